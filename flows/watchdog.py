"""The `watchdog` flow: every team checked on a schedule, each problem alarmed to its lead once.

Teams are checked every 30 s (`TEAMFLOW_WATCHDOG_EVERY`, e.g. `10s`, `1m`), but not one
Prefect run per check, which buried a team's own runs in the UI (120 watchdog runs an hour):
`teamflow up` schedules the `watchdog/watchdog` deployment once per window (ten checks, at
most 15 minutes: 5 minutes at the default), and each run checks `checks` times, `every`
seconds apart, logging one line per check: 12 runs an hour, not 120. A run whose worker died
is marked Crashed and the next window's run takes over (the checks pause for at most one
window). One check:

1. asks Prefect which runs died: `team-task` runs that ended Crashed, Failed or Cancelled
   (`teamflow up` marks its dead worker's runs Crashed at once, the "crash runs without
   heartbeats" automation any other run that went quiet), and
   the runs of open shutdowns and pending plan requests (`models.watchdog.watched_runs`);
2. lets `models.watchdog.scan` decide: members whose heartbeat is older than the team's
   `offline_after_seconds` go offline (the lead gets a `status_update`), tasks of dead runs
   are resumed (a new run, started here, goes on from the last completed steps; or, past
   `TEAMFLOW_RESUME_ATTEMPTS`, closed as failed), shutdowns of dead runs forced, overdue
   tasks noted; each condition is recorded once in `watchdog_alarms`;
3. delivers each new alarm to the team's lead as an ALARM through the `system-alert` flow
   (a subflow run per alarm); an alarm whose delivery failed is delivered by the next run;
4. marks Crashed the in-process subflow runs of dead runs (`end_orphans`), starts the runs
   of tasks whose blockers completed but whose start was lost (`start_unblocked`), starts
   again the tasks whose run crashed before it claimed them (`restart_unclaimed`), and
   hands back to the pool the runs a dead worker took but never started
   (`hand_back_stranded`).
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import anyio
from prefect import flow, get_client, get_run_logger

from flows.outside import resume_reported_runs
from flows.spawn import dead_panes
from flows.system_alert import system_alert
from flows.watchdog_schedule import every_s
from models import watchdog as store
from models.db import session_scope
from models.notification import AlertType
from models.settings import get_settings
from models.team import Team

FLOW_NAME = "watchdog"
TASK_FLOW = "team-task"
PAGE = 200


def _dead_run(run: Any, flow_name: str) -> store.DeadRun:
    state = run.state
    return store.DeadRun(
        id=str(run.id),
        flow=flow_name,
        state=state.name if state is not None else "unknown",
        message=(state.message or None) if state is not None else None,
        task_id=str(run.parameters.get("task_id")) if flow_name == TASK_FLOW else None,
        idempotency_key=run.idempotency_key,
        lease=run.parameters.get("lease") if flow_name == TASK_FLOW else None,
    )


async def dead_runs() -> list[store.DeadRun]:
    """The runs that died and may leave teamflow waiting (see the module docstring)."""
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterId,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    dead_state = FlowRunFilterState(
        type=FlowRunFilterStateType(any_=[StateType(t) for t in sorted(store.DEAD_STATES)])
    )
    watched = await anyio.to_thread.run_sync(store.watched_runs)
    found: list[store.DeadRun] = []
    async with get_client() as client:
        tasks = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[TASK_FLOW])),
            flow_run_filter=FlowRunFilter(state=dead_state),
            sort=FlowRunSort.EXPECTED_START_TIME_DESC,
            limit=PAGE,
        )
        found += [_dead_run(run, TASK_FLOW) for run in tasks]
        for start in range(0, len(watched), PAGE):
            runs = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=watched[start : start + PAGE]), state=dead_state
                ),
                limit=PAGE,
            )
            if not runs:
                continue
            flows = await client.read_flows(
                flow_filter=FlowFilter(id=FlowFilterId(any_=list({r.flow_id for r in runs})))
            )
            names = {f.id: f.name for f in flows}
            found += [_dead_run(run, names.get(run.flow_id, "flow")) for run in runs]
    return found


def _recipient(team: str) -> tuple[bool, str | None]:
    """Whether the team exists, and who gets its alarms: the lead, or (lead shut down)
    every active member."""
    from models.team import Member

    with session_scope() as s:
        row = s.get(Team, team)
        if row is None:
            return False, None
        lead = s.get(Member, (team, row.lead))
        return True, row.lead if lead is not None and lead.is_active else None


async def deliver(alarm: store.WatchdogAlarm) -> bool:
    """Delivers one alarm as an ALARM (a `system-alert` subflow run); True once delivered.

    Claimed first, so two watchdog runs at once deliver it once; released when the delivery
    failed, so the next run delivers it.
    """
    logger = get_run_logger()
    claimed = await anyio.to_thread.run_sync(
        partial(store.claim_delivery, alarm.key, alarm.raised_at)
    )
    if not claimed:
        return False
    exists, recipient = await anyio.to_thread.run_sync(_recipient, alarm.team)
    if not exists:
        logger.warning("alarm %s: team %r is gone; not delivered", alarm.key, alarm.team)
        return False
    state = await system_alert(
        team=alarm.team,
        alert_type=AlertType.ALARM,
        alert_name=alarm.alert_name,
        message=alarm.message,
        member=recipient,
        return_state=True,
    )
    if state.is_completed():
        return True
    logger.error("alarm %s not delivered (%s); the next run tries again", alarm.key, state.name)
    await anyio.to_thread.run_sync(store.release_delivery, alarm.key)
    return False


async def start_resumes() -> list[str]:
    """Starts the run of each decided resume (`models.task_lease.due_resumes`), due at its
    time; one that cannot be started now is started by the next check. Returns their ids."""
    from flows.runner import start_resume
    from models.task_lease import due_resumes, resume_started

    logger = get_run_logger()
    started = []
    for due in await anyio.to_thread.run_sync(due_resumes):
        try:
            run = await anyio.to_thread.run_sync(start_resume, due)
        except Exception as exc:
            logger.warning("resume of task %s not started yet: %s", due.task_id, exc)
            continue
        await anyio.to_thread.run_sync(partial(resume_started, due.task_id, due.lease))
        logger.info("task %s resumed: %s", due.task_id, run.name)
        started.append(str(run.id))
    return started


async def end_orphans() -> list[str]:
    """Marks Crashed the in-process subflow runs (a plan's wait, an alarm's delivery) whose
    parent run is dead and whose worker no longer beats: they died in the same process, but
    Prefect's crash automation only catches the parent, and left them Pending, Running or
    Paused (a dead plan's form would stay open in the UI). Returns their ids."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        FlowRunFilterId,
        FlowRunFilterParentTaskRunId,
        FlowRunFilterState,
        FlowRunFilterStateType,
        TaskRunFilter,
        TaskRunFilterId,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    from models.worker_beat import live_runs

    waiting = [StateType.PENDING, StateType.RUNNING, StateType.PAUSED]
    ended: list[str] = []
    async with get_client() as client:
        children = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_task_run_id=FlowRunFilterParentTaskRunId(is_null_=False),
                deployment_id=FlowRunFilterDeploymentId(is_null_=True),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=waiting)),
            ),
            limit=PAGE,
        )
        if not children:
            return ended
        task_runs = await client.read_task_runs(
            task_run_filter=TaskRunFilter(
                id=TaskRunFilterId(any_=[c.parent_task_run_id for c in children])
            ),
            limit=PAGE,
        )
        parent_of = {t.id: t.flow_run_id for t in task_runs}
        dead_state = FlowRunFilterStateType(any_=[StateType(t) for t in sorted(store.DEAD_STATES)])
        dead = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=list(set(parent_of.values()))),
                state=FlowRunFilterState(type=dead_state),
            ),
            limit=PAGE,
        )
        dead_ids = {r.id for r in dead}
        live = await anyio.to_thread.run_sync(live_runs)
        for child in children:
            parent = parent_of.get(child.parent_task_run_id)  # type: ignore[arg-type]
            if parent not in dead_ids or str(parent) in live or str(child.id) in live:
                continue
            state: Any = Crashed(message=f"its parent run {parent} died with its process")
            await client.set_flow_run_state(child.id, state, force=True)
            ended.append(str(child.id))
    return ended


