"""Prefect's own server services, for real: a deployment schedule makes runs a worker runs.

Nothing else in the suite lets Prefect's scheduler create a run: every other run is
started through the API. With a SQLAlchemy the server's services cannot use (2.1 under
Prefect 3.8.8), the scheduler logs `InvalidRequestError: Can't evaluate bulk DML statement`
every loop and a scheduled deployment never runs. Here a `system-alert` schedule every few
seconds, on a `prefect server start` with its services on and a real `teamflow worker`,
must produce a run the worker completes, and the server's log must hold no error.

The automations service sees those runs as well: teamflow's crash automation (installed by
`teamflow up`) hears each run's state changes as they happen, and leaves runs that finished
alone. Prefect's scheduler emits no event for a scheduled run's first state, and Prefect
3.8.8 held every later state event of the run for 15 minutes waiting for it, so the
automation saw only the run's heartbeat and tried to crash every finished scheduled run
(`flows.compat.prefect_server.scheduled_states_not_awaited`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.schedules import IntervalSchedule
from prefect_server import assert_clean_log, prefect_server, talk_to, wait_until
from teamflow_workers import postgres_databases, register_deployments, teamflow_workers

from flows.alerts import DEPLOYMENT
from flows.pool_setup import ensure_crash_automation
from flows.up_processes import HEARTBEAT_SECONDS
from models import db, inbox

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

POSTGRES_URL = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")

# The services that matter loop every second or two instead of every minute.
SERVICES = {
    # INFO: the log shows what each service did, for a failure to quote.
    "PREFECT_SERVER_LOGGING_LEVEL": "INFO",
    "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
    # A few runs ahead, not the default 100 (every 5 s, an hour ahead).
    "PREFECT_SERVER_SERVICES_SCHEDULER_MAX_RUNS": "3",
    "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS": "2",
    "PREFECT_SERVER_SERVICES_FOREMAN_LOOP_SECONDS": "2",
    "PREFECT_SERVER_SERVICES_CANCELLATION_CLEANUP_LOOP_SECONDS": "2",
    "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_LOOP_SECONDS": "2",
    # Proactive automations (the crash automation) are evaluated every second.
    "PREFECT_SERVER_EVENTS_PROACTIVE_GRANULARITY": "PT1S",
}
CRASH_AFTER_S = 10.0
"""The crash automation's window here (the least Prefect takes): a finished run it wrongly
heard of is acted on soon."""


def scheduled_run_completes(tmp_path: Path, teamflow_url: str, prefect_url: str | None) -> None:
    db.upgrade(teamflow_url)
    research_team()
    shared = {
        "TEAMFLOW_DATABASE_URL": teamflow_url,
        "TEAMFLOW_HOME": str(tmp_path / "home"),
        # As `teamflow up` starts its worker: its runs send heartbeats.
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_SECONDS),
    }
    with prefect_server(tmp_path, prefect_url, env=SERVICES) as server:
        register_deployments(server, tmp_path / "deploy.log")
        with (
            teamflow_workers(server, tmp_path, 1, env=shared),
            talk_to(server.api),
            get_client(sync_client=True) as client,
        ):
            ensure_crash_automation(within_seconds=CRASH_AFTER_S)
            deployment = client.read_deployment_by_name(DEPLOYMENT)
            client.create_deployment_schedules(
                deployment.id,
                [(IntervalSchedule(interval=timedelta(seconds=5)), True)],
                parameters={
                    "team": TEAM,
                    "member": "coordinator",
                    "alert_type": "SCHEDULED_EVENT",
                    "alert_name": "pulse",
                    "message": "every five seconds",
                },
            )

            def completed_runs() -> list:
                assert_clean_log(server.log)  # a service that fails will not schedule: fail now
                return client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
                    flow_run_filter=FlowRunFilter(
                        state=FlowRunFilterState(
                            type=FlowRunFilterStateType(any_=[StateType.COMPLETED])
                        )
                    ),
                )

            # A bound against hanging, not a speed target.
            [run, *_] = wait_until(
                completed_runs, 120, "a scheduled system-alert run to complete", 0.5
            )
            # The automations hear of the run's end now, not 15 minutes later.
            heard = f"covers event 'prefect.flow-run.Completed' ({run.state.id})"
            wait_until(lambda: heard in server.log.read_text(), 60, "the automation to hear it")
            # Three more runs end (the schedule's interval is 5 s): by then the first run's
            # last heartbeat is more than CRASH_AFTER_S old, and an automation that had
            # missed its Completed would have acted on it.
            wait_until(lambda: len(completed_runs()) >= 4, 120, "three more runs to end", 0.5)
            acted = automation_events(client)
        assert acted == [], f"the crash automation acted on finished runs: {acted}"
        assert "already in terminal state" not in server.log.read_text()
        assert run.auto_scheduled, "the run was not made by Prefect's scheduler"
        alerts = [m for m in inbox.messages(TEAM, "coordinator") if m.type == "system_alert"]
        assert alerts and alerts[0].payload["alert_name"] == "pulse"
        assert alerts[0].payload["alert_type"] == "SCHEDULED_EVENT"
        assert_clean_log(server.log)


def automation_events(client: Any) -> list[str]:
    """The automations' firings and actions the server recorded, as the UI lists them."""
    prefixes = ["prefect.automation.triggered", "prefect.automation.action."]
    query = {"filter": {"event": {"prefix": prefixes}}, "limit": 50}
    response = client.request("POST", "/events/filter", json=query)
    response.raise_for_status()
    return [f"{e['event']} {e['payload'].get('reason', '')}" for e in response.json()["events"]]


def test_prefect_scheduler_makes_a_run_a_worker_completes_on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    teamflow_url = f"sqlite:///{tmp_path / 'teamflow.db'}"
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", teamflow_url)
    monkeypatch.setenv("TEAMFLOW_HOME", str(tmp_path / "home"))
    try:
        scheduled_run_completes(tmp_path, teamflow_url, None)
    finally:
        db.dispose_engines()


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="TEAMFLOW_TEST_POSTGRES_URL is not set")
def test_prefect_scheduler_makes_a_run_a_worker_completes_on_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with postgres_databases(POSTGRES_URL) as (prefect_url, teamflow_url):
        monkeypatch.setenv("TEAMFLOW_DATABASE_URL", teamflow_url)
        monkeypatch.setenv("TEAMFLOW_HOME", str(tmp_path / "home"))
        scheduled_run_completes(tmp_path, teamflow_url, prefect_url)
