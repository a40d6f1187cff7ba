"""The `plan-approval` flow: a member's plan waits, paused, for the lead's decision.

The story: the request is recorded and lands in the lead's inbox; the run pauses with a
`PlanDecision` form that shows the plan, so the Prefect UI can decide it; `teamflow plan
approve|deny` decides it from a terminal (recording the decision first, then resuming the
run). A decider who may not decide is told so and the run pauses again. The decision is
recorded once, the member gets its `plan_approval_response` once, and the flow returns it.
Nobody deciding in time lets the team's timeout policy decide (deny, approve, or escalate
to the lead and deny at a hard limit); teamflow keeps that time itself.

A resume does not wait for a poll as with `pause_flow_run` (every 10 s): the run hears its
`prefect.flow-run.Running` event on Prefect's event stream, so a resume reaches it in well
under a second. Every run waiting in a process shares one subscription and one batched read
of their runs every `TEAMFLOW_PAUSE_POLL_SECONDS` (default 10; `flows.run_watch`), so 500
waiting runs cost the server a read or three every 10 s, not 50 requests a second. The read
is there because the stream now and then loses an event; a resume from the form is then
taken at the next read instead of at once. Each run also looks at teamflow's database every
couple of seconds, which costs the Prefect server nothing and catches a decision whose
resume did not get through. A waiting run outlives a restart of the Prefect server: while
the stream is down the watch reads every couple of seconds and subscribes again, and the
run takes a decision recorded meanwhile.

Long waits: a run started from a deployment waits in process for
`TEAMFLOW_SUSPEND_AFTER_SECONDS` (default 60), then suspends: its worker is free, and its
state lives in Prefect's database only. A resume (the form, or `teamflow plan approve`)
reschedules it; a worker runs the flow again from the start, each task whose result was
persisted returns it without running again, and each wait that fired before returns the
input it got (the waits have keys, the same in every run of the flow). At the deadline,
teamflow's clock in every `teamflow worker` (`flows.deadlines`) applies the policy and
resumes the run.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Literal, NoReturn, TypeVar

import anyio
import orjson
from prefect import flow, get_run_logger, task
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.exceptions import Pause, PrefectHTTPStatusError
from prefect.input import RunInput
from prefect.states import Cancelled, Paused, Running, Suspended
from pydantic import Field, ValidationError, field_validator

from flows import run_watch
from flows.compat.prefect_client import keyed_for_input, propose_state
from flows.compat.prefect_engine import abort_with_state, leave_suspended, refused_as_repeat
from flows.run_watch import ENDING, seconds_env, unreachable
from models import approval, plan_timeout
from models import team as teams
from models.approval import AlreadyDecided, NotAllowed, PlanApproval
from models.base import format_timestamp, utcnow
from models.team_settings import ApprovalSettings

FLOW_NAME = "plan-approval"
DEPLOYMENT = f"{FLOW_NAME}/{FLOW_NAME}"
DEFAULT_CHECK_S = 2.0
"""How often a waiting run looks for its decision in teamflow's database."""
DEFAULT_SUSPEND_AFTER_S = 60.0
"""A deployed run waits this long in process (sub-second resume), then suspends."""
PREFECT_PAUSE_MARGIN_S = 600
"""Prefect's own pause timeout lies this far past teamflow's, so teamflow always acts first."""

T = TypeVar("T", bound=RunInput)


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


def decision_input(approve: bool, feedback: str | None, approver: str) -> dict[str, Any]:
    """The `run_input` of a resume with this decision: what the form submits."""
    return {
        "decision": APPROVE if approve else DENY,
        "feedback": feedback or "",
        "approver": approver,
    }


# --- waiting for input, pushed ---------------------------------------------------------------


