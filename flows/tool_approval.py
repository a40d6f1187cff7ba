"""The `tool-approval` flow: a person approves, edits or rejects each tool call of one step.

A member's step whose calls need a person (the team's or member's tool policy,
`models.tool_policy`) becomes one `tool-approval` run with one form: the Prefect UI shows,
for each call, the member, the task, the tool's description, the params as JSON, why it
needs a decision and the member's thoughts, and takes a decision per call: approve, edit
(new params, checked against the tool's `input_schema` before they are accepted) or reject
with feedback. The run waits as a plan approval does (`flows.waits`: in process and pushed,
suspended when long, resumed by event; at the deadline the team's `tool_timeout_policy`
applies: deny, approve, or escalate with an ALARM to the lead). `teamflow action approve|
edit|reject ID` decides one call from a terminal and resumes the run; the run waits until
every call of its step is decided, then returns the decisions to the step
(`flows.tool_gate`), which runs what was approved, exactly once.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Literal

import anyio
from prefect import flow, get_run_logger, task
from prefect.context import FlowRunContext
from prefect.input import RunInput
from pydantic import BaseModel, Field

from flows.waits import wait_for_decision
from models import team as teams
from models import tool_approval as store
from models.base import format_timestamp, utcnow
from models.team_settings import ApprovalError

FLOW_NAME = "tool-approval"


class CallDecision(BaseModel):
    """The decision on one call of the form."""

    call_id: str = Field(title="Call", description="The call's id (as listed above).")
    decision: Literal["approve", "edit", "reject"] = Field(
        title="Decision", description="approve, edit (give new params) or reject (give feedback)"
    )
    params: str = Field(
        default="", title="New params (edit)", description="A JSON object, for an edit."
    )
    feedback: str = Field(
        default="", title="Feedback", description="Needed to reject: what the member should do."
    )


class ToolDecisions(RunInput):
    """The form on a paused `tool-approval` run: a decision per call, and who decides."""

    decisions: list[CallDecision] = Field(title="Decisions", description="One per call.")
    approver: str = Field(min_length=1, title="Approver", description="The lead or an approver.")


def decision_form(calls: list[store.ToolApproval], lead: str) -> type[ToolDecisions]:
    """`ToolDecisions` for these calls: each described above the form, one entry per call."""
    first = calls[0]
    lines = [f"## Tool calls of {first.member} ({first.team})", ""]
    if first.task_title:
        lines += [f"**Task:** {first.task_title} (`{first.task_id}`), step {first.step}", ""]
    for call in calls:
        lines += [
            f"### `{call.call_id}`: {call.tool_id}",
            f"*{call.description}*" if call.description else "",
            "",
            "```json",
            json.dumps(call.params, indent=2),
            "```",
            f"**Why it asks:** {'; '.join(call.reasons) or 'the policy'}",
            "",
            f"**Thoughts:** {call.thoughts or '(none)'}"
            if call.tool_id != store.BUDGET_TOOL
            else "**A budget request:** approve with the new budget as params, e.g. "
            f'`{{"{store.BUDGET_KINDS.get(str(call.params.get("kind")), "budget_tokens")}": N}}`; '
            "reject to stop the member's part (the feedback is the reason).",
            "",
        ]
    lines += [
        "---",
        "Decide each call: *approve*, *edit* (new params as a JSON object) or *reject* "
        "(feedback says why). From a terminal: `teamflow action approve|edit|reject ID`.",
    ]
    return ToolDecisions.with_initial_data(
        description="\n".join(lines),
        decisions=Field(
            default=[{"call_id": c.call_id} for c in calls if c.is_open],
            title="Decisions",
            description="One per call: choose a decision for each.",
        ),
        approver=Field(default=lead, min_length=1, title="Approver"),
    )


# --- tasks ---------------------------------------------------------------------------------


@task(name="record-tool-calls", persist_result=True)
async def record_calls(
    team: str, member: str, batch_id: str, calls: list[dict[str, Any]], info: dict[str, Any]
) -> list[str]:
    """Records the calls that wait for a decision (once, even if retried)."""
    rows = await anyio.to_thread.run_sync(
        lambda: store.request_calls(team, member, batch_id, calls, **info)
    )
    return [r.call_id for r in rows]


@task(name="apply-tool-timeout-policy", persist_result=True)
async def apply_timeout_policy(batch_id: str, due: str) -> str:
    """No decision by `due`: the policy decides the open calls, or escalates to the lead."""
    return await anyio.to_thread.run_sync(lambda: store.apply_timeout(batch_id))


def _record(decision: CallDecision, approver: str, batch_id: str) -> str | None:
    """Records one decision of the form; says why it was refused (None: recorded, or
    recorded before by the same person, as the CLI does before it resumes the run)."""
    params: Any = None
    if decision.decision == "edit" or decision.params.strip():
        try:
            params = json.loads(decision.params or "null")
        except json.JSONDecodeError as exc:
            return f"the new params of {decision.call_id} are not JSON: {exc.msg}"
    try:
        call = store.get_call(decision.call_id)
        if call.batch_id != batch_id:
            return f"call {decision.call_id} is not one of this run's calls"
        store.decide_call(
            decision.call_id, decision.decision, decider=approver, params=params,
            feedback=decision.feedback, door="prefect-ui",
        )  # fmt: skip
    except store.Conflict:
        return None
    except ApprovalError as exc:
        return str(exc)
    return None


# --- the flow ------------------------------------------------------------------------------


@flow(name=FLOW_NAME, flow_run_name="tool calls of {member}@{team}", persist_result=False)
async def tool_approval(
    team: str,
    member: str,
    batch_id: str,
    calls: list[dict[str, Any]],
    task_id: str | None = None,
    task_title: str | None = None,
    step: int = 0,
    timeout_s: float | None = None,
    policy: str | None = None,
    hold_s: float | None = None,
    held_step: dict[str, Any] | None = None,
    held_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """Asks the lead to decide each of a step's tool calls; returns every call's decision.

    With `hold_s`, waits in process at most that long, then returns with calls still
    `pending`: the team-task run that asked then suspends (`flows.tool_gate`), keeping the
    step (`held_step`, `held_tokens`) to go on with once resumed.

    Args:
        team: The team.
        member: The member whose calls they are.
        batch_id: The step's id for its calls (each call is `{batch_id}-{position}`).
        calls: The calls: position, tool_id, description, params, thoughts, reasons, ...
        task_id: The team task the member works on.
        task_title: Its title, for the form.
        step: The member's step.
        timeout_s: Seconds to wait (default: the team's `tool_timeout_seconds`).
        policy: deny, approve or escalate at the timeout (default: the team's).
        hold_s: Seconds to wait in process before returning undecided (None: until decided).
        held_step: The step's Chimera response, kept with the calls.
        held_tokens: The tokens the member spent up to the step.
    """
    from flows.plan_approval import tag_run

    logger = get_run_logger()
    await tag_run(f"team:{team}", f"member:{member}")
    context = FlowRunContext.get()
    run_id = str(context.flow_run.id) if context and context.flow_run else None
    info = {"task_id": task_id, "task_title": task_title, "step": step, "timeout": timeout_s,
            "policy": policy, "flow_run_id": run_id, "held_step": held_step,
            "held_tokens": held_tokens}  # fmt: skip
    hold_until = utcnow() + timedelta(seconds=hold_s) if hold_s is not None else None
    await record_calls(team, member, batch_id, calls, info)
    if run_id:
        await anyio.to_thread.run_sync(lambda: store.set_run(batch_id, run_id))
    lead = await anyio.to_thread.run_sync(lambda: teams.settings_of(team).lead)

    async def decided() -> bool:
        return await anyio.to_thread.run_sync(lambda: store.open_calls(batch_id)) == 0

    wait = 0
    while True:
        rows = await anyio.to_thread.run_sync(lambda: store.batch(batch_id))
        pending = [r for r in rows if r.is_open]
        if not pending:
            break
        dues = [d for d in (r.due_at() for r in pending) if d is not None]
        due = min(dues) if dues else None
        if hold_until is not None and utcnow() >= hold_until and (due is None or due > utcnow()):
            logger.info("Still undecided after %.0f s: the team-task run suspends", hold_s)
            break
        if due is not None and utcnow() >= due:
            action = await apply_timeout_policy(batch_id, format_timestamp(due))
            logger.info("No decision in time on calls of %s: timeout policy %s", member, action)
            continue
        wait += 1
        until = due if hold_until is None else min(d for d in (due, hold_until) if d)
        answer = await wait_for_decision(
            "tool calls", batch_id, decision_form(pending, lead),
            attempt=wait, until=until, decided=decided,
        )  # fmt: skip
        for one in answer.decisions if answer is not None else []:
            approver = answer.approver.strip() if answer is not None else ""
            refusal = await anyio.to_thread.run_sync(_record, one, approver, batch_id)
            if refusal:
                logger.warning("Decision of %s refused: %s", approver, refusal)
    rows = await anyio.to_thread.run_sync(lambda: store.batch(batch_id))
    for row in rows:
        logger.info("Call %s (%s) %s by %s", row.call_id, row.tool_id, row.status, row.decided_by)
    return [r.to_json() for r in rows]


# --- deciding from outside the run (the CLI) ------------------------------------------------
