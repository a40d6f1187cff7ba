"""The `watchdog` flow: every team checked on a schedule, each problem alarmed to its lead once.

`teamflow up` schedules the `watchdog/watchdog` deployment every 30 s
(`TEAMFLOW_WATCHDOG_EVERY`, e.g. `10s`, `1m`). One run:

1. asks Prefect which runs died: `team-task` runs that ended Crashed, Failed or Cancelled
   (the "crash runs without heartbeats" automation marks a dead worker's runs Crashed), and
   the runs of open shutdowns and pending plan requests (`models.watchdog.watched_runs`);
2. lets `models.watchdog.scan` decide: members whose heartbeat is older than the team's
   `offline_after_seconds` go offline (the lead gets a `status_update`), tasks of dead runs
   are closed as failed, shutdowns of dead runs forced, overdue tasks noted; each condition
   is recorded once in `watchdog_alarms`;
3. delivers each new alarm to the team's lead as an ALARM through the `system-alert` flow
   (a subflow run per alarm); an alarm whose delivery failed is delivered by the next run.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import anyio
from prefect import flow, get_client, get_run_logger

from flows.system_alert import system_alert
from models import watchdog as store
from models.db import session_scope
from models.notification import AlertType
from models.settings import get_settings
from models.team import Team

FLOW_NAME = "watchdog"
DEPLOYMENT = "watchdog/watchdog"
"""The deployment `teamflow up` schedules (`prefect.yaml`)."""
TASK_FLOW = "team-task"
PAGE = 200


def every_s() -> float:
    """How often the watchdog runs: `TEAMFLOW_WATCHDOG_EVERY` (90s, 5m, 1h), else 30 s.

    Raises:
        SettingsError: The variable is not a duration of at most a day (a `ValueError`).
    """
    return get_settings().watchdog_every


def schedule_watchdog(every: float | None = None) -> float:
    """Makes the `watchdog` deployment's one schedule an interval of `every` seconds (default
    `every_s()`), replacing the schedules it had; returns the interval."""
    from prefect.client.orchestration import get_client as sync_client
    from prefect.client.schemas.schedules import IntervalSchedule

    every = every or every_s()
    with sync_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(DEPLOYMENT)
        schedules = client.read_deployment_schedules(deployment.id)
        wanted = timedelta(seconds=every)
        keep = [
            s
            for s in schedules
            if isinstance(s.schedule, IntervalSchedule) and s.schedule.interval == wanted
        ][:1]
        for schedule in schedules:
            if schedule not in keep:
                client.delete_deployment_schedule(deployment.id, schedule.id)
        if not keep:
            interval: Any = IntervalSchedule(interval=wanted)  # one of the schedule types it takes
            client.create_deployment_schedules(deployment.id, [(interval, True)])
        elif not keep[0].active:
            client.update_deployment_schedule(deployment.id, keep[0].id, active=True)
    return every


def _dead_run(run: Any, flow_name: str) -> store.DeadRun:
    state = run.state
    return store.DeadRun(
        id=str(run.id),
        flow=flow_name,
        state=state.name if state is not None else "unknown",
        message=(state.message or None) if state is not None else None,
        task_id=str(run.parameters.get("task_id")) if flow_name == TASK_FLOW else None,
        idempotency_key=run.idempotency_key,
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


@flow(
    name=FLOW_NAME,
    description="Checks every team: members offline, tasks late, runs dead; alarms the lead.",
    retries=0,
    persist_result=False,
)
async def watchdog() -> dict[str, Any]:
    """Checks every team once and alarms each team's lead of each new problem.

    Returns:
        `alarms`: the keys of the alarms delivered by this run (`offline:{team}:{member}`,
        `deadline:{task-id}`, `crashed:{run-id}`); `dead_runs`: the dead runs it saw.
    """
    logger = get_run_logger()
    dead = await dead_runs()
    due = await anyio.to_thread.run_sync(partial(store.scan, dead_runs=dead))
    delivered = []
    for alarm in due:
        if await deliver(alarm):
            delivered.append(alarm.key)
            logger.warning("ALARM %s: %s", alarm.key, alarm.message)
    return {"alarms": delivered, "dead_runs": [run.id for run in dead]}
