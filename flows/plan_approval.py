"""The `plan-approval` flow: a member's plan waits, paused, for the lead's decision.

The story: the request is recorded and lands in the lead's inbox; the run pauses with a
`PlanDecision` form that shows the plan, so the Prefect UI can decide it; `teamflow plan
approve|deny` decides it from a terminal (recording the decision first, then resuming the
run). A decider who may not decide is told so and the run pauses again. The decision is
recorded once, the member gets its `plan_approval_response` once, and the flow returns it.
Nobody deciding in time lets the team's timeout policy decide (deny, approve, or escalate
to the lead and deny at a hard limit); teamflow keeps that time itself.

The wait is `flows.waits.wait_for_decision`: a resume does not wait for a poll as with
`pause_flow_run` (every 10 s), the run hears it on Prefect's event stream in well under a
second (500 waiting runs cost the server a read or three every 10 s: `flows.run_watch`), and
it also looks at teamflow's database every couple of seconds, so a decision whose resume did
not get through is taken as well. A waiting run outlives a restart of the Prefect server.

Long waits: a run started from a deployment waits in process for
`TEAMFLOW_SUSPEND_AFTER_SECONDS` (default 60), then suspends: its worker is free. A resume
(the form, or `teamflow plan approve`) reschedules it and a worker runs the flow again from
the start; recorded steps are not done again. At the deadline, teamflow's clock in every
`teamflow worker` (`flows.timers`) applies the policy and resumes the run.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
from prefect import flow, get_run_logger, task
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.input import RunInput
from pydantic import Field, field_validator

from flows.waits import wait_for_decision
from models import approval, plan_timeout
from models import team as teams
from models.approval import AlreadyDecided, NotAllowed, PlanApproval
from models.base import format_timestamp, utcnow
from models.team_settings import ApprovalSettings

FLOW_NAME = "plan-approval"
DEPLOYMENT = f"{FLOW_NAME}/{FLOW_NAME}"
APPROVE, DENY = "approve", "deny"
Choice = Literal["approve", "deny"]
"""Approve or deny: inline in the form's schema (an `enum`), a required select in the UI."""


class PlanDecision(RunInput):
    """The decision on a plan: the form on the paused run in the Prefect UI.

    Prefect's form renders an enum without a default as a required select, so nobody
    approves or denies by leaving a control as it was; a `str` with a default as a plain
    text field (`str | None` would render as a type switch). `decision_form` sets the
    approver to the team's lead and puts the plan and who may decide in the description.
    """

    decision: Choice = Field(
        title="Decision",
        description="Approve the plan, or deny it and say in feedback what to change.",
    )
    feedback: str = Field(
        default="",
        title="Feedback",
        description="Needed to deny: what to change. Optional remarks when approving.",
    )
    approver: str = Field(
        min_length=1,
        title="Approver",
        description="Who decides: the team's lead or a configured approver (see above).",
    )

    @field_validator("feedback", "approver", mode="before")
    @classmethod
    def _stripped(cls, value: Any) -> Any:
        """A text field in the form may end in a newline or spaces; they mean nothing."""
        return value.strip() if isinstance(value, str) else value

    @property
    def approves(self) -> bool:
        return self.decision == APPROVE

    def refusal(self) -> str | None:
        """Why the run refuses this decision before recording it (None: it does not)."""
        if not self.approves and not self.feedback:
            return "a denial needs feedback: say what to change"
        return None


# --- tasks ---------------------------------------------------------------------------------


@task(name="record-plan-request", persist_result=True)
async def record_request(
    team: str,
    member: str,
    plan: str,
    summary: str,
    request_id: str,
    previous_request_id: str | None,
    timeout_s: float | None,
    policy: str | None,
    flow_run_id: str | None,
) -> str:
    """Records the request and puts it in the lead's inbox (once, even if retried)."""
    row = await anyio.to_thread.run_sync(
        lambda: approval.request_plan(
            team,
            member,
            plan,
            summary,
            request_id=request_id,
            previous_request_id=previous_request_id,
            timeout=timeout_s,
            policy=policy,
            flow_run_id=flow_run_id,
        )
    )
    return row.request_id


@task(name="notify-deciders", persist_result=True)
async def notify_deciders(request_id: str) -> str:
    """Posts the team's webhook a notice with each decider's approval link (if it has one)."""
    from flows.plan_notice import notify_deciders as post

    return await anyio.to_thread.run_sync(lambda: post(request_id))


@task(name="apply-timeout-policy", persist_result=True)
async def apply_timeout_policy(request_id: str, due: str) -> str:
    """No decision by `due`: the team's policy decides, or escalates to the lead."""
    action = await anyio.to_thread.run_sync(lambda: plan_timeout.apply_timeout(request_id))
    return action.value


