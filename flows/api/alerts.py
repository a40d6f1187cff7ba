"""`/api/v1/teams/{team}/alerts`, `/memory/search` and `/metrics`: a team's timers, what
its members remember, and the headline figures of its work.

Timers go through `flows.alerts.create_timer` (as `teamflow alert timer` and MCP's
`alert_timer`), memory through `models.memory_search.search` (`teamflow memory search`,
MCP's `recall`), metrics through `models.metrics` (`teamflow metrics TEAM --json`)."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import Field

from flows.api.auth import Caller
from flows.api.envelopes import SUCCESS_SCHEMA, ok
from flows.api.paths import TeamPath
from flows.api.teams import Body
from models.identity import Action, PrincipalKind, authorize

router = APIRouter(prefix="/teams/{team}", tags=["alerts, memory, metrics"])


class TimerIn(Body):
    """A one-shot timer: `message` reaches `to` (default: the whole team; a member's timer
    is for itself) as a `001` system_alert when it fires."""

    name: str = Field(min_length=1, max_length=64, description="e.g. check_build")
    message: str = Field(min_length=1, description="What the alert says")
    after: str | None = Field(default=None, description="90s, 10m, 1h30m")
    at: str | None = Field(default=None, description="Or an ISO 8601 time")
    to: str | None = Field(default=None, max_length=64, description="A member")


@router.post("/alerts/timers", response_model=SUCCESS_SCHEMA, status_code=201, summary="Timer")
def set_timer(team: TeamPath, body: TimerIn, who: Caller) -> JSONResponse:
    """Sets a timer (a scheduled Prefect run: needs `teamflow up`)."""
    from flows import alerts
    from models.alert import check_alert
    from models.schedule import due_time

    recipient = body.to or (who.name if who.kind is PrincipalKind.MEMBER else None)
    authorize(who, Action.ALERT_SET, team, recipient)
    due = due_time(after=body.after, at=body.at)
    check_alert(team, body.name, body.message, recipient)
    alert, run = alerts.create_timer(team, body.name, body.message, due=due, member=recipient)
    return ok({**alert.to_json(), "url": run.url}, f"timer {body.name} set", 201)


@router.get("/alerts", response_model=SUCCESS_SCHEMA, summary="A team's timers and schedules")
def list_alerts(team: TeamPath, who: Caller) -> JSONResponse:
    from models.alert import list_alerts as listed
    from models.db import session_scope
    from models.team import get_team

    with session_scope() as s:
        authorize(who, Action.TEAM_READ, team, session=s)
        get_team(team, session=s)
        rows = [a.to_json() for a in listed(team, session=s)]
    return ok(rows, f"{len(rows)} alert(s)")


@router.get("/memory/search", response_model=SUCCESS_SCHEMA, summary="Search memories")
def search_memory(
    team: TeamPath,
    who: Caller,
    q: str = Query(
        min_length=1, max_length=2000, pattern=r"\w", description="Plain words (at least one)"
    ),
    agent: str | None = Query(
        default=None, description="Whose view: default a member's own, else the team's lead's"
    ),
    limit: int = Query(default=10, ge=1, le=100),
) -> JSONResponse:
    """What `agent` remembered and what the team shared, best first."""
    from models import memory_search

    member = agent or (who.name if who.kind is PrincipalKind.MEMBER else None)
    if member is None:
        from models import team as teams

        member = teams.settings_of(team).lead
    authorize(who, Action.MEMORY_READ, team, member)
    found = memory_search.search(team, q, agent=member, limit=limit)
    return ok([f.to_json() for f in found], f"{len(found)} memory(ies)")


@router.get("/metrics", response_model=SUCCESS_SCHEMA, summary="A team's headline figures")
def metrics(team: TeamPath, who: Caller) -> JSONResponse:
    """Per member: tasks, failures, durations, tokens, plan waits, unread; per alert type:
    firings and lateness (`teamflow metrics TEAM --json`, all history)."""
    from models import metrics as m

    authorize(who, Action.TEAM_READ, team)
    m.check_team(team)
    data = {
        "team": team,
        "members": m.records(m.headline(team, None)),
        "alerts": m.records(m.alert_lateness(team, None)),
    }
    return ok(data)
