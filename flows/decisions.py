"""Asking for a decision and giving one: the acts the CLI and the MCP server share.

`teamflow plan request` and MCP's `plan_request` start the same plan-approval run through
`start_plan_request`; `teamflow plan approve|deny` and MCP's `send_message(type=
"plan_approval_response")` decide through `decide_plan`; `teamflow member shutdown` and
MCP's `send_message(type="shutdown_request")` start the same shutdown-member run through
`start_shutdown`; the member's answer (MCP's `send_message(type="shutdown_response")`) goes
through `answer_shutdown`. Each takes the caller (`who`: the CLI passes the local user, MCP
its session's principal) and asks `models.identity.authorize` first, so the rule of who may
do it holds for every way in. Each raises `Forbidden`, the store's one-line error
(`ApprovalError`, `ShutdownError`) or `flows.runner.RunnerError` when no run can start;
nothing is started or written when it refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flows import runner
from models.identity import Action, Principal, PrincipalKind, authorize


@dataclass
class PlanRequestStarted:
    """A plan request whose run waits for a decision."""

    request_id: str
    revision: int
    run: runner.StartedRun


def start_plan_request(
    team: str,
    member: str,
    plan: str,
    summary: str,
    *,
    who: Principal,
    revises: str | None = None,
    timeout: float | None = None,
    policy: str | None = None,
) -> PlanRequestStarted:
    """Checks that `who` may ask for `member` (a member only for itself) and that `member`
    may ask now, then starts its plan-approval run (needs a Prefect server with a worker:
    `teamflow up`). The run records the request and puts it in the lead's inbox."""
    from models import approval

    authorize(who, Action.PLAN_REQUEST, team, member)
    revision = approval.check_request(team, member, previous_request_id=revises, policy=policy)
    request_id = approval.new_plan_id()
    run = runner.start(
        "plan-approval/plan-approval",
        {
            "team": team,
            "member": member,
            "plan": plan,
            "summary": summary,
            "request_id": request_id,
            "previous_request_id": revises,
            "timeout_s": timeout,
            "policy": policy,
        },
        tags=[f"team:{team}", f"member:{member}"],
        flow_run_name=f"plan of {member}@{team}",
    )
    return PlanRequestStarted(request_id, revision, run)


@dataclass
class PlanDecided:
    """A recorded decision, who made it, and a note when its run could not be resumed."""

    request: Any
    decider: str
    note: str


def decide_plan(
    request_id: str,
    *,
    who: Principal,
    approve: bool,
    feedback: str | None = None,
    decider: str | None = None,
) -> PlanDecided:
    """Records the decision on a plan (once; only from the lead or an approver, never the
    member itself) and resumes the run that waits for it. `decider` defaults to the lead
    for the local user and a lead user, and to the caller itself for a member or an
    approver user, who decides only as itself and only when it is the lead or a listed
    approver. The record keeps how (`who.door`: cli, mcp, api, link) and who, as verified
    (`who.identity`; the CLI's `--as` is recorded as declared, `local`)."""
    from models import approval
    from models import team as teams

    request = approval.get_request(request_id)
    if not decider:
        speaks_for_lead = who.is_local or who.kind is PrincipalKind.LEAD
        decider = teams.settings_of(request.team).lead if speaks_for_lead else who.name
    assert decider is not None  # a team has a lead; a member's principal has its name
    authorize(who, Action.PLAN_DECIDE, request.team, decider)
    row = approval.decide(
        request_id, approve=approve, decider=decider, feedback=feedback,
        via=who.door.via, identity=who.identity,
    )  # fmt: skip
    note = ""
    if row.flow_run_id:
        note = runner.resume(row.flow_run_id, plan_decision_input(approve, feedback, decider))
    return PlanDecided(row, decider, note)


def plan_decision_input(approve: bool, feedback: str | None, approver: str) -> dict[str, Any]:
    """The `run_input` of a plan-approval run's resume with this decision: what its form
    (`flows.plan_approval.PlanDecision`) submits."""
    return {"decision": "approve" if approve else "deny", "feedback": feedback or "",
            "approver": approver}  # fmt: skip


@dataclass
class ShutdownStarted:
    """A shutdown request whose run waits for the member's answer."""

    request_id: str
    run: runner.StartedRun


