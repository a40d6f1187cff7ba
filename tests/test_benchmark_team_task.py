"""`benchmarks/team_task.py`, as docs/performance.md shows it (shortened): a team task's wall
time and CPU seconds beside Prefect's floor (an empty flow run), in one run, and what each
run costs the server, counted; then team tasks through two `teamflow worker`s, beside as
many empty runs through them; and `--replicas 2`, on Prefect's distributed setup."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def test_the_team_task_benchmark_prints_cpu_beside_prefects_floor() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/team_task.py", "--tasks", "2", "--gap", "0.2",
         "--sustained-tasks", "4", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # every team task completed
    printed = json.loads(done.stdout)
    figures = printed["figures"]
    assert set(figures) == {"empty Prefect flow run", "orchestration only", "with one tool call"}
    for label, figure in figures.items():
        assert set(figure["cpu_s"]) == {"server", "client"}, label
        assert figure["p50_s"] > 0, label
    # A team task does work in this process beyond the engine's: its client CPU is not nil.
    assert figures["with one tool call"]["cpu_s"]["client"] > 0
    # Counted on the server: a run's three state changes (Pending, Running, Completed) and
    # no artifacts for the floor; a team task adds its report and the team's artifact, and
    # a task run only for its tool call (an agent's step is none: issue 35).
    floor, idle, tool = (figures[k]["work"] for k in figures)
    assert (floor["state changes"], floor["task runs"], floor["artifacts"]) == (3, 0, 0)
    assert (idle["state changes"], idle["task runs"], idle["artifacts"]) == (3, 0, 2)
    assert (tool["task runs"], tool["task-run events"], tool["artifacts"]) == (1, 3, 2)
    assert floor["transactions"] == 0 < idle["transactions"] < tool["transactions"]
    # Through two workers: what each team task and each empty run cost, by process.
    sustained = printed["sustained"]
    assert sustained["tasks"] == 4 and sum(sustained["runs_per_worker"]) == 4
    for key in ("cpu_per_task_s", "floor_cpu_per_run_s"):
        assert {"server", "workers", "machine"} <= set(sustained[key]), key
        assert sustained[key]["server"] > 0 and sustained[key]["workers"] > 0, key


@pytest.mark.skipif(
    not os.environ.get("TEAMFLOW_TEST_POSTGRES_URL") or not Path(HAPROXY).exists(),
    reason="the distributed setup needs TEAMFLOW_TEST_POSTGRES_URL and HAProxy",
)
def test_the_replicas_benchmark_prints_each_setup_and_a_projection() -> None:
    """`--replicas 2`: one replica, one services process and one worker, then two replicas,
    the services split over three processes and two workers, on PostgreSQL and Redis; each
    setup's team tasks and empty runs by process, and the 16-core projection."""
    done = subprocess.run(
        [sys.executable, "benchmarks/team_task.py", "--replicas", "2", "--tasks", "3", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # every run of both setups completed
    printed = json.loads(done.stdout)
    setups = printed["setups"]
    assert [(s["replicas"], s["workers"], s["services_processes"], s["tasks"]) for s in setups] == [
        (1, 1, 1, 3),
        (2, 2, 3, 3),
    ]
    for setup in printed["setups"]:
        for key in ("cpu_per_task_s", "floor_cpu_per_run_s"):
            cpu = setup[key]
            assert cpu["server"] > 0 and cpu["workers"] > 0, key
            # The busiest replica or services process is one of several: never more than all.
            assert 0 < cpu["busiest_replica"] <= cpu["server"], key
            assert 0 < cpu["busiest_services"] <= cpu["services"] <= cpu["server"], key
        assert setup["tasks_per_s"] > 0 and setup["floor_runs_per_s"] > 0
    projection = printed["projection"]
    assert projection["cores"] == 16 and projection["tasks_per_s"] > 0
    assert set(projection["bounds"]) == {"16 cores busy", "the busiest services process"}
    assert projection["tasks_per_s"] == min(projection["bounds"].values())
