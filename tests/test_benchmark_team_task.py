"""`benchmarks/team_task.py`, as docs/performance.md shows it (shortened): a team task's wall
time and CPU seconds beside Prefect's floor (an empty flow run), in one run, and what each
run costs the server, counted; then team tasks through two `teamflow worker`s, beside as
many empty runs through them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


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
