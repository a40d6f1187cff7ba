"""Asking for a decision and giving one: the acts the CLI and the MCP server share.

`teamflow plan request` and MCP's `plan_request` start the same plan-approval run through
`start_plan_request`; `teamflow plan approve|deny` and MCP's `send_message(type=
"plan_approval_response")` decide through `decide_plan`; `teamflow member shutdown` and
MCP's `send_message(type="shutdown_request")` start the same shutdown-member run through
`start_shutdown`. Each raises the store's one-line error (`ApprovalError`, `ShutdownError`)
or `flows.runner.RunnerError` when no run can start; nothing is started when it refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flows import runner


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
    revises: str | None = None,
    timeout: float | None = None,
    policy: str | None = None,
) -> PlanRequestStarted:
    """Checks that `member` may ask now, then starts its plan-approval run (needs a
    Prefect server with a worker: `teamflow up`). The run records the request and puts
    it in the lead's inbox."""
    from models import approval

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
    request_id: str, *, approve: bool, feedback: str | None = None, decider: str | None = None
) -> PlanDecided:
    """Records the decision on a plan (once; only from the lead or an approver, never the
    member itself) and resumes the run that waits for it. `decider` defaults to the lead."""
    from models import approval
    from models import team as teams

    request = approval.get_request(request_id)
    if request.flow_run_id and request.is_open:
        # Imported before deciding, so the resume follows the decision at once.
        import prefect.flow_runs  # noqa: F401
    decider = decider or teams.settings_of(request.team).lead
    row = approval.decide(request_id, approve=approve, decider=decider, feedback=feedback)
    note = ""
    if row.flow_run_id:
        from flows.plan_approval import resume_with_decision

        note = resume_with_decision(row.flow_run_id, approve, feedback, decider)
    return PlanDecided(row, decider, note)


@dataclass
class ShutdownStarted:
    """A shutdown request whose run waits for the member's answer."""

    request_id: str
    run: runner.StartedRun


def start_shutdown(
    team: str, member: str, *, reason: str | None = None, timeout: float | None = None
) -> ShutdownStarted:
    """Checks that `member` can be asked to shut down, then starts its shutdown-member run
    (the handshake: the member answers, or the timeout forces it)."""
    from models import shutdown

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
