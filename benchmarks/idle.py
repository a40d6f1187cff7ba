"""What an idle `teamflow up` costs the machine, beside Prefect's own idle floor.

    .venv/bin/python benchmarks/idle.py [--seconds 60] [--settle 30] [--json]

In one run, one after the other, each in a temporary home on free ports:

- Prefect's floor: `prefect server start` with Prefect's defaults and one `prefect worker
  start` (process pool, Prefect's 10 s poll), nothing scheduled;
- `teamflow up`: its server, worker (watchdog, timer clock, beats), MCP server and REST API,
  as a user starts it, with no team at work.

Each is left to settle for `--settle` seconds after it is up, then the CPU seconds of each of
its processes (user + system, from /proc) are counted over `--seconds`. Printed as a table
of CPU seconds and percent of one core (or JSON with `--json`), with the load average.
The issue's target: an idle `teamflow up` at most 2% of a core.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ["TEAMFLOW_TEST_FORKSERVER"] = "0"  # what it measures starts anew, not forked
BIN = Path(sys.executable).parent
TARGET_PERCENT = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in children.read_text().split()]
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far; 0 once it has gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def name_of(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode() for w in words if w)
    for label, marker in (
        ("prefect server", "server start"),
        ("teamflow worker", "flows.cli worker"),
        ("prefect worker", "worker start"),
        ("teamflow mcp", "flows.cli mcp"),
        ("teamflow api", "flows.cli api"),
        ("teamflow up", "teamflow up"),
    ):
        if marker in text:
            return label
    return text[:40]


def measure(roots: list[int], seconds: float) -> dict[str, float]:
    """CPU seconds of each process under `roots` over `seconds`, by name."""
    pids = [p for r in roots for p in tree(r)]
    before = {p: cpu_seconds(p) for p in pids}
    time.sleep(seconds)
    spent: dict[str, float] = {}
    for p in pids:
        name = name_of(p)
        spent[name] = spent.get(name, 0.0) + cpu_seconds(p) - before[p]
    return spent


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for(what: str, ready: Any, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 300
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come up; its log: {log}")
        time.sleep(0.5)


def base_env(tmp: Path, api: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "TEAMFLOW_"))}
    return env | {
        "PREFECT_HOME": str(tmp / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }


def healthy(api: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api}/health", timeout=2).text.strip() == "true"
    except httpx.HTTPError:
        return False


def prefect_floor(tmp: Path, seconds: float, settle: float) -> dict[str, float]:
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = base_env(tmp, api)
    server_log, worker_log = tmp / "prefect-server.log", tmp / "prefect-worker.log"
    _seed(tmp / "prefect-home" / "prefect.db", deployed=False)  # Prefect's default database
    server = start([str(BIN / "prefect"), "server", "start", "--port", str(port)], env, server_log)
    worker = None
    try:
        wait_for("prefect server", lambda: healthy(api), server, server_log)
        subprocess.run(
            [str(BIN / "prefect"), "work-pool", "create", "idle-floor", "--type", "process"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        worker = start(
            [str(BIN / "prefect"), "worker", "start", "--pool", "idle-floor"], env, worker_log
        )
        time.sleep(settle)
        return measure([server.pid, worker.pid], seconds)
    finally:
        for process in (worker, server):
            if process is not None:
                stop(process)


def teamflow_up(tmp: Path, seconds: float, settle: float) -> dict[str, float]:
    api = f"http://127.0.0.1:{free_port()}/api"
    env = base_env(tmp, api) | {
        "TEAMFLOW_HOME": str(tmp / "teamflow-home"),
        "TEAMFLOW_MCP_PORT": str(free_port()),
        "TEAMFLOW_API_PORT": str(free_port()),
    }
    from flows.up import UP_LAST_LINE

    log = tmp / "up.log"
    _seed(tmp / "teamflow-home" / "prefect.db", deployed=True)
    up = start([str(BIN / "teamflow"), "up"], env, log)
    try:
        wait_for("teamflow up", lambda: UP_LAST_LINE in log.read_text(), up, log)
        time.sleep(settle)
        return measure([up.pid], seconds)
    finally:
        stop(up)


def _seed(path: Path, *, deployed: bool) -> None:
    """Run by the test suite: the server's database a copy of the suite's template,
    migrated (and with teamflow's deployments, `deployed`), which saves the start seconds
    of CPU and leaves what is counted after it alone. Run by hand: nothing."""
    from prefect_server import seed_prefect_db

    seed_prefect_db(path, deployed=deployed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="how long to count (60)")
    parser.add_argument("--settle", type=float, default=30, help="wait after start (30)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="teamflow-idle-") as tmp:
        floor_dir, up_dir = Path(tmp) / "floor", Path(tmp) / "up"
        floor_dir.mkdir()
        up_dir.mkdir()
        floor = prefect_floor(floor_dir, args.seconds, args.settle)
        ours = teamflow_up(up_dir, args.seconds, args.settle)
    result = {
        "seconds": args.seconds,
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "prefect_floor": {k: round(v, 3) for k, v in floor.items()},
        "teamflow_up": {k: round(v, 3) for k, v in ours.items()},
        "prefect_floor_percent": round(100 * sum(floor.values()) / args.seconds, 2),
        "teamflow_up_percent": round(100 * sum(ours.values()) / args.seconds, 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"idle for {args.seconds:g} s after {args.settle:g} s to settle; "
          f"load average {result['load_average'][0]} at the start, "
          f"{result['load_average'][1]} at the end")  # fmt: skip
    print(f"{'process':<18} {'CPU s':>7} {'% of a core':>12}")
    for title, spent in (("Prefect's floor", floor), ("teamflow up", ours)):
        print(title)
        for name, cpu in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<16} {cpu:>7.2f} {100 * cpu / args.seconds:>11.2f}%")
        total = sum(spent.values())
        print(f"  {'all':<16} {total:>7.2f} {100 * total / args.seconds:>11.2f}%")
    percent = result["teamflow_up_percent"]
    met = "met" if percent <= TARGET_PERCENT else "NOT met"
    print(f"target: an idle teamflow up at most {TARGET_PERCENT:g}% of a core: {met} ({percent}%)")


if __name__ == "__main__":
    main()
