"""What a team's members are doing: the `004` team state export and members' heartbeats.

Above `models.team`, `models.inbox` (unread counts) and `models.agent` (agent state rows).

A change of a member's status is also recorded in `agent_state_history` (same transaction;
a heartbeat that repeats the status writes no history). A member's first heartbeat, one
that changes what it is doing (`idle`, `busy`, `offline`: the
`001` status_update vocabulary), or one from a member the watchdog marked offline, sends the
team's lead a `status_update` notification; heartbeats that change nothing send none.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.agent import AgentStateRow, AgentStateStatus, change_agent_status
from models.base import format_js_timestamp, table_of, utcnow
from models.db import session_scope
from models.inbox import send, unread_counts
from models.inbox_message import MessageType
from models.notification import AgentActivity, StatusUpdatePayload
from models.status import AGENT_TO_ACTIVITY
from models.team import Member, TeamError, get_member, get_team


def team_state(team: str, *, session: Session | None = None) -> dict[str, Any]:
    """`004` "Export Team State" (team, created, active_members, total_members) + unread."""
    with session_scope(session) as s:
        row = get_team(team, session=s)
        members = list(
            s.exec(select(Member).where(col(Member.team) == team).order_by(col(Member.position)))
        )
        unread = unread_counts(team, session=s)
        return {
            "team": row.name,
            "created": format_js_timestamp(row.created_at),
            "active_members": [m.name for m in members if m.is_active],
            "total_members": len(members),
            "unread": {m.name: unread.get(m.name, 0) for m in members},
        }


def heartbeat(team: str, name: str, *, status: str = "idle", session: Session | None = None) -> Any:
    """Records that a member is alive: its `agent_state` row's status and `last_heartbeat`.

    The lead is told (`status_update`) when the member's activity changes, and when a member
    that was offline is back.
    A shut-down (inactive) member may only report `offline`; anything else is refused.
    """
    try:
        status = AgentStateStatus(status).value
    except ValueError:
        choices = ", ".join(s.value for s in AgentStateStatus)
        raise TeamError(f"status {status!r} is not one of {choices}") from None
    with session_scope(session) as s:
        member = get_member(team, name, session=s)
        if not member.is_active and status != AgentStateStatus.OFFLINE.value:
            raise TeamError(
                f"member {name!r} of team {team!r} is shut down (inactive): "
                f"it cannot report {status!r}, only offline"
            )
        # Locked (PostgreSQL): two heartbeats of a member change its status one after the
        # other, so each change opens exactly one history row.
        state = s.get(AgentStateRow, member.agent_id, with_for_update=True)
        now = utcnow()
        before = None if state is None else state.status
        made = False
        if state is None:  # the member's first heartbeat makes its row
            try:
                with s.begin_nested():
                    state = AgentStateRow(agent_id=member.agent_id, team=team, created_at=now)
                    _beat(s, state, status, team=team, name=name, now=now)
                made = True
            except sa.exc.IntegrityError:  # another process's first heartbeat came first
                state = s.get(
                    AgentStateRow, member.agent_id, with_for_update=True, populate_existing=True
                )
                assert state is not None, "made by the heartbeat that came first"
                before = state.status
        if not made:
            _beat(s, state, status, team=team, name=name, now=now)
        if before is None or _activity(before) != _activity(status):
            back = before == AgentStateStatus.OFFLINE.value
            tell_lead(
                team,
                member,
                status,
                f"{name} is back ({status})" if back else f"{name} is {status}",
                session=s,
            )
        return state


def _beat(s: Session, state: AgentStateRow, status: str, *, team: str, name: str, now: Any) -> None:
    """`state` (the member's row) is `status` now, alive at `now`; flushed at once."""
    if state.team is None:
        state.team = team
    change_agent_status(state, status, member=name, now=now, session=s)
    state.last_heartbeat = now
    state.updated_at = now
    s.add(state)
    s.flush()


def _activity(status: str) -> AgentActivity:
    try:
        return AGENT_TO_ACTIVITY[AgentStateStatus(status)]
    except ValueError:
        return AgentActivity.ERROR


_CAPACITY = {AgentActivity.IDLE: 0.0, AgentActivity.BUSY: 1.0}
"""`001` status_update `capacity` (share in use) of an activity; a member works one step at
a time, so a busy one is fully used; offline or in error: not reported."""


def current_task(team: str, member: str, *, session: Session) -> str | None:
    """The title of the task in progress that `member` is assigned to, if any."""
    from models.task import TaskAssigneeRow, TaskRow, TaskState

    tasks, assignees = table_of(TaskRow), table_of(TaskAssigneeRow)
    return session.execute(
        sa.select(tasks.c.title)
        .join(assignees, assignees.c.task_id == tasks.c.id)
        .where(
            tasks.c.team == team,
            tasks.c.status == TaskState.IN_PROGRESS.value,
            assignees.c.assignee_id == member,
        )
        .order_by(tasks.c.created_at)
        .limit(1)
    ).scalar()


def tell_lead(team: str, member: Member, status: str, message: str, *, session: Session) -> None:
    """Sends the team's lead a `001` status_update from `system` about `member` (not when
    the member is the lead, or the lead is shut down)."""
    lead = get_team(team, session=session).lead
    if member.name == lead:
        return
    row = session.get(Member, (team, lead))
    if row is None or not row.is_active:
        return
    activity = _activity(status)
    payload = StatusUpdatePayload(
        agent_id=member.agent_id,
        status=activity,
        current_task=current_task(team, member.name, session=session),
        capacity=_CAPACITY.get(activity),
        message=message,
    )
    send(
        team,
        to=lead,
        sender="system",
        text=message,
        summary=f"status: {member.name} {status}",
        type=MessageType.STATUS_UPDATE.value,
        payload=payload.model_dump(mode="json"),
        session=session,
    )
