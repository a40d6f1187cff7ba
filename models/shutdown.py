"""Shutdowns: the record of each shutdown handshake with a member, and its store.

The lead asks (`004` shutdown_request in the member's inbox), the member approves or
refuses (busy), and the shutdown completes (the member becomes inactive, with its metrics)
once approved, or forced at the timeout. The record outlives the Prefect flow run that
drives it (`flows.shutdown`). Every change is guarded by the database: a conditional
`UPDATE ... WHERE status IN (open states)` lets exactly one answer, and one completion, win.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import format_timestamp, rowcount, table_of, utc_column, utcnow
from models.db import session_scope
from models.inbox import send_payload
from models.inbox_message import ShutdownRequest
from models.inbox_table import InboxRow
from models.task import TaskMetricsRow
from models.task_edit import free_tasks
from models.task_status import TaskStatusRow
from models.team import Member, get_member, get_team, set_member
from models.team_settings import SECONDS_RANGE, ApprovalSettings, is_seconds


class ShutdownStatus(StrEnum):
    """Where a shutdown handshake stands; `completed_at` says the member is inactive."""

    REQUESTED = "requested"
    REFUSED = "refused"  # the member is busy; the flow waits for its task or the timeout
    APPROVED = "approved"
    FORCED = "forced"  # no answer (or no approval) by the timeout

    @classmethod
    def open(cls) -> frozenset[ShutdownStatus]:
        return frozenset({cls.REQUESTED, cls.REFUSED})

    @classmethod
    def done(cls) -> frozenset[ShutdownStatus]:
        return frozenset({cls.APPROVED, cls.FORCED})


class Shutdown(SQLModel, table=True):
    """One shutdown handshake (`004` shutdown_request / shutdown_approved)."""

    __tablename__ = "shutdowns"
    __table_args__ = (sa.Index("ix_shutdowns_team_member", "team", "member"),)

    request_id: str = Field(primary_key=True, max_length=255)
    team: str = Field(max_length=64)
    member: str = Field(max_length=64)
    requested_by: str | None = Field(default=None, max_length=64)
    reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    status: str = Field(default=ShutdownStatus.REQUESTED.value, max_length=16)
    flow_run_id: str | None = Field(default=None, max_length=64)
    requested_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    deadline: Any = Field(default=None, sa_column=utc_column())
    asks: int = Field(
        default=1,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="1"),
        description="How many times the request was sent (again after a busy member's task)",
    )
    last_asked_at: Any = Field(default=None, sa_column=utc_column())
    refused_at: Any = Field(default=None, sa_column=utc_column())
    answered_at: Any = Field(default=None, sa_column=utc_column())
    refusal_reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    backend_type: str | None = Field(default=None, max_length=32)
    pane_id: str | None = Field(default=None, max_length=32)
    pane_closed_at: Any = Field(default=None, sa_column=utc_column())
    completed_at: Any = Field(default=None, sa_column=utc_column())
    cause: str | None = Field(default=None, max_length=255)

    @property
    def is_open(self) -> bool:
        return ShutdownStatus(self.status) in ShutdownStatus.open()

    def to_json(self) -> dict[str, Any]:
        return {
            "requestId": self.request_id,
            "team": self.team,
            "member": self.member,
            "reason": self.reason,
            "status": self.status,
            "forced": self.status == ShutdownStatus.FORCED,
            "flowRunId": self.flow_run_id,
            "requestedAt": _iso(self.requested_at),
            "deadline": _iso(self.deadline),
            "asks": self.asks,
            "refusalReason": self.refusal_reason,
            "answeredAt": _iso(self.answered_at),
            "paneId": self.pane_id,
            "paneClosedAt": _iso(self.pane_closed_at),
            "completedAt": _iso(self.completed_at),
            "cause": self.cause,
        }


class ShutdownError(ValueError):
    """A refused shutdown operation; the message is one line for the user."""


def _iso(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def new_shutdown_id() -> str:
    """A fresh shutdown request id (the seed shows `req-shutdown-abc123`)."""
    return f"req-shutdown-{uuid.uuid4().hex[:12]}"


def request_shutdown(
    team: str,
    member: str,
    *,
    reason: str | None = None,
    timeout: float | None = None,
    request_id: str | None = None,
    flow_run_id: str | None = None,
    session: Session | None = None,
) -> Shutdown:
    """Records a shutdown request and sends the member a `shutdown_request` from the lead.

    Asking again with the id of an existing request returns it unchanged (retries).

    Raises:
        ShutdownError: the member is unknown, shut down already, the lead, or has a
            shutdown under way.
    """
    with session_scope(session) as s:
        team_row = get_team(team, session=s)
        if request_id is not None:
            existing = s.get(Shutdown, request_id)
            if existing is not None:
                if (existing.team, existing.member) != (team, member):
                    raise ShutdownError(f"request id {request_id} is taken")
                return existing
        _checked_shutdown(s, team_row, member)
        timeout_s = ApprovalSettings.of(team_row).shutdown_timeout_s if timeout is None else timeout
        if not is_seconds(timeout_s):
            raise ShutdownError(f"timeout must be {SECONDS_RANGE}, not {timeout_s!r}")
        now = utcnow()
        row = Shutdown(
            request_id=request_id or new_shutdown_id(),
            team=team,
            member=member,
            requested_by=team_row.lead,
            reason=reason,
            flow_run_id=flow_run_id,
            requested_at=now,
            deadline=now + timedelta(seconds=timeout_s),
            last_asked_at=now,
        )
        s.add(row)
        s.flush()
        _send_shutdown_request(s, row, now)
        return row


def check_shutdown(team: str, member: str, *, session: Session | None = None) -> None:
    """Raises the `ShutdownError` that `request_shutdown` would, without writing anything."""
    with session_scope(session) as s:
        _checked_shutdown(s, get_team(team, session=s), member)


def _checked_shutdown(session: Session, team_row: Any, member: str) -> None:

    team = team_row.name
    get_member(team, member, session=session)
    # Locks the member row on PostgreSQL (SQLite's BEGIN IMMEDIATE serialises anyway), so
    # two shutdowns of one member cannot both start.
    locked = session.exec(
        select(Member).where(Member.team == team, Member.name == member).with_for_update()
    ).one()
    if not locked.is_active:
        raise ShutdownError(f"member {member!r} of team {team!r} is shut down already")
    if member == team_row.lead:
        raise ShutdownError(f"{member} leads team {team}: the lead is not shut down this way")
    under_way = session.exec(
        select(Shutdown).where(
            Shutdown.team == team,
            Shutdown.member == member,
            col(Shutdown.status).in_([x.value for x in ShutdownStatus.open()]),
        )
    ).first()
    if under_way is not None:
        raise ShutdownError(f"a shutdown of {member} is under way already ({under_way.request_id})")


def _send_shutdown_request(session: Session, row: Shutdown, now: datetime) -> None:
    assert row.requested_by is not None, "request_shutdown sets it (the team's lead)"

    send_payload(
        row.team,
        to=row.member,
        sender=row.requested_by,
        payload=ShutdownRequest(
            request_id=row.request_id, from_=row.requested_by, reason=row.reason, timestamp=now
        ),
        summary="Shutdown request",
        metadata={"request_id": row.request_id},
        session=session,
    )


def get_shutdown(request_id: str, *, session: Session | None = None) -> Shutdown:
    """One shutdown request; `ShutdownError` if there is none."""
    with session_scope(session) as s:
        return _get_shutdown(s, request_id)


def _get_shutdown(session: Session, request_id: str) -> Shutdown:
    row = session.get(Shutdown, request_id)
    if row is None:
        raise ShutdownError(f"no shutdown request {request_id!r}")
    return row


def list_shutdowns(team: str, *, session: Session | None = None) -> list[Shutdown]:
    """A team's shutdown requests, oldest first."""
    with session_scope(session) as s:
        return list(
            s.exec(
                select(Shutdown)
                .where(Shutdown.team == team)
                .order_by(Shutdown.requested_at, Shutdown.request_id)
            )
        )


