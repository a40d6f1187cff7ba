"""Prefect's distributed setup on this machine, for tests and benchmarks: Prefect's server
on PostgreSQL with Redis messaging (`prefect-redis`), migrated once, then two API replicas
started without migrating and without services, one services process, and HAProxy in
front of the replicas (health checks, failover). As `docs/beyond-one-machine.md` says to run
it, with every address on loopback.

    with cluster(tmp, admin_url) as c:
        register_deployments(c.server, tmp / "deploy.log")   # through the balancer
        ...
        kill_group(c.replicas[0], signal.SIGKILL)             # one replica dies
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import forkserver
from prefect_server import (
    Server,
    base_env,
    free_port,
    healthy,
    prefect_cli,
    stop,
    wait_until,
    with_the_tests,
)
from teamflow_workers import postgres_databases

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
REDIS_DBS = range(8, 16, 2)
"""Redis db numbers a cluster may take (messaging, and the next one for docket)."""


@dataclass
class Cluster:
    server: Server
    """The balancer's URL as the server every client uses; `env` for teamflow processes."""
    replicas: list[forkserver.Process]
    services: forkserver.Process
    """The (first) services process."""
    balancer: subprocess.Popen
    teamflow_url: str
    logs: list[Path] = field(default_factory=list)
    all_services: list[forkserver.Process] = field(default_factory=list)
    """Every services process (`cluster(services=N)`: N, each running its share)."""


SERVICES = {
    "task-run recorder": "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED",
    "event persister": "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED",
    "triggers": "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED",  # and their actions
    "event stream": "PREFECT_API_EVENTS_STREAM_OUT_ENABLED",
}
"""Prefect's services that `prefect server services start` runs by default, by the setting
that turns each on."""

SERVICE_SPLITS: dict[int, tuple[frozenset[str], ...]] = {
    1: (frozenset(SERVICES),),
    2: (
        frozenset({"task-run recorder", "event persister"}),
        frozenset({"triggers", "event stream"}),
    ),
    3: (
        frozenset({"task-run recorder"}),
        frozenset({"event persister"}),
        frozenset({"triggers", "event stream"}),
    ),
}
"""`cluster(services=N)`: which of `SERVICES` each services process runs, each service in
exactly one process. Every services process also runs the docket worker, which shares its
tasks out through Redis."""


def service_share(share: frozenset[str]) -> dict[str, str]:
    """The environment that leaves a services process only `share` of `SERVICES`."""
    return {setting: "false" for name, setting in SERVICES.items() if name not in share}


def haproxy_config(port: int, replicas: list[int]) -> str:
    servers = "\n".join(
        f"  server r{n} 127.0.0.1:{p} check inter 500ms fall 2 rise 2"
        for n, p in enumerate(replicas, 1)
    )
    return f"""global
  maxconn 512
defaults
  mode http
  timeout connect 2s
  timeout client 300s
  timeout server 300s
  timeout tunnel 3600s
  retries 3
  option redispatch
frontend prefect
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
  balance roundrobin
  option httpchk GET /api/health
{servers}
"""


def _redis_db() -> int:
    """A Redis db pair nobody uses now (an empty one), taken for this cluster: taken with
    `SET NX`, so of two test processes that both found it empty one gets it (two clusters
    on one db pair would read each other's events and docket tasks)."""
    import redis

    for n in REDIS_DBS:
        client = redis.Redis(host="127.0.0.1", port=6379, db=n)
        if client.dbsize() != 0 or redis.Redis(db=n + 1).dbsize() != 0:
            continue
        if client.set("teamflow-test-cluster", os.getpid(), nx=True):
            return n
    raise AssertionError("no free Redis db for the cluster (8-15 all in use)")


def _flush(n: int) -> None:
    import redis

    for db in (n, n + 1):
        redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()


def _popen(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=with_the_tests(),
        )  # fmt: skip


def _server(args: list[str], env: dict[str, str], log: Path) -> forkserver.Process:
    """`python -m flows.server ARGS` (a replica or a services process), forked from the
    fork server with Prefect's server imported (`forkserver`)."""
    with log.open("ab") as out:
        return forkserver.popen(
            forkserver.SERVER, "flows.server", args, env=env, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


@contextlib.contextmanager
def cluster(tmp: Path, admin_url: str, replicas: int = 2, services: int = 1) -> Iterator[Cluster]:
    """The distributed setup, started; everything stopped, and its databases and Redis dbs
    dropped, at the end. `services`: how many processes Prefect's services are split over
    (`SERVICE_SPLITS`)."""
    assert services in SERVICE_SPLITS, services
    redis_db = _redis_db()
    processes: list[forkserver.Process] = []
    try:
        with postgres_databases(admin_url) as (prefect_url, teamflow_url):
            port = free_port()
            api = f"http://127.0.0.1:{port}/api"
            env = base_env(tmp, api)
            env.update(
                PREFECT_API_DATABASE_CONNECTION_URL=prefect_url,
                PREFECT_MESSAGING_BROKER="prefect_redis.messaging",
                PREFECT_MESSAGING_CACHE="prefect_redis.messaging",
                PREFECT_SERVER_EVENTS_CAUSAL_ORDERING="prefect_redis.ordering",
                PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE="prefect_redis.lease_storage",
                PREFECT_REDIS_MESSAGING_URL=f"redis://127.0.0.1:6379/{redis_db}",
                PREFECT_SERVER_DOCKET_URL=f"redis://127.0.0.1:6379/{redis_db + 1}",
                TEAMFLOW_DATABASE_URL=teamflow_url,
            )
            Path(env["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
            # Migrate once: replicas started together on a fresh database race otherwise.
            migrated = prefect_cli(["server", "database", "upgrade", "-y"], env)
            assert migrated.returncode == 0, migrated.stdout[-2000:] + migrated.stderr[-2000:]
            serving = {**env, "PREFECT_API_DATABASE_MIGRATE_ON_START": "false"}
            ports = [free_port() for _ in range(replicas)]
            logs = []
            started = []
            # One at a time: each registers Prefect's block types as it starts, and two
            # starting together race on those rows too ("duplicate key ... block_type").
            for n, p in enumerate(ports, 1):
                log = tmp / f"replica-{n}.log"
                logs.append(log)
                process = _server(
                    ["start", "--host", "127.0.0.1", "--port", str(p), "--no-services",
                     "--analytics-off"],
                    serving, log,
                )  # fmt: skip
                processes.append(process)
                started.append(process)
                wait_until(
                    lambda p=p, process=process: healthy(f"http://127.0.0.1:{p}/api")
                    or process.poll() is not None,
                    180, f"the replica on port {p}",
                )  # fmt: skip
                assert process.poll() is None, log.read_text()[-3000:]
            started_services = []
            for n, share in enumerate(SERVICE_SPLITS[services], 1):
                services_log = tmp / ("services.log" if n == 1 else f"services-{n}.log")
                logs.append(services_log)
                process = _server(["services", "start"], serving | service_share(share),
                                  services_log)  # fmt: skip
                processes.append(process)
                started_services.append(process)
            config = tmp / "haproxy.cfg"
            config.write_text(haproxy_config(port, ports))
            balancer = _popen([HAPROXY, "-f", str(config), "-db"], env, tmp / "haproxy.log")
            processes.append(balancer)
            wait_until(lambda: healthy(api), 60, "the balancer")
            server = Server(api=api, env=env, process=None, log=logs[0])
            yield Cluster(server, started, started_services[0], balancer, teamflow_url, logs,
                          started_services)  # fmt: skip
    finally:
        for process in reversed(processes):
            stop(process)
        _flush(redis_db)
