"""Team tasks per second on Prefect's distributed setup, with one API replica, one services
process and one worker beside N replicas, three services processes and N workers, and the
CPU each team task costs each kind of process.

    .venv/bin/python benchmarks/scale_out.py [--tasks 30] [--replicas 2] [--postgres URL] [--json]

Each setup is `tests/scale_out.cluster`: Prefect on PostgreSQL (a fresh database) with Redis
messaging, migrated once, the replicas started with `--no-services` behind HAProxy, the
services in one process or split over three (`scale_out.SERVICE_SPLITS`: each service in
exactly one), teamflow's database on PostgreSQL (a fresh schema). `--tasks` team tasks (one
scripted member, one tool call each) are queued in the paused pool, the workers start, the
pool is resumed (`teamflow_workers.run_batch`). Printed per setup: tasks/s from the first
run's start to the last one's end, and CPU seconds per task by Prefect's server processes
(replicas and services), the workers, and the rest of the machine (PostgreSQL, Redis,
HAProxy); and the CPU per task of the busiest replica and of the busiest services process,
since each is one process and so one core at most. Each setup then runs as many empty flow
runs (`flows.floor`) through fresh workers: Prefect's floor on the same path. From the
measured costs of the last setup, the rate a 16-core machine would reach is a division,
printed beside them. Everything it creates is removed.

`benchmarks/team_task.py --replicas N` runs the same.
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
os.environ.setdefault("TEAMFLOW_TEST_FORKSERVER", "0")  # as `team_task.py` says

from team_task import (  # noqa: E402
    TEAM,
    _floor_deployment,
    _machine_cpu,
    _processes,
    _team,
    _tree,
)

CORES = 16
"""The machine the projection is for."""


@contextlib.contextmanager
def _cpu(replica_pids: list[int], services_pids: list[int], into: dict[str, float]) -> Any:
    """CPU seconds spent while the block runs: Prefect's server processes together
    (`server`), the busiest replica alone, the services processes together and the busiest
    of them alone, the workers, this process, and the rest of the machine."""
    before, machine = _processes(), _machine_cpu()
    yield
    after, machine = _processes(), _machine_cpu() - machine

    def spent(pids: set[int]) -> float:
        return sum(after[p][1] - before.get(p, (0, 0.0))[1] for p in pids if p in after)

    replicas = [_tree(after, pid) for pid in replica_pids]
    services = [_tree(after, pid) for pid in services_pids]
    server = set().union(*replicas, *services)
    me = os.getpid()
    workers = _tree(after, me) - server - {me}
    into.update(server=spent(server), workers=spent(workers), benchmark=spent({me}))
    into["other"] = max(0.0, machine - sum(into.values()))
    into["machine"] = machine
    into["busiest_replica"] = max(spent(r) for r in replicas)
    into["services"] = sum(spent(s) for s in services)
    into["busiest_services"] = max(spent(s) for s in services)


def setup_figures(
    n: int, tasks: int, tmp: Path, postgres_url: str, services: int = 1
) -> dict[str, Any]:
    """N replicas, N workers and `services` services processes: tasks/s and CPU per task,
    for team tasks and for as many empty runs (Prefect's floor)."""
    from prefect.client.orchestration import get_client
    from prefect_server import talk_to
    from scale_out import cluster
    from teamflow_workers import register_deployments, run_batch

    from flows import runner
    from models import db
    from models.task import create_task

    with cluster(tmp, postgres_url, replicas=n, services=services) as c:
        home = tmp / "teamflow-home"
        shared = {"TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": c.teamflow_url}
        os.environ.update(shared)
        db.dispose_engines()
        data = tmp / "data.csv"
        _team(data)
        register_deployments(c.server, tmp / "deploy.log")
        with (
            talk_to(c.server.api),  # Prefect's client and `flows.runner`
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
            replicas = [p.pid for p in c.replicas]
            services_pids = [p.pid for p in c.all_services]
            runs, _ = run_batch(c.server, tmp, client, queue, count=n, env=shared,
                                during=lambda: _cpu(replicas, services_pids, cpu))  # fmt: skip
            floor_id = _floor_deployment(c.server.api)
            floor_cpu: dict[str, float] = {}
            floor_runs, _ = run_batch(
                c.server, tmp / "floor", client,
                lambda: [client.create_flow_run_from_deployment(floor_id).id
                         for _ in range(tasks)],
                count=n, env=shared, during=lambda: _cpu(replicas, services_pids, floor_cpu),
            )  # fmt: skip
        db.dispose_engines()
    failed = [r.name for r in [*runs, *floor_runs] if not r.state.is_completed()]
    if failed:
        sys.exit(f"runs did not complete: {failed}")
    return {
        "replicas": n,
        "workers": n,
        "services_processes": services,
        "tasks": tasks,
        "tasks_per_s": _rate(runs),
        "cpu_per_task_s": {k: round(v / tasks, 3) for k, v in cpu.items()},
        "floor_runs_per_s": _rate(floor_runs),
        "floor_cpu_per_run_s": {k: round(v / tasks, 3) for k, v in floor_cpu.items()},
    }


def _rate(runs: list[Any]) -> float:
    """Runs a second, from the first run's start to the last one's end."""
    first = min(r.start_time.timestamp() for r in runs)
    last = max(r.end_time.timestamp() for r in runs)
    return round(len(runs) / (last - first), 2)


def projection(cpu: dict[str, float], cores: int = CORES) -> dict[str, Any]:
    """The team tasks a second a machine of `cores` cores would reach at these costs (CPU
    seconds per task), and what bounds it: all its cores busy, with as many replicas and
    workers as fit; or the busiest services process (one core at most), which more
    replicas do not relieve."""
    busiest = cpu["busiest_services"]
    bounds = {
        f"{cores} cores busy": round(cores / cpu["machine"], 1),
        "the busiest services process": round(1 / busiest, 1) if busiest else None,
    }
    bound = min((b for b in bounds if bounds[b] is not None), key=lambda b: bounds[b] or 0)
    return {"cores": cores, "tasks_per_s": bounds[bound], "bound_by": bound, "bounds": bounds}


def compare(setups: list[tuple[int, int]], tasks: int, postgres_url: str) -> dict[str, Any]:
    """Each setup's figures (`setup_figures`; a setup is (replicas, services processes)),
    and the projection from the last."""
    from teamflow_workers import benchmark_environment

    benchmark_environment()
    tmp = Path(tempfile.mkdtemp(prefix="teamflow-scale-"))
    figures = []
    try:
        for n, services in setups:
            where = tmp / f"{n}-{services}"
            where.mkdir()
            print(f"setup: {n} replica(s), {n} worker(s), {services} services process(es), "
                  f"{tasks} tasks ...", file=sys.stderr)  # fmt: skip
            figures.append(setup_figures(n, tasks, where, postgres_url, services))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "setups": figures,
        "cores": os.cpu_count(),
        "load": round(os.getloadavg()[0], 1),
        "projection": projection(figures[-1]["cpu_per_task_s"]),
    }


def setups(replicas: int) -> list[tuple[int, int]]:
    """The setups `--replicas N` compares: one replica with one services process, then N
    replicas with Prefect's services split over three processes (`scale_out.SERVICE_SPLITS`)."""
    return [(1, 1), (replicas, 3)]


def report(out: dict[str, Any]) -> None:
    """Prints `compare`'s figures as a table."""
    print(f"team tasks on Prefect's distributed setup ({out['cores']} cores, "
          f"load {out['load']}); CPU seconds per task (per run for the empty runs)")  # fmt: skip
    columns = ("tasks/s", "server", "a replica", "services", "a services", "workers", "other",
               "machine")  # fmt: skip
    keys = ("server", "busiest_replica", "services", "busiest_services", "workers", "other",
            "machine")  # fmt: skip
    print(f"{'replicas, services':<20}" + "".join(f"{c:>11}" for c in columns))
    for f in out["setups"]:
        for label, rate, c in (
            (f"{f['replicas']}, {f['services_processes']}", f["tasks_per_s"], f["cpu_per_task_s"]),
            ("  empty runs", f["floor_runs_per_s"], f["floor_cpu_per_run_s"]),
        ):
            print(f"{label:<20}{rate:>11}" + "".join(f"{c[k]:>11}" for k in keys))
    print("(as many workers as replicas; `a replica`, `a services`: the busiest such process)")
    p = out["projection"]
    print(f"at these costs a {p['cores']}-core machine runs about {p['tasks_per_s']} team "
          f"tasks/s (bound by: {p['bound_by']}); the bounds: "
          + ", ".join(f"{k} {v} tasks/s" for k, v in p["bounds"].items()))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--replicas", type=int, default=2, metavar="N",
                        help="the larger setup: N replicas and N workers (default 2)")  # fmt: skip
    parser.add_argument("--postgres", default=os.environ.get("TEAMFLOW_TEST_POSTGRES_URL", ""),
                        metavar="URL", help="default TEAMFLOW_TEST_POSTGRES_URL")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.postgres:
        parser.error("needs PostgreSQL: --postgres URL (or TEAMFLOW_TEST_POSTGRES_URL)")
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    out = compare(setups(args.replicas), args.tasks, args.postgres)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        report(out)


if __name__ == "__main__":
    main()
