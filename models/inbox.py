"""The inbox store: sending messages to members, reading and marking them.

Every message a member receives is one row of the inbox table (`models.inbox_table`); what
a message is on the wire, and its typed payloads, is `models.inbox_message`. Each change
marks the member's inbox file, which `models.inbox_files` brings up to date after the commit.
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session, col, select

# Imported for its writer too: each change below marks an inbox file for it to write.
from models import inbox_files  # noqa: F401
from models.base import check_member_name, table_of, utcnow
from models.db import session_scope
from models.inbox_message import (
    InboxError,
    InboxMessage,
    MessageColor,
    MessageType,
    TeamPayload,
    check_text,
)
from models.inbox_table import (
    COLUMNS,
    InboxCounter,
    InboxRow,
    bump,
    entry_values,
    execute,
    new_message_id,
    set_read,
)
from models.mirror import mark
from models.team import Member, get_member, get_team, list_members
from models.wire_support import error_lines


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
        after = {to: bump(team, to, appended=True, by=n, session=s) - n for to, n in counts.items()}
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
    session: Session | None = None,
) -> list[InboxRow]:
    """A member's messages, oldest first; `mark_read` marks the ones returned as read."""
    with session_scope(session) as s:
        get_team(team, session=s)
        get_member(team, member, session=s)
        query = select(InboxRow).where(InboxRow.team == team, InboxRow.recipient == member)
        if unread:
            query = query.where(InboxRow.read == sa.false())
        if sender is not None:
            query = query.where(InboxRow.sender == sender)
        rows = list(s.exec(query.order_by(col(InboxRow.seq))))
        if mark_read:
            set_read(team, member, [r.message_id for r in rows if not r.read], session=s)
        return rows


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
