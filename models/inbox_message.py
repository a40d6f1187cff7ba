"""An inbox message on the wire: the `004` inbox entry and the typed payloads it may carry.

An entry (`from, text, summary, timestamp, color, read, messageId, type, metadata`) is one
message of `inboxes/{member}.json`. Structured messages (idle, shutdown, plan approval, ...)
are typed payloads: a discriminated union on `type`. In a `004` inbox file their JSON is the
entry's `text`, as agent-team tools write it, and `type` names it, so both a person and a
program can read the entry.

Also the limit every way in holds a message's text to (`check_text`), and `InboxError`, the
one-line refusal of every inbox operation. The table is `models.inbox_table`, the store
`models.inbox`, the files `models.inbox_files`.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, TypeAdapter, ValidationError, model_validator

from models.base import JsTimestamp, MemberName, WireModel
from models.settings import Settings, get_settings
from models.wire_support import error_lines


class MessageColor(StrEnum):
    """`004` sender colours: the six member colours, and `system` for system messages."""

    BLUE = "blue"
    GREEN = "green"
    YELLOW = "yellow"
    MAGENTA = "magenta"
    CYAN = "cyan"
    RED = "red"
    SYSTEM = "system"


class MessageType(StrEnum):
    """The `type` of an inbox message: the `004` types and the `001` notification types."""

    # 004
    SYSTEM_INIT = "system_init"
    IDLE_NOTIFICATION = "idle_notification"
    SHUTDOWN_REQUEST = "shutdown_request"
    SHUTDOWN_APPROVED = "shutdown_approved"
    SHUTDOWN_REJECTED = "shutdown_rejected"
    PLAN_APPROVAL_REQUEST = "plan_approval_request"
    PLAN_APPROVAL_RESPONSE = "plan_approval_response"
    # 001
    USER_MESSAGE = "user_message"
    AGENT_MESSAGE = "agent_message"
    TASK_ASSIGNMENT = "task_assignment"
    TOOL_RESULT = "tool_result"
    SYSTEM_ALERT = "system_alert"
    STATUS_UPDATE = "status_update"
    CAPABILITY_BROADCAST = "capability_broadcast"


NOTIFICATION_TYPES = frozenset(
    {
        MessageType.USER_MESSAGE,
        MessageType.AGENT_MESSAGE,
        MessageType.TASK_ASSIGNMENT,
        MessageType.TOOL_RESULT,
        MessageType.SYSTEM_ALERT,
        MessageType.STATUS_UPDATE,
        MessageType.CAPABILITY_BROADCAST,
    }
)


class InboxMessage(WireModel):
    """One entry of `inboxes/{member}.json` (`004` InboxMessage)."""

    model_config = ConfigDict(extra="allow")

    from_: MemberName = Field(alias="from", description='Sender name or "system"')
    text: str = Field(description="Full message content")
    summary: str = Field(description="Brief summary for notifications")
    timestamp: JsTimestamp
    color: MessageColor = Field(description="The sender's colour")
    read: StrictBool
    message_id: str | None = Field(default=None, min_length=1, max_length=255)
    type: MessageType | None = None
    metadata: dict[str, Any] | None = None


# --- typed payloads (004) ------------------------------------------------------------------


class IdleReason(StrEnum):
    """`004` IdleNotification `idleReason`."""

    AVAILABLE = "available"
    WAITING_RESPONSE = "waiting_response"
    TASK_COMPLETE = "task_complete"


class IdleNotification(WireModel):
    """`004`: a teammate says it is available, waiting, or done."""

    type: Literal["idle_notification"] = "idle_notification"
    from_: MemberName = Field(alias="from")
    idle_reason: IdleReason
    timestamp: JsTimestamp | None = None


class ShutdownRequest(WireModel):
    """The lead asks a member to shut down (`004` `shutdown_request`)."""

    type: Literal["shutdown_request"] = "shutdown_request"
    request_id: str = Field(min_length=1, max_length=255)
    from_: MemberName = Field(alias="from")
    reason: str | None = None
    timestamp: JsTimestamp | None = None


class ShutdownApproved(WireModel):
    """`004`: the member agrees to shut down; the pane to kill, if it has one."""

    type: Literal["shutdown_approved"] = "shutdown_approved"
    request_id: str = Field(min_length=1, max_length=255)
    pane_id: str | None = Field(default=None, pattern=r"^%\d+$")
    backend_type: str
    timestamp: JsTimestamp | None = None

    @model_validator(mode="after")
    def _pane_for_tmux(self) -> ShutdownApproved:
        if self.backend_type == "tmux" and not self.pane_id:
            raise ValueError("paneId is required when backendType is tmux")
        return self


class ShutdownRejected(WireModel):
    """The member refuses to shut down for now (busy with a task), saying why."""

    type: Literal["shutdown_rejected"] = "shutdown_rejected"
    request_id: str = Field(min_length=1, max_length=255)
    reason: str = Field(min_length=1)
    timestamp: JsTimestamp | None = None


class PlanApprovalRequest(WireModel):
    """`004`: a member asks the lead to approve its plan."""

    type: Literal["plan_approval_request"] = "plan_approval_request"
    from_: MemberName = Field(alias="from")
    plan: str = Field(min_length=1, description="Detailed plan (Markdown)")
    summary: str
    timestamp: JsTimestamp
    request_id: str = Field(min_length=1, max_length=255)


class PlanApprovalResponse(WireModel):
    """`004`: the lead's decision on a plan."""

    type: Literal["plan_approval_response"] = "plan_approval_response"
    request_id: str = Field(min_length=1, max_length=255)
    approve: StrictBool
    feedback: str | None = None
    timestamp: JsTimestamp | None = None


