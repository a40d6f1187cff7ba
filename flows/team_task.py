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
whose `planModeRequired` is true cannot run tools before its plan is approved. The steps are
run by `flows/steps.py`; the `tool-action` flow is `flows/tool_action.py`.

Everything is kept: every step in the `messages` conversation table, the member's `004` task
status (`tasks/{team}/{member}/task-status.json`), `output.log`, `artifacts/`, a
`task_metrics` row and a `000` experience log per execution; the run shows a Markdown report,
the team's artifact (its status and members' table), and each member's Markdown files and
CSV tables (first rows) in the Prefect UI, and logs one line per step (with the seconds its
agent took). At the end the task is `completed` (or `archived` with the failures recorded,
and the run ends Failed saying which member failed at which step and why) and the lead
gets an `idle_notification`.

A denied plan: the lead's feedback joins the member's conversation as a message from the
decider, and its next `request_plan_approval` revises the denied request, up to the team's
`plan_max_revisions`; at the limit the member's part ends with that reason.

Each SYNC tool run is a Prefect task run; an agent's step is not (its log line says what
the task run would: issue 35). Claiming the task and closing it are one database
transaction each, done in the flow itself; so is each step's reading of the inbox and
recording of the conversation. That keeps a team task's cost beyond its
agent's work near what any flow run costs (`benchmarks/team_task.py`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import anyio
from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.client.schemas.objects import State
from prefect.states import Cancelled, Failed

from flows import dependencies
from flows.outside import adopt, is_outside, member_work, resumed
from flows.runner import task_run_tags
from flows.steps import Work
from models import inbox
from models import team as teams
from models.assignment import notify, task_info
from models.base import utcnow
from models.db import session_scope
from models.dependencies import set_reason
from models.task import TaskMetricsRow, TaskState, get_task, move_task, record_metrics
from models.task_lease import Superseded
from models.task_status import member_files

FLOW_NAME = "team-task"
DEFAULT_MAX_STEPS = 25
DEFAULT_CONCURRENCY = 4
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


# --- tasks: every read and write ------------------------------------------------------------


def claim(task_id: str, lease: int | None = None) -> tuple[dict[str, Any], bool, int]:
    """Loads the task and claims it (pending -> in_progress, so of several runs exactly one
    works it, taking the task's next lease); the claimant sends each assignee a `001`
    task_assignment notification. A resume's run (`lease` given) takes the lease decided
    for it instead, and tells nobody again (`models.task_lease`).

    One transaction: a notification that cannot be sent (an assignee shut down since) leaves
    the task pending. Returns the task (its `lease` set once claimed), whether this run
    claimed it, and the team's limit on members working at once.
    """
    from models import task_lease

    run_id, worker = run_identity()
    with session_scope() as s:
        info = task_info(task_id, session=s)
        if lease is not None:
            claimed = task_lease.take(task_id, lease, run_id, worker, session=s)
            info["reason"] = None
            info["resumed"] = claimed
        else:
            # Gated by task dependencies (open blockers, no assignee): flows/dependencies.py.
            claimed = dependencies.claim(s, info)
            if claimed:
                lease = task_lease.claim_lease(task_id, run_id, worker, session=s)
        team = teams.get_team(info["team"], session=s)
        if claimed:
            info["lease"] = lease
            # Which assignees are outside members (`flows.outside.member_work`), read here.
            info["outside"] = [
                name
                for name in info["assignees"]
                if is_outside(teams.get_member(info["team"], name, session=s).runtime)
            ]
            if not info.get("resumed"):
                notify(info, lead=team.lead, session=s)
        limit = int(team.settings.get("concurrency", DEFAULT_CONCURRENCY))
    return info, claimed, limit


def run_identity() -> tuple[str | None, str | None]:
    """The flow run this code runs in, and the teamflow worker whose process runs it."""
    from prefect.context import FlowRunContext

    from flows.worker_life import worker_name

    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    return (str(run.id) if run is not None else None), worker_name()


