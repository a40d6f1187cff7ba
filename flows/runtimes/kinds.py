"""Which runtime a member's `runtime` config asks for, by its `kind`.

Above `flows.runtimes` (the step types every runtime shares) and its runtimes
(`scripted`, `command`, `openai`), which import those types.
"""

from __future__ import annotations

from typing import Any

from flows.runtimes import AgentRuntime
from flows.runtimes.command import CommandRuntime
from flows.runtimes.openai import OpenAIRuntime
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
    raise ValueError(f"unknown runtime kind {kind!r}: use scripted, command or openai")
