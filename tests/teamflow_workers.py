"""teamflow's deployments and real `teamflow worker` processes, for tests and benchmarks.

    with prefect_server(tmp) as server:
        register_deployments(server, tmp / "deploy.log")
        with teamflow_workers(server, tmp, count=2, env=extra) as workers:
            ...

`register_deployments` does what the README says to do without `teamflow up`: creates the
`teamflow` process work pool and runs `prefect deploy --all` in this directory (on a test
process's later servers it creates the same pool and deployments through the API).
`teamflow_workers` starts `teamflow worker` processes, each with its own PREFECT_HOME and log
and in its own session, waits until each has started and the server sees it online, and
stops their process groups when the block ends, also when it fails. `postgres_databases`
makes a fresh PostgreSQL database for a Prefect server and a schema for teamflow, and drops
both after.

Benchmarks that put a batch of runs through workers (`benchmarks/team_task.py`,
`benchmarks/agents.py`) use `benchmark_environment` (none of the user's settings),
`benchmark_databases` (both databases on SQLite or on PostgreSQL, teamflow's set for this
process) and `run_batch` (every run queued, and every worker up, before the pool lets
them take any).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prefect_server import (
    ROOT,
    Server,
    postgres_template,
    prefect_cli,
    start,
    stop,
    wait_until,
)

from flows.runner import tls_context

POOL = "teamflow"


# What `prefect deploy --all` made on this process's first server: the pool and the
# deployments, as the server read them back (see `register_deployments`).
_DEPLOYED: dict[str, Any] | None = None


def register_deployments(server: Server, log: Path) -> None:
    """The `teamflow` work pool and every deployment of `prefect.yaml`, on `server`.

    The first time in a test process, as the README says: `prefect work-pool create` and
    `prefect deploy --all`, whose pool and deployments are then read back from the server.
    After that the same pool and deployments are created through the REST API: the two
    commands cost 8 s of CPU a server, and some thirty servers of the suite need them.
    (`teamflow up`, `tests/test_runner.py` and the README's tests run `prefect deploy`
    themselves.) A server behind an auth string is always deployed with the commands."""
    global _DEPLOYED
    if _DEPLOYED is not None and "PREFECT_API_AUTH_STRING" not in server.env:
        _replay(server.api, _DEPLOYED)
        with log.open("a") as out:
            out.write(f"replayed the pool and {len(_DEPLOYED['deployments'])} deployments\n")
        return
    commands = [
        # --overwrite: a loaded server may answer the create late, and the CLI's retry of
        # it then finds the pool its first try made ("already exists", exit 1).
        ["work-pool", "create", POOL, "--type", "process", "--overwrite"],
        ["--no-prompt", "deploy", "--all", "--prefect-file", str(ROOT / "prefect.yaml")],
    ]
    for command in commands:
        done = prefect_cli(command, server.env)
        with log.open("a") as out:
            out.write(done.stdout + done.stderr)
        assert done.returncode == 0, f"prefect {' '.join(command)}:\n{log.read_text()[-3000:]}"
    if "PREFECT_API_AUTH_STRING" not in server.env:
        _DEPLOYED = _deployed(server.api)


def _deployed(api: str) -> dict[str, Any]:
    """The pool and the deployments on the server at `api`, as their create requests."""
    from prefect.client.schemas.actions import (
        DeploymentCreate,
        DeploymentScheduleCreate,
        WorkPoolCreate,
    )

    def keep(row: dict[str, Any], model: Any) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k in model.model_fields}

    with httpx.Client(base_url=api, timeout=30) as http:
        pool = http.get(f"/work_pools/{POOL}").raise_for_status().json()
        deployments = []
        rows = http.post("/deployments/filter", json={}).raise_for_status().json()
        for row in (r for r in rows if r["work_pool_name"] == POOL):
            flow = http.get(f"/flows/{row['flow_id']}").raise_for_status().json()
            body = keep(row, DeploymentCreate)
            body["schedules"] = [keep(s, DeploymentScheduleCreate) for s in row["schedules"]]
            deployments.append((flow["name"], body))
    return {"pool": keep(pool, WorkPoolCreate), "deployments": deployments}


def _replay(api: str, deployed: dict[str, Any]) -> None:
    """Creates the pool (unless there) and the deployments of `deployed` at `api`."""
    with httpx.Client(base_url=api, timeout=60) as http:
        made = http.post("/work_pools/", json=deployed["pool"])
        if made.status_code != 409:  # 409: the pool is there
            made.raise_for_status()
        for flow_name, body in deployed["deployments"]:
            flow = http.post("/flows/", json={"name": flow_name}).raise_for_status().json()
            http.post("/deployments/", json={**body, "flow_id": flow["id"]}).raise_for_status()


@dataclass
class Worker:
    name: str
    process: subprocess.Popen
    log: Path


def online_workers(api: str, pool: str = POOL) -> set[str]:
    """The names of the workers the server sees online in `pool`."""
    response = httpx.post(
        f"{api}/work_pools/{pool}/workers/filter", json={}, timeout=10, verify=tls_context()
    )
    response.raise_for_status()
    return {w["name"] for w in response.json() if w.get("status") == "ONLINE"}


@contextlib.contextmanager
def teamflow_workers(
    server: Server,
    tmp: Path,
    count: int = 2,
    *,
    env: dict[str, str] | None = None,
    limit: int | None = None,
) -> Iterator[list[Worker]]:
    """`count` `teamflow worker` processes on the `teamflow` pool of `server`, started.

    Each has its own PREFECT_HOME and log under `tmp/worker-N/`; `env` adds to their
    environment (e.g. TEAMFLOW_DATABASE_URL, a shared TEAMFLOW_HOME).
    """
    workers: list[Worker] = []
    try:
        for n in range(1, count + 1):
            folder = tmp / f"worker-{n}"
            (folder / "prefect-home").mkdir(parents=True, exist_ok=True)
            worker_env = {**server.env, "PREFECT_HOME": str(folder / "prefect-home"), **(env or {})}
            worker_env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)  # the server's, not ours
            name = f"worker-{n}-{uuid.uuid4().hex[:6]}"
            args = ["worker", "--pool", POOL, "--name", name]
            if limit is not None:
                args += ["--limit", str(limit)]
            log = folder / "worker.log"
            workers.append(Worker(name, start(args, worker_env, log), log))

        def all_ready() -> bool:
            for worker in workers:
                assert worker.process.poll() is None, (
                    f"{worker.name} exited {worker.process.returncode}:\n"
                    + worker.log.read_text()[-3000:]
                )
            # Set up (it says so once its registration went through) and seen online.
            started = all(f"Worker '{w.name}' started!" in w.log.read_text() for w in workers)
            return started and {w.name for w in workers} <= online_workers(server.api)

        wait_until(all_ready, 120, "the teamflow workers to start", interval=0.5)
        yield workers
    finally:
        for worker in workers:
            stop(worker.process)


def ended_runs(client: Any, run_ids: list[Any]) -> list[Any] | None:
    """The flow runs `run_ids` (a sync Prefect client reads them) once every one has ended;
    None while one has not (for `wait_until`)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = client.read_flow_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids)), limit=len(run_ids)
    )
    ended = [r for r in runs if r.state is not None and r.state.is_final()]
    return runs if len(ended) == len(run_ids) else None


