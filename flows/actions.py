"""A step's actions, run: tools (SYNC inline, ASYNC as runs of their own), knowledge and
memory, and `internal` ones (`flows/internal_actions.py`); each recorded in the member's
step journal (`flows/durable.py`), so a resumed run gives back what was done instead of
doing it again.
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from typing import Any

import anyio

from flows import tool_gate
from flows.durable import Journal, may_have_run, run_once, snapshot
from flows.internal_actions import internal_action
from flows.memory_actions import RECALL, REMEMBER, memory_action
from flows.runtimes import StepError
from flows.scope import READ_KNOWLEDGE, StepScope, read_knowledge
from flows.tool_action import async_action, deliver_result, run_tool
from flows.work import Work
from models import journal as records
from models.chimera_response import ChimeraResponse
from models.task_status import member_files
from models.tool import ToolResult


async def restart_orphans(info: dict[str, Any], name: str, journal: Journal, work: Work) -> None:
    """A resumed run's ASYNC actions whose result never arrived (their run died with the
    worker): each started again with its `task_id`, or, for a tool unsafe to repeat, a
    FAILURE result saying it may have run."""
    team = info["team"]
    for data in await anyio.to_thread.run_sync(journal.orphans, team):
        tool, task_id = data["tool"], data["async_task_id"]
        if await anyio.to_thread.run_sync(run_once, tool):
            await anyio.to_thread.run_sync(
                deliver_result, team, name, tool, task_id, may_have_run(tool)
            )
            continue
        _start_async(info, name, tool, data.get("params") or {}, task_id, data.get("resources"),
                     work)  # fmt: skip


def _start_async(
    info: dict[str, Any], name: str, tool: str, params: dict[str, Any], task_id: str,
    resources: list[dict] | None, work: Work,
) -> None:  # fmt: skip
    runner = asyncio.create_task(
        async_action(
            info["team"], name, tool, params, task_id,
            resources=resources, team_task_id=info["id"],
        )
    )  # fmt: skip
    work.pending.add(runner)
    runner.add_done_callback(work.pending.discard)
    runner.add_done_callback(lambda done: _count_failure(work, done))


TOOL_KINDS = ("tool", "script")
QUIET = (READ_KNOWLEDGE, RECALL, "finish", "finishRequest")
"""Actions that change nothing: they are recorded once done, not before they run."""


async def execute(
    info: dict[str, Any],
    name: str,
    lead: str,
    response: ChimeraResponse,
    work: Work,
    plan_mode: bool,
    resources: list[dict] | None,
    scope: StepScope | None = None,
    journal: Journal | None = None,
) -> tuple[ChimeraResponse, bool, list[ToolResult]]:
    """Executes a step's actions; with a `context` block (`scope`), only on what it names.

    Each action's outcome is recorded in the `journal`; one recorded done is given back
    instead of run again (a resumed run).

    Returns the response as recorded (ASYNC actions: `TASK_STARTED` with their task ids),
    whether the agent is done, and the results to hand back to it (SYNC tools, internal).
    """
    journal = journal or Journal(info["id"], 0, None, name)
    number = work.steps
    stop = response.stop
    results: list[ToolResult] = []
    actions = []
    started_async = False
    entries = [journal.action(number, i) for i in range(len(response.actions))]
    done = [e is not None and e[0] == records.DONE for e in entries]
    tools_done = all(
        d for a, d in zip(response.actions, done, strict=True) if a.type.value in TOOL_KINDS
    )
    blocked = plan_mode and not work.plan_approved
    gate = {} if tools_done else await tool_gate.gate(info, name, response, work, blocked)
    for position, action in enumerate(response.actions):
        entry = entries[position]
        if entry is not None and entry[0] == records.DONE:
            outcome = entry[1]
            for key, value in outcome["work"].items():
                setattr(work, key, value)
            work.notes += [tuple(n) for n in outcome.get("notes", [])]
        else:
            notes = len(work.notes)
            part = records.action_part(position)
            try:
                outcome = await _act(
                    info, name, lead, action, position, work, plan_mode, resources, scope, gate,
                    journal, entry[1] if entry is not None else None,
                )  # fmt: skip
            except StepError as exc:
                failed = {"error": str(exc), "work": snapshot(work), "action": action.to_wire()}
                await journal.record(number, part, records.DONE, failed)
                raise
            outcome |= {"work": snapshot(work), "notes": work.notes[notes:]}
            await journal.record(number, part, records.DONE, outcome)
        if outcome.get("error"):
            raise StepError(outcome["error"])
        actions.append(type(action).model_validate(outcome["action"]))
        if outcome.get("result") is not None:
            results.append(ToolResult.model_validate(outcome["result"]))
        started_async = started_async or bool(outcome.get("async_task_id"))
        stop = outcome.get("stop", False) or stop
    update: dict[str, Any] = {"actions": actions}
    if started_async:
        update["status"] = "TASK_STARTED"
    recorded = ChimeraResponse.model_validate({**response.to_wire(), **_wire(update)})
    return recorded, stop, results


async def _act(
    info: dict[str, Any], name: str, lead: str, action: Any, position: int, work: Work,
    plan_mode: bool, resources: list[dict] | None, scope: StepScope | None,
    gate: dict[int, dict[str, Any]], journal: Journal, prior: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """Runs one action of step `work.steps`: its outcome (`action` as recorded, `result`
    for the member, `stop`, `async_task_id`). `prior`: what a run that died recorded when
    it began this action (so it was running then)."""
    team = info["team"]
    number, part = work.steps, records.action_part(position)
    out: dict[str, Any] = {"action": action.to_wire(), "result": None, "stop": False}
    kind = action.type.value
    if kind in TOOL_KINDS:
        if plan_mode and not work.plan_approved:
            refused = ToolResult.failure(
                action.action, "plan approval is required before tools run"
            )
            return out | {"result": refused.to_wire()}
        if scope is not None:
            refusal = await anyio.to_thread.run_sync(
                _scope_refusal, scope, action.action, dict(action.params), team, name
            )
            if refusal:
                return out | {"result": ToolResult.failure(action.action, refusal).to_wire()}
            resources = scope.resources_in_force()
        params = dict(action.params)
        if position in gate:  # a person decided: approved, edited or rejected
            params, rejected = tool_gate.admit(gate[position], work)
            if rejected is not None:
                return out | {"result": rejected.to_wire()}
        work.tool_calls += 1
        if action.mode.value == "ASYNC":
            task_id = (prior or {}).get("async_task_id") or action.task_id or str(uuid.uuid4())
            if prior is None:  # else it was started: restarted as an orphan, or failed
                begun = {"async_task_id": task_id, "tool": action.action, "params": params,
                         "resources": resources}  # fmt: skip
                await journal.record(number, part, records.STARTED, begun)
                _start_async(info, name, action.action, params, task_id, resources, work)
            started = action.model_copy(update={"task_id": task_id})
            return out | {"action": started.to_wire(), "async_task_id": task_id}
        if prior is not None and await anyio.to_thread.run_sync(run_once, action.action):
            result = may_have_run(action.action)
            _count_failure(work, result)
            return out | {"result": result}
        await journal.record(number, part, records.STARTED, {"tool": action.action})
        outcome = await run_tool(action.action, params, team, name, resources)
        _count_failure(work, outcome["result"])
        work.feedback_id = outcome["feedback_id"] or work.feedback_id
        return out | {"result": outcome["result"]}
    results: list[ToolResult] = []
    if action.action == READ_KNOWLEDGE:
        params = dict(action.params)
        results.append(await anyio.to_thread.run_sync(read_knowledge, params, scope))
    elif action.action in (REMEMBER, RECALL):
        if action.action == REMEMBER:
            await journal.record(number, part, records.STARTED, {})
        relics = list(scope.context.knowledge_relics) if scope is not None else None
        run = partial(memory_action, team, name, action.action, dict(action.params), relics)
        results.append(await anyio.to_thread.run_sync(run))
    else:
        request_id = None
        if action.action == "request_plan_approval" and journal.durable:
            # The same id when a resumed run asks again: a decided plan is not asked again.
            key = records.journal_key(journal.task_id, journal.attempt, name, number, part)
            request_id = (prior or {}).get("request_id") or (
                f"plan-{uuid.uuid5(uuid.NAMESPACE_URL, f'teamflow:{key}').hex[:12]}"
            )
        if action.action not in QUIET:
            await journal.record(number, part, records.STARTED, {"request_id": request_id})
        out["stop"] = await internal_action(
            info, name, lead, action.action, dict(action.params), work, results, request_id
        )
    if results:
        out["result"] = results[0].to_wire()
    return out


def _count_failure(work: Work, result: dict[str, Any] | asyncio.Task) -> None:
    """Counts a tool call that failed (its result, or the task that ran it) in `work`."""
    if isinstance(result, asyncio.Task):
        failed = result.cancelled() or result.exception() is not None
        result = {} if failed else result.result()
    else:
        failed = False
    if failed or result.get("status") != "SUCCESS":
        work.tool_failures += 1


def _scope_refusal(
    scope: StepScope, tool_id: str, params: dict[str, Any], team: str, member: str
) -> str | None:
    """Why the step's context refuses running `tool_id` with `params` (None: it may run)."""
    from models.tool import get_tool

    try:
        definition = get_tool(tool_id)
    except ValueError:
        return None  # run_tool reports the unknown tool
    refusals = scope.tool_refusals(definition, params, cwd=member_files(team, member))
    return f"tool {tool_id} refused: {'; '.join(refusals)}" if refusals else None


def _wire(update: dict[str, Any]) -> dict[str, Any]:
    out = dict(update)
    if "actions" in out:
        out["actions"] = [a.to_wire() for a in out["actions"]]
    return out
