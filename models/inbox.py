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

import functools
import json
import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from pydantic import ConfigDict, Field, StrictBool, TypeAdapter, ValidationError, model_validator
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, select

from models import db, mirror
from models.base import (
    JsTimestamp,
    MemberName,
    WireModel,
    check_member_name,
    format_js_timestamp,
    json_column,
    utc_column,
    utcnow,
)
from models.db import session_scope
from models.limits import LimitError, loads_json, salvage_array
from models.mirror import mark
from models.team import Member, get_member, get_team, list_members
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


# --- the table -----------------------------------------------------------------------------


class InboxRow(SQLModel, table=True):
    """One message in one member's inbox; the database's copy of every inbox entry."""

    __tablename__ = "inbox_messages"
    __table_args__ = (
        sa.UniqueConstraint("team", "recipient", "seq", name="uq_inbox_messages_seq"),
        sa.UniqueConstraint("team", "recipient", "message_id", name="uq_inbox_messages_message_id"),
        sa.Index("ix_inbox_messages_unread", "team", "recipient", "read", "seq"),
        sa.Index("ix_inbox_messages_sender", "team", "recipient", "sender"),
    )

    id: int | None = SQLField(default=None, primary_key=True)
    seq: int = SQLField(default=0, description="Position in its inbox: 1, 2, 3, ...")
    message_id: str = SQLField(max_length=255)
    team: str = SQLField(max_length=64)
    recipient: str = SQLField(max_length=255)
    recipient_agent_id: str | None = SQLField(
        default=None, max_length=255, description="`001` recipient id when it is not name@team"
    )
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
        return cls(**_entry_values(team, recipient, entry))

    def to_entry(self) -> InboxMessage:
        """The row as a `004` inbox entry."""
        return InboxMessage.model_validate(self.entry_dict())

    def entry_dict(self) -> dict[str, Any]:
        """The row as a `004` inbox entry, JSON-ready (fast: the row was validated on write)."""
        return _entry_dict(_Fields(self))

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
            recipient_agent_id=notification.recipient_agent_id,
        )

    def to_notification(self) -> Any:
        """The row as a `001` notification; only notification types have this form."""
        from models.notification import NotificationAdapter  # jsonschema, tasks: not for a send

        if self.type not in NOTIFICATION_TYPES:
            raise ValueError(f"message {self.message_id} of type {self.type!r} is no notification")
        recipient = self.recipient_agent_id or f"{self.recipient}@{self.team}"
        return NotificationAdapter.validate_python(
            {
                # 001 ids are UUIDs; teamflow's message ids are `msg-{uuid}`.
                "notification_id": self.message_id.removeprefix("msg-"),
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


def _entry_dict(row: Any) -> dict[str, Any]:
    """A `004` entry from a row's values by attribute name (`meta` for `metadata`)."""
    data: dict[str, Any] = {
        "from": row["sender"],
        "text": row["text"],
        "summary": row["summary"],
        "timestamp": format_js_timestamp(row["timestamp"]),
        "color": row["color"],
        "read": row["read"],
    }
    fields_set = row["fields_set"]
    present = ("messageId", "type", "metadata") if fields_set is None else fields_set
    if "messageId" in present:
        data["messageId"] = row["message_id"]
    if row["type"] is not None and "type" in present:
        data["type"] = row["type"]
    if row["meta"] is not None and "metadata" in present:
        data["metadata"] = row["meta"]
    data.update(row["extra"] or {})
    return data


def _entry_values(
    team: str, recipient: str, entry: InboxMessage, payload: Any = None
) -> dict[str, Any]:
    """An `InboxRow`'s attributes from a `004` inbox entry; `payload` None: a structured
    entry's JSON text is parsed for it."""
    if payload is None and entry.type in PAYLOAD_TYPES:
        try:
            payload = TeamPayloadAdapter.validate_json(entry.text).model_dump(mode="json")
        except ValueError:
            payload = None
    fields_set = entry.model_fields_set
    return {
        "message_id": entry.message_id or _new_message_id(),
        "team": team,
        "recipient": recipient,
        "recipient_agent_id": None,
        "sender": entry.from_,
        "text": entry.text,
        "summary": entry.summary,
        "timestamp": entry.timestamp,
        "color": entry.color.value,
        "read": entry.read,
        "junk": False,
        "type": entry.type.value if entry.type else None,
        "category": None,
        "payload": payload,
        "meta": entry.metadata,
        "extra": dict(entry.model_extra or {}),
        "fields_set": [k for k, name in _OPTIONAL_KEYS if name in fields_set],
    }


_OPTIONAL_KEYS = (("messageId", "message_id"), ("type", "type"), ("metadata", "metadata"))
"""The optional `004` keys an entry may leave out, with their `InboxMessage` attributes."""


def _new_message_id() -> str:
    import uuid

    return f"msg-{uuid.uuid4()}"


def _notification_text(kind: str, payload: dict[str, Any]) -> str:
    for key in ("message", "content", "task_description", "error_message"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
    return json.dumps(payload, sort_keys=True)


class InboxCounter(SQLModel, table=True):
    """Per inbox: a dense sequence for its messages and a version bumped on every change.

    Taken with a row lock in the same transaction as the change, so `seq` follows commit
    order on PostgreSQL too; the file mirror appends what came after the `seq` it last wrote,
    and rewrites the file when the version says something other than an append happened.
    """

    __tablename__ = "inbox_counters"

    team: str = SQLField(primary_key=True, max_length=64)
    member: str = SQLField(primary_key=True, max_length=64)
    seq: int = SQLField(default=0)
    version: int = SQLField(default=0)


# --- the store -----------------------------------------------------------------------------

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024


class InboxError(ValueError):
    """A refused inbox operation; the message is one line for the user."""


def max_message_bytes() -> int:
    """The largest message text accepted (`TEAMFLOW_MAX_MESSAGE_BYTES`, default 1 MiB)."""
    return int(os.environ.get("TEAMFLOW_MAX_MESSAGE_BYTES") or DEFAULT_MAX_MESSAGE_BYTES)


def create_inbox(session: Session, team: str, member: str) -> None:
    """Starts an empty inbox for a new member (its counter, and its file on commit)."""
    session.add(InboxCounter(team=team, member=member))
    mark(session, "inbox", (team, member))


def send(
    team: str,
    *,
    to: str,
    sender: str,
    text: str,
    summary: str | None = None,
    type: str | None = None,
    metadata: dict[str, Any] | None = None,
    payload: dict[str, Any] | None = None,
    session: Session | None = None,
) -> InboxRow:
    """Puts a message in one active member's inbox and returns it.

    The sender is a member of the team or `system`; the message gets a unique `messageId`,
    a UTC timestamp and the sender's colour. Refused (`InboxError`/`TeamError`, nothing
    written) for an unknown or shut-down recipient, an unknown sender, an unknown type or
    a text over the size limit.
    """
    with session_scope(session) as s:
        color = _check_route(s, team, to, sender)
        return _deliver(s, team, to, sender, color, text, summary, type, metadata, payload)


def send_many(
    team: str, messages: list[dict[str, Any]], *, session: Session | None = None
) -> list[InboxRow]:
    """Sends many messages in one transaction, each inbox file written once at the end.

    Each item takes the keywords of `send` (`to`, `sender`, `text`, and optionally
    `summary`, `type`, `metadata`, `payload`). All or nothing: one refused message (unknown
    recipient, oversized text, ...) refuses the batch, naming the item.
    """
    with session_scope(session) as s:
        colors: dict[tuple[str, str], str] = {}
        for i, item in enumerate(messages):
            try:
                route = (item["to"], item["sender"])
                if route not in colors:
                    colors[route] = _check_route(s, team, *route)
            except KeyError as exc:
                raise InboxError(f"message {i}: {exc.args[0]!r} is missing") from None
            except ValueError as exc:
                raise InboxError(f"message {i}: {exc}") from None
        # One counter update per inbox reserves the batch's positions in it.
        counts: dict[str, int] = {}
        for item in messages:
            counts[item["to"]] = counts.get(item["to"], 0) + 1
        after = {to: _bump(s, team, to, appended=True, by=n) - n for to, n in counts.items()}
        rows = []
        for i, item in enumerate(messages):
            after[item["to"]] += 1
            try:
                rows.append(
                    _deliver(
                        s, team, item["to"], item["sender"], colors[(item["to"], item["sender"])],
                        item["text"], item.get("summary"), item.get("type"),
                        item.get("metadata"), item.get("payload"), seq=after[item["to"]],
                    )
                )  # fmt: skip
            except ValueError as exc:
                raise InboxError(f"message {i}: {exc}") from None
        return rows


def broadcast(
    team: str,
    *,
    sender: str,
    text: str,
    summary: str | None = None,
    type: str | None = None,
    metadata: dict[str, Any] | None = None,
    session: Session | None = None,
) -> list[InboxRow]:
    """Sends one message to every active member of the team but the sender."""
    with session_scope(session) as s:
        color = _sender_color(s, team, sender)
        members = [m for m in list_members(team, active=True, session=s) if m.name != sender]
        return [
            _deliver(s, team, m.name, sender, color, text, summary, type, metadata, None)
            for m in members
        ]


def payload_message(
    payload: TeamPayload,
    *,
    to: str,
    sender: str,
    summary: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A typed message as `send`'s keywords (and a `send_many` item): its JSON is the
    entry's `text`, its `type` the entry's type."""
    return {
        "to": to,
        "sender": sender,
        "text": payload.to_json(),
        "summary": summary or payload.type.replace("_", " "),
        "type": payload.type,
        "metadata": metadata,
        "payload": payload.model_dump(mode="json", by_alias=True),
    }


def send_payload(
    team: str,
    *,
    to: str,
    sender: str,
    payload: TeamPayload,
    summary: str | None = None,
    metadata: dict[str, Any] | None = None,
    session: Session | None = None,
) -> InboxRow:
    """Sends a typed message: its JSON is the entry's `text`, its `type` the entry's type."""
    message = payload_message(payload, to=to, sender=sender, summary=summary, metadata=metadata)
    return send(team, **message, session=session)


def send_system_init(session: Session, team: str, member: str, prompt: str) -> InboxRow:
    """`004` initial system message: the member's prompt, from `system`."""
    return _deliver(
        session, team, member, "system", "system", prompt, "Initial system prompt",
        MessageType.SYSTEM_INIT.value, None, None,
    )  # fmt: skip


def messages(
    team: str,
    member: str,
    *,
    unread: bool = False,
    sender: str | None = None,
    mark_read: bool = False,
    session: Session | None = None,
) -> list[InboxRow]:
    """A member's messages, oldest first; `mark_read` marks the ones returned as read."""
    with session_scope(session) as s:
        get_team(s, team)
        get_member(s, team, member)
        query = select(InboxRow).where(InboxRow.team == team, InboxRow.recipient == member)
        if unread:
            query = query.where(InboxRow.read == sa.false())
        if sender is not None:
            query = query.where(InboxRow.sender == sender)
        rows = list(s.exec(query.order_by(InboxRow.seq)))
        if mark_read:
            _mark(s, team, member, [r.message_id for r in rows if not r.read])
        return rows


def unread_counts(session: Session, team: str) -> dict[str, int]:
    """Unread messages per member of `team` (members with none are left out)."""
    query = (
        select(InboxRow.recipient, sa.func.count())
        .where(InboxRow.team == team, InboxRow.read == sa.false())
        .group_by(InboxRow.recipient)
    )
    return dict(session.exec(query).all())


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


def unread_count(team: str, member: str, *, session: Session | None = None) -> int:
    """How many unread messages a member has."""
    with session_scope(session) as s:
        query = select(sa.func.count()).where(
            InboxRow.team == team, InboxRow.recipient == member, InboxRow.read == sa.false()
        )
        return s.exec(query).one()


def mark_read(
    team: str, member: str, message_ids: list[str] | None = None, *, session: Session | None = None
) -> int:
    """Marks the given messages (default: all) read; returns how many changed."""
    with session_scope(session) as s:
        get_member(s, team, member)
        if message_ids is not None:
            known = set(
                s.exec(
                    select(InboxRow.message_id).where(
                        InboxRow.team == team,
                        InboxRow.recipient == member,
                        InboxRow.message_id.in_(message_ids),
                    )
                )
            )
            missing = [m for m in message_ids if m not in known]
            if missing:
                raise InboxError(f"{member!r} has no message {missing[0]!r}")
        return _mark(s, team, member, message_ids)


def _mark(session: Session, team: str, member: str, message_ids: list[str] | None) -> int:
    query = sa.update(InboxRow).where(
        InboxRow.team == team, InboxRow.recipient == member, InboxRow.read == sa.false()
    )
    if message_ids is not None:
        if not message_ids:
            return 0
        query = query.where(InboxRow.message_id.in_(message_ids))
    changed = session.exec(query.values(read=True)).rowcount
    if changed:
        _bump(session, team, member, appended=False)
        mark(session, "inbox", (team, member))
    return changed


def _check_route(session: Session, team: str, to: str, sender: str) -> str:
    """Checks that `to` is an active member and `sender` a member (or system) of `team`.

    Returns the sender's colour. One query in the common case; the precise error otherwise.
    """
    check_member_name(to)
    check_member_name(sender)
    rows = {
        m.name: m
        for m in _execute(session, _statement("route"), {"team": team, "to": to, "sender": sender})
    }
    recipient = rows.get(to)
    if recipient is None or not recipient.is_active:
        get_team(session, team)
        try:
            get_member(session, team, to, active=True)
        except ValueError as exc:
            raise InboxError(f"cannot deliver: {exc}") from None
    if sender == "system":
        return MessageColor.SYSTEM.value
    if sender not in rows:
        raise InboxError(f"unknown sender: team {team!r} has no member named {sender!r}")
    _check_sender_active(rows[sender], team)
    return rows[sender].color


def _check_sender_active(member: Any, team: str) -> None:
    """A shut-down (inactive) member sends nothing; refused naming its state.

    `member`: a `Member`, or a row with its `name` and `is_active`."""
    if not member.is_active:
        raise InboxError(
            f"cannot send: sender {member.name!r} of team {team!r} is shut down (inactive)"
        )


def _sender_color(session: Session, team: str, sender: str) -> str:

    if sender == "system":
        return MessageColor.SYSTEM.value
    try:
        member = get_member(session, team, sender)
    except ValueError as exc:
        raise InboxError(f"unknown sender: {exc}") from None
    _check_sender_active(member, team)
    return member.color


def _bump(session: Session, team: str, member: str, *, appended: bool, by: int = 1) -> int:
    """Advances the inbox counter by `by` (row-locked until commit); returns the new `seq`."""
    statement = _statement("append" if appended else "change")
    params = {"the_team": team, "the_member": member, "by": by}
    result = _execute(session, statement, params).first()
    if result is None:
        raise InboxError(f"team {team!r} has no inbox for {member!r}")
    mark(session, "inbox", (team, member), version=result[1])
    return result[0]


def _execute(session: Session, statement: Any, params: dict[str, Any]) -> sa.CursorResult:
    """Runs a Core statement in the session's transaction, as `session.execute` would (the
    session's pending objects are flushed first) but without the ORM's execution machinery,
    which costs a send about as much as its statements do."""
    if session.autoflush:
        session.flush()
    return session.connection().execute(statement, params)


@functools.cache
def _statement(name: str) -> Any:
    """A statement of the send and mirror paths, built once per process: building one anew
    (and computing its cache key) costs more than running it."""
    p = sa.bindparam
    members = Member.__table__
    counters = InboxCounter.__table__
    rows = InboxRow.__table__
    # (Not `team`, `member`: an UPDATE reserves its columns' names for its SET values.)
    inbox_counter = (counters.c.team == p("the_team")) & (counters.c.member == p("the_member"))
    if name == "route":
        return sa.select(members.c.name, members.c.is_active, members.c.color).where(
            members.c.team == p("team"), members.c.name.in_([p("to"), p("sender")])
        )
    if name in ("append", "change"):
        values = {"version": counters.c.version + p("by")}
        if name == "append":
            values["seq"] = counters.c.seq + p("by")
        return (
            sa.update(counters)
            .where(inbox_counter)
            .values(**values)
            .returning(counters.c.seq, counters.c.version)
        )
    if name == "insert":
        return rows.insert()
    if name == "counter_entries":
        entry = (
            (rows.c.team == counters.c.team)
            & (rows.c.recipient == counters.c.member)
            & (rows.c.seq > p("since"))
            & (rows.c.seq <= counters.c.seq)
        )
        return (
            sa.select(
                counters.c.seq.label("counter_seq"),
                counters.c.version.label("counter_version"),
                rows,
            )
            .select_from(counters.outerjoin(rows, entry))
            .where(inbox_counter)
            .order_by(rows.c.seq)
        )
    if name == "entries":
        return (
            sa.select(rows)
            .where(
                rows.c.team == p("team"),
                rows.c.recipient == p("member"),
                rows.c.seq > p("since"),
                rows.c.seq <= p("until"),
            )
            .order_by(rows.c.seq)
        )
    raise KeyError(name)


def _deliver(
    session: Session,
    team: str,
    recipient: str,
    sender: str,
    color: str,
    text: str,
    summary: str | None,
    type: str | None,
    metadata: dict[str, Any] | None,
    payload: dict[str, Any] | None,
    *,
    message_id: str | None = None,
    timestamp: Any = None,
    read: bool = False,
    seq: int | None = None,
) -> InboxRow:
    check_text(text)
    entry = {
        "from": sender,
        "text": text,
        "summary": summary if summary is not None else _summary(text),
        "timestamp": timestamp or utcnow(),
        "color": color,
        "read": read,
        "messageId": message_id or _new_message_id(),
    }
    if type is not None:
        entry["type"] = type
    if metadata is not None:
        entry["metadata"] = metadata
    try:
        validated = InboxMessage.model_validate(entry)
    except ValidationError as exc:
        raise InboxError("; ".join(error_lines(exc))) from None
    values = _entry_values(team, recipient, validated, payload)
    values["fields_set"] = None
    values["seq"] = seq if seq is not None else _bump(session, team, recipient, appended=True)
    # A Core insert, not `session.add`: the unit of work costs a send more than the insert.
    _execute(session, _statement("insert"), {_COLUMNS.get(k, k): v for k, v in values.items()})
    mark(session, "inbox", (team, recipient))
    return InboxRow(**values)


def _summary(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 80 else line[:77] + "..."


# --- the inbox files -----------------------------------------------------------------------


class SyncError(ValueError):
    """An inbox file teamflow cannot take in; says which file, entry and field."""


log = logging.getLogger("teamflow.inbox")

MAX_ROUNDS = 100
"""How often one refresh writes the file again because an outside writer raced it."""


def check_text(text: str) -> None:
    """The limit every way in applies to a message's text (`InboxError`, one line)."""
    size = len(text.encode())
    if size > max_message_bytes():
        raise InboxError(
            f"message of {size} bytes is over the limit of {max_message_bytes()} "
            "(TEAMFLOW_MAX_MESSAGE_BYTES)"
        )


def read_entries(
    path: Path | str, data: bytes | None, error: str | None = None
) -> tuple[list[InboxMessage], list[str]]:
    """The valid entries of an inbox file's bytes, and one line per thing refused.

    Each entry is held to what a send is held to (`InboxMessage`, `check_text`); a refused
    entry does not stop the others. A file that is not JSON gives the whole entries before
    the damage (a truncated file keeps all but its last); `data` None is a file that could
    not be read (`error` says why).
    """
    if data is None:
        return [], [error or f"{path}: could not be read"]
    refused: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [f"{path}: not valid JSON: {exc}"]
    try:
        items = loads_json(text, what=str(path))
    except (LimitError, ValueError) as exc:
        items = salvage_array(text, what=str(path))
        line = str(exc) if isinstance(exc, LimitError) else f"{path}: not valid JSON: {exc}"
        if items:
            line += f" (the {len(items)} entries before it are kept)"
        refused.append(line.splitlines()[0])
    if not isinstance(items, list):
        return [], [f"{path}: an inbox file must be a JSON array"]
    entries: list[InboxMessage] = []
    for i, item in enumerate(items):
        try:
            entry = InboxMessage.model_validate(item)
            check_text(entry.text)
        except ValidationError as exc:
            refused.append(f"{path}: entry {i}: {error_lines(exc)[0]}")
            continue
        except InboxError as exc:
            refused.append(f"{path}: entry {i}: {exc}")
            continue
        entries.append(entry)
    return entries, refused


def refresh_file(
    team: str, member: str, refused: list[str] | None = None, *, version: int | None = None
) -> tuple[int, int]:
    """Brings `inboxes/{member}.json` up to date, first taking in what others wrote there.

    `version`: what the caller needs the file to show (the inbox counter's version after
    its commit); a file that teamflow wrote at that version or a later one is left as it is.

    Returns what was taken in: (messages added, messages marked read). What could not be
    taken in (a file that is not JSON, an invalid or oversized entry) is one line each,
    added to `refused` if given, else logged; such a file is kept beside the inbox as
    `{member}.json.bad-{time}` and the inbox written again from the database, so one bad
    file never makes a send fail, or the next ones.

    An append costs O(new entries): they go into the spare copy, which is swapped in
    (`mirror.append_to_spare`); the file is written whole only after a change that is no
    append (read flags), an outside change, a repair, or when the spare cannot be used (a
    reader still has it open). Sends from several processes are grouped: each commits its
    row, then waits for the lock; whoever holds it writes every entry committed so far, and
    the others find the file already at their version (or past it) and write nothing.

    Outside writers that do not take `inboxes/.lock` (the `004` jq append recipe: read the
    file, write `f.tmp`, `mv f.tmp f`) lose nothing that teamflow could have seen:

    - Under the lock, teamflow opens the file and keeps it open. If it is not the version
      teamflow last wrote (`.state`: inode, size, mtime), its entries are taken into the
      database first, read through that descriptor.
    - The new version is swapped in with `renameat2(RENAME_EXCHANGE)` (`mirror.swap_in`,
      or `mirror.append_to_spare`),
      which hands back the file that was at the path at the moment of the swap instead of
      destroying it. If that is the file read (same inode, size, mtime), nothing came in
      between and it becomes the spare copy. Otherwise an outside writer moved its file in after
      teamflow read: that file is taken in now and the inbox written again (and so on, up
      to `MAX_ROUNDS`; what was taken in last is then written by the next refresh).
    - So every file an outside writer moves in is either swapped out by teamflow (and
      taken in then) or still at the path (taken in by the next refresh, which sees it is
      not teamflow's version). Its entries can only be missed if another unlocked writer
      replaces it first, from a read made before it: outside writers racing each other,
      which no reader can see.
    - The one window the other way: a jq writer reads the file, teamflow swaps its new
      version in, then the jq `mv` puts the older content back. teamflow's new entries are
      then missing from the file but are in the database; the file is not teamflow's
      version any more, so the next refresh (the next send, `teamflow sync`) takes in the
      jq entry and writes the whole inbox from the database again. Once the writers stop,
      one `sync` leaves file and database equal, with every message once.
    """
    path = mirror.inbox_path(team, member)
    taken = [0, 0]

    def take(entries: list[InboxMessage]) -> bool:
        added, marked = take_in(team, member, entries)
        taken[0] += added
        taken[1] += marked
        return bool(added or marked)

    def report(lines: list[str], kept: Path | None) -> None:
        where = f" (the file is kept as {kept.name})" if kept is not None else ""
        for line in lines:
            if refused is not None:
                refused.append(line + where)
            else:
                log.warning("teamflow: %s%s", line, where)

    if version is not None and _written_at(path, version):
        return 0, 0  # without waiting for the lock, which the process writing it holds
    with mirror.inbox_lock(team):
        for _ in range(MAX_ROUNDS):
            with mirror.snapshot(path) as snap:
                state = mirror.read_state(path)
                ours = snap is not None and state is not None and state.matches(snap.stat)
                if ours and version is not None and state.version >= version:
                    break  # what the caller committed is in the file already
                bad: list[str] = []
                if snap is not None and not ours:
                    entries, bad = read_entries(path, snap.read(), snap.error)
                    take(entries)
                with db.engine().connect().execution_options(teamflow_read_only=True) as conn:
                    spare = state.spare_state() if ours else None
                    # The counter and the entries after the oldest version an append could
                    # start from, in one statement (one snapshot on PostgreSQL too).
                    since = spare.seq if spare is not None else state.seq if ours else 0
                    found = _counter_and_entries(conn, team, member, since)
                    if found is None:  # the member is gone
                        break
                    (seq, version), fetched = found
                    if ours and (seq, version) == (state.seq, state.version):
                        break  # another writer already wrote this version
                    read = (conn, team, member, since, fetched, seq)
                    swapped = None
                    if spare is not None and _appended_since(spare, seq, version):
                        after = _entries_after(*read, spare.seq)
                        swapped = mirror.append_to_spare(path, spare, after)
                    if swapped is None:
                        data = None
                        if ours and _appended_since(state, seq, version):
                            old = snap.read()
                            if old is not None:
                                data = mirror.append_bytes(old, _entries_after(*read, state.seq))
                        if data is None:
                            data = mirror.array_bytes(_entries_after(*read, 0))
                        swapped = mirror.swap_in(path, data)
                if snap is not None and snap.same_file(swapped.old_stat):
                    outside = None  # what was swapped out is the file read
                    kept = None
                    if bad:
                        report(bad, mirror.set_aside(path, swapped.old, None))
                    elif ours and swapped.written:  # a version teamflow wrote: the new spare
                        if mirror.keep_as_spare(path, swapped.old):  # type: ignore[arg-type]
                            kept = mirror.FileState.of(swapped.old_stat, state.seq, state.version)  # type: ignore[arg-type,union-attr]
                    else:
                        swapped.old.unlink()  # type: ignore[union-attr]
                else:
                    outside = swapped.old  # moved in by another writer after the read
                    kept = None
                    if bad:
                        data = snap.read() if snap is not None else None
                        report(bad, mirror.set_aside(path, None, data) if data else None)
                if swapped.written:
                    state = mirror.FileState.of(swapped.stat, seq, version, kept)
                    mirror.write_state(path, state)
                again = not swapped.written
            if outside is not None:
                with mirror.snapshot(outside) as other:
                    entries, bad = read_entries(path, other.read(), other.error)  # type: ignore[union-attr]
                again = take(entries) or again
                if bad:
                    report(bad, mirror.set_aside(path, outside, None))
                else:
                    outside.unlink()
            if not again:
                break
    return taken[0], taken[1]


def _written_at(path: Path, version: int) -> bool:
    """True if the file at `path` is one teamflow wrote at `version` or later.

    Safe without the lock: a file at the path is never changed in place, so if the path
    holds the very file the state describes (inode, size, mtime), that file has the state's
    version. A state file read half written does not parse and says nothing.
    """
    state = mirror.read_state(path)
    if state is None or state.version < version:
        return False
    try:
        return state.matches(os.lstat(path))
    except OSError:
        return False


def _appended_since(state: mirror.FileState, seq: int, version: int) -> bool:
    """True if the inbox changed only by appends since the version `state` describes."""
    return seq >= state.seq and version - state.version == seq - state.seq


def _counter_and_entries(
    conn: sa.Connection, team: str, member: str, since: int
) -> tuple[tuple[int, int], list[tuple[int, dict[str, Any]]]] | None:
    """The inbox counter (seq, version) and the entries with `since` < seq <= its seq, each
    as (seq, entry), oldest first; None if the inbox has no counter (its member is gone)."""
    params = {"the_team": team, "the_member": member, "since": since}
    counter = None
    entries = []
    for row in conn.execute(_statement("counter_entries"), params):
        mapping = row._mapping
        counter = (mapping["counter_seq"], mapping["counter_version"])
        if mapping["seq"] is not None:  # None: no entry (an outer join)
            entries.append((mapping["seq"], _entry_dict(_Attributes(mapping))))
    return None if counter is None else (counter, entries)


def _entries_after(
    conn: sa.Connection,
    team: str,
    member: str,
    since: int,
    fetched: list[tuple[int, dict[str, Any]]],
    until: int,
    first: int,
) -> list[dict[str, Any]]:
    """The entries with `first` < seq <= `until`: from `fetched` (those after `since`) if it
    holds them, else read."""
    if first >= since:
        return [entry for seq, entry in fetched if seq > first]
    return _entries(conn, team, member, first, until)


def _entries(
    conn: sa.Connection, team: str, member: str, since: int, until: int
) -> list[dict[str, Any]]:
    """The inbox's entries with `since` < seq <= `until`, oldest first."""
    params = {"team": team, "member": member, "since": since, "until": until}
    rows = conn.execute(_statement("entries"), params)
    return [_entry_dict(_Attributes(row._mapping)) for row in rows]


def _content_key(sender: str, timestamp: Any, text: str) -> tuple[str, str, str]:
    return sender, format_js_timestamp(timestamp), text


def take_in(team: str, member: str, entries: list[InboxMessage]) -> tuple[int, int]:
    """Takes an inbox file's (valid) entries into the database: the new ones, and read flags.

    Returns (messages added, messages marked read). An entry with a `messageId` is the
    message with that id. One without (as Claude Code's team tools write them: `from, text,
    timestamp, read, summary, color`, e.g. when they mark messages read) is the stored
    message with the same sender, timestamp and text, each stored message matched at most
    once; only one that matches none is new. A read flag is only ever set, never cleared.
    """
    added = marked = 0
    with session_scope() as s:
        table = InboxRow.__table__
        rows = s.execute(
            sa.select(table.c.message_id, table.c.sender, table.c.timestamp, table.c.text,
                      table.c.read)
            .where(table.c.team == team, table.c.recipient == member)
            .order_by(table.c.seq)
        ).all()  # fmt: skip
        known = {r.message_id: r.read for r in rows}
        named = {e.message_id for e in entries if e.message_id}
        by_content: dict[tuple[str, str, str], list[str]] = {}
        for r in rows:
            if r.message_id not in named:
                key = _content_key(r.sender, r.timestamp, r.text)
                by_content.setdefault(key, []).append(r.message_id)
        to_mark: list[str] = []
        for entry in entries:
            message_id = entry.message_id
            if message_id is None:
                same = by_content.get(_content_key(entry.from_, entry.timestamp, entry.text))
                message_id = same.pop(0) if same else None
            if message_id in known:
                if entry.read and not known[message_id]:
                    to_mark.append(message_id)  # type: ignore[arg-type]
                    known[message_id] = True  # type: ignore[index]
                continue
            row = InboxRow.from_entry(team, member, entry)
            row.fields_set = None  # written back with its (possibly new) messageId
            row.seq = _bump(s, team, member, appended=True)
            s.add(row)
            known[row.message_id] = row.read
            added += 1
        if to_mark:
            marked = _mark(s, team, member, to_mark)
        s.info.pop("teamflow_mirror", None)  # the caller holds the lock and writes the file
        s.info.pop("teamflow_mirror_versions", None)
    return added, marked


def sync(team: str, refused: dict[str, list[str]] | None = None) -> dict[str, tuple[int, int]]:
    """Takes in every inbox file of `team`; returns (added, marked read) per member.

    What could not be taken in is one line each in `refused[member]` (logged if `refused`
    is not given); the rest is taken in (see `refresh_file`).
    """
    report = {}
    for m in list_members(team):
        lines = refused.setdefault(m.name, []) if refused is not None else None
        report[m.name] = refresh_file(team, m.name, lines)
    return report


def _row(values: Any) -> InboxRow:
    """An `InboxRow` from a Core result row (column names are not always attribute names)."""
    return InboxRow(**{_ATTRIBUTES.get(k, k): v for k, v in values.items()})


_ATTRIBUTES = {prop.columns[0].key: prop.key for prop in sa.inspect(InboxRow).column_attrs}
_COLUMNS = {attribute: column for column, attribute in _ATTRIBUTES.items()}


class _Fields:
    """An object's attributes read as `obj["name"]`."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getitem__(self, attribute: str) -> Any:
        return getattr(self.obj, attribute)


class _Attributes:
    """A Core result row read by attribute name (no `InboxRow` built: the mirror's hot path)."""

    def __init__(self, mapping: Any) -> None:
        self.mapping = mapping

    def __getitem__(self, attribute: str) -> Any:
        return self.mapping[_COLUMNS.get(attribute, attribute)]


def _write_inbox(team: str, member: str, version: int | None = None) -> None:
    refresh_file(team, member, version=version)


mirror.register("inbox", _write_inbox)
