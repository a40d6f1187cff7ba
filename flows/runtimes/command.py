"""The `command` runtime: any external program is the agent (how a local LLM CLI plugs in).

    {"kind": "command", "argv": ["python", "my_agent.py"], "timeout": 60,
     "cwd": "/somewhere", "env": {"MY_VAR": "1"}}

Each step runs `argv` (no shell; a string is split with `shlex`) with the `StepRequest` as
JSON on stdin (`team`, `member`, `agent_id`, `model`, `prompt`, `task`, the `003`
`conversation`, the `000` `tools`, the unread `inbox`) and reads one `002` Chimera response as
JSON from stdout. A program that counts model tokens may print
`{"chimera": {...response...}, "tokens": 1234}` instead. A timeout (default 60 s; the program's
process group is killed), a non-zero exit, output that is not JSON, or JSON that is not a
Chimera response is a `StepError` that says which.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from flows.runtimes import StepError, StepRequest, StepResult, parse_chimera
from flows.tools import run_process
from models.limits import loads_json
from models.team_settings import SECONDS_RANGE, is_seconds

DEFAULT_TIMEOUT = 60.0
MAX_OUTPUT = 10_000_000


_INTERPRETERS = re.compile(
    r"(python[\d.]*|pypy[\d.]*|node|deno|bun|ruby|perl|php|sh|bash|zsh|uv|npx)"
)


def program_name(argv: tuple[str, ...] | list[str]) -> str:
    """The agent's program as a user named it: `my_agent.py` of `python3 my_agent.py`, not
    the interpreter (`python3 -m pkg` stays `python3 -m pkg`)."""
    head = os.path.basename(argv[0])
    if _INTERPRETERS.fullmatch(head) and len(argv) > 1:
        if argv[1] in ("-m", "-c") and len(argv) > 2:
            return f"{head} {argv[1]} {argv[2]}" if argv[1] == "-m" else f"{head} -c"
        if not argv[1].startswith("-"):
            return argv[1]
    return argv[0]


@dataclass(frozen=True)
class CommandRuntime:
    """Runs `argv` once per step (see the module docstring)."""

    argv: tuple[str, ...]
    timeout: float = DEFAULT_TIMEOUT
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CommandRuntime:
        """The runtime for `{"kind": "command", "argv": [...], ...}`; `ValueError` if unusable."""
        argv = config.get("argv", config.get("command"))
        if isinstance(argv, str):
            argv = shlex.split(argv)
        if not argv or not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError('command runtime needs "argv": a non-empty list of strings')
        timeout = config.get("timeout", DEFAULT_TIMEOUT)
        if not is_seconds(timeout):
            raise ValueError(f'command runtime "timeout" must be {SECONDS_RANGE}')
        env = config.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError('command runtime "env" must map names to strings')
        return cls(argv=tuple(argv), timeout=float(timeout), cwd=config.get("cwd"), env=env)

    def step(self, request: StepRequest) -> StepResult:
        """Runs the program on `request`; its Chimera response, or a `StepError` saying why not."""
        name = program_name(self.argv)
        try:
            outcome = run_process(
                self.argv,
                stdin=json.dumps(request.to_wire(), ensure_ascii=False).encode(),
                timeout=self.timeout,
                max_output=MAX_OUTPUT,
                cwd=self.cwd,
                env=self.env,
            )
        except OSError as exc:
            raise StepError(f"cannot run agent command {name}: {exc.strerror or exc}") from None
        if outcome.timed_out:
            raise StepError(
                f"agent command {name} timed out after {self.timeout:g}s and was killed"
            )
        if outcome.exit_code != 0:
            last = next((ln for ln in reversed(outcome.stderr.splitlines()) if ln.strip()), "")
            why = f": {last.strip()}" if last else ""
            raise StepError(f"agent command {name} exited with code {outcome.exit_code}{why}")
        try:
            data = loads_json(outcome.stdout, what=f"the output of agent command {name}")
        except ValueError as exc:
            start = outcome.stdout.strip()[:80] or "(nothing)"
            raise StepError(
                f"agent command {name} did not print JSON ({exc}); its output starts: {start!r}"
            ) from None
        tokens = 0
        if isinstance(data, dict) and "chimera" in data:
            tokens = data.get("tokens", 0)
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise StepError(f"agent command {name} printed tokens {tokens!r}, not a count")
            data = data["chimera"]
        response = parse_chimera(data, source=f"the output of agent command {name}")
        return StepResult(response=response, tokens=tokens)
