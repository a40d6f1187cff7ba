"""teamflow's own MCP tools: plan approval, heartbeats, memory and timers.

`plan_request` and `plan_status` (the plan-approval run `teamflow plan request` starts),
`heartbeat` (`teamflow member heartbeat`), `remember` and `recall` (`teamflow memory add` and
`search`), `alert_timer` (`teamflow alert timer`). A member's session acts as itself; the
local user names the member (`agent_name`) where one is needed.
"""

import time
from typing import Any

from mcp.server.mcpserver import Context

from flows.mcp.server import TeamflowMCP, refusals
from models.identity import Action, PrincipalKind, authorize

MAX_WAIT_S = 10.0
"""A tool call waits at most this long for a decision: people are slow, and a call must not
hold its connection for minutes. `plan_status` asks again later."""


def _member(who, given: str) -> str:
    """The member a call is about: a member's session is always itself."""
    if who.kind is PrincipalKind.MEMBER:
        return given or who.name
    if not given:
        raise ValueError(f"{who.describe()} must name the member: agent_name")
    return given


def plan_request(
    team_name: str,
    plan: str,
    summary: str,
    ctx: Context,
    agent_name: str = "",
    revises: str = "",
    wait_seconds: float = 5.0,
) -> dict[str, Any]:
    """Ask for approval of your plan before you act (needed when your plan mode requires it).

    Args:
        team_name: your team.
        plan: the plan, Markdown: steps, files you will touch, risks.
        summary: one line for the approver.
        agent_name: leave empty (a member asks for itself; the local user names the member).
        revises: the request id of your denied plan that this one revises.
        wait_seconds: how long to wait here for a decision (0 to 10, default 5).

    Starts a plan-approval run (it shows a decision form in the Prefect UI; the lead may also
    answer with `teamflow plan approve`). Returns {"request_id", "status", "feedback"}:
    status "pending" when nobody decided yet: call plan_status(request_id) later, or wait
    for the plan_approval_response in your inbox. Act only once it is "approved"; after
    "denied", revise with the feedback and ask again with revises=request_id.
    """
    from flows.decisions import start_plan_request

    with refusals(ctx) as who:
        member = _member(who, agent_name)
        started = start_plan_request(
            team_name, member, plan, summary, who=who, revises=revises or None
        )
        data = _await_decision(started.request_id, wait_seconds)
        data["url"] = started.run.url
        data["revision"] = started.revision
        return data


def _await_decision(request_id: str, wait_seconds: float) -> dict[str, Any]:
    """The request's state after waiting up to `wait_seconds` (capped) for a decision."""
    from models import approval

    deadline = time.monotonic() + max(0.0, min(float(wait_seconds), MAX_WAIT_S))
    while True:
        try:
            row = approval.get_request(request_id)
        except ValueError:
            row = None  # the run has not recorded the request yet
        if row is not None and not row.is_open:
            return _status(row)
        if time.monotonic() >= deadline:
            return _status(row) if row else {"request_id": request_id, "status": "pending"}
        time.sleep(0.2)


def _status(row) -> dict[str, Any]:
    return {
        "request_id": row.request_id,
        "status": row.status,
        "member": row.member,
        "feedback": row.feedback,
        "decided_by": row.decided_by,
        "cause": row.cause,
    }


def plan_status(request_id: str, ctx: Context) -> dict[str, Any]:
    """The state of a plan request: pending, approved, denied, rejected (revision limit) or
    timed out, with the approver's feedback."""
    from models import approval

    with refusals(ctx) as who:
        row = approval.get_request(request_id)
        authorize(who, Action.PLAN_READ, row.team, row.member)
        return _status(row)


def heartbeat(
    ctx: Context, status: str = "idle", team_name: str = "", agent_name: str = ""
) -> dict[str, Any]:
    """Say you are alive and what you are doing: idle, thinking, executing_tools, offline.

    Call it every minute or so while you work: a member silent for longer than the team's
    offline_after is marked offline and the lead is alarmed. A member's session needs no
    other argument; the local user names team_name and agent_name.
    """
    from models import presence

    with refusals(ctx) as who:
        team = team_name or (who.team or "")
        if not team:
            raise ValueError("the local user must name the team: team_name")
        member = _member(who, agent_name)
        authorize(who, Action.HEARTBEAT, team, member)
        state = presence.heartbeat(team, member, status=status)
        return {
            "agent_id": state.agent_id,
            "status": state.status,
            "last_heartbeat": state.last_heartbeat.isoformat(),
        }


def remember(
    team_name: str,
    content: str,
    ctx: Context,
    memory_type: str = "knowledge",
    scope: str = "individual",
    importance: float | None = None,
    tags: list[str] | None = None,
    agent_name: str = "",
) -> dict[str, Any]:
    """Keep something for later (a 001 Memory): a fact, a procedure that worked, an error and
    its fix. scope individual (only you) or shared (the whole team); memory_type one of
    user_preference, user_fact, conversation_context, agent_procedure, knowledge,
    event_pattern, error_handling, proactive_action; importance 0 to 1."""
    from models import memory

    with refusals(ctx) as who:
        member = _member(who, agent_name)
        authorize(who, Action.MEMORY_WRITE, team_name, member)
        made = memory.add(
            team_name,
            member,
            memory_type=memory_type,
            scope=scope,
            content=content,
            importance=importance,
            tags=tags or [],
        )
        return made.to_wire()


def recall(
    team_name: str, query: str, ctx: Context, limit: int = 10, agent_name: str = ""
) -> list[dict[str, Any]]:
    """Search what you remembered and what your team shared, best first (plain words)."""
    from models import memory_search

    with refusals(ctx) as who:
        member = _member(who, agent_name)
        authorize(who, Action.MEMORY_READ, team_name, member)
        return [
            f.to_json() for f in memory_search.search(team_name, query, agent=member, limit=limit)
        ]


def alert_timer(
    team_name: str,
    name: str,
    message: str,
    ctx: Context,
    after: str = "",
    at: str = "",
    to: str = "",
) -> dict[str, Any]:
    """Set a one-shot timer: `message` arrives as a system_alert in the inbox when it fires.

    Args:
        name: the timer's name, e.g. check_build.
        after: fire after this long: 90s, 10m, 1h30m. Or give `at`: an ISO 8601 time.
        to: who gets it; a member's timer is always for itself (the local user: anyone, or
            "" for the whole team).

    Needs `teamflow up` (the timer is a scheduled Prefect run).
    """
    from flows import alerts
    from models.alert import check_alert
    from models.schedule import due_time

    with refusals(ctx) as who:
        recipient = to or (who.name if who.kind is PrincipalKind.MEMBER else None)
        authorize(who, Action.ALERT_SET, team_name, recipient)
        due = due_time(after=after or None, at=at or None)
        check_alert(team_name, name, message, recipient)
        alert, run = alerts.create_timer(team_name, name, message, due=due, member=recipient)
        return {**alert.to_json(), "url": run.url}


TOOLS = (plan_request, plan_status, heartbeat, remember, recall, alert_timer)


def register(server: TeamflowMCP) -> None:
    """Adds these tools to `server`."""
    for fn in TOOLS:
        server.add_tool(fn)
