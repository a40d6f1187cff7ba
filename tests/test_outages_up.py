"""Outages of `teamflow up`'s own processes (moved from test_outages.py, to run beside
it): a server killed with -9 is restarted and the decisions made meanwhile reach their runs;
`up` killed with -9 takes what it started along."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from factories import TEAM, research_team
from prefect_server import (
    kill_pids,
    pid_alive,
    start,
    started_by_name,
    started_pids,
    stop,
    teamflow,
    wait_for_up,
    wait_until,
)
from test_outages import (  # noqa: F401 (up_env: a fixture)
    flow_run_state,
    up_env,
)

from models import db

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


def test_a_killed_server_is_restarted_by_up_and_decisions_reach_their_runs(
    up_env: dict[str, str],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """kill -9 of the Prefect server `teamflow up` started, while a plan-approval run waits
    in the worker: `up` says so and starts the server again; the worker stays (same pid); a
    plan approved while the server was away and one approved just after it came back both
    reach their runs, which complete."""
    env = {**up_env, "TEAMFLOW_SUSPEND_AFTER_SECONDS": "3600"}  # the runs wait in process
    log = tmp_path / "up.log"
    process = start(["up"], env, log)
    pids: list[int] = []
    try:
        output = wait_for_up(process, log)
        pids = started_pids(output)
        server_pid, worker_pid = (started_by_name(output)[n] for n in ("server", "worker"))
        api = env["PREFECT_API_URL"]
        db.upgrade()
        research_team()

        def ask(summary: str) -> dict[str, str]:
            asked = teamflow(
                ["plan", "request", TEAM, "--from", "analyst-1", "--plan", f"## {summary}",
                 "--summary", summary, "--json"],
                env,
            )  # fmt: skip
            assert asked.returncode == 0, asked.stderr
            found = json.loads(asked.stdout)
            wait_until(lambda: flow_run_state(api, found["flowRunId"]).is_paused(), 120, summary)
            return found

        during, after = ask("during the outage"), ask("just after")
        os.kill(server_pid, signal.SIGKILL)
        decided = teamflow(["plan", "approve", during["requestId"]], env)
        assert decided.returncode == 0, decided.stderr
        text = wait_until(
            lambda: "server:  restarted" in (t := log.read_text()) and t, 180, "the restart"
        )
        assert f"the server (pid {server_pid}) died (exit -9)" in text, text
        assert teamflow(["plan", "approve", after["requestId"]], env).returncode == 0
        for found in (during, after):
            state = wait_until(
                lambda f=found: (s := flow_run_state(api, f["flowRunId"])).is_final() and s,
                180,
                f"the run of {found['requestId']} to take its decision",
                interval=0.5,
            )
            assert state.is_completed(), state
        assert process.poll() is None, log.read_text()
        assert pid_alive(worker_pid), "the worker was kept"
        assert "worker:  restarted" not in log.read_text()
        pids += started_pids(log.read_text().replace("restarted, pid", "started, pid"))
    finally:
        stop(process)
        kill_pids(pids)


def test_up_killed_with_sigkill_takes_what_it_started_along(
    up_env: dict[str, str],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """kill -9 of `teamflow up`: its server, worker, MCP server and REST API stop too (the kernel's
    parent-death signal), so no orphan is left for the next `up` to take for its own."""
    log = tmp_path / "up.log"
    process = start(["up"], up_env, log)
    pids: list[int] = []
    try:
        pids = started_pids(wait_for_up(process, log))
        assert len(pids) == 4 and all(pid_alive(pid) for pid in pids)  # server worker mcp api
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        wait_until(lambda: not any(pid_alive(pid) for pid in pids), 90, "up's children to stop")
    finally:
        stop(process)
        kill_pids(pids)
