"""Deployments and starting runs on a real Prefect server: `prefect deploy --all`, the runner
helper's answers, a teamflow worker running a deployment, and crash detection.

One Prefect server (SQLite, free port, own PREFECT_HOME) serves the whole module; every
process a test starts runs in its own session and is killed in a `finally`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from factories import TEAM, research_team
from prefect_server import (
    ROOT,
    Server,
    base_env,
    free_port,
    kill_group,
    prefect_cli,
    prefect_server,
    start,
    stop,
    talk_to,
    wait_until,
)

from flows import runner, up
from flows.alerts import DEPLOYMENT
from models import db, inbox

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Prefect server with the `teamflow` pool and `prefect deploy --all` done, no worker."""
    tmp = tmp_path_factory.mktemp("prefect")
    with prefect_server(tmp) as srv:
        prefect(srv, "work-pool", "create", "teamflow", "--type", "process", "--overwrite")
        srv.deployed = prefect(srv, "deploy", "--all", check=False)
        yield srv


def prefect(
    srv: Server, *args: str, cwd: Path = ROOT, check: bool = True
) -> subprocess.CompletedProcess:
    """The `prefect` CLI against the test server, without prompts."""
    result = prefect_cli(["--no-prompt", *args], srv.env, cwd=cwd, timeout=180)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def api(srv: Server, method: str, path: str, **kwargs) -> httpx.Response:
    # Prefect's server on SQLite, on a loaded machine, can stall for its 60 s busy timeout.
    response = httpx.request(method, f"{srv.api}{path}", timeout=120, **kwargs)
    response.raise_for_status()
    return response


@pytest.fixture
def on_server(server: Server) -> Iterator[Server]:
    """The test process talks to the module's server (as the CLI would)."""
    with talk_to(server.api):
        yield server