@contextlib.contextmanager
def postgres_databases(admin_url: str) -> Iterator[tuple[str, str]]:
    """A new database for a Prefect server (asyncpg) and a schema for teamflow (psycopg).

    Yields their URLs; drops both at the end, whatever happened.
    """
    import sqlalchemy as sa

    url = sa.make_url(admin_url)
    name = f"tf_prefect_{uuid.uuid4().hex[:10]}"
    schema = f"tf_workers_{uuid.uuid4().hex[:10]}"
    template = postgres_template(admin_url)  # migrated: the server's start skips migrating
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            copy = f' TEMPLATE "{template}"' if template else ""
            conn.execute(sa.text(f'CREATE DATABASE "{name}"{copy}'))
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        prefect_url = url.set(drivername="postgresql+asyncpg", database=name)
        teamflow_url = url.update_query_dict({"options": f"-csearch_path={schema}"})
        yield (
            prefect_url.render_as_string(hide_password=False),
            teamflow_url.render_as_string(hide_password=False),
        )
    finally:
        from models import db

        db.dispose_engines()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def benchmark_environment() -> None:
    """This process's environment for a benchmark: none of the user's PREFECT_ and TEAMFLOW_
    settings (but the tests' own, TEAMFLOW_TEST_*: the PostgreSQL to use, and whether the
    processes are forked), no telemetry, Prefect logging only errors."""
    for name in list(os.environ):
        if name.startswith(("PREFECT_", "TEAMFLOW_")) and not name.startswith("TEAMFLOW_TEST_"):
            del os.environ[name]
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["DO_NOT_TRACK"] = "1"
    os.environ["PREFECT_LOGGING_LEVEL"] = "ERROR"


