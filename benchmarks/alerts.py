"""How late TIMER alerts fire: `teamflow worker` next to Prefect's default process worker.

    .venv/bin/python benchmarks/alerts.py [--timers 100] [--spread 45] [--lead S]
                                          [--only teamflow|prefect]
                                          [--server-postgres [URL]] [--keep]

A TIMER alert (`flows.alerts.create_timer`, what `teamflow alert timer` does) is an
`alerts` row and a run of the `system-alert` deployment created in a Scheduled state for a
future time. For each worker in turn this starts a real Prefect server (free port, its own
home, SQLite) with teamflow's deployments, creates `--timers` timers for a team of three,
due from `--lead` seconds on, spread evenly over `--spread` seconds, starts the worker on
the `teamflow` pool, waits for every timer's run to end and prints, per worker, two
latenesses: when the alert reached the inboxes (the firing's `fired_at` minus the timer's
due time; what a member sees), and when the run started (its `start_time`, it entered
Running, minus its `expected_start_time`). Negative means early. `teamflow worker` keeps
teamflow's clock, which delivers a timer at its time without waiting for its run;
Prefect's worker has only the run. How many runs completed and timers were delivered to
every member is printed beside.

The timers are created before the worker starts: while runs write to Prefect's server on
SQLite, creating a run now and then meets 503s and its client's retries (2, 4, 8 s), and
a timer created after its time would measure that, not the worker.

- teamflow: `teamflow worker` (what `teamflow up` runs), with its own settings;
- prefect: `prefect worker start --pool teamflow --type process` with Prefect's defaults
  (a poll every 10 s, runs taken 10 s ahead, a new process per run).

The alerts go to a team of three in a temporary teamflow database (SQLite). Everything it
starts is stopped, also on failure or Ctrl-C, and its temporary folder removed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the test helpers start servers and workers
os.environ["TEAMFLOW_TEST_FORKSERVER"] = "0"  # what it measures starts anew, not forked

TEAM = "timer-team"
DEPLOYMENT = "system-alert/system-alert"
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of values at or below."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil
    return ordered[int(rank) - 1]


def create_timers(count: int, first: datetime, spread: float) -> list[Any]:
    """`count` TIMER alerts with their Scheduled runs, due from `first` over `spread` s."""
    from flows.alerts import create_timer

    step = spread / max(1, count - 1)
    return [
        create_timer(TEAM, f"bench-{i}", f"timer {i}", due=first + timedelta(seconds=i * step),
                     require_worker=False)
        for i in range(count)
    ]  # fmt: skip


@contextlib.contextmanager
def prefect_worker(server: Any, tmp: Path, env: dict[str, str]) -> Iterator[None]:
    """Prefect's own process worker, with Prefect's defaults, on the `teamflow` pool."""
    from prefect_server import stop, wait_until
    from teamflow_workers import POOL, online_workers

    home = tmp / "prefect-worker-home"
    home.mkdir(parents=True, exist_ok=True)
    worker_env = {**server.env, "PREFECT_HOME": str(home), **env}
    worker_env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)
    name = "prefect-default"
    log = tmp / "prefect-worker.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL,
             "--type", "process", "--name", name],
            env=worker_env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:

        def ready() -> bool:
            assert process.poll() is None, log.read_text()[-3000:]
            return name in online_workers(server.api)

        wait_until(ready, 120, "Prefect's worker to start", interval=0.5)
        yield
    finally:
        stop(process)


def measure(
    kind: str, timers: int, spread: float, lead: float, tmp: Path, server_database: str | None
) -> dict[str, Any]:
    """Lateness in seconds of `timers` timers run by one kind of worker on a fresh server."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_server import prefect_server, wait_until
    from teamflow_workers import (
        ended_runs,
        postgres_databases,
        register_deployments,
        teamflow_workers,
    )

    from models import db, inbox, membership
    from models.alert import last_firing

    tmp.mkdir(parents=True)
    home = tmp / "teamflow-home"
    url = f"sqlite:///{tmp / 'teamflow.db'}"
    os.environ["TEAMFLOW_HOME"] = str(home)
    os.environ["TEAMFLOW_DATABASE_URL"] = url
    db.dispose_engines()
    db.upgrade(url)
    membership.create_team(TEAM, description="Timers", lead="coordinator")
    for name in ("analyst-1", "analyst-2"):
        membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.")
    shared = {"TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": url}

    with contextlib.ExitStack() as stack:
        server_url = None
        if server_database:
            server_url, _ = stack.enter_context(postgres_databases(server_database))
        server = stack.enter_context(prefect_server(tmp, server_url, clean_log=False))
        register_deployments(server, tmp / "deploy.log")
        stack.enter_context(temporary_settings(updates={PREFECT_API_URL: server.api}))
        client = stack.enter_context(get_client(sync_client=True))
        first = datetime.now(UTC) + timedelta(seconds=lead)
        created = create_timers(timers, first, spread)
        run_ids = [run.id for _alert, run in created]
        if kind == "teamflow":
            stack.enter_context(teamflow_workers(server, tmp, 1, env=shared))
        else:
            stack.enter_context(prefect_worker(server, tmp, shared))
        if datetime.now(UTC) > first - timedelta(seconds=2):
            sys.exit(f"{kind}: the timers and the worker were not ready in time; give a --lead")
        bound = lead + spread + 300
        # Every timer went off (a firing recorded), then the runs end, or not within the bound:
        # a run still not ended is counted, not waited for.
        wait_until(lambda: all(last_firing(a.id) for a, _run in created), bound, "every timer", 0.5)
        with contextlib.suppress(AssertionError):
            wait_until(lambda: ended_runs(client, run_ids), 300, "every timer's run", 0.5)
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids)), limit=len(run_ids)
        )

    # Prefect's worker crashes runs whose submission met a 503 from the server (its label
    # request): they are counted, and run lateness is over the runs that started.
    alerts = sum(
        1
        for member in ("coordinator", "analyst-1", "analyst-2")
        for m in inbox.messages(TEAM, member)
        if m.type == "system_alert"
    )
    started = [
        (r.start_time - r.expected_start_time).total_seconds()
        for r in runs
        if r.start_time is not None
    ]
    firings = [last_firing(alert.id) for alert, _run in created]
    delivered = [(f.fired_at - f.due_at).total_seconds() for f in firings if f is not None]
    if not delivered:
        sys.exit(f"{kind}: no timer went off")
    return {
        "completed": sum(1 for r in runs if r.state is not None and r.state.is_completed()),
        "delivered": alerts // 3,
        "alert": figures_of(delivered),
        "run": figures_of(started) if started else None,
    }