def start_shutdown(
    team: str,
    member: str,
    *,
    who: Principal,
    reason: str | None = None,
    timeout: float | None = None,
) -> ShutdownStarted:
    """Checks that `who` may ask (the local user: members do not) and that `member` can be
    asked to shut down, then starts its shutdown-member run (the handshake: the member
    answers, or the timeout forces it)."""
    from models import shutdown

    authorize(who, Action.SHUTDOWN_REQUEST, team, member)
    shutdown.check_shutdown(team, member)
    request_id = shutdown.new_shutdown_id()
    run = runner.start(
        "shutdown-member/shutdown-member",
        {
            "team": team,
            "member": member,
            "reason": reason,
            "timeout_s": timeout,
            "request_id": request_id,
        },
        tags=[f"team:{team}", f"member:{member}"],
        flow_run_name=f"shutdown {member}@{team}",
    )
    return ShutdownStarted(request_id, run)


def answer_shutdown(
    team: str,
    member: str,
    request_id: str,
    *,
    who: Principal,
    approve: bool,
    reason: str | None = None,
) -> Any:
    """`member`'s answer to the shutdown request `request_id` (only its own, and a member
    answers only as itself): a `shutdown_approved` or `shutdown_rejected` message to whoever
    asked, which the waiting shutdown-member run reads. Returns the message sent."""
    from models import inbox, shutdown
    from models import team as teams
    from models.base import utcnow
    from models.db import session_scope
    from models.inbox_message import ShutdownApproved, ShutdownRejected

    authorize(who, Action.SHUTDOWN_ANSWER, team, member)
    with session_scope() as s:
        request = shutdown.get_shutdown(request_id, session=s)
        if (request.team, request.member) != (team, member):
            raise ValueError(f"shutdown {request_id} was not asked of {member} in team {team}")
        row = teams.get_member(team, member, session=s)
        payload: ShutdownApproved | ShutdownRejected
        if approve:
            payload = ShutdownApproved(
                request_id=request_id,
                backend_type=row.backend_type,
                pane_id=row.tmux_pane_id,
                timestamp=utcnow(),
            )
        else:
            payload = ShutdownRejected(
                request_id=request_id, reason=reason or "", timestamp=utcnow()
            )
        return inbox.send_payload(
            team,
            to=request.requested_by or teams.settings_of(team, session=s).lead,
            sender=member,
            payload=payload,
            session=s,
        )


@dataclass
class CallDecided:
    """A recorded decision on a tool call, who made it, and a note when its run could not
    be resumed."""

    call: Any
    decider: str
    note: str


def decide_action(
    call_id: str,
    decision: str,
    *,
    who: Principal,
    params: Any = None,
    feedback: str | None = None,
    decider: str | None = None,
) -> CallDecided:
    """Records the decision on one tool call (once; from the lead or an approver, never the
    member itself), then resumes the run that waits for it. `decider` defaults to the lead
    for the local user and a lead user, and to the caller itself for a member or an
    approver user (`models.identity.RULES`, as for plans)."""
    from models import team as teams
    from models import tool_approval as store

    call = store.get_call(call_id)
    if not decider:
        speaks_for_lead = who.is_local or who.kind is PrincipalKind.LEAD
        decider = teams.settings_of(call.team).lead if speaks_for_lead else who.name
    assert decider is not None
    authorize(who, Action.TOOL_DECIDE, call.team, decider)
    row = store.decide_call(
        call_id, decision, decider=decider, params=params, feedback=feedback, door=who.door.value
    )
    note = ""
    if row.flow_run_id:
        run_input = tool_decision_input(call_id, decision, params, feedback, decider)
        # A run between two waits finds the decision in the database: nothing to say.
        note = runner.resume(row.flow_run_id, run_input, only_if_paused=True)
    return CallDecided(row, decider, note)


def tool_decision_input(
    call_id: str, decision: str, params: Any, feedback: str | None, by: str
) -> dict[str, Any]:
    """The `run_input` of a resume carrying one call's decision: what the `tool-approval`
    run's form (`flows.tool_approval.ToolDecisions`) submits."""
    import json

    text = json.dumps(params) if params is not None else ""
    one = {"call_id": call_id, "decision": decision, "params": text, "feedback": feedback or ""}
    return {"decisions": [one], "approver": by}