@contextlib.contextmanager
def benchmark_databases(
    tmp: Path, postgres_url: str | None = None
) -> Iterator[tuple[str | None, dict[str, str]]]:
    """Both databases of a benchmark: SQLite (teamflow's under `tmp/teamflow-home`), or a
    fresh PostgreSQL database and schema on `postgres_url` (`postgres_databases`).

    teamflow's is the one this process uses while the block runs (TEAMFLOW_HOME and
    TEAMFLOW_DATABASE_URL are set). Yields the Prefect server's database URL (None: the
    server's own SQLite file) and the environment that points workers at teamflow's.
    """
    from models import db

    home = tmp / "teamflow-home"
    with contextlib.ExitStack() as stack:
        if postgres_url:
            prefect_url, teamflow_url = stack.enter_context(postgres_databases(postgres_url))
        else:
            prefect_url, teamflow_url = None, f"sqlite:///{home / 'teamflow.db'}"
        shared = {"TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": teamflow_url}
        os.environ.update(shared)
        db.dispose_engines()
        yield prefect_url, shared


def run_batch(
    server: Server,
    tmp: Path,
    client: Any,
    queue: Callable[[], list[Any]],
    *,
    count: int = 2,
    env: dict[str, str] | None = None,
    limit: int | None = None,
    timeout: float = 900,
    during: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> tuple[list[Any], list[Worker]]:
    """The runs `queue()` creates, run by `count` teamflow workers (see `teamflow_workers`).

    Every run is queued in the paused pool, and every worker is up, before the pool lets them
    take any: what is measured is how workers get through the batch, not how fast one client
    creates runs or a worker registers (both meet 503s from Prefect's server on SQLite while
    runs write). `client` is a sync Prefect client. Returns the runs once every one has
    ended, and the workers (stopped by then; their logs stay). `during()`, if given, is
    entered once the pool lets the workers go and left once every run has ended (e.g. to
    count the CPU that the batch costs).
    """
    from prefect.client.schemas.actions import WorkPoolUpdate

    client.update_work_pool(POOL, WorkPoolUpdate(is_paused=True))
    run_ids = queue()
    metered = during() if during is not None else contextlib.nullcontext()
    with teamflow_workers(server, tmp, count, env=env, limit=limit) as workers, metered:
        client.update_work_pool(POOL, WorkPoolUpdate(is_paused=False))
        runs = wait_until(
            lambda: ended_runs(client, run_ids), timeout, "every run of the batch to end",
            interval=0.5,
        )  # fmt: skip
    return runs, workers