@pytest.fixture
def teamflow_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A migrated SQLite teamflow database shared by this test and the processes it starts."""
    home = tmp_path / "teamflow-home"
    url = f"sqlite:///{home / 'teamflow.db'}"
    monkeypatch.setenv("TEAMFLOW_HOME", str(home))
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", url)
    db.upgrade(url)
    return url


def worker_env(srv: Server, db_url: str) -> dict[str, str]:
    home = str(Path(db_url.removeprefix("sqlite:///")).parent)
    return {**srv.env, "TEAMFLOW_HOME": home, "TEAMFLOW_DATABASE_URL": db_url}


def heartbeats(srv: Server, run_id) -> int:
    """How many heartbeats of the run the server has received."""
    query = {
        "filter": {
            "event": {"name": ["prefect.flow-run.heartbeat"]},
            "resource": {"id": [f"prefect.flow-run.{run_id}"]},
        }
    }
    return api(srv, "POST", "/events/filter", json=query).json()["total"]


def flow_run(srv: Server, run_id) -> dict:
    return api(srv, "GET", f"/flow_runs/{run_id}").json()


# --- prefect.yaml ----------------------------------------------------------------------------


def test_prefect_deploy_all_registers_every_teamflow_deployment(server: Server) -> None:
    assert server.deployed.returncode == 0, server.deployed.stdout + server.deployed.stderr
    deployments = api(server, "POST", "/deployments/filter", json={}).json()
    by_name = {d["name"]: d for d in deployments}
    for name in ("team-task", "tool-action", "plan-approval", "shutdown-member", "watchdog"):
        assert by_name[name]["work_pool_name"] == "teamflow"
        flow = api(server, "GET", f"/flows/{by_name[name]['flow_id']}").json()
        assert flow["name"] == name  # started as `name/name`
    alert = by_name["system-alert"]
    assert alert["entrypoint"] == "flows/system_alert.py:system_alert"
    assert alert["work_pool_name"] == "teamflow"
    assert "teamflow" in alert["tags"]
    assert alert["job_variables"]["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    flow = api(server, "GET", f"/flows/{alert['flow_id']}").json()
    assert flow["name"] == "system-alert"
    pool = api(server, "GET", "/work_pools/teamflow").json()
    assert pool["type"] == "process"


# --- settings and in-process runs (no server) --------------------------------------------------


def test_teamflows_own_flows_run_inside_the_worker_and_others_do_not() -> None:
    from flows.system_alert import system_alert
    from flows.worker import teamflow_flow, warm_up

    assert teamflow_flow("flows/system_alert.py:system_alert") is system_alert
    assert teamflow_flow("./flows/system_alert.py:system_alert") is system_alert
    assert teamflow_flow("flows/system_alert.py:run_tags") is None  # not a flow
    assert teamflow_flow("flows/nothing_here.py:flow") is None
    assert teamflow_flow("elsewhere/flows/system_alert.py:system_alert") is None
    assert teamflow_flow("slow_flow.py:slow") is None
    assert teamflow_flow(None) is None
    assert "flows/system_alert.py:system_alert" in warm_up()


def test_a_setting_chosen_in_the_prefect_profile_counts_as_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    for name in ("PREFECT_PROFILES_PATH", "PREFECT_PROFILE", "PREFECT_WORKER_QUERY_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    assert runner.user_setting("PREFECT_WORKER_QUERY_SECONDS") is None
    (tmp_path / "profiles.toml").write_text(
        'active = "mine"\n[profiles.mine]\nPREFECT_WORKER_QUERY_SECONDS = "5"\n'
    )
    assert runner.user_setting("PREFECT_WORKER_QUERY_SECONDS") == "5"
    monkeypatch.setenv("PREFECT_WORKER_QUERY_SECONDS", "7")
    assert runner.user_setting("PREFECT_WORKER_QUERY_SECONDS") == "7"


# --- the runner's answers ---------------------------------------------------------------------


def test_no_server_is_one_line_saying_how_to_start_one() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/api"
    with (
        talk_to(nowhere),
        pytest.raises(runner.NoServer) as refused,
    ):
        runner.start(DEPLOYMENT, {"team": TEAM})
    message = str(refused.value)
    assert "\n" not in message
    assert nowhere in message
    assert "teamflow up" in message


def test_an_unknown_deployment_is_one_line_naming_the_known_ones(on_server: Server) -> None:
    with pytest.raises(runner.NoDeployment) as refused:
        runner.start("system-alert/nope", {"team": TEAM})
    message = str(refused.value)
    assert "\n" not in message
    assert "'system-alert/nope'" in message
    assert "system-alert/system-alert" in message


def test_a_pool_without_worker_is_one_line_saying_how_to_start_one(on_server: Server) -> None:
    prefect(on_server, "work-pool", "create", "idle", "--type", "process", "--overwrite")
    prefect(
        on_server, "deploy", "flows/system_alert.py:system_alert", "--name", "idle",
        "--pool", "idle",
    )  # fmt: skip

    with pytest.raises(runner.NoWorker) as refused:
        runner.start("system-alert/idle", {"team": TEAM})

    message = str(refused.value)
    assert "\n" not in message
    assert "'idle'" in message
    assert "teamflow up" in message
    [idle] = [
        d for d in api(on_server, "POST", "/deployments/filter", json={}).json()
        if d["name"] == "idle"
    ]  # fmt: skip
    runs = api(
        on_server, "POST", "/flow_runs/filter", json={"deployments": {"id": {"any_": [idle["id"]]}}}
    ).json()
    assert runs == []


def test_the_cli_says_it_in_one_line_too(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/api"
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "worker"],
        env={**base_env(tmp_path, nowhere)}, capture_output=True, text=True, timeout=120,
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line == (
        f"teamflow: error: no Prefect server answers at {nowhere}; start one with `teamflow up`"
    )


# --- a worker runs the deployment -------------------------------------------------------------


def test_a_started_run_is_picked_up_at_once_and_delivers_the_alert(
    on_server: Server, teamflow_db: str, tmp_path: Path
) -> None:
    research_team()
    worker = start(["worker"], worker_env(on_server, teamflow_db), tmp_path / "worker.log")
    try:
        wait_until(
            lambda: api(on_server, "GET", "/work_pools/teamflow").json()["status"] == "READY",
            60,
            "the worker to come online",
        )
        key = f"alert-{time.time_ns()}"
        parameters = {"team": TEAM, "alert_type": "TIMER", "alert_name": "standup"}
        parameters["message"] = "Now"
        started = runner.start(
            DEPLOYMENT, parameters, idempotency_key=key, tags=[f"team:{TEAM}", "TIMER"]
        )
        again = runner.start(DEPLOYMENT, parameters, idempotency_key=key)

        assert again.id == started.id
        assert started.url == f"{on_server.api.removesuffix('/api')}/runs/flow-run/{started.id}"
        final = wait_until(
            lambda: (r := flow_run(on_server, started.id))["state_type"] == "COMPLETED" and r,
            60,
            "the run to complete",
        )
        assert {"teamflow", f"team:{TEAM}", "TIMER"} <= set(final["tags"])
        # The worker labels the run beside it (no retries), as Prefect's worker does before.
        labels = wait_until(
            lambda: (
                (got := flow_run(on_server, started.id)["labels"]).get("prefect.worker.name")
                and got
            ),
            60,
            "the worker's labels on the run",
        )
        assert labels["prefect.work-pool.name"] == "teamflow"
        [message] = [m for m in inbox.messages(TEAM, "analyst-1") if m.type == "system_alert"]
        assert message.payload == {"alert_type": "TIMER", "alert_name": "standup", "message": "Now"}
    finally:
        stop(worker)


# --- crash detection --------------------------------------------------------------------------

SLOW_FLOW = """
import time
from prefect import flow

