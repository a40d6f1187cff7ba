"""Which runtime a member's `runtime` config asks for, by its `kind`.

Above `flows.runtimes` (the step types every runtime shares) and its runtimes
(`scripted`, `command`, `openai`, `mcp`: an outside member), which import those types.
"""

from __future__ import annotations

from typing import Any

from flows.runtimes import AgentRuntime
from flows.runtimes.command import CommandRuntime
from flows.runtimes.openai import OpenAIRuntime
from flows.runtimes.outside import OutsideRuntime
from flows.runtimes.scripted import ScriptedRuntime


def runtime_for(config: dict[str, Any] | None) -> AgentRuntime:
    """The runtime a member's `runtime` config asks for (`kind`, default `scripted`).

    Raises `ValueError` for an unknown kind or a config the runtime cannot use.
    """
    config = dict(config or {})
    kind = config.get("kind", "scripted")
    if kind == "scripted":
        return ScriptedRuntime.from_config(config)
    if kind == "command":
        return CommandRuntime.from_config(config)
    if kind == "openai":
        return OpenAIRuntime.from_config(config)
    if kind == "mcp":
        return OutsideRuntime.from_config(config)
    raise ValueError(f"unknown runtime kind {kind!r}: use scripted, command, openai or mcp")


KINDS = ("scripted", "command", "openai", "mcp")

KIND_KEYS = {
    "scripted": ("playbook",),
    "command": ("argv", "command", "timeout", "cwd", "env"),
    "openai": (
        "base_url", "model", "api_key_env", "api_key_secret", "timeout", "temperature",
        "max_tokens", "json_mode", "instructions",
    ),
    "mcp": (),
}  # fmt: skip
"""The keys of a runtime config that belong to its kind; the others
(`flows.runtimes.MEMBER_KEYS`) are the member's, whatever runtime runs it."""


def runtime_problem(config: dict[str, Any] | None) -> str | None:
    """Why a member with this runtime config cannot run a task, or None when it can.

    No config, or a scripted one without a playbook, cannot run; neither can a config
    `runtime_for` refuses. Nothing is started and no secret is read.
    """
    config = dict(config or {})
    if not any(k in config for keys in KIND_KEYS.values() for k in keys) and "kind" not in config:
        return "it has no runtime"
    try:
        runtime = runtime_for(config)
    except ValueError as exc:
        return f"its runtime is unusable: {exc}"
    if isinstance(runtime, ScriptedRuntime) and not runtime.playbook:
        return "its scripted runtime has no playbook"
    return None
