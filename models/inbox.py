"""The inbox store: sending messages to members, reading and marking them.

Every message a member receives is one row of the inbox table (`models.inbox_table`); what
a message is on the wire, and its typed payloads, is `models.inbox_message`. Each change
marks the member's inbox file, which `models.inbox_files` brings up to date after the commit.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session, col, select

# Imported for its writer too: each change below marks an inbox file for it to write.
from models import (
    inbox_files,  # noqa: F401
    limits,
)
from models.base import JSONValue, UTCDateTime, check_member_name, table_of, utcnow
from models.db import session_scope
from models.inbox_message import (
    NOTIFICATION_TYPES,
    InboxError,
    InboxMessage,
    MessageColor,
    MessageType,
    TeamPayload,
    check_text,
)
from models.inbox_table import (
    ATTRIBUTES,
    COLUMNS,
    InboxCounter,
    InboxMessageRow,
    InboxRow,
    MessageReads,
    bump,
    entry_values,
    execute,
    new_message_id,
    set_read,
)
from models.mirror import mark
from models.team import Member, get_member, get_team, list_members
from models.wire_support import error_lines

if TYPE_CHECKING:
    from models.identity import Principal


def create_inbox(team: str, member: str, *, session: Session) -> None:
    """Starts an empty inbox for a new member (its counter, and its file on commit)."""
    session.add(InboxCounter(team=team, member=member))
    mark("inbox", (team, member), session=session)


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
    who: Principal | None = None,
    session: Session | None = None,
) -> InboxRow:
    """Puts a message in one active member's inbox and returns it.

    The sender is a member of the team or `system`; the message gets a unique `messageId`,
    a UTC timestamp and the sender's colour. Refused (`InboxError`/`TeamError`, nothing
    written) for an unknown or shut-down recipient, an unknown sender, an unknown type or
    a text over the size limit; and (`Forbidden`) when the caller `who` may not send as
    `sender` (a member sends only as itself). `who` None: teamflow itself sends. A `001`
    notification type (`status_update`, ...) needs a valid payload of that type: `payload`,
    or else the JSON of `text`.
    """
    payload = notification_payload(type, text, payload)
    with session_scope(session) as s:
        _authorize(who, "message.send", team, sender, session=s)
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
        payloads: list[dict[str, Any] | None] = []
        for i, item in enumerate(messages):
            try:
                payloads.append(
                    notification_payload(
                        item.get("type"), item.get("text", ""), item.get("payload")
                    )
                )
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
        after = {to: bump(team, to, appended=True, by=n, session=s) - n for to, n in counts.items()}
        rows = []
        for i, item in enumerate(messages):
            after[item["to"]] += 1
            try:
                rows.append(
                    _deliver(
                        s, team, item["to"], item["sender"], colors[(item["to"], item["sender"])],
                        item["text"], item.get("summary"), item.get("type"),
                        item.get("metadata"), payloads[i], seq=after[item["to"]],
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
    who: Principal | None = None,
    session: Session | None = None,
) -> list[InboxRow]:
    """Sends one message to every active member of the team but the sender (refused, as
    `send`, when the caller `who` may not send as `sender`)."""
    with session_scope(session) as s:
        _authorize(who, "message.send", team, sender, session=s)
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
    who: Principal | None = None,
    session: Session | None = None,
) -> InboxRow:
    """Sends a typed message: its JSON is the entry's `text`, its `type` the entry's type."""
    message = payload_message(payload, to=to, sender=sender, summary=summary, metadata=metadata)
    return send(team, **message, who=who, session=session)


def send_system_init(team: str, member: str, prompt: str, *, session: Session) -> InboxRow:
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
    who: Principal | None = None,
    session: Session | None = None,
) -> list[InboxMessageRow]:
    """A member's messages, oldest first; `mark_read` marks the ones returned as read.
    Refused (`Forbidden`) when the caller `who` may not read this inbox (a member reads
    only its own); `who` None: teamflow itself reads."""
    with session_scope(session) as s:
        _authorize(who, "inbox.read", team, member, session=s)
        params = {"team": team, "member": member, "sender": sender}
        raw = s.get_bind().dialect.name == "sqlite"
        result = execute(_messages_statement(unread, sender is not None, raw), params, session=s)
        rows = [_row(team, member, values, raw) for values in result.all()]
        if not rows:  # why none: no such team or member, or none there
            get_team(team, session=s)
            get_member(team, member, session=s)
        if mark_read:
            unread_rows = [r for r in rows if not r.read]
            set_read(team, member, [r.message_id for r in unread_rows], session=s)
            for r in unread_rows:
                r.read = True
        return rows


def _row(team: str, member: str, values: Any, raw: bool) -> InboxMessageRow:
    """An `InboxMessageRow` from a Core row of `_messages_statement`: no validation, no ORM
    instance (the unread query's cost was making those, not its SQL). `raw`: SQLite's own
    values, decoded here (`_DECODERS`)."""
    row = _new_row(InboxMessageRow)
    fields = row.__dict__
    fields.update(zip(_MESSAGE_ATTRIBUTES, values, strict=True))
    if raw:
        for name, decode in _DECODERS:
            if (value := fields[name]) is not None:
                fields[name] = decode(value)
    fields["team"] = team
    fields["recipient"] = member
    return row


def _sqlite_json(text: str) -> Any:
    return {} if text == "{}" else json.loads(text)


def _sqlite_utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _decoder(column: sa.Column[Any]) -> Any:
    """How a column's SQLite value becomes its attribute's (None: as it is). SQLAlchemy's
    result processors, a regular expression per timestamp and a JSON parse of every empty
    object, cost the unread query more than SQLite's reading of its rows."""
    kind = column.type
    if isinstance(kind, UTCDateTime):
        return _sqlite_utc
    if isinstance(kind, JSONValue):
        return _sqlite_json
    if isinstance(kind, sa.Boolean):
        return bool
    return None


_new_row = object.__new__
_MESSAGE_ATTRIBUTES = [name for name in ATTRIBUTES.values() if name not in ("team", "recipient")]
"""What the message query reads: every attribute but the two its caller names."""
_DECODERS = [
    (name, decode)
    for name in _MESSAGE_ATTRIBUTES
    if (decode := _decoder(table_of(InboxRow).c[COLUMNS.get(name, name)])) is not None
]
"""The attributes whose SQLite values `_row` decodes, and how."""


VIEW_FORMATS = ("004", "001", "000")
"""The three forms of a message: `004` inbox entry, `001` notification, `000` Message."""


def view(rows: Sequence[MessageReads], fmt: str = "004") -> list[dict[str, Any]]:
    """Messages in one of their three forms, JSON-ready: `004` inbox entries, `001`
    notifications or `000` Messages (`InboxError` for another format)."""
    if fmt == "004":
        return [r.entry_dict() for r in rows]
    if fmt == "001":
        from models.notification import NotificationAdapter

        return [NotificationAdapter.dump_python(r.to_notification(), mode="json") for r in rows]
    if fmt == "000":
        return [r.to_message().model_dump(mode="json") for r in rows]
    raise InboxError(f"unknown format {fmt!r}; formats: {', '.join(VIEW_FORMATS)}")


def mark_junk(
    team: str, member: str, message_id: str, *, junk: bool = True, session: Session | None = None
) -> InboxRow:
    """Sets (or clears) a message's `000` status `junk`; returns the message."""
    with session_scope(session) as s:
        get_member(team, member, session=s)
        row = s.exec(
            select(InboxRow).where(
                InboxRow.team == team,
                InboxRow.recipient == member,
                InboxRow.message_id == message_id,
            )
        ).first()
        if row is None:
            raise InboxError(f"{member!r} has no message {message_id!r}")
        row.junk = junk
        s.add(row)
        s.flush()
        return row


def unread_counts(team: str, *, session: Session) -> dict[str, int]:
    """Unread messages per member of `team` (members with none are left out)."""
    query = (
        select(InboxRow.recipient, sa.func.count())
        .where(InboxRow.team == team, InboxRow.read == sa.false())
        .group_by(InboxRow.recipient)
    )
    return dict(session.exec(query).all())


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
        get_member(team, member, session=s)
        if message_ids is not None:
            known = set(
                s.exec(
                    select(InboxRow.message_id).where(
                        InboxRow.team == team,
                        InboxRow.recipient == member,
                        col(InboxRow.message_id).in_(message_ids),
                    )
                )
            )
            missing = [m for m in message_ids if m not in known]
            if missing:
                raise InboxError(f"{member!r} has no message {missing[0]!r}")
        return set_read(team, member, message_ids, session=s)


def notification_payload(
    kind: str | None, text: str, payload: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The payload a message of type `kind` carries: for a `001` notification type, checked
    against its `001` model (`payload`, or else the JSON of `text`); `InboxError` if bad."""
    if kind not in NOTIFICATION_TYPES:
        return payload
    from models.notification import check_payload  # jsonschema, tasks: only when needed

    return check_payload(kind, text if payload is None else payload)


def _authorize(
    who: Principal | None, action: str, team: str, target: str, *, session: Session
) -> None:
    """`models.identity.authorize` for a caller; nothing for teamflow's own sends (None)."""
    if who is not None:
        from models.identity import authorize

        authorize(who, action, team, target, session=session)


def _check_route(session: Session, team: str, to: str, sender: str) -> str:
    """Checks that `to` is an active member and `sender` a member (or system) of `team`.

    Returns the sender's colour. One query in the common case; the precise error otherwise.
    """
    check_member_name(to)
    check_member_name(sender)
    rows = {
        m.name: m
        for m in execute(
            _statement("route"), {"team": team, "to": to, "sender": sender}, session=session
        )
    }
    recipient = rows.get(to)
    if recipient is None or not recipient.is_active:
        get_team(team, session=session)
        try:
            get_member(team, to, active=True, session=session)
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
        member = get_member(team, sender, session=session)
    except ValueError as exc:
        raise InboxError(f"unknown sender: {exc}") from None
    _check_sender_active(member, team)
    return member.color


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
    limits.check_chars(summary, limits.MAX_SUMMARY_CHARS, what="summary")
    entry = {
        "from": sender,
        "text": text,
        "summary": summary if summary is not None else _summary(text),
        "timestamp": timestamp or utcnow(),
        "color": color,
        "read": read,
        "messageId": message_id or new_message_id(),
    }
    if type is not None:
        entry["type"] = type
    if metadata is not None:
        entry["metadata"] = metadata
    try:
        validated = InboxMessage.model_validate(entry)
    except ValidationError as exc:
        raise InboxError("; ".join(error_lines(exc))) from None
    values = entry_values(team, recipient, validated, payload)
    values["fields_set"] = None
    values["seq"] = (
        seq if seq is not None else bump(team, recipient, appended=True, session=session)
    )
    # A Core insert, not `session.add`: the unit of work costs a send more than the insert.
    execute(
        _statement("insert"), {COLUMNS.get(k, k): v for k, v in values.items()}, session=session
    )
    mark("inbox", (team, recipient), session=session)
    return InboxRow(**values)


def _summary(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 80 else line[:77] + "..."


@functools.cache
def _statement(name: str) -> Any:
    """A statement of the send path, built once per process: building one anew (and
    computing its cache key) costs more than running it."""
    if name == "route":
        p = sa.bindparam
        members = table_of(Member)
        return sa.select(members.c.name, members.c.is_active, members.c.color).where(
            members.c.team == p("team"), members.c.name.in_([p("to"), p("sender")])
        )
    if name == "insert":
        return table_of(InboxRow).insert()
    raise KeyError(name)


@functools.cache
def _messages_statement(unread: bool, by_sender: bool, raw: bool = False) -> Any:
    """A member's messages in `_MESSAGE_ATTRIBUTES` order; `raw`: the driver's values,
    without SQLAlchemy's result processing (`_row` decodes them)."""
    p = sa.bindparam
    table = table_of(InboxRow)
    columns: list[sa.ColumnElement[Any]] = [table.c[COLUMNS.get(a, a)] for a in _MESSAGE_ATTRIBUTES]
    if raw:
        columns = [sa.type_coerce(c, sa.types.NULLTYPE) for c in columns]
    query = sa.select(*columns).where(table.c.team == p("team"), table.c.recipient == p("member"))
    if unread:
        query = query.where(table.c.read == sa.false())
    if by_sender:
        query = query.where(table.c.sender == p("sender"))
    return query.order_by(table.c.seq)
