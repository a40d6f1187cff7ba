"""The `team-task` flow: a lead's task, worked on by its assignees' agents, step by step.

One flow run per team task. It claims the task (pending -> in_progress, exactly once even
with several workers), sends each assignee a `task_assignment` notification, and runs each
assignee's agent (in parallel, bounded by the team's `concurrency` setting): every step asks
the member's runtime for one `002` Chimera response and executes its actions. `SYNC` tool
actions run inline as Prefect tasks; `ASYNC` ones start a separate `tool-action` run at once
(the step reports `TASK_STARTED` and the action's `task_id`) whose result arrives later as a
`tool_result` notification. `internal` actions send messages, request plan approval (the
`plan-approval` flow), create tasks, read knowledge, `remember` and `recall` memories (the
member's own and the team's shared ones: `flows/memory_actions.py`), or finish. A member
whose `planModeRequired` is true cannot run tools before its plan is approved.

Everything is kept: every step in the `messages` conversation table, the member's `004` task
status (`tasks/{team}/{member}/task-status.json`), `output.log`, `artifacts/`, a
`task_metrics` row and a `000` experience log per execution; the run shows a Markdown report,
a table of the team's status, and each member's Markdown files and CSV tables (first rows) in
the Prefect UI, and logs one line per step. At the end the task is `completed` (or `archived`
with the failures recorded, and the run ends Failed saying which member failed at which step
and why) and the lead gets an `idle_notification`.

A denied plan: the lead's feedback joins the member's conversation as a message from the
decider, and its next `request_plan_approval` revises the denied request, up to the team's
`plan_max_revisions`; at the limit the member's part ends with that reason.

Each agent step and each SYNC tool run is a Prefect task run. Claiming the task and closing
it are one database transaction each, done in the flow itself; so is each step's reading of
the inbox and recording of the conversation. That keeps a team task's cost beyond its
agent's work near what any flow run costs (`benchmarks/team_task.py`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from prefect import flow, get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed
from prefect.utilities.annotations import quote

from flows import dependencies
from flows.memory_actions import RECALL, REMEMBER, memory_action
from flows.runner import task_run_tags
from flows.runtimes import (
    ResultPending,
    StepError,
    StepRequest,
    StepResult,
    step_message,
    tool_result_message,
)
from flows.runtimes.kinds import runtime_for
from flows.scope import READ_KNOWLEDGE, StepScope, read_knowledge, step_scope
from models import inbox, presence
from models import team as teams
from models.base import utcnow
from models.chimera_response import ChimeraResponse
from models.conversation import ConversationMessage, append_message, load_conversation
from models.db import session_scope
from models.task import TaskMetricsRow, TaskState, get_task, move_task, record_metrics
from models.task_status import ExecutionStatus, append_output, member_files, set_member_status
from models.tool import ToolResult

FLOW_NAME = "team-task"
DEFAULT_MAX_STEPS = 25
DEFAULT_CONCURRENCY = 4
RESULT_WAIT_S = 0.2  # how often a step waiting for an ASYNC result looks at the inbox
HEARTBEAT_S = 10.0  # how often a working member's agent_state.last_heartbeat is renewed
ARTIFACT_ROWS = 20  # rows of a member's CSV artifact shown as a table on the run
ARTIFACT_CHARS = 20_000  # characters of a member's Markdown artifact shown on the run


class TaskFailed(Exception):
    """A team task a member failed: the `team-task` run ends Failed with this message.

    Calling the flow directly raises it; `outcome` is what the flow would have returned.
    """

    def __init__(self, message: str, outcome: dict[str, Any]) -> None:
        super().__init__(message, outcome)  # both in args: it pickles with its outcome
        self.message, self.outcome = message, outcome

    def __str__(self) -> str:
        return self.message


@dataclass
class Work:
    """What one member's execution of the task did."""

    member: str
    ok: bool = True
    error: str | None = None
    steps: int = 0
    tokens: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    approval_wait_s: float = 0.0
    response: str | None = None
    plan_approved: bool = False
    denied_request: str | None = None
    feedback_id: str | None = None
    failed_step: int | None = None
    notes: list[tuple[str, str]] = field(default_factory=list)  # (userid, text) to record
    pending: set[asyncio.Task] = field(default_factory=set)
    started_at: Any = None
    ended_at: Any = None


# --- tasks: every read and write ------------------------------------------------------------


