"""Agent runtimes: what turns a member's conversation into its next `002` Chimera response.

Every runtime has one method, `step(request) -> StepResult`. The request holds the member,
its task, its `003` conversation so far, the `000` tools it may use and its unread inbox; the
result is one Chimera response and the tokens it cost. The `team-task` flow executes the
actions and calls `step` again until the response says `stop`.

`flows.runtimes.kinds.runtime_for(member.runtime)` picks the runtime from the member's runtime
config:

- `{"kind": "scripted", "playbook": [...] | "path/to/playbook.json"}` (the default)
- `{"kind": "command", "argv": [...], "timeout": 60}`
- `{"kind": "openai", "base_url": ..., "model": ..., "api_key_env": ... | "api_key_secret": ...}`

How steps and tool results sit in the `003` conversation (the flow writes them, the runtimes
read them): each step is ONE assistant message, built by `step_message` (the scripted runtime
counts these to know where it is); each tool result is one user message from
`tool:{tool_name}` whose text is the `001` ToolResult JSON, built by `tool_result_message`.

Nothing here imports Prefect (the `openai` runtime imports it only to read a Secret block).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from models.base import utcnow
from models.chimera_response import ChimeraResponse
from models.conversation import ConversationMessage, ConversationRole
from models.tool import ToolDefinition, ToolResult

__all__ = [
    "MEMBER_KEYS",
    "TOOL_USER_PREFIX",
    "AgentRuntime",
    "ResultPending",
    "StepError",
    "StepRequest",
    "StepResult",
    "parse_chimera",
    "step_message",
    "tool_result_message",
    "tool_results",
]

MEMBER_KEYS = frozenset({"tools", "resources", "security_level", "tmux_socket"})
"""Keys of a member's runtime config that are the member's, whatever runtime kind runs it
(the tools it may use, its resources, its clearance, its tmux socket): no runtime refuses them."""

TOOL_USER_PREFIX = "tool:"
"""The `userid` of a `003` user message that carries a tool result: `tool:{tool_name}`."""


class StepError(RuntimeError):
    """A runtime could not produce a valid step; the message says why (never a secret)."""


class ResultPending(StepError):
    """The scripted playbook needs the result of `tool`, which has not arrived yet (an ASYNC
    action still running): wait for its `tool_result` notification and step again."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool


@dataclass
class StepRequest:
    """Everything a runtime is given for one step."""

    team: str
    member: str
    agent_id: str
    model: str
    prompt: str
    task: dict[str, Any]
    conversation: list[ConversationMessage] = field(default_factory=list)
    tools: list[ToolDefinition] = field(default_factory=list)
    inbox: list[dict[str, Any]] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        """The request as JSON-ready data (what the `command` runtime writes on stdin)."""
        return {
            "team": self.team,
            "member": self.member,
            "agent_id": self.agent_id,
            "model": self.model,
            "prompt": self.prompt,
            "task": self.task,
            "conversation": [m.to_wire() for m in self.conversation],
            "tools": [t.to_wire() for t in self.tools],
            "inbox": self.inbox,
        }

    @property
    def steps_taken(self) -> int:
        """How many assistant steps the conversation holds already."""
        return sum(1 for m in self.conversation if m.role is ConversationRole.ASSISTANT)


@dataclass(frozen=True)
class StepResult:
    """One step's answer and what it cost in model tokens (0 when no model was asked)."""

    response: ChimeraResponse
    tokens: int = 0


class AgentRuntime(Protocol):
    """Something that answers a step with a Chimera response."""

    def step(self, request: StepRequest) -> StepResult: ...


def parse_chimera(data: Any, *, source: str) -> ChimeraResponse:
    """`data` as a `002` Chimera response; a `StepError` naming `source` and the wrong fields
    when it is not one."""
    try:
        return ChimeraResponse.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise StepError(f"{source} is not a valid Chimera response: {problems}") from None


# --- the 003 conventions -------------------------------------------------------------------


def step_message(
    response: ChimeraResponse, *, index: int, turn: int, timestamp: datetime | None = None
) -> ConversationMessage:
    """The `003` assistant message that records one step.

    `toolCall` names the step's actions (`analyze_sales`, or `a, b` for two), or is
    `postMessage` (a response, no actions) or `finishRequest` (stop, nothing else);
    `reasoning` joins the thoughts; `text` is the response; `chimera` is the whole `002`
    response, so the step can be read back exactly.
    """
    names = [a.action for a in response.actions]
    if names:
        call = ", ".join(names)
    elif response.stop and not response.response:
        call = "finishRequest"
    else:
        call = "postMessage"
    content: dict[str, Any] = {"toolCall": call}
    if response.thoughts:
        content["reasoning"] = " / ".join(t.content for t in response.thoughts)
    if response.response is not None:
        content["text"] = response.response
    content["chimera"] = response.to_wire()
    return ConversationMessage.model_validate(
        {
            "index": index,
            "turn": turn,
            "timestamp": timestamp or utcnow(),
            "role": "assistant",
            "content": content,
        }
    )


def tool_result_message(
    result: ToolResult, *, index: int, turn: int, timestamp: datetime | None = None
) -> ConversationMessage:
    """The `003` user message that hands a tool's result to the agent (`tool:{name}`)."""
    return ConversationMessage.model_validate(
        {
            "index": index,
            "turn": turn,
            "timestamp": timestamp or utcnow(),
            "role": "user",
            "content": {
                "userid": f"{TOOL_USER_PREFIX}{result.tool_name}",
                "text": result.to_json(),
            },
        }
    )


def tool_results(
    conversation: Sequence[ConversationMessage], inbox: Sequence[dict[str, Any]] = ()
) -> dict[str, ToolResult]:
    """The latest result of each tool, by tool name: from the conversation's `tool:` user
    messages, then from `tool_result` inbox entries (newer than the conversation)."""
    found: dict[str, ToolResult] = {}
    for message in conversation:
        if message.role is not ConversationRole.USER:
            continue
        content = message.content
        userid = getattr(content, "userid", "")
        if not userid.startswith(TOOL_USER_PREFIX):
            continue
        result = _tool_result(getattr(content, "text", ""))
        if result is not None:
            found[result.tool_name] = result
    for entry in inbox:
        if entry.get("type") != "tool_result":
            continue
        result = _tool_result(entry.get("payload") or entry.get("text") or "")
        if result is not None:
            found[result.tool_name] = result
    return found


def _tool_result(data: Any) -> ToolResult | None:
    try:
        if isinstance(data, str):
            data = json.loads(data)
        return ToolResult.model_validate(data)
    except ValueError:
        return None