def answer_shutdown(
    request_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    backend_type: str | None = None,
    pane_id: str | None = None,
    at: datetime | None = None,
    session: Session | None = None,
) -> Shutdown:
    """Records the member's answer: approved (with its pane), or refused with a reason.

    An approval counts once (later answers change nothing); a refusal only counts while the
    request is open and not approved. `at` is when the member answered (default: now): a
    busy member's task counts as done when it says so after that. Returns the request as
    it stands.
    """
    if not approved and not (reason or "").strip():
        raise ShutdownError("a refusal needs a reason (e.g. the task the member is busy with)")
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        table = table_of(Shutdown)
        open_states = [x.value for x in ShutdownStatus.open()]
        now = utcnow()
        if approved:
            values: dict[str, Any] = {
                "status": ShutdownStatus.APPROVED.value,
                "answered_at": now,
                "cause": "approved by the member",
            }
            if backend_type:
                values["backend_type"] = backend_type
            if pane_id:
                values["pane_id"] = pane_id
        else:
            values = {
                "status": ShutdownStatus.REFUSED.value,
                "refused_at": at or now,
                "answered_at": now,
                "refusal_reason": reason,
            }
        s.execute(
            sa.update(table)
            .where(table.c.request_id == request_id, table.c.status.in_(open_states))
            .values(**values)
        )
        s.refresh(row)
        return row