def _task_info(task_id: str, session: Any = None) -> dict[str, Any]:
    row = get_task(task_id, session=session)
    return {
        "id": str(row.id),
        "team": row.team,
        "title": row.title,
        "description": row.description,
        "status": row.status,
        "priority": row.priority,
        "deadline": row.deadline.isoformat() if row.deadline else None,
        "params": row.params or {},
        "creator": row.creator_id,
        "assignees": [a.assignee_id for a in row.assignees],
    }


def claim(task_id: str) -> tuple[dict[str, Any], bool, int]:
    """Loads the task and claims it (pending -> in_progress, so of several runs exactly one
    works it); the claimant sends each assignee a `001` task_assignment notification.

    One transaction: a notification that cannot be sent (an assignee shut down since) leaves
    the task pending. Returns the task, whether this run claimed it, and the team's limit on
    members working at once.
    """
    with session_scope() as s:
        info = _task_info(task_id, session=s)
        # Gated by task dependencies (open blockers, no assignee): flows/dependencies.py.
        claimed = dependencies.claim(s, info)
        team = teams.get_team(s, info["team"])
        if claimed:
            notify(info, lead=team.lead, session=s)
        limit = int(team.settings.get("concurrency", DEFAULT_CONCURRENCY))
    return info, claimed, limit


def notify(info: dict[str, Any], *, lead: str, session: Any = None) -> list[str]:
    """Sends each assignee a `001` task_assignment notification from the lead."""
    payload: dict[str, Any] = {
        "task_id": info["id"],
        "task_description": info["description"] or info["title"],
        "priority": info["priority"] or "normal",
        "context": {"title": info["title"], "params": info["params"]},
    }
    if info["deadline"]:
        payload["deadline"] = info["deadline"]
    rows = inbox.send_many(
        info["team"],
        [
            {
                "to": name,
                "sender": lead,
                "text": payload["task_description"],
                "summary": f"Task: {info['title']}",
                "type": "task_assignment",
                "payload": payload,
            }
            for name in info["assignees"]
        ],
        session=session,
    )
    return [row.message_id for row in rows]


async def alive(team: str, member: str, status: str) -> None:
    """A heartbeat of the member: its `agent_state` is `status` now (thinking, executing_tools,
    idle); the lead hears of changes (`models.presence.heartbeat`)."""
    try:
        await anyio.to_thread.run_sync(partial(presence.heartbeat, team, member, status=status))
    except Exception as exc:  # the member's state is a report: never a reason to fail
        get_run_logger().warning("heartbeat of %s: %s", member, exc)


