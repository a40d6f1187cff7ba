"""Plan approvals on teamflow's clock: the timeout policy, when it acts, which waits are over.

`apply_timeout` decides (or escalates) one due request; `expire_due` every due request, in
batches, for `flows.timers`; `next_due` says when to look again; `decided_runs` /
`decided_with_runs` tell a waiting run that its request was decided meanwhile. The requests
and their decisions are `models.approval`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.approval import (
    SYSTEM,
    AlreadyDecided,
    ApprovalStatus,
    PlanApproval,
    close_request,
    denial,
    load_plan,
)
from models.base import format_timestamp, rowcount, table_of, utcnow
from models.db import session_scope
from models.inbox import send
from models.team import get_team
from models.team_settings import ApprovalSettings, TimeoutPolicy


class TimeoutAction(StrEnum):
    """What the timeout policy does to a request at a given time."""

    NONE = "none"  # not due (or decided already)
    DENY = "deny"
    APPROVE = "approve"
    ESCALATE = "escalate"
    DENY_AFTER_ESCALATION = "deny_after_escalation"


def timeout_action(request: PlanApproval, now: datetime | None = None) -> TimeoutAction:
    """What the policy does to `request` at `now` (pure: no database, no clock but `now`)."""
    now = now or utcnow()
    due = request.due_at()
    if due is None or now < due:
        return TimeoutAction.NONE
    if request.escalated_at is not None:
        return TimeoutAction.DENY_AFTER_ESCALATION
    return {
        TimeoutPolicy.DENY: TimeoutAction.DENY,
        TimeoutPolicy.APPROVE: TimeoutAction.APPROVE,
        TimeoutPolicy.ESCALATE: TimeoutAction.ESCALATE,
    }[TimeoutPolicy(request.timeout_policy)]


def apply_timeout(
    request_id: str, *, now: datetime | None = None, session: Session | None = None
) -> TimeoutAction:
    """Applies the timeout policy to a request that is due; returns what it did.

    deny / approve: the request ends so, decided by `system`, with the cause recorded and
    the response sent. escalate: an ALARM `system_alert` goes to the lead (once) and the
    request keeps waiting until its hard deadline, where it is denied. A request decided
    meanwhile is left alone (`NONE`).
    """
    with session_scope(session) as s:
        request = load_plan(request_id, session=s)
        action = timeout_action(request, now)
        waited = _seconds(request.deadline - request.requested_at)
        config = ApprovalSettings.of(get_team(request.team, session=s))
        try:
            if action is TimeoutAction.DENY:
                status, cause = denial(
                    request, config, f"no decision within {waited}: denied by the timeout policy"
                )
                close_request(request, status, SYSTEM, None, cause, session=s)
            elif action is TimeoutAction.APPROVE:
                close_request(request, ApprovalStatus.APPROVED, SYSTEM, None,
                       f"no decision within {waited}: approved by the timeout policy",
                       session=s)  # fmt: skip
            elif action is TimeoutAction.DENY_AFTER_ESCALATION:
                total = _seconds(request.hard_deadline - request.requested_at)
                status, cause = denial(
                    request, config, f"no decision within {total}, escalated to the lead: denied"
                )
                close_request(request, status, SYSTEM, None, cause, session=s)
            elif action is TimeoutAction.ESCALATE and not _escalate(s, request, waited):
                return TimeoutAction.NONE
        except AlreadyDecided:
            return TimeoutAction.NONE
        return action


def _escalate(session: Session, request: PlanApproval, waited: str) -> bool:

    table = table_of(PlanApproval)
    won = rowcount(
        session.execute(
            sa.update(table)
            .where(
                table.c.request_id == request.request_id,
                table.c.status == ApprovalStatus.PENDING,
                table.c.escalated_at.is_(None),
            )
            .values(escalated_at=utcnow())
        )
    )
    session.refresh(request)
    if not won:
        return False
    lead = get_team(request.team, session=session).lead
    message = (
        f"Plan {request.request_id} of {request.member} ({request.summary}) has waited "
        f"{waited} for a decision. Decide with `teamflow plan approve|deny "
        f"{request.request_id}`; it is denied at {format_timestamp(request.hard_deadline)}."
    )
    send(
        request.team,
        to=lead,
        sender=SYSTEM,
        text=message,
        summary=f"ALARM: plan of {request.member} waits for a decision",
        type="system_alert",
        payload={"alert_type": "ALARM", "alert_name": "plan-approval-overdue", "message": message},
        metadata={"request_id": request.request_id},
        session=session,
    )
    return True


def expire_due(
    *,
    now: datetime | None = None,
    session: Session | None = None,
    batch: int = 100,
    committed: Callable[[list[str]], None] | None = None,
) -> list[str]:
    """Applies the timeout policy to every due request (teamflow's clock, `flows.timers`).

    Requests are decided `batch` to a transaction, so each inbox file is written once per
    batch rather than once per response: hundreds of requests due at once end within a
    second. A batch that fails is applied again one request at a time, and a request that
    still fails is left pending (its own run, or the next round, tries again).
    `committed(ids)` hears each batch's requests once they are committed (the clock resumes
    their runs while the next batch is decided).

    Returns the ids of the requests it acted on (decided, or escalated to the lead).
    """
    now = now or utcnow()
    with session_scope(session) as s:
        ids = list(
            s.exec(
                select(PlanApproval.request_id)
                .where(PlanApproval.status == ApprovalStatus.PENDING, _due_at() <= now)
                .order_by(_due_at())
            )
        )
    if session is not None:
        return [
            i for i in ids if apply_timeout(i, now=now, session=session) is not TimeoutAction.NONE
        ]
    acted: list[str] = []
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        done: list[str] = []
        try:
            with session_scope() as s:
                done = [
                    i
                    for i in chunk
                    if apply_timeout(i, now=now, session=s) is not TimeoutAction.NONE
                ]
        except Exception:
            for request_id in chunk:
                with contextlib.suppress(Exception):
                    if apply_timeout(request_id, now=now) is not TimeoutAction.NONE:
                        done.append(request_id)
        acted += done
        if done and committed is not None:
            committed(done)
    return acted


def _due_at() -> Any:
    """SQL for `PlanApproval.due_at()` of a pending request: its deadline, or its hard
    deadline once it was escalated."""
    table = table_of(PlanApproval)
    due = sa.case((table.c.escalated_at.is_(None), table.c.deadline), else_=table.c.hard_deadline)
    return sa.type_coerce(due, table.c.deadline.type)


def next_due(*, session: Session | None = None) -> datetime | None:
    """When the timeout policy acts next on any pending request (None: nothing waits)."""
    with session_scope(session) as s:
        return s.exec(
            select(
                sa.type_coerce(sa.func.min(_due_at()), table_of(PlanApproval).c.deadline.type)
            ).where(PlanApproval.status == ApprovalStatus.PENDING)
        ).one()


def decided_with_runs(request_ids: list[str], *, session: Session | None = None) -> list[str]:
    """The flow run ids of those of `request_ids` that are decided and have a run."""
    return _decided(PlanApproval.request_id, request_ids, session)


def decided_runs(flow_run_ids: list[str], *, session: Session | None = None) -> list[str]:
    """Those of `flow_run_ids` whose request is decided: their wait is over."""
    return _decided(PlanApproval.flow_run_id, flow_run_ids, session)


def _decided(column: Any, values: list[str], session: Session | None) -> list[str]:
    if not values:
        return []
    with session_scope(session) as s:
        found = s.exec(
            select(col(PlanApproval.flow_run_id)).where(
                column.in_(values),
                PlanApproval.status != ApprovalStatus.PENDING,
                col(PlanApproval.flow_run_id).is_not(None),
            )
        )
        return [run_id for run_id in found if run_id is not None]


def _seconds(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"