async def hand_back_stranded(older_than: float | None = None) -> list[str]:
    """Hands back to the pool (Scheduled, due now) the runs of the `teamflow` pool that a
    worker took (Pending) and died before starting: they never beat, so the crash automation
    never sees them, and their tasks would wait for good. Only runs Pending for longer than
    `TEAMFLOW_WORKER_ALIVE_SECONDS` that no live worker lists (a live worker lists a run
    from the moment it takes it). `older_than`: that window in seconds, if not the
    setting's. Returns their ids."""
    from datetime import UTC, datetime

    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        WorkPoolFilter,
        WorkPoolFilterName,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Scheduled

    from flows.up_processes import POOL
    from models.worker_beat import live_runs

    live = await anyio.to_thread.run_sync(live_runs)  # first: a run taken since is listed
    window = get_settings().worker_alive_seconds if older_than is None else older_than
    cutoff = datetime.now(UTC) - timedelta(seconds=window)
    handed: list[str] = []
    async with get_client() as client:
        pending = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PENDING]))
            ),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[POOL])),
            limit=PAGE,
        )
        for run in pending:
            if run.state is None or run.state.timestamp > cutoff or str(run.id) in live:
                continue
            state: Any = Scheduled(message="handed back: the worker that took it died")
            await client.set_flow_run_state(run.id, state, force=True)
            handed.append(str(run.id))
    return handed