@task(name="record-decision", persist_result=True)
async def record_decision(
    request_id: str, decision: dict[str, Any], wait: int, ui_allowed: bool = True
) -> dict[str, Any]:
    """Records the decision the `wait`-th wait got (once); says if refused or too late.

    A decision by the CLI, the API or MCP is recorded before the run is resumed with it; one
    that finds the request still open came from the Prefect UI's form, which a team with
    `ui_decisions = deny` refuses."""
    if not ui_allowed:
        stored = await _load(request_id)
        if stored.is_open:
            return {"refused": UI_DENIED.format(request_id=request_id).replace("**", "")}
    try:
        row = await anyio.to_thread.run_sync(
            lambda: approval.decide(
                request_id,
                approve=decision["decision"] == APPROVE,
                decider=decision["approver"],
                feedback=decision.get("feedback") or None,
                # The Prefect UI's form proves nobody: recorded as `ui`, unverified.
                via="ui",
                identity="unverified",
            )
        )
    except NotAllowed as exc:
        return {"refused": str(exc)}
    except AlreadyDecided as exc:
        stored = exc.request
        approve = decision["decision"] == APPROVE
        if stored.decided_by == decision["approver"] and stored.approved == approve:
            return {"status": stored.status}  # the CLI recorded it before resuming the run
        return {"late": str(exc), "status": stored.status}
    return {"status": row.status}


@task(name="tell-decider-not-allowed", persist_result=True)
async def tell_not_allowed(request_id: str, decider: str, reason: str, wait: int) -> None:
    """Tells the would-be decider (or the lead, if it is nobody on the team) the refusal."""
    from models import inbox
    from models.team import get_member, get_team

    def send() -> None:
        from models.db import session_scope

        with session_scope() as s:
            request = approval.get_request(request_id, session=s)
            lead = get_team(request.team, session=s).lead
            try:
                to = get_member(request.team, decider, active=True, session=s).name
            except ValueError:
                to = lead
            inbox.send(
                request.team,
                to=to,
                sender=approval.SYSTEM,
                text=f"Decision on plan {request_id} refused: {reason}",
                summary=f"decision refused: {decider} may not decide this plan",
                metadata={"request_id": request_id},
                session=s,
            )

    await anyio.to_thread.run_sync(send)


@task(name="send-plan-response", persist_result=True)
async def send_response(request_id: str) -> str | None:
    """Makes sure the member has its response (normally sent with the decision already)."""
    return await anyio.to_thread.run_sync(lambda: approval.respond(request_id))


# --- the flow ------------------------------------------------------------------------------


UI_DENIED = (
    "**This form may not decide:** the team decides plans only where the decider is proven "
    "(`teamflow team settings TEAM --ui-decisions deny`). Decide with the REST API "
    "(`POST /api/v1/plans/{request_id}/decision` with your token), over MCP, or with "
    "`teamflow plan approve|deny {request_id}` and your token in TEAMFLOW_TOKEN."
)
"""What the form says, and a decision submitted through it is refused with, when the team
does not let the Prefect UI decide."""


def decision_form(request: PlanApproval, config: ApprovalSettings) -> type[PlanDecision]:
    """`PlanDecision` for this request: the approver preset to the team's lead, and the
    plan (Markdown) with who may decide in the description above the UI's form."""
    deciders = [d for d in config.deciders if d != request.member]
    lines = [
        f"## Plan of {request.member} ({request.team})"
        + (f", revision {request.revision}" if request.revision > 1 else ""),
        "",
        f"**Summary:** {request.summary}",
        "",
        request.plan,
        "",
        "---",
        "**To decide:** choose *approve* or *deny* below; a denial needs feedback saying "
        "what to change."
        if config.ui_decisions
        else UI_DENIED.format(request_id=request.request_id),
        "",
        f"**Who may decide:** {', '.join(deciders)} (the approver field; it starts with "
        f"the lead, {config.lead}).",
        "",
        f"Request `{request.request_id}`.",
    ]
    due = request.due_at()
    if due is not None:
        lines[-1] += (
            f" Without a decision by {due:%Y-%m-%d %H:%M:%S} UTC, the policy "
            f"`{request.timeout_policy}` applies."
        )
    lines += [
        "",
        f"From a terminal: `teamflow plan approve {request.request_id}` or "
        f"`teamflow plan deny {request.request_id} --feedback ...`.",
    ]
    approver = PlanDecision.model_fields["approver"]
    return PlanDecision.with_initial_data(
        description="\n".join(lines),
        approver=Field(
            default=config.lead,
            min_length=1,
            title=approver.title,
            description=approver.description,
        ),
    )


