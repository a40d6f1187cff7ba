"""A worker killed with -9 under `teamflow up` (moved from test_outages.py, to run beside
it): restarted, its task closed as failed and run again."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from factories import research_team
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
    agent_pids,
    flow_run_state,
    slow_member,
    start_task,
    up_env,
)

from models import db
from models.task import get_task

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


def test_a_killed_worker_is_restarted_and_its_task_closed_as_failed_and_run_again(
    up_env: dict[str, str],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """kill -9 of the worker under `teamflow up` while a member works on a task: `up` stays,
    the server stays, the agent program dies with the worker, `up` starts a new worker and
    says so, the run is marked Crashed at once, the watchdog closes the task as failed with the
    reason, and `teamflow task run ID` runs it again to completion."""
    env = {**up_env, "TEAMFLOW_CRASH_AFTER_SECONDS": "45", "TEAMFLOW_WATCHDOG_EVERY": "5s",
           "TEAMFLOW_RESUME_ATTEMPTS": "0"}  # fmt: skip  # resumes: tests/test_durable_system.py
    api = env["PREFECT_API_URL"]
    log = tmp_path / "up.log"
    process = start(["up"], env, log)
    pids: list[int] = []
    marks = tmp_path / "marks"
    try:
        output = wait_for_up(process, log)
        pids = started_pids(output)
        server_pid, worker_pid = (started_by_name(output)[n] for n in ("server", "worker"))
        db.upgrade()
        research_team()
        marks = slow_member(tmp_path)
        task_id, run_id = start_task(env)
        [agent] = wait_until(lambda: agent_pids(marks), 120, "the agent program to start")
        assert get_task(task_id).status == "in_progress"

        os.kill(worker_pid, signal.SIGKILL)

        wait_until(lambda: not pid_alive(agent), 30, "the agent program to die with its worker")
        restarted = wait_until(
            lambda: "restarted, pid" in (t := log.read_text()) and t, 180, "a new worker"
        )
        assert f"the worker (pid {worker_pid}) died (exit -9)" in restarted
        pids += started_pids(restarted.replace("restarted, pid", "started, pid"))
        assert process.poll() is None and pid_alive(server_pid)

        crashed = wait_until(
            lambda: (s := flow_run_state(api, run_id)).is_crashed() and s,
            240,
            "the run to be marked Crashed",
            interval=1,
        )
        # Marked by `up`, which saw its worker die, not by the automation 45 s later.
        assert f"(pid {worker_pid}) died (exit -9)" in crashed.message
        closed = wait_until(
            lambda: (t := get_task(task_id)).status == "archived" and t,
            120,
            "the watchdog to close the task",
            interval=1,
        )
        assert f"(pid {worker_pid}) died (exit -9)" in closed.reason and run_id in closed.reason

        (marks / "fast").write_text("")
        again = teamflow(["task", "run", task_id, "--json"], env)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["flow_run_id"] != run_id
        wait_until(lambda: get_task(task_id).status == "completed", 120, "the task to complete")
        assert process.poll() is None
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=120) == 0
        assert not any(pid_alive(pid) for pid in pids)
    finally:
        stop(process)
        kill_pids(pids)
        for pid in agent_pids(marks):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


# --- items 6 and 7: the Prefect server away ------------------------------------------------
