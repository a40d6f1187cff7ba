"""The inbox table: every message a member receives is one `inbox_messages` row.

The same row reads back as a `004` inbox entry (`from, text, summary, timestamp, color,
read, messageId, type, metadata`), a `001` notification (`notification_id,
recipient_agent_id, notification_type, source, payload`) or a `000` message (`message_id,
type, sender, recipient, payload, status`).

Beside it, each inbox's counter (`inbox_counters`): the dense sequence of its messages and
the version of its file, advanced in the transaction of every change (`bump`, `set_read`).
The store is `models.inbox`; the files are `models.inbox_files`.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col

from models import inbox_flags
from models.base import format_js_timestamp, json_column, table_of, utc_column, utcnow
from models.inbox_message import (
    NOTIFICATION_TYPES,
    PAYLOAD_TYPES,
    InboxError,
    InboxMessage,
    TeamPayloadAdapter,
)
from models.mirror import mark


class MessageReads:
    """A message read back as a `004` inbox entry, a `001` notification or a `000` message:
    what `InboxRow` and `InboxMessageRow` share."""

    if TYPE_CHECKING:  # what the reads use; the classes below have them
        id: int | None
        seq: int
        message_id: str
        team: str
        recipient: str
        recipient_agent_id: str | None
        sender: str
        text: str
        summary: str
        timestamp: Any
        color: str
        read: bool
        junk: bool
        type: str | None
        category: str | None
        payload: Any
        meta: dict | None
        extra: dict
        fields_set: list | None

    def to_entry(self) -> InboxMessage:
        """The row as a `004` inbox entry."""
        return InboxMessage.model_validate(self.entry_dict())

    def entry_dict(self) -> dict[str, Any]:
        """The row as a `004` inbox entry, JSON-ready (fast: the row was validated on write)."""
        return entry_of(_Fields(self))

    def to_notification(self) -> Any:
        """The row as a `001` notification.

        A message of a `001` type is that notification; any other message (plain text, a
        `004` typed message) is what one agent said to another: an `agent_message` whose
        `content` is the text, from the sender's agent id (`system` for the system).
        """
        from models.notification import NotificationAdapter  # jsonschema, tasks: not for a send

        recipient = self.recipient_agent_id or f"{self.recipient}@{self.team}"
        kind, payload = self.type, self.payload
        if kind not in NOTIFICATION_TYPES:
            sender = self.sender if self.sender == "system" else f"{self.sender}@{self.team}"
            kind, payload = "agent_message", {"sender_agent_id": sender, "content": self.text}
        return NotificationAdapter.validate_python(
            {
                # 001 ids are UUIDs; teamflow's message ids are `msg-{uuid}`.
                "notification_id": _uuid_of(self.message_id),
                "timestamp": self.timestamp,
                "recipient_agent_id": recipient,
                "notification_type": kind,
                "source": self.sender,
                "payload": payload,
            }
        )

    def to_message(self) -> Any:
        """The row as a `000` message."""
        from models.notification import Message

        if self.payload is not None and self.category is not None:
            payload = self.payload
        elif isinstance(self.payload, dict):  # a typed message: its payload is the content
            payload = {"type": self.type or "text", "content": self.payload}
        else:
            payload = {"type": self.type or "text", "content": self.text}
        status = "junk" if self.junk else "read" if self.read else "sent"
        return Message.model_validate(
            {
                "message_id": self.message_id,
                "type": self.category or _COMMANDS.get(self.type or "", "event"),
                "sender": self.sender,
                "recipient": self.recipient,
                "timestamp": self.timestamp,
                "payload": payload,
                "status": status,
            }
        )


class InboxRow(MessageReads, SQLModel, table=True):
    """One message in one member's inbox; the database's copy of every inbox entry."""

    __tablename__ = "inbox_messages"
    __table_args__ = (
        sa.UniqueConstraint("team", "recipient", "seq", name="uq_inbox_messages_seq"),
        sa.UniqueConstraint("team", "recipient", "message_id", name="uq_inbox_messages_message_id"),
        # The unread rows alone (migration 0013): what the unread query and count read.
        sa.Index(
            "ix_inbox_messages_unread",
            "team",
            "recipient",
            "seq",
            sqlite_where=sa.text("read = 0"),
            postgresql_where=sa.text("read = false"),
        ),
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
        return cls(**entry_values(team, recipient, entry))

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


class InboxMessageRow(MessageReads):
    """A message as `models.inbox.messages` returns it: its row's values as attributes,
    without the ORM's instance state or SQLModel's fields (making those was most of the
    unread query's time, for rows it only reads). Not in a session: change a message
    through the store."""

    def __repr__(self) -> str:
        return f"InboxMessageRow({self.__dict__!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]  # equal by value, and its values change


_COMMANDS = {
    **{
        t: "command"
        for t in ("task_assignment", "shutdown_request", "plan_approval_response", "user_message")
    },
    **{t: "log" for t in ("status_update", "idle_notification", "capability_broadcast")},
}
"""The `000` `type` of a message: `command` asks the recipient to act, `log` reports a
member's state; the others are `event`s."""


def _uuid_of(message_id: str) -> str:
    """A message id as a `001` UUID: `msg-{uuid}` loses its prefix; an outside writer's id
    that is no UUID becomes a stable one derived from it."""
    import uuid

    bare = message_id.removeprefix("msg-")
    try:
        return str(uuid.UUID(bare))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"teamflow:{message_id}"))