def result_of(request: PlanApproval) -> dict[str, Any]:
    """The `plan_approval_response` the member got, with the request's outcome."""
    return {
        "type": "plan_approval_response",
        "requestId": request.request_id,
        "approve": request.approved,
        "feedback": request.feedback,
        "timestamp": format_timestamp(request.decided_at) if request.decided_at else None,
        "status": request.status,
        "decidedBy": request.decided_by,
        "cause": request.cause,
        "revision": request.revision,
    }


async def _load(request_id: str) -> PlanApproval:
    return await anyio.to_thread.run_sync(lambda: approval.get_request(request_id))


async def tag_run(*tags: str) -> None:
    """Adds tags to the current flow run, so the UI can filter runs by team and member."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    wanted = set(context.flow_run.tags or []) | set(tags)
    if wanted != set(context.flow_run.tags or []):
        async with get_client() as client:
            await client.update_flow_run(context.flow_run.id, tags=sorted(wanted))


@flow(name=FLOW_NAME, flow_run_name="plan of {member}@{team}", persist_result=False)
async def plan_approval(
    team: str,
    member: str,
    plan: str,
    summary: str,
    request_id: str | None = None,
    previous_request_id: str | None = None,
    timeout_s: float | None = None,
    policy: str | None = None,
) -> dict[str, Any]:
    """Asks the lead to approve a member's plan and waits for the decision.

    Args:
        team: The team.
        member: The member whose plan it is.
        plan: The plan, Markdown (shown on the Prefect UI's resume form).
        summary: One line for the lead.
        request_id: The request's id (the CLI makes one up front, so it can print it).
        previous_request_id: The denied request this plan revises.
        timeout_s: Seconds to wait (default: the team's `plan_timeout_seconds`).
        policy: `deny`, `approve` or `escalate` at the timeout (default: the team's).

    Returns:
        The `plan_approval_response` sent to the member, with `status`, `decidedBy`,
        `cause` and `revision`.
    """
    logger = get_run_logger()
    await tag_run(f"team:{team}", f"member:{member}")
    context = FlowRunContext.get()
    run_id = str(context.flow_run.id) if context and context.flow_run else None
    # A suspended run runs again from the start: the id must come out the same then.
    request_id = request_id or (f"plan-{run_id.replace('-', '')[:12]}" if run_id else None)
    request_id = await record_request(
        team, member, plan, summary, request_id or approval.new_plan_id(),
        previous_request_id, timeout_s, policy, run_id,
    )  # fmt: skip
    config = await anyio.to_thread.run_sync(lambda: teams.settings_of(team))
    logger.info("%s", await notify_deciders(request_id))

    async def decided_elsewhere() -> bool:
        return not (await _load(request_id)).is_open

    wait = 0  # waits so far: each has its own key, the same when a resumed run runs again
    while True:
        request = await _load(request_id)
        if not request.is_open:
            break
        due = request.due_at()
        if due is not None and utcnow() >= due:
            action = await apply_timeout_policy(request_id, format_timestamp(due))
            if action != "none":
                logger.info("No decision in time: timeout policy %s", action)
            continue
        wait += 1
        decision = await wait_for_decision(
            "plan", request_id, decision_form(request, config),
            attempt=wait, until=due, decided=decided_elsewhere,
        )  # fmt: skip
        if decision is None:
            continue
        refusal = decision.refusal()
        if refusal is not None:
            logger.warning(
                "Decision of %s refused: %s. Waiting again: resume the run with a new decision",
                decision.approver, refusal,
            )  # fmt: skip
            continue
        outcome = await record_decision(
            request_id, decision.model_dump(mode="json"), wait, config.ui_decisions
        )
        if "refused" in outcome:
            logger.warning(
                "Decision of %s refused: %s. Waiting again: resume the run with a new decision",
                decision.approver, outcome["refused"],
            )  # fmt: skip
            await tell_not_allowed(request_id, decision.approver, outcome["refused"], wait)
            continue
        if "late" in outcome:
            logger.info("Decision from %s came too late: %s", decision.approver, outcome["late"])

    await send_response(request_id)
    request = await _load(request_id)
    logger.info("Plan %s %s (%s)", request_id, request.status, request.cause)
    return result_of(request)


def denial_note(team: str, lead: str, decision: dict[str, Any]) -> tuple[str, str]:
    """The lead's feedback on a denied plan, as the member's conversation shows it."""
    limit = teams.settings_of(team).max_revisions
    feedback = decision.get("feedback") or decision.get("cause") or "no reason given"
    text = (
        f"Plan {decision['requestId']} (revision {decision['revision']} of at most {limit}) "
        f"was denied: {feedback}\nRevise the plan and ask for approval again."
    )
    who = decision.get("decidedBy") or lead
    return (lead if who == "system" else who), text
