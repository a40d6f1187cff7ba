"""The step machinery of a team task: one member's agent, run step by step.

`work_on` runs one assignee's part of a `team-task` run (`flows/team_task.py`): it opens
the member's conversation, then at every step reads the member's inbox, asks the member's
runtime for one `002` Chimera response (`agent_step`) and executes its actions
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
import contextlib
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
from prefect import get_run_logger

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
from models.tool_policy import ToolPolicy

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


def _beat(team: str, member: str, status: str | None, *, session: Any) -> None:
    """`presence.heartbeat` in a transaction that happens anyway (no transaction of its
    own); a shut-down member's refused heartbeat is no reason to fail (it writes nothing)."""
    from models.team import TeamError

    if status is not None:
        with contextlib.suppress(TeamError):
            presence.heartbeat(team, member, status=status, session=session)


async def member_status(
    team: str, member: str, status: str, *, beat: str | None = None, **kwargs: Any
) -> None:
    """Updates the member's `004` task status (and its task-status.json); with `beat`, its
    heartbeat in the same transaction."""

    def update() -> None:
        with session_scope() as s:
            _beat(team, member, beat, session=s)
            set_member_status(team, member, status=ExecutionStatus(status), session=s, **kwargs)

    await anyio.to_thread.run_sync(update)


@dataclass(frozen=True)
class StepFailure:
    """Why a runtime could not give the member's next step (one line)."""

    reason: str


async def agent_step(
    runtime: dict[str, Any], request: StepRequest
) -> StepResult | StepFailure | None:
    """The member's next step; None while a result it needs (an ASYNC action's) is due;
    a `StepFailure` (one line, no traceback in the run's logs) when the runtime cannot step.

    Not a Prefect task run: a step's run would cost the server three events and a task
    run's rows, and show nothing the run's log line for the step (`step_line`, with the
    seconds the agent took) does not (issue 35). The tools a step calls are task runs.
    """

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


def _begin(info: dict[str, Any], name: str) -> tuple[Assignee, Journal]:
    """In one transaction: the member's settings and tools, its status `running`, the
    conversation's opening (the member's prompt, the lead's task) unless it has begun, and
    the member's journal of the task (`flows.durable`)."""
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
        return member, Journal.load(info, name, session=s)


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
    team: str,
    name: str,
    agent_id: str,
    conversation: str,
    journal: Journal | None = None,
    beat: str | None = None,
) -> tuple[list[dict[str, Any]], list[ConversationMessage], ToolPolicy]:
    """The member's unread inbox entries, marked read, the conversation the step sees
    (ASYNC results that arrived join it, so later steps still see them) and its tool policy
    and budgets as of now. One transaction, refused (`Superseded`) when the run's lease on
    the task was taken; with `beat`, the member's heartbeat (`_beat`) in it too."""
    from models.member_policy import policy_of

    with session_scope() as s:
        if journal is not None and journal.durable:
            from models.task_lease import hold

            hold(journal.task_id, journal.lease, session=s)  # type: ignore[arg-type]  # durable
        _beat(team, name, beat, session=s)
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
        return (
            arrived,
            load_conversation(session=s, agent_id=agent_id, conversation_id=conversation),
            policy_of(team, name, session=s),
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
    member, journal = await anyio.to_thread.run_sync(_begin, info, name)
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
        while work.steps < max_steps and not work.stopped:
            number = work.steps + 1
            step = journal.response(number)
            # The member's heartbeat "thinking" rides on the step's first transaction.
            beat = "thinking" if step is None and liveness.status != "thinking" else None
            arrived, conversation, work.policy = await anyio.to_thread.run_sync(
                partial(_before_step, journal=journal, beat=beat),
                team, name, member.agent_id, conversation_id,
            )  # fmt: skip
            liveness.status = beat or liveness.status
            unread += arrived
            thought = 0.0  # seconds the agent took for this step
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
                held = await tool_gate.held_step(info, name, work, request.steps_taken)  # resumed
                thinking = time.monotonic()
                result = held or await agent_step(runtime, request)
                thought = time.monotonic() - thinking
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
            work.stopped = stop  # recorded with the step: a resume after it asks no more
            await anyio.to_thread.run_sync(
                partial(_record_step, journal=journal, work=work),
                member.agent_id, conversation_id, response, results, notes,
            )  # fmt: skip
            logger.info("%s in %.1f s", step_line(name, work.steps, response), thought)
            unread = []
            if stop:
                break
        else:
            if not work.stopped:  # a resumed run whose member had stopped: it is done
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
    await member_status(
        team,
        name,
        "complete" if work.ok else "error",
        beat="idle" if liveness.status != "idle" else None,
        error_message=work.error,
        tokens=work.tokens,
        completed=work.ok,
        response_time=elapsed if work.ok else None,
    )
    return work
