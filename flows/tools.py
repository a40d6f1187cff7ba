"""Running tools: a `000` Tool Definition with params in, a `000` Feedback and a `001`
ToolResult out.

- Params are checked against the tool's `input_schema` before anything runs; a violation is a
  FAILURE that names the field. A JSON result is checked against `output_schema` after.
- `script` tools: the `command` is split with `shlex` into an argv and run without a shell,
  in a process group of its own. The params go in as JSON on stdin, and `{name}` inside an
  argv item is replaced by the param `name` (so a value is always one argument, whatever it
  holds). `{python}` is the Python running teamflow, `{tools_dir}` the folder of the built-in
  tools (`flows/toolbox/`). Other `{...}` text is left alone, so `awk '{print}'` keeps its braces.
- `elisp` tools run as `emacs --batch --eval FORM` (params on stdin as JSON too, and `{name}`
  in the form replaced by the value as a Lisp literal); without Emacs they fail with
  "emacs is not installed".
- A run past its timeout has its whole process group killed. stdout and stderr are kept up to
  `max_output` bytes each (the rest is dropped, and the text says so) and NUL characters are
  removed, because PostgreSQL TEXT cannot hold them.
- A tool's `stdout` becomes the result when it is a JSON object; any other output becomes
  `{"stdout": ...}`.

Resource access (`000` Context resources, `read | write`): a param whose `input_schema`
property carries `"x-teamflow-writes": true` names a path the tool writes. `check_access`
refuses the run when such a path is (or lies inside) a resource whose access is `read`, or
would overwrite a folder that holds one. Paths no resource covers are not restricted.

Nothing here imports Prefect: the `team-task` flow wraps these functions in its tasks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlmodel import Session

from models.base import utcnow
from models.db import session_scope
from models.knowledge import ContextResource, ResourceAccess, ResourceType
from models.tool import (
    Feedback,
    ToolDefinition,
    ToolResult,
    ToolResultStatus,
    ToolType,
    add_tool,
    missing_tools,
    record_feedback,
)

__all__ = [
    "BUILTIN_TOOLS_DIR",
    "WRITES_KEYWORD",
    "ProcessOutcome",
    "ToolRun",
    "builtin_tools",
    "check_access",
    "die_with_parent",
    "install_builtin_tools",
    "load_tool_file",
    "record_feedback",
    "run_process",
    "run_tool",
    "tool_origin",
    "written_paths",
]

BUILTIN_TOOLS_DIR = Path(__file__).parent / "toolbox"
"""The built-in tools: their `000` definitions (`*.json`) and the programs they run."""

WRITES_KEYWORD = "x-teamflow-writes"
"""Set to `true` on an `input_schema` property whose value is a path the tool writes."""

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_OUTPUT = 1_000_000
_CHUNK = 65536
# How long to wait for output pipes after the process is gone (children may hold them).
_DRAIN_GRACE = 2.0

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


# --- processes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessOutcome:
    """What a finished (or killed) process left: exit code and its capped output."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration: float


class _Capture:
    """Reads a pipe to its end in a thread, keeping the first `limit` bytes."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        self.kept = bytearray()
        self.total = 0
        self._pipe = pipe
        self._limit = limit
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        # Keep reading after the limit: a writer blocked on a full pipe would never exit.
        while chunk := self._pipe.read1(_CHUNK):  # type: ignore[attr-defined]  # a BufferedReader
            self.total += len(chunk)
            room = self._limit - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
        self._pipe.close()

    def text(self) -> tuple[str, bool]:
        text = bytes(self.kept).decode("utf-8", errors="replace").replace("\x00", "")
        dropped = self.total - len(self.kept)
        if dropped:
            text += f"\n[teamflow: output truncated: {dropped} of {self.total} bytes dropped]"
        return text, bool(dropped)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass  # the program does not read its stdin, or exited before it did
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None
"""util-linux's `setpriv`, which sets `PR_SET_PDEATHSIG` and then execs the program.

