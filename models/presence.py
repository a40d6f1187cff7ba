"""What a team's members are doing: the `004` team state export and members' heartbeats.

Above `models.team`, `models.inbox` (unread counts) and `models.agent` (agent state rows).
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from models.agent import AgentStateRow, AgentStateStatus
from models.base import format_js_timestamp, utcnow
from models.db import session_scope
from models.inbox import unread_counts
from models.team import Member, TeamError, get_member, get_team


def team_state(team: str, *, session: Session | None = None) -> dict[str, Any]:
    """`004` "Export Team State" (team, created, active_members, total_members) + unread."""
    with session_scope(session) as s:
        row = get_team(s, team)
        members = list(s.exec(select(Member).where(Member.team == team).order_by(Member.position)))
        unread = unread_counts(s, team)
        return {
            "team": row.name,
            "created": format_js_timestamp(row.created_at),
            "active_members": [m.name for m in members if m.is_active],
            "total_members": len(members),
            "unread": {m.name: unread.get(m.name, 0) for m in members},
        }


def heartbeat(team: str, name: str, *, status: str = "idle", session: Session | None = None) -> Any:
    """Records that a member is alive: its `agent_state` row's status and `last_heartbeat`.

    A shut-down (inactive) member may only report `offline`; anything else is refused.
    """
    try:
        status = AgentStateStatus(status).value
    except ValueError:
        choices = ", ".join(s.value for s in AgentStateStatus)
        raise TeamError(f"status {status!r} is not one of {choices}") from None
    with session_scope(session) as s:
        member = get_member(s, team, name)
        if not member.is_active and status != AgentStateStatus.OFFLINE.value:
            raise TeamError(
                f"member {name!r} of team {team!r} is shut down (inactive): "
                f"it cannot report {status!r}, only offline"
            )
        state = s.get(AgentStateRow, member.agent_id)
        now = utcnow()
        if state is None:
            state = AgentStateRow(agent_id=member.agent_id, team=team, created_at=now)
        state.status = status
        state.last_heartbeat = now
        state.updated_at = now
        s.add(state)
        s.flush()
        return state