def figures_of(late: list[float]) -> dict[str, Any]:
    return {
        "p50": percentile(late, 50),
        "p95": percentile(late, 95),
        "p99": percentile(late, 99),
        "max": max(late),
        "min": min(late),
        "early": sum(1 for s in late if s < 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=100, help="timers per worker")
    parser.add_argument("--spread", type=float, default=45, help="seconds the timers span")
    parser.add_argument(
        "--lead", type=float, default=None,
        help="seconds from creating the first timer to its time: the timers are created and "
        "the worker started by then (default 30 + timers / 10)",
    )  # fmt: skip
    parser.add_argument("--only", choices=["teamflow", "prefect"], help="one worker only")
    parser.add_argument(
        "--server-postgres", metavar="URL", nargs="?", const=POSTGRES_URL,
        help="run Prefect's server on a new PostgreSQL database made through URL (an admin "
        f"URL; default {POSTGRES_URL}) instead of SQLite; teamflow's own database stays SQLite",
    )  # fmt: skip
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary folder (servers' and workers' logs)"
    )
    args = parser.parse_args()
    if args.lead is None:
        args.lead = 30 + args.timers / 10
    for name in list(os.environ):
        if name.startswith(("PREFECT_", "TEAMFLOW_")):
            del os.environ[name]
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["DO_NOT_TRACK"] = "1"
    os.environ["PREFECT_LOGGING_LEVEL"] = "ERROR"

    kinds = [args.only] if args.only else ["teamflow", "prefect"]
    tmp = Path(tempfile.mkdtemp(prefix="teamflow-bench-alerts-"))
    figures: dict[str, dict[str, Any]] = {}
    try:
        for kind in kinds:
            print(f"{kind}: {args.timers} timers over {args.spread:g} s ...", flush=True)
            figures[kind] = measure(
                kind, args.timers, args.spread, args.lead, tmp / kind, args.server_postgres
            )
    except KeyboardInterrupt:
        sys.exit("interrupted; everything started was stopped")
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    where = "PostgreSQL" if args.server_postgres else "SQLite"
    print(f"\nPrefect's server on {where}; lateness of {args.timers} timers, seconds")
    print("alert: the firing's fired_at - its due time; run: start_time - expected_start_time")
    names = {"teamflow": "teamflow worker", "prefect": "Prefect default worker"}
    columns = ("p50", "p95", "p99", "max", "min")
    print(f"{'':31}" + "".join(f"{k:>9}" for k in (*columns, "early")) + "  completed delivered")
    for kind, f in figures.items():
        for what in ("alert", "run"):
            row = f[what]
            if row is None:
                continue
            values = "".join(f"{row[k]:9.3f}" for k in columns) + f"{row['early']:9d}"
            print(f"{names[kind] + ' ' + what:31}{values}{f['completed']:11d}{f['delivered']:10d}")
    print("early: before their time; completed (runs), delivered (to every member): of the timers")


if __name__ == "__main__":
    main()
