"""A `teamflow worker` whose Prefect API fails it past the client's retries while it takes a
run, as an API replica that dies mid-request, or a server too loaded to answer, does: the
worker stays up, lets the run go back to the pool, and takes and runs it once the API
answers again. A fault proxy (a real socket) in front of a real Prefect server fails the
worker's reads of the run's deployment; the test talks to the server directly."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from factories import TEAM, research_team
from fault_proxy import fault_proxy
from prefect.client.orchestration import get_client
from prefect_server import Server, talk_to, wait_until
from teamflow_workers import ended_runs, teamflow_workers

from flows.alerts import DEPLOYMENT
from models import inbox

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

REFUSED_READS = 4
"""The worker's reads of the run's deployment answered 503 one after another: two
submissions' worth, with the client trying each read twice (`PREFECT_CLIENT_MAX_RETRIES` 1)."""


def test_a_worker_that_cannot_read_a_runs_deployment_stays_up_and_runs_it_later(
    deployed_prefect: Server, tmp_path: Path, db_url: str, home: Path
) -> None:
    research_team()
    server = deployed_prefect
    with fault_proxy(urlsplit(server.api).netloc) as proxy:
        env = {
            "TEAMFLOW_DATABASE_URL": db_url,
            "TEAMFLOW_HOME": str(home),
            "PREFECT_API_URL": f"{proxy.url}/api",
            "PREFECT_CLIENT_MAX_RETRIES": "1",
        }
        with (
            teamflow_workers(server, tmp_path, 1, env=env) as [worker],
            talk_to(server.api),
            get_client(sync_client=True) as client,
        ):
            deployment = client.read_deployment_by_name(DEPLOYMENT)
            proxy.burst = (f"GET /api/deployments/{deployment.id}", b"")
            proxy.burst_left = REFUSED_READS
            run = client.create_flow_run_from_deployment(
                deployment.id,
                parameters={"team": TEAM, "alert_type": "ALARM", "alert_name": "faults",
                            "message": "through the faults", "member": "analyst-1"},
            )  # fmt: skip

            def ended() -> list | None:
                assert worker.process.poll() is None, (
                    f"the worker exited {worker.process.returncode}:\n"
                    + worker.log.read_text()[-3000:]
                )
                return ended_runs(client, [run.id])

            [done] = wait_until(ended, 120, "the run", 0.5)
            assert proxy.burst_left == 0  # every refused read happened
            assert worker.process.poll() is None
    assert done.state.is_completed(), done.state
    alerts = [m for m in inbox.messages(TEAM, "analyst-1") if m.type == "system_alert"]
    assert [m.payload["alert_name"] for m in alerts] == ["faults"]