async def start_unblocked(older_than: float | None = None) -> list[str]:
    """Starts the run of each task whose start a blocker's close claimed more than
    `TEAMFLOW_WORKER_ALIVE_SECONDS` ago (or `older_than` seconds) and that no run has taken:
    the closing process died between its commit and the start, or the server refused it.
    The start's idempotency key makes it one run per attempt, whoever starts it; a run that
    exists but waits in the queue is found, not started again. Returns the new runs' ids."""
    from datetime import UTC, datetime

    from flows.dependencies import run_logger, start_failed, start_run
    from models.dependencies import unstarted

    def candidates(cutoff: datetime) -> list[tuple[Any, str]]:
        with session_scope() as s:
            return unstarted(cutoff, session=s)

    logger = run_logger()
    window = get_settings().worker_alive_seconds if older_than is None else older_than
    began = datetime.now(UTC)
    started: list[str] = []
    for task_id, team in await anyio.to_thread.run_sync(
        candidates, began - timedelta(seconds=window)
    ):
        try:
            run = await anyio.to_thread.run_sync(start_run, task_id, team)
        except Exception as exc:
            reason = await anyio.to_thread.run_sync(start_failed, task_id, exc)
            logger.warning("task %s: %s", task_id, reason)
            continue
        if run.created is not None and run.created < began - timedelta(seconds=window / 2):
            continue  # its run was started at the close, and waits for a worker
        logger.info("task %s: its blockers completed and no run had started it: started %s",
                    task_id, run.name)  # fmt: skip
        started.append(str(run.id))
    return started


