"""Team tasks per second on Prefect's distributed setup, with one API replica and one worker
beside two and two, and the CPU each team task costs Prefect's server processes.

    .venv/bin/python benchmarks/scale_out.py [--tasks 30] [--postgres URL] [--json]

Each setup is `tests/scale_out.cluster`: Prefect on PostgreSQL (a fresh database) with Redis
messaging, migrated once, N replicas started with `--no-services` behind HAProxy, one
services process, teamflow's database on PostgreSQL (a fresh schema). `--tasks` team tasks
(one scripted member, one tool call each) are queued in the paused pool, N `teamflow
worker`s start, the pool is resumed (`teamflow_workers.run_batch`). Printed per setup:
tasks/s from the first run's start to the last one's end, and CPU seconds per task by
Prefect's server processes (replicas and services), the workers, and the rest of the
machine (PostgreSQL, Redis, HAProxy). From the measured server CPU per task, the rate a
machine with more cores would reach is a division, printed beside it. Everything it
creates is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from team_task import TEAM, _machine_cpu, _processes, _team, _tree  # noqa: E402


@contextlib.contextmanager
def _cpu(server_pids: list[int], into: dict[str, float]) -> Any:
    before, machine = _processes(), _machine_cpu()
    yield
    after, machine = _processes(), _machine_cpu() - machine

    def spent(pids: set[int]) -> float:
        return sum(after[p][1] - before.get(p, (0, 0.0))[1] for p in pids if p in after)

    server: set[int] = set()
    for pid in server_pids:
        server |= _tree(after, pid)
    me = os.getpid()
    workers = _tree(after, me) - server - {me}
    into.update(server=spent(server), workers=spent(workers), benchmark=spent({me}))
    into["other"] = max(0.0, machine - sum(into.values()))
    into["machine"] = machine


def setup_figures(n: int, tasks: int, tmp: Path, postgres_url: str) -> dict[str, Any]:
    """N replicas and N workers: tasks/s and CPU per task."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from scale_out import cluster
    from teamflow_workers import register_deployments, run_batch

    from flows import runner
    from models import db
    from models.task import create_task

    with cluster(tmp, postgres_url, replicas=n) as c:
        home = tmp / "teamflow-home"
        shared = {"TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": c.teamflow_url}
        os.environ.update(shared)
        db.dispose_engines()
        data = tmp / "data.csv"
        _team(data)
        register_deployments(c.server, tmp / "deploy.log")
        with (
            temporary_settings(updates={PREFECT_API_URL: c.server.api}),
            get_client(sync_client=True) as client,
        ):

            def queue() -> list[Any]:
                ids = []
                for i in range(tasks):
                    task = create_task(TEAM, title=f"scale {i}", assignees=["worker"],
                                       params={"path": str(data)})  # fmt: skip
                    ids.append(runner.start_task(str(task.id), require_worker=False).id)
                return ids

            cpu: dict[str, float] = {}
            pids = [p.pid for p in (*c.replicas, c.services)]
            runs, _ = run_batch(c.server, tmp, client, queue, count=n, env=shared,
                                during=lambda: _cpu(pids, cpu))  # fmt: skip
        db.dispose_engines()
    failed = [r.name for r in runs if not r.state.is_completed()]
    if failed:
        sys.exit(f"runs did not complete: {failed}")
    first = min(r.start_time.timestamp() for r in runs)
    last = max(r.end_time.timestamp() for r in runs)
    per_task = {k: round(v / tasks, 3) for k, v in cpu.items()}
    return {
        "replicas": n,
        "workers": n,
        "tasks": tasks,
        "tasks_per_s": round(tasks / (last - first), 2),
        "cpu_per_task_s": per_task,
        "server_bound_tasks_per_s_per_core": round(1 / per_task["server"], 1)
        if per_task["server"]
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--postgres", default=os.environ.get("TEAMFLOW_TEST_POSTGRES_URL", ""),
                        metavar="URL", help="default TEAMFLOW_TEST_POSTGRES_URL")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.postgres:
        parser.error("needs PostgreSQL: --postgres URL (or TEAMFLOW_TEST_POSTGRES_URL)")
    from teamflow_workers import benchmark_environment

    benchmark_environment()
    tmp = Path(tempfile.mkdtemp(prefix="teamflow-scale-"))
    figures = []
    try:
        for n in (1, 2):
            (tmp / str(n)).mkdir()
            print(f"setup: {n} replica(s), {n} worker(s), {args.tasks} tasks ...", file=sys.stderr)
            figures.append(setup_figures(n, args.tasks, tmp / str(n), args.postgres))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"setups": figures, "cores": os.cpu_count(), "load": load}, indent=2))
        return
    print(f"team tasks on Prefect's distributed setup ({os.cpu_count()} cores, load {load:.1f})")
    print(f"{'replicas+workers':<18}{'tasks/s':>9}{'server CPU/task':>17}{'workers':>9}"
          f"{'other':>8}{'machine':>9}")  # fmt: skip
    for f in figures:
        c = f["cpu_per_task_s"]
        print(f"{f['replicas']} + {f['workers']:<14}{f['tasks_per_s']:>9}{c['server']:>15} s"
              f"{c['workers']:>7} s{c['other']:>6} s{c['machine']:>7} s")  # fmt: skip
    for f in figures:
        rate = f["server_bound_tasks_per_s_per_core"]
        print(
            f"{f['replicas']} replica(s): Prefect's server processes allow about {rate} "
            "tasks/s per core they get"
        )


if __name__ == "__main__":
    main()