def adopt_lease(info: dict[str, Any]) -> None:
    """A run that adopts a task its outside member began (`flows.outside.adopt`) takes the
    task's next lease, as a claim would."""
    from models import task_lease

    run_id, worker = run_identity()
    with session_scope() as s:
        info["lease"] = task_lease.claim_lease(info["id"], run_id, worker, session=s)


def tell_assignees(info: dict[str, Any]) -> None:
    """`notify`, in a transaction of its own."""
    with session_scope() as s:
        notify(info, lead=teams.get_team(info["team"], session=s).lead, session=s)


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
    from models.task_lease import hold

    team = info["team"]
    with session_scope() as s:
        if info.get("lease") is not None:  # a run that was superseded closes nothing
            hold(info["id"], info["lease"], session=s)
        for work in works:
            record_execution(info, work, s)
        task_id = uuid.UUID(info["id"])
        if ok:
            move_task(task_id, to=TaskState.COMPLETED, session=s)
            ready = dependencies.settle(s, info, ok)  # dependents: start them
        elif move_task(task_id, to=TaskState.ARCHIVED, only_from={TaskState.IN_PROGRESS},
                       session=s):  # fmt: skip
            # `001` has no `failed`: the task is archived, and its reason says it failed.
            set_reason(task_id, failure_message(works), session=s)
            ready = dependencies.settle(s, info, ok)  # dependents: fail them
        else:
            ready = []  # freed meanwhile (its member stopped): pending, for another member
        lead = teams.get_team(team, session=s).lead
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
        row = get_task(task_id)
    except ValueError:
        return f"task {task_id[:8]}"
    from flows.runner import task_run_name

    name = task_run_name(row.team or "", row.title, [a.assignee_id for a in row.assignees])
    # A resume's run says so (as `flows.runner.start_resume` names it).
    return f"{name} resume {row.resumes}" if flow_run.parameters.get("lease") else name


@flow(name=FLOW_NAME, flow_run_name=_run_name, persist_result=False)
async def team_task(
    task_id: str,
    team: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    lease: int | None = None,
) -> dict[str, Any] | State[Any]:
    """Works a team task to its end with its assignees' agents.

    Args:
        task_id: The `001` task (created with `teamflow task create`).
        team: The team (for the run's name; the task says which team it is).
        max_steps: The most steps one member may take.
        lease: Given to a run that resumes the task after its run died (the watchdog, or
            `teamflow task resume`): it goes on from each member's last completed step.

    Returns:
        The task's id, status and, per member, whether it succeeded, its steps and answer.
    """
    from flows.plan_approval import tag_run

    logger = get_run_logger()
    info, claimed, limit = await anyio.to_thread.run_sync(claim, task_id, lease)
    team = info["team"]
    if lease is not None:
        if not claimed:
            logger.warning("Task %s moved on before this resume began; nothing to do", task_id)
            return {"task_id": task_id, "status": info["status"], "members": {}}
        logger.info("Resuming task %s (lease %d) from its members' last completed steps",
                    task_id, lease)  # fmt: skip
    if not claimed and lease is None and await adopt(info):
        # Its member set it in_progress before this run claimed it: told as by any run.
        claimed = True
        await anyio.to_thread.run_sync(adopt_lease, info)
        if not await resumed(info):  # a resumed run told them the first time
            await anyio.to_thread.run_sync(tell_assignees, info)
        logger.info("%s began before this run: the run follows its report", info["assignees"])
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
            work = await member_work(info, name, max_steps)
            work.started_at, work.ended_at = started, utcnow()
            return work

    # The run that works the task gets its tags while the members work (no round trip of its
    # own); a run that finds the task claimed already keeps just the tags it started with.
    tagging = asyncio.ensure_future(tag_run(*task_run_tags(team, info["assignees"])))
    try:
        works = list(await asyncio.gather(*(bounded(m) for m in info["assignees"])))
        ok = all(w.ok for w in works)
        await finish(info, works, ok)
    except Superseded as exc:
        # Declared dead while it was slow or frozen, and resumed elsewhere: it acts no more.
        logger.warning("%s", exc)
        return Cancelled(message=str(exc))
    finally:
        await tagging
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
