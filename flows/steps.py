"""The step machinery of a team task: one member's agent, run step by step.

`work_on` runs one assignee's part of a `team-task` run (`flows/team_task.py`): it opens
the member's conversation, then at every step reads the member's inbox, asks the member's
runtime for one `002` Chimera response (the `agent-step` task) and executes its actions
(`_execute`), recording each step in the `messages` conversation table, until the agent stops,
fails or runs out of steps. `tool`/`script` actions run inline as `run-tool` tasks (`SYNC`) or
as separate `tool-action` runs (`ASYNC`, `flows/tool_action.py`); `internal` ones send
messages, ask for plan approval (`flows/plan_approval.py`), create tasks, read knowledge,
`remember` and `recall` (`flows/memory_actions.py`) or finish. A v2 `context` block limits what
a step may use (`flows/scope.py`). A working member sends heartbeats (`Liveness`), so the
watchdog never takes a long step for a dead member.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote

from flows import tool_gate
from flows.actions import execute, restart_orphans
from flows.durable import Journal, snapshot
from flows.runtimes import (
    ResultPending,
    StepError,
    StepRequest,
    StepResult,
    step_message,
    tool_result_message,
)
from flows.runtimes.kinds import runtime_for
from flows.scope import step_scope
from flows.work import Work
from models import inbox, presence
from models import journal as records
from models import team as teams
from models.base import utcnow
from models.chimera_response import ChimeraResponse
from models.conversation import ConversationMessage, append_message, load_conversation
from models.db import session_scope
from models.task_status import ExecutionStatus, append_output, set_member_status
from models.tool import ToolResult

RESULT_WAIT_S = 0.2  # how often a step waiting for an ASYNC result looks at the inbox
HEARTBEAT_S = 10.0  # how often a working member's agent_state.last_heartbeat is renewed


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
        row = teams.get_member(team, name, active=True, session=s)
        runtime = dict(row.runtime or {})
        allowed = runtime.get("tools")
        member = Assignee(
            agent_id=row.agent_id,
            runtime=runtime,
            model=row.model,
            prompt=row.prompt,
            plan_mode=bool(row.plan_mode_required),
            lead=teams.get_team(team, session=s).lead,
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
        made = make(index, turn)
        message, columns = made if isinstance(made, tuple) else (made, {})
        append_message(
            session=session, agent_id=agent_id, conversation_id=conversation, message=message,
            **columns,
        )  # fmt: skip
        index, turn = index + 1, message.turn


def _before_step(
    team: str, name: str, agent_id: str, conversation: str, journal: Journal | None = None
) -> tuple[list[dict[str, Any]], list[ConversationMessage]]:
    """The member's unread inbox entries, marked read, and the conversation the step sees:
    ASYNC results that arrived join it, so later steps still see them. One transaction,
    refused (`Superseded`) when the run's lease on the task was taken."""
    with session_scope() as s:
        if journal is not None and journal.durable:
            from models.task_lease import hold

            hold(journal.task_id, journal.lease, session=s)  # type: ignore[arg-type]  # durable
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
    journal: Journal | None = None,
    work: Work | None = None,
) -> None:
    """Appends the step's response (a new turn), the results handed back to the agent, and
    `notes`: user messages (`userid`, text), e.g. the lead's feedback on a denied plan.
    With a `journal`, in the same transaction: where `work` stands after the step (the
    lease checked first)."""
    calls = [a.to_wire() for a in response.actions]
    with session_scope() as s:
        if journal is not None and work is not None:
            journal.write(work.steps, records.STEP, records.DONE, snapshot(work), session=s)
        _append_all(
            s,
            agent_id,
            conversation,
            # The seed's `messages.tool_calls` / `tool_results`: the step's actions, each result.
            [lambda i, t: (step_message(response, index=i, turn=t + 1), {"tool_calls": calls})]
            + [
                lambda i, t, r=result: (
                    tool_result_message(r, index=i, turn=t),
                    {"tool_results": [r.to_wire()]},
                )
                for result in results
            ]
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
    """Runs one member's agent on the task until it stops, fails, or runs out of steps.

    A resumed run goes on after the member's last completed step (`flows/durable.py`).
    """
    logger = get_run_logger()
    team, work = info["team"], Work(member=name)
    member = await anyio.to_thread.run_sync(_begin, info, name)
    journal = await anyio.to_thread.run_sync(Journal.load, info, name)
    if journal.restore(work):
        logger.info("%s resumes after its step %d", name, work.steps)
    runtime, lead = member.runtime, member.lead
    resources = runtime.get("resources")
    clearance = runtime.get("security_level")  # the highest level its steps may claim
    conversation_id = _conversation_id(info["id"])
    started = work.clock = time.monotonic()
    task_brief = {k: info[k] for k in ("id", "title", "description", "params")}
    unread: list[dict[str, Any]] = []
    waited_after_last = False
    liveness = Liveness(team, name)
    keeper = asyncio.ensure_future(liveness.keep())
    try:
        await restart_orphans(info, name, journal, work)
        while work.steps < max_steps:
            arrived, conversation = await anyio.to_thread.run_sync(
                _before_step, team, name, member.agent_id, conversation_id, journal
            )
            unread += arrived
            number = work.steps + 1
            step = journal.response(number)
            if step is not None:
                logger.info("%s step %d: its recorded response (not asked again)", name, number)
            else:
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
                held = await tool_gate.held_step(info, name, work, request.steps_taken)  # resumed
                # quote: Prefect need not walk the conversation and tools looking for futures.
                result = held or await agent_step(quote(runtime), quote(request), name, number)  # type: ignore[call-overload]  # Prefect unquotes
                if isinstance(result, StepFailure):
                    work.failed_step = number
                    raise StepError(result.reason)
                if result is None:
                    # A result it needs is due from an ASYNC action. Once none is running, the
                    # inbox is looked at one more time before the step counts as failed.
                    if not work.pending and waited_after_last:
                        work.failed_step = number
                        raise StepError(
                            f"{name} waits for a result that no running action will send"
                        )
                    waited_after_last = not work.pending
                    await asyncio.sleep(RESULT_WAIT_S)
                    continue
                step = result
                recorded = {"response": step.response.to_wire(), "tokens": step.tokens}
                await journal.record(number, records.RESPONSE, records.DONE, recorded)
            waited_after_last = False
            work.steps += 1
            work.tokens += step.tokens
            await tool_gate.spend(info, name, lead, work)  # over budget: waits, or raises
            response = step.response
            if any(a.type == "tool" for a in response.actions):
                await liveness.now("executing_tools")
            # A v2 `context` block limits what this step may use (flows/scope.py).
            scope = None
            if response.context is not None:
                scope = await anyio.to_thread.run_sync(
                    partial(step_scope, resources=resources, clearance=clearance),
                    response.context,
                )
            response, stop, results = await execute(
                info, name, lead, response, work, member.plan_mode, resources, scope, journal
            )
            notes, work.notes = work.notes, []
            if response.response:
                work.response = response.response
            await anyio.to_thread.run_sync(
                partial(_record_step, journal=journal, work=work),
                member.agent_id, conversation_id, response, results, notes,
            )  # fmt: skip
            logger.info("%s", step_line(name, work.steps, response))
            unread = []
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
