"""Between a member's step and its tool calls: the calls a person must decide, and the budget.

`gate` looks at a step's tool calls with the member's tool policy (`models.tool_policy`);
those that need a person go, together, to one `tool-approval` run (`flows/tool_approval.py`),
and the step waits for every decision before any of its calls runs. `admit` then says, per
call, with which params it runs (approved: its own; edited: the new ones, and the
conversation notes the edit) or which FAILURE result the member gets instead (rejected: the
feedback). A call runs at most once (`models.tool_approval.claim_run`).

`spend` keeps a member to its budgets on a task (tokens; seconds of work): at 80% the lead
gets one ALARM, at 100% the member waits for a budget extension through the same machinery (a
`budget` request: approved with a new budget it goes on, rejected its part stops).
"""

from __future__ import annotations

import json
import time
import uuid
from functools import partial
from typing import Any

import anyio
from prefect import get_run_logger

from flows.runtimes import StepError
from flows.tools import WRITES_KEYWORD
from models import tool_approval as store
from models.chimera_response import ChimeraResponse
from models.member_policy import policy_of
from models.settings import get_settings
from models.tool import ToolResult
from models.tool_approval import BUDGET_KINDS, BUDGET_TOOL
from models.tool_policy import ALARM_AT, ToolPolicy

SYSTEM = "system"


def _writes(tool_id: str) -> tuple[bool, str]:
    """Whether the tool writes somewhere (an `x-teamflow-writes` param), and its description."""
    from models.tool import get_tool

    try:
        definition = get_tool(tool_id)
    except ValueError:
        return False, ""
    properties = definition.input_schema.get("properties") or {}
    writes = any(isinstance(p, dict) and p.get(WRITES_KEYWORD) is True for p in properties.values())
    return writes, definition.description


def _calls(policy: ToolPolicy, response: ChimeraResponse) -> list[dict[str, Any]]:
    """The step's calls that need a person, each with why."""
    level = response.context.security_level.value if response.context is not None else None
    thoughts = "\n".join(f"{t.type.value}: {t.content}" for t in response.thoughts)
    out = []
    for position, action in enumerate(response.actions):
        if action.type.value not in ("tool", "script"):
            continue
        writes, description = _writes(action.action)
        reasons = policy.reasons(
            action.action, writes=writes, confidence=action.confidence,
            warnings=action.warnings, security_level=level,
        )  # fmt: skip
        if reasons:
            out.append({
                "position": position, "tool_id": action.action, "description": description,
                "params": dict(action.params), "thoughts": thoughts, "reasons": reasons,
                "confidence": action.confidence, "warnings": action.warnings,
            })  # fmt: skip
    return out


async def gate(
    info: dict[str, Any], name: str, response: ChimeraResponse, work: Any, blocked: bool
) -> dict[int, dict[str, Any]]:
    """The decisions on the step's calls that need a person, by their place among the
    step's actions (none: every call runs without asking). Waits for all of them.
    `blocked`: the step's tools are refused anyway (plan mode before an approved plan)."""
    if blocked:
        return {}
    team = info["team"]
    policy = work.policy  # read by the step (`flows.steps._before_step`)
    if policy is None:
        policy = await anyio.to_thread.run_sync(lambda: policy_of(team, name))
    if not policy.asks:
        return {}
    calls = await anyio.to_thread.run_sync(_calls, policy, response)
    if not calls:
        return {}
    from flows.tool_approval import tool_approval

    # The same id when a resumed task runs this step again: its decisions are kept.
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"teamflow:{info['id']}/{name}/{work.steps}")
    batch_id = f"calls-{key.hex[:12]}"
    holds = _can_hold(info)
    asked = time.monotonic()
    ask = partial(
        tool_approval, team=team, member=name, batch_id=batch_id, calls=calls,
        task_id=str(info["id"]), task_title=info.get("title"), step=work.steps,
        timeout_s=policy.timeout_s, policy=policy.policy.value,
        hold_s=get_settings().suspend_after_seconds if holds else None,
        held_step=response.to_wire() if holds else None, held_tokens=work.tokens,
    )  # fmt: skip
    decided = await ask()
    held = 0
    while any(d["status"] == store.CallStatus.PENDING.value for d in decided):
        held += 1
        await _hold(info, name, batch_id, held)
        decided = await ask()
    work.approval_wait_s += time.monotonic() - asked
    positions = {f"{batch_id}-{c['position']}": c["position"] for c in calls}
    return {positions[d["callId"]]: d for d in decided if d["callId"] in positions}