def take_answers(request_id: str, *, session: Session | None = None) -> Shutdown:
    """Records the answers the member sent to the lead's inbox for this request.

    Members answer with `shutdown_approved` or `shutdown_rejected` messages carrying the
    `requestId` (`teamflow msg send --type ...`, or appended to the lead's inbox file and
    taken in by `teamflow sync`). Returns the request as it stands.
    """
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if not row.is_open:
            return row
        answers = s.exec(
            select(InboxRow)
            .where(
                InboxRow.team == row.team,
                InboxRow.recipient == row.requested_by,
                InboxRow.sender == row.member,
                col(InboxRow.type).in_(["shutdown_approved", "shutdown_rejected"]),
            )
            .order_by(col(InboxRow.seq))
        )
        for answer in answers:
            payload = answer.payload or {}
            if payload.get("requestId") != request_id:
                continue
            if answer.type == "shutdown_approved":
                return answer_shutdown(
                    request_id,
                    approved=True,
                    backend_type=payload.get("backendType"),
                    pane_id=payload.get("paneId"),
                    session=s,
                )
            if row.refused_at is None or answer.timestamp > row.refused_at:
                row = answer_shutdown(
                    request_id,
                    approved=False,
                    reason=payload.get("reason"),
                    at=answer.timestamp,
                    session=s,
                )
        return row


def task_finished_since(
    team: str, member: str, since: datetime, *, session: Session | None = None
) -> bool:
    """Whether `member` finished its work after `since`.

    Either it told the lead (`idle_notification`, available or task_complete) or its `004`
    task status left `running` after that time.
    """
    with session_scope(session) as s:
        lead = get_team(team, session=s).lead
        notes = s.exec(
            select(InboxRow).where(
                InboxRow.team == team,
                InboxRow.recipient == lead,
                InboxRow.sender == member,
                InboxRow.type == "idle_notification",
                InboxRow.timestamp > since,
            )
        )
        if any(
            (n.payload or {}).get("idleReason") in ("available", "task_complete") for n in notes
        ):
            return True
        status = s.get(TaskStatusRow, (team, member))
        if status is None or status.status == "running":
            return False
        last = max(t for t in (status.last_active_at, status.completed_at) if t is not None)
        return last > since


def ask_again(request_id: str, *, session: Session | None = None) -> Shutdown:
    """Sends a refused shutdown request again (the member's task is done); counts the asks."""
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if row.status != ShutdownStatus.REFUSED:
            return row
        now = utcnow()
        row.status = ShutdownStatus.REQUESTED.value
        row.asks += 1
        row.last_asked_at = now
        s.add(row)
        s.flush()
        _send_shutdown_request(s, row, now)
        return row


def member_metrics(team: str, member: str, *, session: Session | None = None) -> dict[str, int]:
    """`tasks_completed` and `total_tokens` of a member.

    From its `004` task status metrics when it reports them, else summed over its task
    executions (`task_metrics`).
    """
    with session_scope(session) as s:
        status = s.get(TaskStatusRow, (team, member))
        if status is not None and status.tokens_used is not None:
            return {
                "tasks_completed": int(status.tasks_completed or 0),
                "total_tokens": int(status.tokens_used),
            }
        count, tokens = s.execute(
            sa.select(
                sa.func.count(col(TaskMetricsRow.ended_at)),
                sa.func.coalesce(sa.func.sum(TaskMetricsRow.tokens), 0),
            ).where(col(TaskMetricsRow.team) == team, col(TaskMetricsRow.member) == member)
        ).one()
        return {"tasks_completed": int(count), "total_tokens": int(tokens)}


def complete_shutdown(
    request_id: str,
    *,
    forced: bool = False,
    cause: str | None = None,
    session: Session | None = None,
) -> Shutdown:
    """Makes the member inactive: `shutdownAt`, and metadata `tasks_completed`,
    `total_tokens`, `shutdown_reason`. Once: a completed request is returned unchanged.

    `forced` records a shutdown nobody approved (the timeout), with its cause. Either way
    the member's open tasks are freed (`models.task_edit.free_tasks`).
    """
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if row.completed_at is not None:
            return row
        if not forced and row.status != ShutdownStatus.APPROVED:
            raise ShutdownError(
                f"shutdown {request_id} is {row.status}: only an approved (or forced) "
                "shutdown completes"
            )
        now = utcnow()
        table = table_of(Shutdown)
        values: dict[str, Any] = {"completed_at": now}
        if forced:
            values.update(status=ShutdownStatus.FORCED.value, cause=(cause or "forced")[:255])
        won = rowcount(
            s.execute(
                sa.update(table)
                .where(table.c.request_id == request_id, table.c.completed_at.is_(None))
                .values(**values)
            )
        )
        s.refresh(row)
        if not won:
            return row
        member = get_member(row.team, row.member, session=s)
        meta = dict(member.meta or {})
        meta.update(member_metrics(row.team, row.member, session=s))
        meta["shutdown_reason"] = (
            f"forced: {row.cause}" if forced else (row.reason or "requested by the lead")
        )
        set_member(row.team, row.member, is_active=False, shutdown_at=now, meta=meta, session=s)
        # An inactive member works no more: its open tasks go back for others to take.
        free_tasks(row.team, row.member, session=s)
        return row


def pane_closed(request_id: str, *, session: Session | None = None) -> Shutdown:
    """Records that the member's tmux pane was closed."""
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if row.pane_closed_at is None:
            row.pane_closed_at = utcnow()
            s.add(row)
        return row