def entry_of(row: Any) -> dict[str, Any]:
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


def entry_values(
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
        "message_id": entry.message_id or new_message_id(),
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


def new_message_id() -> str:
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


ATTRIBUTES = {prop.columns[0].key: prop.key for prop in sa.inspect(InboxRow).column_attrs}
COLUMNS = {attribute: column for column, attribute in ATTRIBUTES.items()}
"""`InboxRow`'s attribute names by column name, and back (`meta` is column `metadata`)."""


class _Fields:
    """An object's attributes read as `obj["name"]`."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getitem__(self, attribute: str) -> Any:
        return getattr(self.obj, attribute)


class ResultAttributes:
    """A Core result row read by attribute name (no `InboxRow` built: the mirror's hot path)."""

    def __init__(self, mapping: Any) -> None:
        self.mapping = mapping

    def __getitem__(self, attribute: str) -> Any:
        return self.mapping[COLUMNS.get(attribute, attribute)]


# --- the counter and the read flags, in the caller's transaction -----------------------------


def bump(team: str, member: str, *, session: Session, appended: bool, by: int = 1) -> int:
    """Advances the inbox counter by `by` (row-locked until commit); returns the new `seq`."""
    return _advance(session, team, member, appended=appended, by=by)[0]


def _advance(
    session: Session, team: str, member: str, *, appended: bool, by: int = 1
) -> tuple[int, int]:
    """`bump`: the counter's new (seq, version)."""
    params = {"the_team": team, "the_member": member, "by": by}
    result = execute(_counter_update(appended), params, session=session).first()
    if result is None:
        raise InboxError(f"team {team!r} has no inbox for {member!r}")
    mark("inbox", (team, member), version=result[1], session=session)
    return result[0], result[1]


def execute(statement: Any, params: dict[str, Any], *, session: Session) -> sa.CursorResult:
    """Runs a Core statement in the session's transaction, as `session.execute` would (the
    session's pending objects are flushed first) but without the ORM's execution machinery,
    which costs a send about as much as its statements do."""
    if session.autoflush:
        session.flush()
    return session.connection().execute(statement, params)


def set_read(team: str, member: str, message_ids: list[str] | None, *, session: Session) -> int:
    """Marks the member's unread messages (those of `message_ids`, None: all) read, unchecked;
    returns how many changed."""
    query = sa.update(InboxRow).where(
        col(InboxRow.team) == team,
        col(InboxRow.recipient) == member,
        col(InboxRow.read) == sa.false(),
    )
    if message_ids is not None:
        if not message_ids:
            return 0
        query = query.where(col(InboxRow.message_id).in_(message_ids))
    statement = query.values(read=True).returning(col(InboxRow.seq), col(InboxRow.message_id))
    rows = session.execute(statement).all()
    if rows:
        _seq, version = _advance(session, team, member, appended=False)
        # Which entries the file needs patched: five bytes each, not the file rewritten.
        inbox_flags.record(session, team, member, version, rows)
    return len(rows)


@functools.cache
def _counter_update(appended: bool) -> Any:
    """The counter's UPDATE for a change (`appended`: one that adds messages), built once per
    process: building one anew (and computing its cache key) costs more than running it."""
    p = sa.bindparam
    counters = table_of(InboxCounter)
    values = {"version": counters.c.version + p("by")}
    if appended:
        values["seq"] = counters.c.seq + p("by")
    # (Not `team`, `member`: an UPDATE reserves its columns' names for its SET values.)
    inbox = (counters.c.team == p("the_team")) & (counters.c.member == p("the_member"))
    return (
        sa.update(counters)
        .where(inbox)
        .values(**values)
        .returning(counters.c.seq, counters.c.version)
    )
