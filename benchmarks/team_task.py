"""How much a team task costs beyond its agent's own work.

    .venv/bin/python benchmarks/team_task.py [--tasks 20] [--json]

Runs `--tasks` team tasks whose one member's scripted agent finishes in its first step
(no tools: the agent's own work is nil), so each task's wall time is teamflow's
orchestration: claiming the task, the assignment notification, the flow and task runs, the
step, the status files, metrics, the report artifacts and the lead's notification. Prints
p50/p95 next to the target (p50 at most 0.25 s), and the same figures with one tool call
per task. A temporary Prefect server (the test harness) and a temporary SQLite database
are used and removed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET_P50_S = 0.25


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="teamflow-bench-"))
    os.environ["TEAMFLOW_HOME"] = str(home)
    os.environ["TEAMFLOW_DATABASE_URL"] = f"sqlite:///{home / 'teamflow.db'}"
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")

    from prefect.testing.utilities import prefect_test_harness

    from flows.team_task import team_task
    from flows.tools import install_builtin_tools
    from models import db
    from models import team as teams
    from models.task import create_task

    db.upgrade()
    install_builtin_tools()
    teams.create_team("bench-team", description="benchmark", lead="lead")
    finish = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "ok"}
    one_tool = {
        "status": "EXECUTING",
        "thoughts": [],
        "actions": [{"action": "read_csv_summary", "type": "tool", "params": {"path": "{path}"}}],
        "stop": False,
        "response": None,
    }
    teams.add_member("bench-team", "idle", model="haiku", prompt="p",
                     runtime={"kind": "scripted", "playbook": [finish]})  # fmt: skip
    teams.add_member("bench-team", "worker", model="haiku", prompt="p",
                     runtime={"kind": "scripted", "playbook": [one_tool, finish]})  # fmt: skip
    data = home / "data.csv"
    data.write_text("a,b\n1,2\n")

    async def measure() -> dict[str, dict[str, float]]:
        # One event loop, as in a long-lived worker: Prefect's API clients are reused.
        warm = create_task("bench-team", title="warm-up", assignees=["idle"])
        await team_task(str(warm.id))  # the first run pays for imports and first calls
        figures: dict[str, dict[str, float]] = {}
        for label, member in (("orchestration only", "idle"), ("with one tool call", "worker")):
            times = []
            for i in range(args.tasks):
                task = create_task("bench-team", title=f"{label} {i}", assignees=[member],
                                   params={"path": str(data)})  # fmt: skip
                started = time.perf_counter()
                result = await team_task(str(task.id))
                times.append(time.perf_counter() - started)
                if result["status"] != "completed":
                    sys.exit(f"task {task.id} ended {result['status']}: {result['members']}")
            figures[label] = {
                "p50_s": round(statistics.median(times), 3),
                "p95_s": round(_percentile(times, 0.95), 3),
                "tasks_per_s": round(len(times) / sum(times), 2),
            }
        return figures

    with prefect_test_harness():
        figures = asyncio.run(measure())
    if args.json:
        print(json.dumps({"target_p50_s": TARGET_P50_S, "figures": figures}, indent=2))
        return
    print(f"team tasks, {args.tasks} each, one process, temporary Prefect server")
    print(f"{'':<22}{'p50 s':>8}{'p95 s':>8}{'tasks/s':>9}")
    for label, f in figures.items():
        print(f"{label:<22}{f['p50_s']:>8}{f['p95_s']:>8}{f['tasks_per_s']:>9}")
    p50 = figures["orchestration only"]["p50_s"]
    verdict = "met" if p50 <= TARGET_P50_S else "NOT met"
    print(f"target: orchestration p50 at most {TARGET_P50_S} s: {verdict} ({p50} s)")


if __name__ == "__main__":
    main()