@dataclass
class Liveness:
    """A working member's heartbeats: at each change of status, and every `HEARTBEAT_S`
    while a step runs, so the watchdog never takes a long step for a dead member."""

    team: str
    member: str
    status: str = ""

    async def now(self, status: str) -> None:
        if status != self.status:
            self.status = status
            await alive(self.team, self.member, status)

    async def keep(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if self.status:
                await alive(self.team, self.member, self.status)


async def member_status(team: str, member: str, status: str, **kwargs: Any) -> None:
    """Updates the member's `004` task status (and its task-status.json)."""
    await anyio.to_thread.run_sync(
        lambda: set_member_status(team, member, status=ExecutionStatus(status), **kwargs)
    )


@dataclass(frozen=True)
class StepFailure:
    """Why a runtime could not give the member's next step (one line)."""

    reason: str


@task(name="agent-step", task_run_name="step {number} of {member}", cache_policy=NO_CACHE)
async def agent_step(
    runtime: dict[str, Any], request: StepRequest, member: str, number: int
) -> StepResult | StepFailure | None:
    """The member's next step; None while a result it needs (an ASYNC action's) is due;
    a `StepFailure` (one line, no traceback in the run's logs) when the runtime cannot step."""

    def step() -> StepResult | StepFailure | None:
        try:
            return runtime_for(runtime).step(request)
        except ResultPending:
            return None
        except (StepError, ValueError) as exc:
            return StepFailure(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    return await anyio.to_thread.run_sync(step)


@task(name="run-tool", task_run_name="{tool_id} for {member}", cache_policy=NO_CACHE)
async def run_tool(
    tool_id: str, params: dict[str, Any], team: str, member: str, resources: list[dict] | None
) -> dict[str, Any]:
    """Runs a `000` tool (in the member's task folder) and stores its Feedback."""
    from flows.tools import run_tool as execute
    from models.tool import get_tool, record_feedback

    def go() -> dict[str, Any]:
        try:
            definition = get_tool(tool_id)
        except ValueError as exc:
            result = ToolResult.failure(tool_id, str(exc))
            return {"result": result.to_wire(), "feedback_id": None, "log": str(exc)}
        folder = member_files(team, member)
        run = execute(definition, params, cwd=folder, resources=resources or [])
        feedback_id = None
        if run.feedback is not None:
            record_feedback(run.feedback)
            feedback_id = run.feedback.execution_id
            log = (
                f"[{tool_id}] $ {' '.join(run.argv)} (exit {run.feedback.exit_code})\n"
                f"{run.feedback.stdout}{run.feedback.stderr}"
            )
        else:
            log = f"[{tool_id}] not run: {run.result.error_message}"
        return {"result": run.result.to_wire(), "feedback_id": feedback_id, "log": log}

    outcome = await anyio.to_thread.run_sync(go)
    await anyio.to_thread.run_sync(append_output, team, member, outcome["log"])
    return outcome


@flow(name="tool-action", flow_run_name="{tool_id} for {member}@{team}", persist_result=False)
async def tool_action(
    team: str,
    member: str,
    tool_id: str,
    params: dict[str, Any],
    task_id: str,
    resources: list[dict] | None = None,
    team_task_id: str | None = None,
) -> dict[str, Any]:
    """An `ASYNC` tool action: runs the tool, then delivers a `tool_result` notification.

    The run is tagged `team:`, `member:` and (given `team_task_id`) `task:` while the tool
    runs. (The run alone: tags on its task runs would cost a concurrency-slot call each.)
    """
    from flows.plan_approval import tag_run

    extra = [f"task:{team_task_id}"] if team_task_id else []
    tagging = asyncio.ensure_future(tag_run(*task_run_tags(team, [member]), *extra))
    try:
        outcome = await run_tool(tool_id, params, team, member, resources)
    finally:
        await tagging
    result = outcome["result"]
    await anyio.to_thread.run_sync(_deliver_result, team, member, tool_id, task_id, result)
    return result


def _deliver_result(
    team: str, member: str, tool_id: str, task_id: str, result: dict[str, Any]
) -> None:
    """The `tool_result` notification of an ASYNC action, in the member's inbox."""
    inbox.send(
        team,
        to=member,
        sender="system",
        text=json.dumps(result),
        type="tool_result",
        summary=f"{tool_id} finished ({result['status']})",
        payload=result,
        metadata={"task_id": task_id},
    )


async def _async_action(
    team: str, member: str, tool_id: str, params: dict[str, Any], task_id: str, **kwargs: Any
) -> dict[str, Any]:
    """Runs `tool_action`; if its run dies before it delivered a result (the Prefect server
    refused to create it, say), the member gets a FAILURE result saying why, instead of
    waiting for one that will never come."""
    try:
        return await tool_action(team, member, tool_id, params, task_id, **kwargs)
    except Exception as exc:
        failure = ToolResult.failure(
            tool_id, f"the ASYNC run of {tool_id} failed: {exc}"[:2000]
        ).model_dump(mode="json")

        def deliver_once() -> None:
            sent = inbox.messages(team, member, sender="system")
            if not any(
                m.type == "tool_result" and (m.meta or {}).get("task_id") == task_id for m in sent
            ):
                _deliver_result(team, member, tool_id, task_id, failure)

        await anyio.to_thread.run_sync(deliver_once)
        raise


# --- one member's work ----------------------------------------------------------------------


def _conversation_id(task_id: str) -> str:
    return f"task-{task_id}"


@dataclass
class Assignee:
    """What a member's work on a task needs to know of it, read once at the start."""

    agent_id: str
    runtime: dict[str, Any]
    model: str
    prompt: str
    plan_mode: bool
    lead: str
    tools: list[Any]


def _begin(info: dict[str, Any], name: str) -> Assignee:
    """In one transaction: the member's settings and tools, its status `running`, and the
    conversation's opening (the member's prompt, the lead's task) unless it has begun."""
    from models.tool import list_tools

    team = info["team"]
    with session_scope() as s:
        row = teams.get_member(s, team, name, active=True)
        runtime = dict(row.runtime or {})
        allowed = runtime.get("tools")
        member = Assignee(
            agent_id=row.agent_id,
            runtime=runtime,
            model=row.model,
            prompt=row.prompt,
            plan_mode=bool(row.plan_mode_required),
            lead=teams.get_team(s, team).lead,
            tools=[t for t in list_tools(session=s) if allowed is None or t.tool_id in allowed],
        )
        set_member_status(team, name, status=ExecutionStatus.RUNNING, session=s)
        conversation_id = _conversation_id(info["id"])
        if not load_conversation(
            session=s, agent_id=member.agent_id, conversation_id=conversation_id
        ):
            now = utcnow()
            opening = [
                {
                    "index": 0,
                    "turn": 0,
                    "timestamp": now,
                    "role": "system",
                    "content": member.prompt,
                },
                {
                    "index": 1,
                    "turn": 0,
                    "timestamp": now,
                    "role": "user",
                    "content": {
                        "userid": member.lead,
                        "text": info["description"] or info["title"],
                    },
                },
            ]
            for data in opening:
                append_message(
                    session=s,
                    agent_id=member.agent_id,
                    conversation_id=conversation_id,
                    message=ConversationMessage.model_validate(data),
                )
    return member


def _append_all(session: Any, agent_id: str, conversation: str, makers: list[Any]) -> None:
    """Appends `make(index, turn)` for each maker, each made for the conversation's next place."""
    if not makers:
        return
    current = load_conversation(session=session, agent_id=agent_id, conversation_id=conversation)
    index, turn = _next(current)
    for make in makers:
        message = make(index, turn)
        append_message(
            session=session, agent_id=agent_id, conversation_id=conversation, message=message
        )
        index, turn = index + 1, message.turn


def _before_step(
    team: str, name: str, agent_id: str, conversation: str
) -> tuple[list[dict[str, Any]], list[ConversationMessage]]:
    """The member's unread inbox entries, marked read, and the conversation the step sees:
    ASYNC results that arrived join it, so later steps still see them. One transaction."""
    with session_scope() as s:
        rows = inbox.messages(team, name, unread=True, mark_read=True, session=s)
        arrived = [{**r.entry_dict(), "payload": r.payload} for r in rows]
        results = [
            ToolResult.model_validate(entry["payload"])
            for entry in arrived
            if entry.get("type") == "tool_result" and entry.get("payload")
        ]
        _append_all(
            s,
            agent_id,
            conversation,
            [lambda i, t, r=result: tool_result_message(r, index=i, turn=t) for result in results],
        )
        return arrived, load_conversation(
            session=s, agent_id=agent_id, conversation_id=conversation
        )


def _record_step(
    agent_id: str,
    conversation: str,
    response: ChimeraResponse,
    results: list[ToolResult],
    notes: list[tuple[str, str]] | None = None,
) -> None:
    """Appends the step's response (a new turn), the results handed back to the agent, and
    `notes`: user messages (`userid`, text), e.g. the lead's feedback on a denied plan."""
    with session_scope() as s:
        _append_all(
            s,
            agent_id,
            conversation,
            [lambda i, t: step_message(response, index=i, turn=t + 1)]
            + [lambda i, t, r=result: tool_result_message(r, index=i, turn=t) for result in results]
            + [lambda i, t, n=note: _note_message(*n, index=i, turn=t) for note in notes or []],
        )


def _note_message(userid: str, text: str, *, index: int, turn: int) -> ConversationMessage:
    return ConversationMessage.model_validate(
        {
            "index": index,
            "turn": turn,
            "timestamp": utcnow(),
            "role": "user",
            "content": {"userid": userid, "text": text},
        }
    )


def step_line(member: str, number: int, response: ChimeraResponse) -> str:
    """The run log's line for one step: `analyst-1 step 2: analyze_sales (EXECUTING)`."""
    actions = ", ".join(
        f"{a.action} {a.mode.value}" if a.mode.value == "ASYNC" else a.action
        for a in response.actions
    )
    done = " stop" if response.stop else ""
    return f"{member} step {number}: {actions or 'no actions'} ({response.status.value}{done})"


def _next(conversation: list[ConversationMessage]) -> tuple[int, int]:
    """The index and turn of the next message."""
    if not conversation:
        return 0, 0
    return len(conversation), conversation[-1].turn


async def work_on(info: dict[str, Any], name: str, max_steps: int) -> Work:
    """Runs one member's agent on the task until it stops, fails, or runs out of steps."""
    logger = get_run_logger()
    team, work = info["team"], Work(member=name)
    member = await anyio.to_thread.run_sync(_begin, info, name)
    runtime, lead = member.runtime, member.lead
    resources = runtime.get("resources")
    clearance = runtime.get("security_level")  # the highest level its steps may claim
    conversation_id = _conversation_id(info["id"])
    started = time.monotonic()
    task_brief = {k: info[k] for k in ("id", "title", "description", "params")}
    unread: list[dict[str, Any]] = []
    waited_after_last = False
    liveness = Liveness(team, name)
    keeper = asyncio.ensure_future(liveness.keep())
    try:
        while work.steps < max_steps:
            arrived, conversation = await anyio.to_thread.run_sync(
                _before_step, team, name, member.agent_id, conversation_id
            )
            unread += arrived
            request = StepRequest(
                team=team,
                member=name,
                agent_id=member.agent_id,
                model=member.model,
                prompt=member.prompt,
                task=task_brief,
                conversation=conversation,
                tools=member.tools,
                inbox=unread,
            )
            await liveness.now("thinking")
            # quote: Prefect need not walk the conversation and tools looking for futures.
            result = await agent_step(quote(runtime), quote(request), name, work.steps + 1)
            if isinstance(result, StepFailure):
                work.failed_step = work.steps + 1
                raise StepError(result.reason)
            if result is None:
                # A result it needs is due from an ASYNC action. Once none is running, the
                # inbox is looked at one more time before the step counts as failed.
                if not work.pending and waited_after_last:
                    work.failed_step = work.steps + 1
                    raise StepError(f"{name} waits for a result that no running action will send")
                waited_after_last = not work.pending
                await asyncio.sleep(RESULT_WAIT_S)
                continue
            waited_after_last = False
            work.steps += 1
            work.tokens += result.tokens
            response = result.response
            if any(a.type == "tool" for a in response.actions):
                await liveness.now("executing_tools")
            # A v2 `context` block limits what this step may use (flows/scope.py).
            scope = None
            if response.context is not None:
                scope = await anyio.to_thread.run_sync(
                    partial(step_scope, resources=resources, clearance=clearance),
                    response.context,
                )
            response, stop, results = await _execute(
                info, name, lead, response, work, member.plan_mode, resources, scope
            )
            notes, work.notes = work.notes, []
            await anyio.to_thread.run_sync(
                _record_step, member.agent_id, conversation_id, response, results, notes
            )
            logger.info("%s", step_line(name, work.steps, response))
            unread = []
            if response.response:
                work.response = response.response
            if stop:
                break
        else:
            raise StepError(f"{name} did not finish within {max_steps} steps")
        # An agent that stopped while ASYNC actions still run: their results still arrive.
        if work.pending:
            await asyncio.gather(*work.pending)
    except (StepError, ValueError) as exc:
        work.ok, work.error = False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        work.failed_step = work.failed_step or max(work.steps, 1)
        logger.error("%s failed at step %d: %s", name, work.failed_step, work.error)
        await anyio.to_thread.run_sync(append_output, team, name, f"error: {exc}")
    finally:
        keeper.cancel()
    elapsed = time.monotonic() - started
    await liveness.now("idle")
    await member_status(
        team,
        name,
        "complete" if work.ok else "error",
        error_message=work.error,
        tokens=work.tokens,
        completed=work.ok,
        response_time=elapsed if work.ok else None,
    )
    return work


async def _execute(
    info: dict[str, Any],
    name: str,
    lead: str,
    response: ChimeraResponse,
    work: Work,
    plan_mode: bool,
    resources: list[dict] | None,
    scope: StepScope | None = None,
) -> tuple[ChimeraResponse, bool, list[ToolResult]]:
    """Executes a step's actions; with a `context` block (`scope`), only on what it names.

    Returns the response as recorded (ASYNC actions: `TASK_STARTED` with their task ids),
    whether the agent is done, and the results to hand back to it (SYNC tools, internal).
    """
    team = info["team"]
    stop = response.stop
    results: list[ToolResult] = []
    actions = []
    started_async = False
    for action in response.actions:
        kind = action.type.value
        if kind in ("tool", "script"):
            if plan_mode and not work.plan_approved:
                results.append(
                    ToolResult.failure(action.action, "plan approval is required before tools run")
                )
                actions.append(action)
                continue
            if scope is not None:
                refusal = await anyio.to_thread.run_sync(
                    _scope_refusal, scope, action.action, dict(action.params), team, name
                )
                if refusal:
                    results.append(ToolResult.failure(action.action, refusal))
                    actions.append(action)
                    continue
                resources = scope.resources_in_force()
            work.tool_calls += 1
            if action.mode.value == "ASYNC":
                task_id = action.task_id or str(uuid.uuid4())
                runner = asyncio.create_task(
                    _async_action(
                        team, name, action.action, dict(action.params), task_id,
                        resources=resources, team_task_id=info["id"],
                    )
                )  # fmt: skip
                work.pending.add(runner)
                runner.add_done_callback(work.pending.discard)
                runner.add_done_callback(lambda done: _count_failure(work, done))
                actions.append(action.model_copy(update={"task_id": task_id}))
                started_async = True
                continue
            outcome = await run_tool(action.action, dict(action.params), team, name, resources)
            results.append(ToolResult.model_validate(outcome["result"]))
            _count_failure(work, outcome["result"])
            work.feedback_id = outcome["feedback_id"] or work.feedback_id
            actions.append(action)
            continue
        actions.append(action)
        if action.action == READ_KNOWLEDGE:
            params = dict(action.params)
            results.append(await anyio.to_thread.run_sync(read_knowledge, params, scope))
            continue
        if action.action in (REMEMBER, RECALL):
            relics = list(scope.context.knowledge_relics) if scope is not None else None
            run = partial(memory_action, team, name, action.action, dict(action.params), relics)
            results.append(await anyio.to_thread.run_sync(run))
            continue
        stop = (
            await _internal(info, name, lead, action.action, dict(action.params), work, results)
            or stop
        )
    update: dict[str, Any] = {"actions": actions}
    if started_async:
        update["status"] = "TASK_STARTED"
    recorded = ChimeraResponse.model_validate({**response.to_wire(), **_wire(update)})
    return recorded, stop, results


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


async def _internal(
    info: dict[str, Any],
    name: str,
    lead: str,
    action: str,
    params: dict[str, Any],
    work: Work,
    results: list[ToolResult],
) -> bool:
    """Runs an `internal` action; True if it ends the member's work."""
    team = info["team"]
    if action in ("finish", "finishRequest"):
        return True
    if action in ("send_message", "postMessage"):
        to = params.get("to", lead)
        text = str(params.get("text", ""))
        row = await anyio.to_thread.run_sync(
            lambda: inbox.send(team, to=to, sender=name, text=text, summary=params.get("summary"))
        )
        results.append(ToolResult.success(action, {"messageId": row.message_id}))
        return False
    if action == "request_plan_approval":
        from flows.plan_approval import plan_approval

        asked = time.monotonic()
        decision = await plan_approval(
            team=team,
            member=name,
            plan=str(params.get("plan", "")),
            summary=str(params.get("summary", info["title"])),
            # Asking again after a denial is a revision of it: the team's limit counts.
            previous_request_id=work.denied_request,
        )
        work.approval_wait_s += time.monotonic() - asked
        work.plan_approved = bool(decision.get("approve"))
        work.denied_request = decision["requestId"] if decision["status"] == "denied" else None
        if decision["status"] == "rejected":
            raise StepError(f"plan {decision['requestId']} was rejected: {decision['cause']}")
        results.append(ToolResult.success(action, decision))
        if decision["status"] == "denied":
            work.notes.append(await anyio.to_thread.run_sync(_denial_note, team, lead, decision))
        return False
    if action == "create_task":
        from models.task import create_task

        row = await anyio.to_thread.run_sync(
            lambda: create_task(
                team,
                title=str(params.get("title", "")),
                description=params.get("description"),
                assignees=list(params.get("assignees", [])),
                creator=name,
            )
        )
        results.append(ToolResult.success(action, {"task_id": str(row.id)}))
        return False
    results.append(ToolResult.failure(action, f"unknown internal action {action!r}"))
    return False


def _denial_note(team: str, lead: str, decision: dict[str, Any]) -> tuple[str, str]:
    """The lead's feedback on a denied plan, as the member's conversation shows it."""
    limit = teams.settings_of(team).max_revisions
    feedback = decision.get("feedback") or decision.get("cause") or "no reason given"
    text = (
        f"Plan {decision['requestId']} (revision {decision['revision']} of at most {limit}) "
        f"was denied: {feedback}\nRevise the plan and ask for approval again."
    )
    who = decision.get("decidedBy") or lead
    return (lead if who == "system" else who), text


# --- the flow -------------------------------------------------------------------------------


def record_execution(info: dict[str, Any], work: Work, session: Any) -> None:
    """A `task_metrics` row and a `000` experience log for one member's execution."""
    from models.agent import ExperienceLog, ExperienceLogRow

    started_at, ended_at = work.started_at, work.ended_at
    duration = (ended_at - started_at).total_seconds()
    record_metrics(
        TaskMetricsRow(
            team=info["team"],
            member=work.member,
            task_id=info["id"],
            started_at=started_at,
            ended_at=ended_at,
            duration_s=duration,
            tokens=work.tokens,
            steps=work.steps,
            tool_calls=work.tool_calls,
            approval_wait_s=work.approval_wait_s,
            ok=work.ok,
            tool_failures=work.tool_failures,
        ),
        session=session,
    )
    log = ExperienceLog(
        log_id=str(uuid.uuid4()),
        agent_id=f"{work.member}@{info['team']}",
        task_id=info["id"],
        start_time=started_at,
        end_time=ended_at,
        status="success" if work.ok else "failure",
        feedback_id=work.feedback_id or "none",
        created_at=ended_at,
        updated_at=ended_at,
    )
    session.add(ExperienceLogRow.from_wire(log))


def close(info: dict[str, Any], works: list[Work], ok: bool) -> None:
    """In one transaction: each member's metrics and experience log, the task closed
    (completed, or archived when a member failed), and the lead told: an
    `idle_notification` per member, and a message for each failure."""
    from models.inbox_message import IdleNotification

    team = info["team"]
    with session_scope() as s:
        for work in works:
            record_execution(info, work, s)
        state = TaskState.COMPLETED if ok else TaskState.ARCHIVED
        move_task(uuid.UUID(info["id"]), to=state, session=s)
        ready = dependencies.settle(s, info, ok)  # dependents: start them, or fail them
        lead = teams.get_team(s, team).lead
        messages = []
        for work in works:
            if work.member == lead:
                continue
            note = IdleNotification.model_validate(
                {
                    "from": work.member,
                    "idleReason": "task_complete" if work.ok else "available",
                    "timestamp": utcnow(),
                }
            )
            messages.append(inbox.payload_message(note, to=lead, sender=work.member))
            if not work.ok:
                text = f"Task {info['title']} failed: {work.error}"
                messages.append(
                    {"to": lead, "sender": work.member, "text": text, "summary": "task failed"}
                )
        inbox.send_many(team, messages, session=s)
    dependencies.start_ready(ready)


def report_markdown(info: dict[str, Any], works: list[Work], ok: bool) -> str:
    """The task's report: its outcome, and per member its steps, tool calls and answer."""
    lines = [
        f"# {info['title']}",
        "",
        f"Team **{info['team']}**, task `{info['id']}`: **{'completed' if ok else 'failed'}**",
        "",
    ]
    for work in works:
        state = "done" if work.ok else f"failed: {work.error}"
        lines += [
            f"## {work.member} ({state})",
            "",
            f"{work.steps} steps, {work.tool_calls} tool calls, {work.tokens} tokens",
            "",
        ]
        if work.response:
            lines += [work.response, ""]
    return "\n".join(lines)


async def finish(info: dict[str, Any], works: list[Work], ok: bool) -> None:
    """Closes the task (`close`) while the report's Markdown artifact is made; then the
    members' table and the team's artifact (`flows.team_view`), and the members' files.
    All show on the flow run in the Prefect UI."""
    from prefect.runtime import flow_run

    from flows import team_view

    markdown = asyncio.ensure_future(
        acreate_markdown_artifact(
            report_markdown(info, works, ok),
            key=f"task-{info['id']}"[:100],
            description=info["title"],
        )
    )
    try:
        await anyio.to_thread.run_sync(close, info, works, ok)
        await team_view.publish(info["team"], by=f"team task run {flow_run.name!r}")
        await member_artifacts(info, [w.member for w in works])
    finally:
        await markdown


def _artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) made of `parts`."""
    import re

    key = re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")
    return key[:100].rstrip("-") or "artifact"


def _member_outputs(team: str, member: str) -> list[tuple[str, str, Any]]:
    """A member's Markdown and CSV artifacts, kept small: (kind, file name, content)."""
    import csv
    import itertools

    folder = member_files(team, member) / "artifacts"
    found: list[tuple[str, str, Any]] = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        try:
            if path.suffix == ".md":
                text = path.read_text(encoding="utf-8", errors="replace")
                if len(text) > ARTIFACT_CHARS:
                    text = text[:ARTIFACT_CHARS] + "\n\n*(cut: see the file for the rest)*"
                found.append(("markdown", path.name, text))
            elif path.suffix == ".csv":
                with path.open(newline="", encoding="utf-8", errors="replace") as f:
                    rows = [dict(r) for r in itertools.islice(csv.DictReader(f), ARTIFACT_ROWS)]
                found.append(("table", path.name, rows))
        except OSError:
            continue
    return found


async def member_artifacts(info: dict[str, Any], members: list[str]) -> None:
    """Each member's `report.md` (any Markdown) and tables of its CSV files (the first
    `ARTIFACT_ROWS` rows) as artifacts of the run, so the Prefect UI shows the results."""
    team = info["team"]
    for member in members:
        outputs = await anyio.to_thread.run_sync(_member_outputs, team, member)
        for kind, name, content in outputs:
            key = _artifact_key(member, info["id"][:8], name)
            description = f"{member}: artifacts/{name}"
            if kind == "markdown":
                await acreate_markdown_artifact(content, key=key, description=description)
            elif content:
                await acreate_table_artifact(content, key=key, description=description)


def _run_name() -> str:
    """`research-team: Q4 sales analysis (analyst-1, analyst-2)`: team, task and assignees."""
    from prefect.runtime import flow_run

    task_id = str(flow_run.parameters.get("task_id", ""))
    try:
        info = _task_info(task_id)
    except ValueError:
        return f"task {task_id[:8]}"
    from flows.runner import task_run_name

    return task_run_name(info["team"], info["title"], info["assignees"])


@flow(name=FLOW_NAME, flow_run_name=_run_name, persist_result=False)
async def team_task(
    task_id: str, team: str | None = None, max_steps: int = DEFAULT_MAX_STEPS
) -> dict[str, Any]:
    """Works a team task to its end with its assignees' agents.

    Args:
        task_id: The `001` task (created with `teamflow task create`).
        team: The team (for the run's name; the task says which team it is).
        max_steps: The most steps one member may take.

    Returns:
        The task's id, status and, per member, whether it succeeded, its steps and answer.
    """
    from flows.plan_approval import tag_run

    logger = get_run_logger()
    info, claimed, limit = await anyio.to_thread.run_sync(claim, task_id)
    team = info["team"]
    if not claimed:
        if info.get("reason"):
            logger.warning("Task %s stays %s: %s", task_id, info["status"], info["reason"])
        else:
            logger.warning("Task %s is %s already; nothing to do", task_id, info["status"])
        return {"task_id": task_id, "status": info["status"], "members": {}}
    gate = asyncio.Semaphore(max(1, limit))

    async def bounded(name: str) -> Work:
        async with gate:
            started = utcnow()
            work = await work_on(info, name, max_steps)
            work.started_at, work.ended_at = started, utcnow()
            return work

    # The run that works the task gets its tags while the members work (no round trip of its
    # own); a run that finds the task claimed already keeps just the tags it started with.
    tagging = asyncio.ensure_future(tag_run(*task_run_tags(team, info["assignees"])))
    try:
        works = list(await asyncio.gather(*(bounded(m) for m in info["assignees"])))
    finally:
        await tagging
    ok = all(w.ok for w in works)
    await finish(info, works, ok)
    outcome = {
        "task_id": task_id,
        "status": "completed" if ok else "archived",
        "members": {
            w.member: {"ok": w.ok, "error": w.error, "steps": w.steps, "response": w.response}
            for w in works
        },
    }
    if ok:
        return outcome
    # Recorded and closed: the run itself ends Failed, saying who failed where and why.
    message = failure_message(works)
    return Failed(message=message, data=TaskFailed(message, outcome))


def failure_message(works: list[Work]) -> str:
    """`analyst-1 failed at step 3: plan ... was rejected: ...` (one clause per member)."""
    return "; ".join(
        f"{w.member} failed at step {w.failed_step or w.steps}: {w.error}"
        for w in works
        if not w.ok
    )


async def run_team_task(task_id: str, **kwargs: Any) -> dict[str, Any]:
    """Runs `team_task` here and returns its outcome, whether the task completed or failed."""
    try:
        return await team_task(task_id, **kwargs)
    except TaskFailed as exc:
        return exc.outcome