def _can_hold(info: dict[str, Any]) -> bool:
    """Whether the team-task run may suspend while a step waits: it comes from a deployment
    (no subflow) and works a task of one assignee, so running it again from the start redoes
    nothing but that member's part, which goes on from its conversation and held step."""
    from flows.waits import can_suspend

    return len(info.get("assignees") or ()) == 1 and can_suspend()


async def _hold(info: dict[str, Any], name: str, batch_id: str, held: int) -> None:
    """Suspends the team-task run until the batch is decided: the worker is free meanwhile.
    A decision (CLI, API, MCP: recorded first) or teamflow's clock (at the deadline) resumes
    it, and it runs again from the start; a decision given in the run's own form is
    recorded here, when the run gets back to this wait (`held` counts them, each its key)."""
    from prefect.context import FlowRunContext

    from flows.tool_approval import _record, decision_form
    from flows.waits import suspend_for_input
    from models import notify
    from models import team as teams

    context = FlowRunContext.get()
    assert context is not None and context.flow_run is not None, "_can_hold said so"
    run_id = str(context.flow_run.id)

    def prepare() -> tuple[list[store.ToolApproval], str]:
        store.set_run(batch_id, run_id)  # deciders resume this run now
        lead = teams.settings_of(info["team"]).lead
        notify.waiting_response(info["team"], name, on=lead)
        return [r for r in store.batch(batch_id) if r.is_open], lead

    pending, lead = await anyio.to_thread.run_sync(prepare)
    if not pending:
        return
    dues = [d for d in (r.due_at() for r in pending) if d is not None]
    answer = await suspend_for_input(
        decision_form(pending, lead), key=f"{batch_id}-held-{held}",
        until=min(dues) if dues else None, what=f"decisions on tool calls of {name}",
    )  # fmt: skip
    if answer is None:
        return
    for one in answer.decisions:
        refusal = await anyio.to_thread.run_sync(_record, one, answer.approver.strip(), batch_id)
        if refusal:
            get_run_logger().warning("Decision of %s refused: %s", answer.approver, refusal)


async def held_step(info: dict[str, Any], name: str, work: Any, taken: int) -> Any:
    """The step a resumed run suspended in (its calls waited for decisions), to go on with
    instead of asking the member's agent again, with the member's tokens up to it; None
    when the run did not suspend there (`taken`: the steps its conversation holds)."""
    from prefect.context import FlowRunContext

    from flows.runtimes import StepResult, parse_chimera

    context = FlowRunContext.get()
    if not info.get("held") or context is None or context.flow_run is None:
        return None
    run_id = str(context.flow_run.id)
    row = await anyio.to_thread.run_sync(
        lambda: store.held_step(str(info["id"]), name, run_id, taken + 1)
    )
    if row is None or row.held_step is None:
        return None
    get_run_logger().info("%s goes on with its step %d, held while it waited", name, taken + 1)
    work.steps, work.tokens = taken, row.held_tokens or 0
    return StepResult(response=parse_chimera(row.held_step, source="the held step"), tokens=0)


def admit(decision: dict[str, Any], work: Any) -> tuple[dict[str, Any], ToolResult | None]:
    """The params a decided call runs with, or the FAILURE result the member gets instead."""
    tool, by = decision["toolId"], decision["decidedBy"]
    if decision["status"] == store.CallStatus.REJECTED.value:
        why = decision.get("feedback") or decision.get("cause") or "no reason given"
        return {}, ToolResult.failure(tool, f"call {decision['callId']} rejected by {by}: {why}")
    if not store.claim_run(decision["callId"]):
        return {}, ToolResult.failure(tool, f"call {decision['callId']} ran before: not again")
    if decision["status"] == store.CallStatus.EDITED.value:
        before, after = json.dumps(decision["params"]), json.dumps(decision["newParams"])
        work.notes.append(
            (by if by != SYSTEM else work.member,
             f"Call {decision['callId']} of {tool}: params edited by {by} from {before} to {after}")
        )  # fmt: skip
        return dict(decision["newParams"]), None
    return dict(decision["params"]), None


UNITS = {"tokens": "tokens", "seconds": "seconds of work"}