@flow(name="slow")
def slow(seconds: float = 300):
    time.sleep(seconds)
"""


def kill_run_process(srv: Server, run_id) -> None:
    """Kills the process group of a run that a worker started as a subprocess."""
    pid = flow_run(srv, run_id).get("infrastructure_pid")
    if pid and pid.split(":")[-1].isdigit():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid.split(":")[-1]), signal.SIGKILL)


def test_a_run_whose_worker_is_killed_is_marked_crashed(
    on_server: Server, teamflow_db: str, tmp_path: Path
) -> None:
    """A system alert runs inside the teamflow worker and is held mid-delivery (another
    writer holds teamflow's SQLite database). SIGKILL of the worker ends the run with it;
    its heartbeats stop and the automation `teamflow up` installs marks it Crashed. A run
    whose worker lives keeps beating (every 30 s, Prefect's shortest interval) and stays
    Running."""
    research_team()
    source = tmp_path / "slow"
    source.mkdir()
    (source / "slow_flow.py").write_text(SLOW_FLOW)
    prefect(on_server, "deploy", "slow_flow.py:slow", "--name", "slow", "--pool", "teamflow",
            cwd=source)  # fmt: skip
    up.ensure_crash_automation(within_seconds=45)
    env = worker_env(on_server, teamflow_db)
    writer = sqlite3.connect(teamflow_db.removeprefix("sqlite:///"), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    doomed = start(["worker", "--name", "doomed"], env, tmp_path / "doomed.log")
    survivor = None
    control = None
    try:
        wait_until(
            lambda: api(on_server, "GET", "/work_pools/teamflow").json()["status"] == "READY",
            60,
            "the worker to come online",
        )
        victim = runner.start(
            DEPLOYMENT,
            {"team": TEAM, "alert_type": "ALARM", "alert_name": "stuck", "message": "x"},
        )
        wait_until(lambda: heartbeats(on_server, victim.id), 180, "the run's first heartbeat")
        assert flow_run(on_server, victim.id)["state_type"] == "RUNNING"
        kill_group(doomed)
        doomed.wait(timeout=10)

        survivor = start(["worker", "--name", "survivor"], env, tmp_path / "survivor.log")
        control = runner.start("slow/slow", {"seconds": 300})
        wait_until(
            lambda: flow_run(on_server, control.id)["state_type"] == "RUNNING", 180, "Running"
        )

        crashed = wait_until(
            lambda: (r := flow_run(on_server, victim.id))["state_type"] == "CRASHED" and r,
            120,
            "the killed run to be marked Crashed",
            interval=1,
        )
        assert "heartbeats stopped" in crashed["state"]["message"]
        assert flow_run(on_server, control.id)["state_type"] == "RUNNING"
    finally:
        writer.rollback()
        writer.close()
        kill_group(doomed)
        if survivor is not None:
            kill_group(survivor)
        if control is not None:
            kill_run_process(on_server, control.id)