async def wait_for_input(
    form: type[T],
    *,
    until: datetime | None = None,
    check: Callable[[], Awaitable[bool]] | None = None,
    check_s: float | None = None,
    key: str | None = None,
) -> T | None:
    """Pauses the current flow run until it is resumed with `form`'s input; returns it.

    Unlike `prefect.flow_runs.pause_flow_run`, the run hears its resume on Prefect's event
    stream at once (`flows.run_watch`: one subscription and one batched read of every run
    waiting in this process, the read as a fallback for a lost event). The input schema is
    saved before the run pauses, so a resume can never find it missing.

    Returns None, after setting the run Running itself, when `until` passes or `check()`
    says the wait is over (e.g. the decision is in the database already), and None when
    the run was resumed without input: the caller then looks at why.

    `key` names this wait within the run. A run that was suspended and resumed runs its
    flow again from the start; a wait whose key fired before then ends at once, with the
    input it got then (or None).
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("wait_for_input runs inside a flow run")
    logger = get_run_logger()
    run_id = context.flow_run.id
    check_s = check_s or seconds_env("TEAMFLOW_PAUSE_CHECK_SECONDS", DEFAULT_CHECK_S)
    remaining = (until - utcnow()).total_seconds() if until else 7 * 24 * 3600
    paused = Paused(
        timeout_seconds=int(max(remaining, 0)) + PREFECT_PAUSE_MARGIN_S,
        reschedule=False,
        pause_key=key or f"teamflow-{uuid.uuid4().hex[:12]}",
    )
    keyset = keyed_for_input(paused)

    async with get_client() as client, run_watch.waiting(run_id) as waiter:
        await _save_form(client, form, keyset, run_id)
        try:
            state = await propose_state(client, paused, run_id)
        except Pause as refused:
            # A loaded server answered 503 to the pause it had made, and the client's
            # retry of it was refused as a repeat: the run is paused, by this wait.
            state = refused_as_repeat(refused, paused.state_details.pause_key)
            if state is None:
                raise
        if state.is_running():  # this wait fired before the run was suspended
            return await _read_input(client, form, keyset, run_id, patience=0)
        if not state.is_paused():
            raise RuntimeError(f"flow run cannot be paused: the server answered {state}")
        waiter.arm(state.timestamp)
        logger.info("Waiting for a decision (resume the run with its form, or use the CLI)")
        while True:
            if check is not None and await check():
                await _retrying(lambda: _resume_self(client, run_id), logger)
                return None
            if until is not None and utcnow() >= until:
                await _retrying(lambda: _resume_self(client, run_id), logger)
                return None
            step = check_s
            if until is not None:
                step = min(step, max((until - utcnow()).total_seconds(), 0.0))
            kind = await waiter.next(step)
            if kind == "RUNNING":
                return await _retrying(lambda: _read_input(client, form, keyset, run_id), logger)
            if kind in ENDING:
                await _abort(client, run_id, kind)


async def suspend_for_input(form: type[T], *, key: str, until: datetime | None = None) -> T | None:
    """Suspends the current (deployed) flow run until it is resumed; releases its worker.

    The run's process leaves at once (`Pause`); a resume reschedules the run, a worker runs
    the flow again from the start, and completed tasks whose results were persisted are not
    run again. Back at this call, with the same `key`, the suspension has fired before: it
    returns the input the run was resumed with, or None when it was resumed without any
    (teamflow's clock, `flows.deadlines`, resumes a run so after its timeout policy acted).
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("suspend_for_input runs inside a flow run")
    run_id = context.flow_run.id
    remaining = (until - utcnow()).total_seconds() if until else 7 * 24 * 3600
    suspended = Suspended(
        timeout_seconds=int(max(remaining, 0)) + PREFECT_PAUSE_MARGIN_S, pause_key=key
    )
    keyset = keyed_for_input(suspended)
    async with get_client() as client:
        await _save_form(client, form, keyset, run_id)
        state = await propose_state(client, suspended, run_id)
        if state.is_running():  # resumed: this is the run again, from the start
            return await _read_input(client, form, keyset, run_id, patience=1.0)
        if not state.is_paused():
            raise RuntimeError(f"flow run cannot be suspended: the server answered {state}")
    get_run_logger().info(
        "Suspended until a decision (resume the run with its form, or use the CLI); "
        "the worker is free meanwhile"
    )
    leave_suspended(state)


def can_suspend() -> bool:
    """Whether the current run can suspend: it comes from a deployment, and is no subflow."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    return run is not None and run.deployment_id is not None and run.parent_task_run_id is None


async def _save_form(client: Any, form: type[RunInput], keyset: Any, run_id: Any) -> None:
    """Saves the form's schema for the UI and for resumes; kept if it was saved before."""
    try:
        await form.asave(keyset, flow_run_id=run_id)
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code != 409:
            raise


async def _retrying(call: Callable[[], Awaitable[Any]], logger: Any, every: float = 2.0) -> Any:
    """`call()`, tried again every `every` seconds while the Prefect API is away.

    A paused run outlives a restart of the server: it keeps waiting instead of crashing.
    """
    warned = False
    while True:
        try:
            return await call()
        except Exception as exc:
            if not unreachable(exc):
                raise
            if not warned:
                logger.warning("Prefect API unreachable (%s); trying again", exc)
                warned = True
            await anyio.sleep(every)


async def _read_input(
    client: Any, form: type[T], keyset: dict[str, str], run_id: Any, patience: float = 5.0
) -> T | None:
    """The input the run was resumed with; None if it was resumed without any.

    The server announces the Running state before the input it stored with it is readable,
    so a missing input is read again for a moment before giving up.
    """
    from prefect.exceptions import ObjectNotFound

    deadline = anyio.current_time() + patience
    delay = 0.01
    while True:
        try:
            value = await client.read_flow_run_input(flow_run_id=run_id, key=keyset["response"])
        except ObjectNotFound:
            value = None
        except PrefectHTTPStatusError as exc:
            if exc.response.status_code != 404:
                raise
            value = None
        if value:
            try:
                return form.model_validate(orjson.loads(value))
            except ValidationError:
                return None  # the server checked it against the schema; be safe anyway
        if anyio.current_time() >= deadline:
            return None
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.25)