TeamPayload = Annotated[
    IdleNotification
    | ShutdownRequest
    | ShutdownApproved
    | ShutdownRejected
    | PlanApprovalRequest
    | PlanApprovalResponse,
    Field(discriminator="type"),
]
"""A structured `004` message, told apart by its `type`."""

# Built on first use, not at import: commands start faster.
TeamPayloadAdapter: TypeAdapter[TeamPayload] = TypeAdapter(
    TeamPayload, config=ConfigDict(defer_build=True)
)

PAYLOAD_TYPES = frozenset(
    {
        MessageType.IDLE_NOTIFICATION,
        MessageType.SHUTDOWN_REQUEST,
        MessageType.SHUTDOWN_APPROVED,
        MessageType.SHUTDOWN_REJECTED,
        MessageType.PLAN_APPROVAL_REQUEST,
        MessageType.PLAN_APPROVAL_RESPONSE,
    }
)


DEFAULT_MAX_MESSAGE_BYTES: int = Settings.model_fields["max_message_bytes"].default


class InboxError(ValueError):
    """A refused inbox operation; the message is one line for the user."""


def max_message_bytes() -> int:
    """The largest message text accepted (`TEAMFLOW_MAX_MESSAGE_BYTES`, default 1 MiB)."""
    return get_settings().max_message_bytes


def check_text(text: str) -> None:
    """The limit every way in applies to a message's text (`InboxError`, one line)."""
    size = len(text.encode())
    if size > max_message_bytes():
        raise InboxError(
            f"message of {size} bytes is over the limit of {max_message_bytes()} "
            "(TEAMFLOW_MAX_MESSAGE_BYTES)"
        )


def parse_payload(kind: str, text: str) -> TeamPayload:
    """A typed message from its JSON text; `InboxError` naming the field if it is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        raise InboxError(
            f"a {kind} message takes its JSON as the text; got: {text[:60]!r}"
        ) from None
    if isinstance(data, dict):
        data.setdefault("type", kind)
    try:
        payload = TeamPayloadAdapter.validate_python(data)
    except ValidationError as exc:
        raise InboxError("; ".join(error_lines(exc))) from None
    if payload.type != kind:
        raise InboxError(f"--type {kind} does not match the text's type {payload.type}")
    return payload
