"""The console log format of seed `003`: a conversation as a person reads it.

    🧠 System: [system message content]

    👤 User <@userid> [Turn X]
    🕐 [timestamp]
    > [user message]

    🤖 Assistant [Turn X]
    🕐 [timestamp]
    🔧 [toolCall] (parameter: value)
       └─ Reason: [reasoning]

`postMessage` shows its text as `💬 postMessage:` and a quoted line, `finishRequest` as `✅`.
The seed's file has these emojis as mojibake; they are written here as real UTF-8. The
assistant's header takes the member's `004` colour when colour is on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from models.base import format_timestamp
from models.conversation import (
    AssistantContent,
    ConversationMessage,
    ConversationRole,
    UserContent,
)
from models.team_config import ANSI, Color

SYSTEM, USER, ASSISTANT, CLOCK = "🧠", "👤", "🤖", "🕐"
TOOL, POST, FINISH = "🔧", "💬", "✅"
RESET = "\033[0m"
# Keys of an assistant message that are not the tool call's parameters.
_NOT_PARAMS = {"toolCall", "reasoning", "chimera"}


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _params(content: dict[str, Any]) -> dict[str, Any]:
    params = {k: v for k, v in content.items() if k not in _NOT_PARAMS}
    chimera = content.get("chimera")
    if isinstance(chimera, dict):  # a teamflow step: show what its actions were given
        params.pop("text", None)
        for action in chimera.get("actions") or []:
            params.update(action.get("params") or {})
    return params


def render_message(message: ConversationMessage, *, color: str | None = None) -> str:
    """One message in the `003` console format (no trailing blank line)."""
    stamp = f"{CLOCK} {format_timestamp(message.timestamp)}"
    if message.role is ConversationRole.SYSTEM:
        return f"{SYSTEM} System: {message.content}"
    if message.role is ConversationRole.USER:
        said = message.content
        assert isinstance(said, UserContent), "a user message's content (validated)"
        return "\n".join(
            [f"{USER} User {said.userid} [Turn {message.turn}]", stamp, f"> {said.text}"]
        )
    assert isinstance(message.content, AssistantContent), "an assistant message's (validated)"
    content = message.content.model_dump(mode="json", by_alias=True)
    header = f"{ASSISTANT} Assistant [Turn {message.turn}]"
    if color:
        header = f"{ANSI.get(Color(color), '')}{header}{RESET}" if color in ANSI else header
    call = content.get("toolCall", "")
    lines = [header, stamp]
    if call == "postMessage":
        lines += [f"{POST} postMessage:", f'   "{content.get("text", "")}"']
    elif call == "finishRequest":
        lines.append(f"{FINISH} finishRequest")
    else:
        params = _params(content)
        shown = ", ".join(f"{k}: {_value(v)}" for k, v in params.items())
        lines.append(f"{TOOL} {call} ({shown})" if shown else f"{TOOL} {call}")
        if "text" in content and "chimera" in content:
            lines.append(f'   "{content["text"]}"')
    if content.get("reasoning"):
        lines.append(f"   └─ Reason: {content['reasoning']}")
    return "\n".join(lines)


def render(messages: Iterable[ConversationMessage], *, color: str | None = None) -> str:
    """A conversation in the `003` console format, messages separated by a blank line."""
    return "\n\n".join(render_message(m, color=color) for m in messages) + "\n"
