"""Scheduling the `watchdog` flow (`flows.watchdog`), without importing it: `teamflow up`
schedules it at every start and starts a run after a worker died, and the flow's module
(Prefect's flow machinery, the system alerts, the spawn backends) would cost it about 0.9 s
of CPU to import.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from models.settings import get_settings

DEPLOYMENT = "watchdog/watchdog"
"""The deployment `teamflow up` schedules (`prefect.yaml`)."""
WINDOW_S = 900.0
"""How long one scheduled watchdog run keeps checking, at most."""
MAX_CHECKS = 10
"""How many checks one run makes, at most (5 minutes of them at the default 30 s)."""


def every_s() -> float:
    """How often the watchdog runs: `TEAMFLOW_WATCHDOG_EVERY` (90s, 5m, 1h), else 30 s.

    Raises:
        SettingsError: The variable is not a duration of at most a day (a `ValueError`).
    """
    return get_settings().watchdog_every


def window(every: float) -> tuple[int, float]:
    """How many checks `every` seconds apart one scheduled run makes, and the interval of
    the schedule (about `WINDOW_S`, a whole number of checks)."""
    # At most MAX_CHECKS a run: after a worker's death the next run takes over soon enough.
    checks = max(1, min(round(WINDOW_S / every), MAX_CHECKS))
    return checks, checks * every


def schedule_watchdog(every: float | None = None) -> float:
    """Makes the `watchdog` deployment check every `every` seconds (default `every_s()`):
    one schedule (its interval `window(every)`, replacing the schedules it had) whose runs
    each check `checks` times. Returns `every`."""
    from prefect.client.orchestration import get_client as sync_client
    from prefect.client.schemas.actions import DeploymentUpdate
    from prefect.client.schemas.schedules import IntervalSchedule

    every = every or every_s()
    checks, interval = window(every)
    with sync_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(DEPLOYMENT)
        client.update_deployment(
            deployment.id, DeploymentUpdate(parameters={"checks": checks, "every": every})
        )
        schedules = client.read_deployment_schedules(deployment.id)
        wanted = timedelta(seconds=interval)
        keep = [
            s
            for s in schedules
            if isinstance(s.schedule, IntervalSchedule) and s.schedule.interval == wanted
        ][:1]
        for schedule in schedules:
            if schedule not in keep:
                client.delete_deployment_schedule(deployment.id, schedule.id)
        if not keep:
            schedule_: Any = IntervalSchedule(interval=wanted)  # one of the types it takes
            client.create_deployment_schedules(deployment.id, [(schedule_, True)])
        elif not keep[0].active:
            client.update_deployment_schedule(deployment.id, keep[0].id, active=True)
    return every


def run_now_unless_running() -> str | None:
    """Starts a run of the watchdog deployment now, unless one is Pending or Running: the
    run of the current window died with its worker (`teamflow up` saw it die), and the
    checks would pause until the next window (up to 15 minutes). Returns the new run's id."""
    from prefect.client.orchestration import get_client as sync_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    from flows import runner

    going = FlowRunFilterStateType(any_=[StateType.PENDING, StateType.RUNNING])
    with sync_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(DEPLOYMENT)
        if client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=going)),
            limit=1,
        ):
            return None
    return str(runner.start(DEPLOYMENT, require_worker=False).id)