Not a `preexec_fn`: Python code between fork and exec in a threaded process (a worker,
Prefect's threads) can deadlock in the child on a lock another thread held at the fork."""


def die_with_parent(
    argv: list[str], cwd: Any, environment: Mapping[str, str], *, sig: str = "KILL"
) -> list[str]:
    """`argv` run so that the kernel sends the program SIG`sig` when the thread that started
    it ends (a worker killed with SIGKILL included): no agent program outlives its worker,
    and nothing `teamflow up` started outlives `up` (there with TERM: a server stops cleanly).

    The program is looked up first, as `Popen` would, so a missing one is still an `OSError`
    here rather than an exit code of `setpriv`'s.
    """
    if _SETPRIV is None or not argv:
        return argv
    program = argv[0]
    if os.sep in program:
        found = os.path.join(os.fspath(cwd) if cwd else os.getcwd(), program)
        if not os.path.isfile(found):
            raise FileNotFoundError(2, "No such file or directory", program)
        if not os.access(found, os.X_OK):
            raise PermissionError(13, "Permission denied", program)
    else:
        on_path = shutil.which(program, path=environment.get("PATH", os.defpath))
        if on_path is None:
            raise FileNotFoundError(2, "No such file or directory", program)
        found = on_path
    return [_SETPRIV, "--pdeathsig", sig, "--", found, *argv[1:]]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


SCRUBBED = frozenset(
    {
        "TEAMFLOW_TOKEN",
        "PREFECT_API_AUTH_STRING",
        "PREFECT_SERVER_API_AUTH_STRING",
        "PREFECT_API_KEY",
    }
)
"""Credentials an agent program (and a tool it runs) never inherits from the worker: a
person's or the lead's token, Prefect's auth string. An agent's own member token is given
to it explicitly (`env`), never inherited."""


def agent_environment() -> dict[str, str]:
    """teamflow's environment without `SCRUBBED`: what agent programs and tools start with."""
    return {k: v for k, v in os.environ.items() if k not in SCRUBBED}


def run_process(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    timeout: float = DEFAULT_TIMEOUT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> ProcessOutcome:
    """Runs `argv` (no shell) in a new process group, feeding `stdin`, for at most `timeout`
    seconds; past it the whole group is killed. The program is killed too when the process
    running it dies (`PR_SET_PDEATHSIG` on Linux, set by `setpriv`), so a killed worker
    leaves no orphan.

    `env` is added to teamflow's own environment, scrubbed of credentials
    (`agent_environment`). Raises `OSError` when the program cannot be started (not found,
    not executable).
    """
    environment = {**agent_environment(), **(env or {})}
    started = time.monotonic()
    proc = subprocess.Popen(
        die_with_parent(list(argv), cwd, environment),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=environment,
        start_new_session=True,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    out = _Capture(proc.stdout, max_output)
    err = _Capture(proc.stderr, max_output)
    threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    # Children left in the group may still hold the pipes open: give them until the deadline
    # (at least a short grace), then end the group so the readers see the end of the output.
    remaining = max(_DRAIN_GRACE, timeout - (time.monotonic() - started))
    for capture in (out, err):
        capture.thread.join(remaining)
    if out.thread.is_alive() or err.thread.is_alive():
        _kill_group(proc)
        for capture in (out, err):
            capture.thread.join(_DRAIN_GRACE)
    stdout, cut_out = out.text()
    stderr, cut_err = err.text()
    return ProcessOutcome(
        exit_code=proc.returncode,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        truncated=cut_out or cut_err,
        duration=time.monotonic() - started,
    )


# --- running a tool ------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRun:
    """One execution of a tool: the `001` ToolResult for the agent, the `000` Feedback to keep.

    `feedback` is None when nothing ran (params refused, access refused, no Emacs).
    """

    result: ToolResult
    feedback: Feedback | None = None
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0
    argv: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.status is ToolResultStatus.SUCCESS


def _failure(definition: ToolDefinition, message: str, **kwargs: Any) -> ToolRun:
    return ToolRun(result=ToolResult.failure(definition.tool_id, message), **kwargs)


def run_tool(
    definition: ToolDefinition,
    params: dict[str, Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_output: int = DEFAULT_MAX_OUTPUT,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    resources: Sequence[ContextResource | Mapping[str, Any]] | None = None,
) -> ToolRun:
    """Runs `definition` with `params`: validates, checks resource access, executes, and
    reads the result.

    Args:
        definition: the `000` Tool Definition to run.
        params: the action's params, checked against `input_schema` first.
        timeout: seconds before the tool's process group is killed.
        max_output: bytes of stdout and of stderr kept in the Feedback.
        cwd: the folder the tool runs in; relative paths in params are read from it.
        env: variables added to the tool's environment.
        resources: the `000` Context resources in force; writing a `read` one is refused.

    Returns:
        A `ToolRun`: never raises for a tool's own failure; every failure is a FAILURE result.
    """
    name = definition.tool_id
    errors = definition.input_errors(params)
    if errors:
        return _failure(definition, f"invalid params for tool {name}: {'; '.join(errors)}")
    if resources is not None:
        refusals = check_access(definition, params, resources, cwd=cwd)
        if refusals:
            return _failure(definition, f"tool {name} refused: {'; '.join(refusals)}")
    try:
        argv = _argv(definition, params, env)
    except ValueError as exc:
        return _failure(definition, f"cannot run tool {name}: {exc}")

    created_at = utcnow()
    try:
        outcome = run_process(
            argv,
            stdin=json.dumps(params).encode(),
            timeout=timeout,
            max_output=max_output,
            cwd=cwd,
            env=env,
        )
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return _failure(definition, f"cannot run tool {name}: {argv[0]}: {reason}", argv=argv)

    feedback = Feedback(
        execution_id=str(uuid.uuid4()),
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        exit_code=outcome.exit_code,
        created_at=created_at,
    )
    facts: dict[str, Any] = {
        "feedback": feedback,
        "timed_out": outcome.timed_out,
        "truncated": outcome.truncated,
        "duration": outcome.duration,
        "argv": argv,
    }
    if outcome.timed_out:
        return _failure(
            definition, f"tool {name} timed out after {timeout:g}s and was killed", **facts
        )
    if outcome.exit_code != 0:
        last = next((line for line in reversed(outcome.stderr.splitlines()) if line.strip()), "")
        why = f": {last.strip()}" if last else ""
        message = f"tool {name} exited with code {outcome.exit_code}{why}"
        return _failure(definition, message, **facts)

    result = _result_of(outcome.stdout)
    errors = definition.output_errors(result)
    if errors:
        return _failure(
            definition,
            f"tool {name} gave a result that does not match its output_schema: "
            + "; ".join(errors),
            **facts,
        )
    return ToolRun(result=ToolResult.success(name, result), **facts)


def _result_of(stdout: str) -> dict[str, Any]:
    try:
        parsed = json.loads(stdout)
    except ValueError:
        return {"stdout": stdout}
    return parsed if isinstance(parsed, dict) else {"stdout": stdout}


def _argv(
    definition: ToolDefinition, params: dict[str, Any], env: Mapping[str, str] | None
) -> list[str]:
    declared = set((definition.input_schema.get("properties") or {}).keys())
    if definition.type is ToolType.ELISP:
        search = (env or {}).get("PATH", os.environ.get("PATH"))
        emacs = shutil.which("emacs", path=search)
        if emacs is None:
            raise ValueError("emacs is not installed")
        form = _substitute(definition.command, params, declared, _lisp_literal, builtins={})
        return [emacs, "--batch", "--eval", form]
    try:
        argv = shlex.split(definition.command)
    except ValueError as exc:
        raise ValueError(f"its command cannot be split into arguments: {exc}") from None
    if not argv:
        raise ValueError("its command is empty")
    builtins = {"python": sys.executable, "tools_dir": str(BUILTIN_TOOLS_DIR)}
    return [_substitute(item, params, declared, _argv_text, builtins) for item in argv]


def _substitute(
    text: str,
    params: dict[str, Any],
    declared: set[str],
    render: Any,
    builtins: dict[str, str],
) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key in builtins:
            return builtins[key]
        if key in params:
            return render(params[key])
        if key in declared:
            raise ValueError(f"its command uses {{{key}}}, but the param {key!r} was not given")
        return match.group(0)

    return _PLACEHOLDER.sub(replace, text)


def _argv_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _lisp_literal(value: Any) -> str:
    if value is True:
        return "t"
    if value is None or value is False:
        return "nil"
    if isinstance(value, int | float):
        return json.dumps(value)
    text = value if isinstance(value, str) else json.dumps(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- resource access -----------------------------------------------------------------------


def written_paths(definition: ToolDefinition, params: dict[str, Any]) -> dict[str, str]:
    """The params (name: path) this call would write, by the `x-teamflow-writes` convention."""
    properties = definition.input_schema.get("properties") or {}
    return {
        key: value
        for key, spec in properties.items()
        if isinstance(spec, dict)
        and spec.get(WRITES_KEYWORD) is True
        and isinstance(value := params.get(key), str)
        and value
    }


def check_access(
    definition: ToolDefinition,
    params: dict[str, Any],
    resources: Sequence[ContextResource | Mapping[str, Any]],
    *,
    cwd: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Why running `definition` with `params` would break `resources` (empty: allowed).

    A path written (see `written_paths`) is refused when the most specific `file` or `data`
    resource that covers it (the same path, or a folder above it) has access `read`, or when
    a `read` resource lies inside it. Paths are compared after resolving symlinks, relative
    to `cwd`.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    held = [
        r if isinstance(r, ContextResource) else ContextResource.model_validate(dict(r))
        for r in resources
    ]
    located = [
        (r, _real(base, r.path))
        for r in held
        if r.type in (ResourceType.FILE, ResourceType.DATA) and r.path
    ]
    refusals: list[str] = []
    for param, value in written_paths(definition, params).items():
        target = _real(base, value)
        covering = [(r, p) for r, p in located if target == p or target.is_relative_to(p)]
        if covering:
            resource, path = max(covering, key=lambda item: len(item[1].parts))
            if resource.access is ResourceAccess.READ:
                refusals.append(
                    f"param {param!r} writes {value}, which is resource {resource.id!r} "
                    f"({resource.path}) with read access"
                )
                continue
        for resource, path in located:
            if resource.access is ResourceAccess.READ and path.is_relative_to(target):
                if path == target:
                    continue  # reported above
                refusals.append(
                    f"param {param!r} writes {value}, which holds resource {resource.id!r} "
                    f"({resource.path}) with read access"
                )
    return refusals


def _real(base: Path, path: str) -> Path:
    return Path(os.path.realpath(base / Path(path).expanduser()))


# --- tool files and the built-in tools ------------------------------------------------------


def load_tool_file(path: str | os.PathLike[str]) -> ToolDefinition:
    """Reads a `000` Tool Definition JSON file.

    `{here}` in its `command` becomes the file's folder (so a tool can name a program next to
    it); a missing `created_at` / `updated_at` becomes now. Raises `ValueError` (a pydantic
    `ValidationError` names the field) when the file is not a valid Tool Definition.
    """
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{file}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: a Tool Definition is a JSON object")
    now = utcnow()
    data.setdefault("created_at", now)
    data.setdefault("updated_at", now)
    if isinstance(data.get("command"), str):
        here = shlex.quote(str(file.resolve().parent))
        data["command"] = data["command"].replace("{here}", here)
    return ToolDefinition.model_validate(data)


def builtin_tools() -> list[ToolDefinition]:
    """The built-in tools (`read_csv_summary`, `analyze_sales`, `cross_reference_satisfaction`,
    `write_file`), from `flows/toolbox/*.json`."""
    return [load_tool_file(file) for file in sorted(BUILTIN_TOOLS_DIR.glob("*.json"))]


def install_builtin_tools(
    *, session: Session | None = None, missing_only: bool = False
) -> list[ToolDefinition]:
    """Stores the built-in tools (replacing older copies); returns those stored.

    `missing_only` (what `teamflow db upgrade` does): only those no tool of the home is
    called, so a tool a user changed under a built-in's name stays as the user left it.
    """
    tools = builtin_tools()
    with session_scope(session) as s:
        if missing_only:
            absent = set(missing_tools([t.tool_id for t in tools], session=s))
            tools = [t for t in tools if t.tool_id in absent]
        return [add_tool(tool, session=s) for tool in tools]


def tool_origin(tool: ToolDefinition) -> str:
    """Where a stored tool comes from: `built-in` (teamflow's toolbox, as shipped),
    `built-in, changed` (a built-in's name, another command or schema) or `added`."""
    shipped = {t.tool_id: t for t in builtin_tools()}.get(tool.tool_id)
    if shipped is None:
        return "added"
    same = (shipped.command, shipped.input_schema, shipped.output_schema) == (
        tool.command, tool.input_schema, tool.output_schema,
    )  # fmt: skip
    return "built-in" if same else "built-in, changed"