def _unclaimed(run: store.DeadRun) -> tuple[str, str, list[str], str] | None:
    """The task `run` died before claiming (pending, and `run` is its own run of its
    current attempt, or a restart of that run): (team, title, assignees, the attempt's run
    key); else None."""
    import uuid

    from models.task import TaskRow, TaskState

    try:
        task_id = uuid.UUID(str(run.task_id))
    except ValueError:
        return None
    with session_scope() as s:
        row = s.get(TaskRow, task_id)
        if row is None or row.status != TaskState.PENDING.value:
            return None
        key = store.task_run_key(row.id, row.attempt)
        if run.idempotency_key != key and not str(run.idempotency_key).startswith(key + "-after-"):
            return None
        return row.team or "", row.title, [a.assignee_id for a in row.assignees], key


async def restart_unclaimed(dead: list[store.DeadRun]) -> list[str]:
    """Starts the task again of each `team-task` run that crashed before it claimed its task
    (its worker or its API replica died between the run's start and its claim): the task is
    still pending and no run would take it. Only Crashed runs (a run someone cancelled
    stays so) that were the task's own run of its current attempt, or a restart of it. The
    new run's idempotency key names the dead one: one restart per dead run, whoever starts
    it, however often. Returns the ids of the runs started now."""
    from datetime import UTC, datetime

    from flows import runner
    from flows.dependencies import DEPLOYMENT

    began = datetime.now(UTC)
    started: list[str] = []
    for run in dead:
        if run.flow != TASK_FLOW or run.state != "Crashed" or run.lease is not None:
            continue
        found = await anyio.to_thread.run_sync(_unclaimed, run)
        if found is None:
            continue
        team, title, assignees, key = found
        new = await anyio.to_thread.run_sync(
            partial(
                runner.start, DEPLOYMENT, {"task_id": run.task_id, "team": team},
                idempotency_key=f"{key}-after-{run.id}", tags=[f"team:{team}"],
                flow_run_name=runner.task_run_name(team, title, assignees),
                require_worker=False,
            )
        )  # fmt: skip
        if new.created is None or new.created >= began:
            get_run_logger().warning(
                "task %s: its run %s crashed before it claimed the task: started %s",
                run.task_id, run.id, new.name,
            )  # fmt: skip
            started.append(str(new.id))
    return started


@flow(
    name=FLOW_NAME,
    description="Checks every team: members offline, tasks late, runs dead; alarms the lead.",
    retries=0,
    persist_result=False,
)
async def watchdog(checks: int = 1, every: float | None = None) -> dict[str, Any]:
    """Checks every team `checks` times, `every` seconds apart (default `every_s()`), and
    alarms each team's lead of each new problem; each check is one line of the run's log.

    Returns:
        `alarms`: the keys of the alarms delivered by this run (`offline:{team}:{member}`,
        `deadline:{task-id}`, `crashed:{run-id}`); `dead_runs`: the dead runs it saw.
    """
    logger = get_run_logger()
    pause = every or every_s()
    delivered: list[str] = []
    seen: list[str] = []
    for n in range(1, checks + 1):
        if n > 1:
            await anyio.sleep(pause)
        dead = await dead_runs()
        panes = await anyio.to_thread.run_sync(dead_panes)
        due = await anyio.to_thread.run_sync(partial(store.scan, dead_runs=dead, dead_panes=panes))
        if panes:
            # Their tasks were freed: the suspended runs that waited on them end now.
            await resume_reported_runs()
        await start_resumes()
        for orphan in await end_orphans():
            logger.info("subflow run %s marked Crashed: its parent run died", orphan)
        await start_unblocked()
        await restart_unclaimed(dead)
        for stranded in await hand_back_stranded():
            logger.info("run %s handed back to the pool: the worker that took it died", stranded)
        new = []
        for alarm in due:
            if await deliver(alarm):
                new.append(alarm.key)
                logger.warning("ALARM %s: %s", alarm.key, alarm.message)
        logger.info("check %d of %d: %s", n, checks, f"{len(new)} alarm(s)" if new else "all well")
        delivered += new
        seen += [run.id for run in dead if run.id not in seen]
    return {"alarms": delivered, "dead_runs": seen}
