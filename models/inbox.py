"""Inboxes: the `004` inbox entry, its typed payloads, and the one table behind three formats.

Every message a member receives is one `inbox_messages` row. The same row reads back as a
`004` inbox entry (`from, text, summary, timestamp, color, read, messageId, type, metadata`),
a `001` notification (`notification_id, recipient_agent_id, notification_type, source,
payload`) or a `000` message (`message_id, type, sender, recipient, payload, status`).

Structured messages (idle, shutdown, plan approval, ...) are typed payloads: a discriminated
union on `type`. In a `004` inbox file their JSON is the entry's `text`, as agent-team tools
write it, and `type` names it, so both a person and a program can read the entry.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from pydantic import ConfigDict, Field, StrictBool, TypeAdapter, model_validator
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel

from models.base import (
    JsTimestamp,
    MemberName,
    WireModel,
    json_column,
    utc_column,
    utcnow,
)


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

TeamPayloadAdapter: TypeAdapter[TeamPayload] = TypeAdapter(TeamPayload)

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


# --- the table -----------------------------------------------------------------------------


class InboxRow(SQLModel, table=True):
    """One message in one member's inbox; the database's copy of every inbox entry."""

    __tablename__ = "inbox_messages"
    __table_args__ = (
        sa.Index("ix_inbox_messages_unread", "team", "recipient", "read", "id"),
        sa.Index("ix_inbox_messages_sender", "team", "recipient", "sender"),
    )

    id: int | None = SQLField(default=None, primary_key=True)
    message_id: str = SQLField(max_length=255, unique=True)
    team: str = SQLField(max_length=64)
    recipient: str = SQLField(max_length=255)
    sender: str = SQLField(max_length=255)
    text: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    summary: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False, server_default=""))
    timestamp: Any = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    color: str = SQLField(max_length=16)
    read: bool = SQLField(default=False)
    junk: bool = SQLField(default=False, description="`000` status junk")
    type: str | None = SQLField(default=None, max_length=64)
    category: str | None = SQLField(default=None, max_length=16, description="`000` type")
    payload: Any = SQLField(default=None, sa_column=json_column())
    meta: dict | None = SQLField(default=None, sa_column=json_column("metadata"))
    extra: dict = SQLField(default_factory=dict, sa_column=json_column(nullable=False))
    fields_set: list | None = SQLField(
        default=None,
        sa_column=json_column(),
        description="Which optional 004 keys an imported entry carried (None: all of them)",
    )

    # -- 004 ---------------------------------------------------------------------------------

    @classmethod
    def from_entry(cls, team: str, recipient: str, entry: InboxMessage) -> InboxRow:
        """A row from a `004` inbox entry (a structured entry's JSON text becomes its payload)."""
        payload = None
        if entry.type in PAYLOAD_TYPES:
            try:
                payload = TeamPayloadAdapter.validate_json(entry.text).model_dump(mode="json")
            except ValueError:
                payload = None
        present = [k for k in ("messageId", "type", "metadata") if _was_set(entry, k)]
        return cls(
            message_id=entry.message_id or _new_message_id(),
            team=team,
            recipient=recipient,
            sender=entry.from_,
            text=entry.text,
            summary=entry.summary,
            timestamp=entry.timestamp,
            color=entry.color.value,
            read=entry.read,
            type=entry.type.value if entry.type else None,
            payload=payload,
            meta=entry.metadata,
            extra=dict(entry.model_extra or {}),
            fields_set=present,
        )

    def to_entry(self) -> InboxMessage:
        """The row as a `004` inbox entry."""
        data: dict[str, Any] = {
            "from": self.sender,
            "text": self.text,
            "summary": self.summary,
            "timestamp": self.timestamp,
            "color": self.color,
            "read": self.read,
        }
        present = set(
            ("messageId", "type", "metadata") if self.fields_set is None else self.fields_set
        )
        if "messageId" in present:
            data["messageId"] = self.message_id
        if self.type is not None and "type" in present:
            data["type"] = self.type
        if self.meta is not None and "metadata" in present:
            data["metadata"] = self.meta
        data.update(self.extra or {})
        return InboxMessage.model_validate(data)

    # -- 001 ---------------------------------------------------------------------------------

    @classmethod
    def from_notification(cls, team: str, notification: Any, *, color: str = "system") -> InboxRow:
        """A row from a `001` notification (`models.notification.Notification`)."""
        recipient = notification.recipient_agent_id.split("@", 1)[0]
        payload = notification.payload.model_dump(mode="json", by_alias=True)
        text = _notification_text(notification.notification_type, payload)
        return cls(
            message_id=str(notification.notification_id),
            team=team,
            recipient=recipient,
            sender=notification.source,
            text=text,
            summary=notification.notification_type.replace("_", " "),
            timestamp=notification.timestamp,
            color=color,
            type=notification.notification_type,
            payload=payload,
            extra={"recipient_agent_id": notification.recipient_agent_id},
        )

    def to_notification(self) -> Any:
        """The row as a `001` notification; only notification types have this form."""
        from models.notification import NotificationAdapter

        if self.type not in NOTIFICATION_TYPES:
            raise ValueError(f"message {self.message_id} of type {self.type!r} is no notification")
        recipient = (self.extra or {}).get("recipient_agent_id") or f"{self.recipient}@{self.team}"
        return NotificationAdapter.validate_python(
            {
                "notification_id": self.message_id,
                "timestamp": self.timestamp,
                "recipient_agent_id": recipient,
                "notification_type": self.type,
                "source": self.sender,
                "payload": self.payload,
            }
        )

    # -- 000 ---------------------------------------------------------------------------------

    @classmethod
    def from_message(cls, team: str, message: Any, *, color: str = "system") -> InboxRow:
        """A row from a `000` message (`models.notification.Message`)."""
        payload = message.payload.model_dump(mode="json", by_alias=True)
        content = payload.get("content")
        status = message.status.value
        return cls(
            message_id=message.message_id,
            team=team,
            recipient=message.recipient,
            sender=message.sender,
            text=content if isinstance(content, str) else json.dumps(content),
            summary=str(payload.get("type", "")),
            timestamp=message.timestamp,
            color=color,
            read=status == "read",
            junk=status == "junk",
            category=message.type.value,
            payload=payload,
        )

    def to_message(self) -> Any:
        """The row as a `000` message."""
        from models.notification import Message

        if self.payload is not None and self.category is not None:
            payload = self.payload
        else:
            payload = {"type": self.type or "text", "content": self.text}
        status = "junk" if self.junk else "read" if self.read else "sent"
        return Message.model_validate(
            {
                "message_id": self.message_id,
                "type": self.category or "event",
                "sender": self.sender,
                "recipient": self.recipient,
                "timestamp": self.timestamp,
                "payload": payload,
                "status": status,
            }
        )


def _was_set(model: WireModel, alias: str) -> bool:
    for name, field in type(model).model_fields.items():
        if (field.alias or name) == alias:
            return name in model.model_fields_set
    return False


def _new_message_id() -> str:
    import uuid

    return f"msg-{uuid.uuid4()}"


def _notification_text(kind: str, payload: dict[str, Any]) -> str:
    for key in ("message", "content", "task_description", "error_message"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return json.dumps(payload, sort_keys=True)