async def _abort(client: Any, run_id: Any, kind: str) -> NoReturn:
    """Ends the wait of a run someone cancelled or ended from outside.

    A cancelled run in this process has no worker process to kill, so it finishes its own
    cancellation; `Abort`, carrying the final state, tells the engine to leave it at that.
    """
    if kind == "CANCELLING":
        state = await propose_state(client, Cancelled(message="cancelled while waiting"), run_id)
    else:
        state = (await client.read_flow_run(run_id)).state
    abort_with_state(f"the run became {kind.lower()} while waiting", state)


async def _resume_self(client: Any, run_id: Any) -> None:
    """Takes the run out of its pause when teamflow, not a person, ends the wait."""
    await propose_state(client, Running(), run_id)


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
    flow_run_id: str,
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


@task(name="apply-timeout-policy", persist_result=True)
async def apply_timeout_policy(request_id: str, due: str) -> str:
    """No decision by `due`: the team's policy decides, or escalates to the lead."""
    action = await anyio.to_thread.run_sync(lambda: plan_timeout.apply_timeout(request_id))
    return action.value


@task(name="record-decision", persist_result=True)
async def record_decision(request_id: str, decision: dict[str, Any], wait: int) -> dict[str, Any]:
    """Records the decision the `wait`-th wait got (once); says if refused or too late."""
    try:
        row = await anyio.to_thread.run_sync(
            lambda: approval.decide(
                request_id,
                approve=decision["decision"] == APPROVE,
                decider=decision["approver"],
                feedback=decision.get("feedback") or None,
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
            lead = get_team(s, request.team).lead
            try:
                to = get_member(s, request.team, decider, active=True).name
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
        "what to change.",
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
    suspendable = can_suspend()
    suspend_after = seconds_env("TEAMFLOW_SUSPEND_AFTER_SECONDS", DEFAULT_SUSPEND_AFTER_S)

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
        form, key = decision_form(request, config), f"{request_id}-{wait}"
        if suspendable and wait > 1:
            # Still undecided after a while in process: let the worker go until a decision
            # (or teamflow's clock, at the deadline) resumes the run.
            decision = await suspend_for_input(form, key=key, until=due)
        else:
            until = due
            if suspendable:
                soon = utcnow() + timedelta(seconds=suspend_after)
                until = soon if due is None else min(due, soon)
            decision = await wait_for_input(form, key=key, until=until, check=decided_elsewhere)
        if decision is None:
            continue
        refusal = decision.refusal()
        if refusal is not None:
            logger.warning(
                "Decision of %s refused: %s. Waiting again: resume the run with a new decision",
                decision.approver, refusal,
            )  # fmt: skip
            continue
        outcome = await record_decision(request_id, decision.model_dump(mode="json"), wait)
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


def resume_with_decision(run_id: str, approve: bool, feedback: str | None, decider: str) -> str:
    """Resumes the waiting run with the decision; says why if it could not (the run then
    finds the decision in teamflow's database by itself, within seconds)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.exceptions import NotPausedError
    from prefect.flow_runs import resume_flow_run

    from flows import runner

    try:
        with runner.connected() as api:
            runner.check_server(api)
            try:
                resume_flow_run(
                    UUID(run_id),
                    run_input=decision_input(approve, feedback, decider),
                )
            except NotPausedError:
                with get_client(sync_client=True) as client:
                    state = client.read_flow_run(UUID(run_id)).state
                if state is not None and (state.is_running() or state.is_final()):
                    return ""  # the run saw the decision in the database first
                kind = state.type.value.lower() if state is not None else "without a state"
                return f"run {run_id} is {kind}; it finds the decision in the database"
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"run {run_id} not resumed ({reason}); it finds the decision in the database"
    return ""
