"""Request-to-running latency of a flow run: teamflow's setup next to Prefect's defaults.

Starts one Prefect server (SQLite, a free port, temporary homes), registers the
`system-alert` deployment twice, and measures, in the same run, how long a run takes from
the request that creates it to `Running` (the run's `start_time`, set by the server):

- teamflow: `teamflow worker` on the `teamflow` pool, as `teamflow up` starts it (event
  push, 2 s fallback poll while busy, teamflow's flows run inside the worker process);
- Prefect defaults: `prefect worker start` on a second process pool (10 s poll, a new
  Python process per run).

Runs alternate between the two setups, one at a time, each to completion, so both see the
same machine. Usage: `python benchmarks/startup.py [--runs 20]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per setup (default 20)")
    runs = parser.parse_args().runs

    tmp = Path(tempfile.mkdtemp(prefix="teamflow-bench-"))
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    os.environ.update(
        PREFECT_HOME=str(tmp / "prefect-home"),
        PREFECT_API_URL=api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        TEAMFLOW_HOME=str(tmp / "teamflow-home"),
    )
    os.environ.pop("TEAMFLOW_DATABASE_URL", None)
    os.environ.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)

    from flows import runner, up, up_processes
    from models import db

    processes: list[subprocess.Popen] = []
    home = Path(os.environ["TEAMFLOW_HOME"])
    try:
        with runner.connected(api):
            server = up.start_server(api, "127.0.0.1", home, print)
            assert server is not None
            processes.append(server.process)
            up.ensure_pool("teamflow")
            up.ensure_pool("stock-process")
            up.deploy(api, home)
            _prefect(api, "deploy", "flows/system_alert.py:system_alert", "--name", "defaults",
                     "--pool", "stock-process")  # fmt: skip
            db.upgrade()
            _team()
            env = up_processes.child_env(api)
            processes.append(_spawn([sys.executable, "-m", "flows.cli", "worker"], env,
                                    home / "logs" / "teamflow-worker.log"))  # fmt: skip
            defaults = {k: v for k, v in env.items() if not k.startswith("PREFECT_WORKER_")}
            processes.append(_spawn([sys.executable, "-m", "prefect", "worker", "start",
                                     "--pool", "stock-process"], defaults,
                                    home / "logs" / "prefect-worker.log"))  # fmt: skip
            _wait_ready("teamflow")
            _wait_ready("stock-process")

            setups = {
                "teamflow (teamflow worker)": "system-alert/system-alert",
                "Prefect defaults (process worker)": "system-alert/defaults",
            }
            latencies: dict[str, list[float]] = {name: [] for name in setups}
            for n in range(runs):
                for name, deployment in setups.items():
                    latencies[name].append(_measure(runner, deployment, n))
                print(f"  run {n + 1}/{runs}: " + ", ".join(
                    f"{latencies[name][-1]:.2f} s" for name in setups), flush=True)  # fmt: skip
    finally:
        for process in reversed(processes):
            _stop(process)
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"request-to-running latency over {runs} runs each (same server, same machine)")
    print(f"{'setup':<36} {'p50':>7} {'p95':>7} {'min':>7} {'max':>7}")
    for name, values in latencies.items():
        print(
            f"{name:<36} {statistics.median(values):6.2f}s {_p95(values):6.2f}s "
            f"{min(values):6.2f}s {max(values):6.2f}s"
        )


def _measure(runner, deployment: str, n: int) -> float:
    from prefect.client.orchestration import get_client

    parameters = {"team": "bench-team", "alert_type": "TIMER", "alert_name": f"tick-{n}",
                  "message": "tick"}  # fmt: skip
    requested = datetime.now(UTC)
    started = runner.start(deployment, parameters)
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            run = client.read_flow_run(started.id)
            if run.state.is_final():
                if not run.state.is_completed():
                    raise SystemExit(f"{deployment} run {run.id} ended {run.state.name}")
                return (run.start_time - requested).total_seconds()
            time.sleep(0.05)
    raise SystemExit(f"{deployment} run {started.id} did not finish within 120 s")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _team() -> None:
    from models import membership

    membership.create_team("bench-team", description="latency benchmark", lead="lead")
    membership.add_member("bench-team", "member-1", model="haiku", prompt="You measure.")


def _prefect(api: str, *args: str) -> None:
    from flows import up_processes

    subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", *args], cwd=ROOT,
                   env=up_processes.child_env(api), check=True, capture_output=True)  # fmt: skip


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _wait_ready(pool: str) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for _ in range(600):
            if client.read_work_pool(pool).status.value == "READY":
                return
            time.sleep(0.1)
    raise SystemExit(f"no worker came online on {pool}")


def _stop(process: subprocess.Popen) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
