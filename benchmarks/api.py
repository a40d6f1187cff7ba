"""The REST API under load: inbox send and read by 50 clients at once on loopback, beside
the same acts through the CLI.

    .venv/bin/python benchmarks/api.py [--clients 50] [--rounds 10] [--cli-runs 5] [--json]

A temporary SQLite database and `TEAMFLOW_HOME` (deleted at the end); a team of `--clients`
members, each with its member token; `teamflow api` on a free port, as its own process.
Each client, at once (released together), does `--rounds` rounds of: send a message to the
next member (`POST /teams/T/messages`), read its unread inbox (`GET .../inbox?unread=true`),
mark it read (`POST .../inbox/read`). Printed: requests per second over all clients, p50 and
p95 latency per kind of request, errors (any answer that is not a success envelope). Then
the same send and read through `teamflow msg send` and `teamflow msg inbox --unread
--mark-read` (one process each, `--cli-runs` times): wall time per command. Bounded: every
request has a 30 s timeout, and the whole run stops after `--budget` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEAM = "bench-api"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cli-runs", type=int, default=5)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds, at most")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="teamflow-bench-api-") as tmp:
        os.environ["TEAMFLOW_HOME"] = str(Path(tmp) / "home")
        os.environ["TEAMFLOW_DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'teamflow.db'}"
        figures = run(args)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    api = figures["api"]
    print(f"REST API, {args.clients} clients x {args.rounds} rounds on loopback (SQLite):")
    print(f"  {api['requests']} requests in {api['seconds']:.2f} s: "
          f"{api['requests_per_s']:.0f} req/s, {api['errors']} error(s)")  # fmt: skip
    for kind, row in api["latency_ms"].items():
        print(f"  {kind:<10} p50 {row['p50']:7.1f} ms   p95 {row['p95']:7.1f} ms")
    print("CLI, one process per command:")
    for kind, row in figures["cli"].items():
        print(f"  {kind:<10} {row['median_s'] * 1000:7.0f} ms per command (median of "
              f"{row['runs']}), {1 / row['median_s']:.1f} commands/s")  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    import httpx

    from models import db, identity, membership

    db.upgrade()
    names = [f"m{i}" for i in range(args.clients)]
    membership.create_team(TEAM, description="API benchmark")
    for name in names:
        membership.add_member(TEAM, name, model="haiku", prompt="p")
    tokens = {n: identity.issue_token(TEAM, n) for n in names}
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "api", "--port", str(port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/teams", timeout=1)
                break
            except httpx.HTTPError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("teamflow api did not start") from None
                time.sleep(0.1)
        latencies: dict[str, list[float]] = {"send": [], "read": [], "mark": []}
        errors = [0]
        lock = threading.Lock()
        go = threading.Event()
        stop_at = time.monotonic() + args.budget

        def client(index: int) -> None:
            me = names[index]
            peer = names[(index + 1) % len(names)]
            headers = {"Authorization": f"Bearer {tokens[me]}"}
            inbox = f"{base}/teams/{TEAM}/members/{me}/inbox"
            with httpx.Client(headers=headers, timeout=30) as http:
                go.wait()
                for _ in range(args.rounds):
                    if time.monotonic() > stop_at:
                        return
                    for kind, call in (
                        ("send", lambda: http.post(f"{base}/teams/{TEAM}/messages",
                                                   json={"to": peer, "text": "hello"})),
                        ("read", lambda: http.get(f"{inbox}?unread=true")),
                        ("mark", lambda: http.post(f"{inbox}/read")),
                    ):  # fmt: skip
                        started = time.perf_counter()
                        try:
                            good = call().json().get("status") == "success"
                        except (httpx.HTTPError, ValueError):
                            good = False
                        took = (time.perf_counter() - started) * 1000
                        with lock:
                            latencies[kind].append(took)
                            errors[0] += not good

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(names))]
        for t in threads:
            t.start()
        began = time.perf_counter()
        go.set()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - began
    finally:
        server.terminate()
        try:
            server.wait(timeout=120)  # a loaded machine drains its requests slowly
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    total = sum(len(v) for v in latencies.values())
    cli = cli_figures(args.cli_runs, names)
    return {
        "api": {
            "clients": len(names),
            "requests": total,
            "seconds": seconds,
            "requests_per_s": total / seconds if seconds else 0.0,
            "errors": errors[0],
            "latency_ms": {
                k: {"p50": statistics.median(v) if v else float("nan"), "p95": quantile(v, 0.95)}
                for k, v in latencies.items()
            },
        },
        "cli": cli,
    }


def cli_figures(runs: int, names: list[str]) -> dict:
    """Wall time of `teamflow msg send` and `teamflow msg inbox --unread --mark-read`."""
    commands = {
        "send": ["msg", "send", TEAM, "--to", names[1], "--from", names[0], "--text", "hi"],
        "read": ["msg", "inbox", TEAM, names[1], "--unread", "--mark-read", "--json"],
    }
    figures = {}
    for kind, argv in commands.items():
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "flows.cli", *argv], cwd=REPO,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            times.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"teamflow {' '.join(argv)} failed: {done.stderr.strip()}")
        figures[kind] = {"runs": runs, "median_s": statistics.median(times)}
    return figures


if __name__ == "__main__":
    main()