async def spend(info: dict[str, Any], name: str, lead: str, work: Any) -> None:
    """Holds the member to its budgets on the task, tokens and seconds of work (waits for
    decisions not counted): one ALARM to the lead at 80% of each; at 100% the member waits
    for a budget extension (a `budget` request in a `tool-approval` run): approved with a
    new budget, it goes on; rejected, its part stops with the feedback as the reason.
    The member's policy is the one the step read (`work.policy`), else read here."""
    team = info["team"]
    policy = work.policy
    if policy is None:
        policy = await anyio.to_thread.run_sync(lambda: policy_of(team, name))
    for kind, key, given in (
        ("tokens", BUDGET_KINDS["tokens"], policy.budget_tokens),
        ("seconds", BUDGET_KINDS["seconds"], policy.budget_seconds),
    ):
        while True:
            budget = work.extended.get(key) or given
            spent = work.tokens if kind == "tokens" else _worked_s(work)
            if not budget or spent < ALARM_AT * budget:
                break
            await anyio.to_thread.run_sync(
                _alarm_once, team, name, lead, str(info["id"]), spent, budget, kind
            )
            if spent < budget:
                break
            work.extended[key] = await _extension(info, name, work, policy, kind, spent, budget)


def _worked_s(work: Any) -> int:
    """Seconds the member worked on the task so far, its waits for decisions not counted."""
    return int(time.monotonic() - work.clock - work.approval_wait_s) if work.clock else 0


async def _extension(
    info: dict[str, Any], name: str, work: Any, policy: ToolPolicy, kind: str, spent: int,
    budget: int,
) -> int:  # fmt: skip
    """Waits for the decision on a budget extension; returns the new budget, or raises
    `StepError` (the member's part stops) when it is refused."""
    from flows.tool_approval import tool_approval

    unit = UNITS[kind]
    why = f"budget exhausted: {spent} of {budget} {unit} spent"
    get_run_logger().warning("%s: %s; waiting for a budget extension", name, why)
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"teamflow:{info['id']}/{name}/budget/{kind}/{budget}")
    request = {
        "position": 0, "tool_id": BUDGET_TOOL, "params": {"kind": kind, "spent": spent,
        "budget": budget}, "reasons": [why], "thoughts": "",
        "description": f"{name} asks for more than its {budget} {unit} on task "
        f"{info.get('title') or info['id']}: approve with a new budget, or reject to stop "
        "its part (the feedback is the reason).",
    }  # fmt: skip
    asked = time.monotonic()
    [decided] = await tool_approval(
        team=info["team"], member=name, batch_id=f"budget-{key.hex[:12]}", calls=[request],
        task_id=str(info["id"]), task_title=info.get("title"), step=work.steps,
        timeout_s=policy.timeout_s, policy=policy.policy.value,
    )  # fmt: skip
    work.approval_wait_s += time.monotonic() - asked
    by = decided["decidedBy"]
    if decided["status"] == store.CallStatus.REJECTED.value:
        reason = decided.get("feedback") or decided.get("cause") or "no reason given"
        raise StepError(f"{why}; stopped by {by}: {reason}")
    # Approved by a person: the new budget it gave; by the timeout policy: as much again.
    new = (decided.get("newParams") or {}).get(BUDGET_KINDS[kind]) or spent + budget
    work.notes.append(
        (by if by != SYSTEM else work.member,
         f"Budget of {name} extended by {by}: {new} {unit} (was {budget}, {spent} spent)")
    )  # fmt: skip
    return int(new)


def _alarm_once(
    team: str, member: str, lead: str, task_id: str, spent: int, budget: int, kind: str
) -> None:
    """One ALARM `system_alert` to the lead per member, task and budget, at 80% of it."""
    from models import inbox
    from models.db import session_scope

    key = f"budget:{task_id}:{member}" + ("" if kind == "tokens" else f":{kind}")
    key += f":{budget}" if budget else ""
    with session_scope() as s:
        sent = inbox.messages(team, lead, sender=SYSTEM, session=s)
        if any((m.meta or {}).get("budget_alarm") == key for m in sent):
            return
        message = (
            f"{member} has spent {spent} of its {budget} {UNITS[kind]} on task {task_id} "
            f"({100 * spent // budget}%); at 100% it waits for a budget extension."
        )
        inbox.send(
            team, to=lead, sender=SYSTEM, text=message, type="system_alert",
            summary=f"ALARM: {member} at {100 * spent // budget}% of its {kind} budget",
            payload={"alert_type": "ALARM", "alert_name": "budget", "message": message},
            metadata={"budget_alarm": key, "member": member, "task_id": task_id},
            session=s,
        )  # fmt: skip
