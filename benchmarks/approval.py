"""How fast a decision reaches a waiting run, and what waiting runs cost the Prefect server.

Compares teamflow's wait (`flows.plan_approval.wait_for_input`: Prefect's event stream, a slow
poll as fallback) with Prefect's default `pause_flow_run` (a poll every 10 s):

- latency from the decision call (`resume_flow_run`, what the CLI and the UI's form call)
  to the flow continuing, over N approvals, p50 and p95;
- the same for the whole `plan-approval` flow, from `teamflow plan approve`'s work
  (decide in the database + resume) to the run having returned its response;
- API requests per second that M runs make while they all wait (every HTTP request the
  runs' process sends is counted by wrapping httpx).

Runs against a temporary Prefect server on SQLite (`prefect_test_harness`) and a temporary
teamflow database. Usage:

    .venv/bin/python benchmarks/approval.py [--approvals 20] [--waiting 50] [--window 60]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# Prefect's server on SQLite logs "database is locked" tracebacks when many runs write at
# once; its clients retry, and the latencies below include that. Keep the output readable.
os.environ.setdefault("PREFECT_LOGGING_SERVER_LEVEL", "CRITICAL")

import httpx  # noqa: E402

SPACING_S = 0.3
"""Between two decisions: runs that finish write to Prefect's SQLite, which locks."""
CONTINUED: dict[str, float] = {}
RUN_IDS: dict[str, Any] = {}
COUNTS: collections.Counter[str] = collections.Counter()
COUNTING = threading.Event()


def _count(send: Any) -> Any:
    """Wraps httpx's send so every request made while COUNTING is set is counted by path."""

    def key(request: httpx.Request) -> str:
        parts = [p if len(p) != 36 else "{id}" for p in request.url.path.split("/")]
        return f"{request.method} {'/'.join(parts)}"

    if asyncio.iscoroutinefunction(send):

        async def counted_async(self: Any, request: httpx.Request, *args: Any, **kw: Any) -> Any:
            if COUNTING.is_set():
                COUNTS[key(request)] += 1
            return await send(self, request, *args, **kw)

        return counted_async

    def counted(self: Any, request: httpx.Request, *args: Any, **kw: Any) -> Any:
        if COUNTING.is_set():
            COUNTS[key(request)] += 1
        return send(self, request, *args, **kw)

    return counted


httpx.AsyncClient.send = _count(httpx.AsyncClient.send)  # type: ignore[method-assign]
httpx.Client.send = _count(httpx.Client.send)  # type: ignore[method-assign]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def show(label: str, seconds: list[float]) -> None:
    p50, p95 = percentile(seconds, 0.5), percentile(seconds, 0.95)

    def fmt(s: float) -> str:
        return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"

    print(f"  {label:<48} p50 {fmt(p50):>8}   p95 {fmt(p95):>8}   (n={len(seconds)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--approvals", type=int, default=20)
    parser.add_argument("--waiting", type=int, default=50)
    parser.add_argument("--window", type=float, default=60.0, help="seconds to count requests")
    parser.add_argument(
        "--outage",
        type=float,
        default=None,
        metavar="SECONDS",
        help="instead: stop the Prefect server under a waiting run for SECONDS, restart it, "
        "and time the decision that follows",
    )
    args = parser.parse_args()
    if args.outage is not None:
        survive_outage(args.outage)
        return

    home = Path(tempfile.mkdtemp(prefix="teamflow-bench-"))
    os.environ["TEAMFLOW_HOME"] = str(home)
    os.environ["TEAMFLOW_DATABASE_URL"] = f"sqlite:///{home / 'teamflow.db'}"

    from prefect import flow
    from prefect.context import FlowRunContext
    from prefect.exceptions import NotPausedError
    from prefect.flow_runs import apause_flow_run, resume_flow_run
    from prefect.testing.utilities import prefect_test_harness

    from flows.plan_approval import PlanDecision, plan_approval, wait_for_input
    from models import approval, db
    from models import team as teams

    @flow(name="bench-teamflow-wait", persist_result=False)
    async def teamflow_wait(key: str) -> None:
        RUN_IDS[key] = FlowRunContext.get().flow_run.id
        await wait_for_input(PlanDecision.with_initial_data(description="benchmark"))
        CONTINUED[key] = time.perf_counter()

    @flow(name="bench-prefect-pause", persist_result=False)
    async def prefect_pause(key: str) -> None:
        RUN_IDS[key] = FlowRunContext.get().flow_run.id
        await apause_flow_run(wait_for_input=PlanDecision, timeout=3600)
        CONTINUED[key] = time.perf_counter()

    def start_runs(make: Any, keys: list[str]) -> list[threading.Thread]:
        threads = []
        for i, key in enumerate(keys):
            thread = threading.Thread(target=asyncio.run, args=(make(key),), daemon=True)
            thread.start()
            threads.append(thread)
            if i % 10 == 9:
                time.sleep(1.0)  # Prefect's server on SQLite refuses (503) bursts of ~50 runs
        return threads

    def wait_all_paused(keys: list[str], timeout: float = 180) -> None:
        from prefect.client.orchestration import get_client

        deadline = time.monotonic() + timeout
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                ids = [RUN_IDS.get(k) for k in keys]
                if all(ids) and all(client.read_flow_run(i).state.is_paused() for i in ids):
                    return
                time.sleep(0.5)
        raise SystemExit("runs did not all pause in time")

    def latencies(make: Any, prefix: str, n: int, calls: list[float]) -> list[float]:
        keys = [f"{prefix}-{i}" for i in range(n)]
        threads = start_runs(make, keys)
        wait_all_paused(keys)
        time.sleep(1.0)
        started: dict[str, float] = {}
        returned: dict[str, float] = {}
        for key in keys:
            started[key] = time.perf_counter()
            resume_flow_run(RUN_IDS[key], run_input={"approve": True, "approver": "lead"})
            returned[key] = time.perf_counter()
            time.sleep(SPACING_S)
        for thread in threads:
            thread.join(60)
        calls.extend(returned[k] - started[k] for k in keys)
        return [CONTINUED[k] - started[k] for k in keys]

    def request_rate(make: Any, prefix: str, n: int, window: float) -> tuple[float, dict]:
        keys = [f"{prefix}-{i}" for i in range(n)]
        threads = start_runs(make, keys)
        wait_all_paused(keys)
        time.sleep(2.0)
        COUNTS.clear()
        COUNTING.set()
        time.sleep(window)
        COUNTING.clear()
        counted = dict(COUNTS)
        for key in keys:
            resume_flow_run(RUN_IDS[key], run_input={"approve": True, "approver": "lead"})
        for thread in threads:
            thread.join(60)
        return sum(counted.values()) / window, counted

    db.upgrade()
    teams.create_team("bench-team", description="benchmark", lead="coordinator")
    teams.add_member("bench-team", "analyst-1", model="haiku", prompt="p")

    def plan_flow_latencies(n: int) -> list[float]:
        done: dict[str, float] = {}

        def run(request_id: str) -> None:
            asyncio.run(
                plan_approval(
                    team="bench-team", member="analyst-1", plan="## Plan", summary="bench",
                    request_id=request_id, timeout_s=600,
                )
            )  # fmt: skip
            done[request_id] = time.perf_counter()

        ids = [f"plan-bench-{i:03d}" for i in range(n)]
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in ids]
        for thread in threads:
            thread.start()
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                rows = {r.request_id: r for r in approval.list_requests("bench-team")}
                if all(i in rows and rows[i].flow_run_id for i in ids) and all(
                    client.read_flow_run(rows[i].flow_run_id).state.is_paused() for i in ids
                ):
                    break
                time.sleep(0.5)
        time.sleep(1.0)
        started: dict[str, float] = {}
        for request_id in ids:
            started[request_id] = time.perf_counter()
            row = approval.decide(request_id, approve=True, decider="coordinator")
            # As `teamflow plan approve` does; the run may have seen the decision in the
            # database first (it looks every 2 s), which is fine.
            with contextlib.suppress(NotPausedError):
                resume_flow_run(
                    row.flow_run_id,
                    run_input={"approve": True, "feedback": None, "approver": "coordinator"},
                )
            time.sleep(SPACING_S)
        for thread in threads:
            thread.join(60)
        return [done[i] - started[i] for i in ids]

    with prefect_test_harness(server_startup_timeout=120):
        print("teamflow plan approval: decision latency and server load (Prefect 3.8.8, SQLite)")
        print(f"decision call -> flow continues, {args.approvals} approvals:")
        calls: list[float] = []
        waits = latencies(teamflow_wait, "tf", args.approvals, calls)
        show("teamflow wait_for_input (event stream)", waits)
        show("  of which the resume_flow_run call itself", calls)
        show(
            "Prefect pause_flow_run (default 10 s poll)",
            latencies(prefect_pause, "pf", args.approvals, []),
        )
        show(
            "plan-approval flow: decide + resume -> run done",
            plan_flow_latencies(args.approvals),
        )
        print(f"API requests per second while {args.waiting} runs wait ({args.window:g} s):")
        for label, make, prefix in (
            ("teamflow wait_for_input", teamflow_wait, "tfw"),
            ("Prefect pause_flow_run", prefect_pause, "pfw"),
        ):
            rate, counted = request_rate(make, prefix, args.waiting, args.window)
            detail = ", ".join(f"{n} x {k}" for k, n in sorted(counted.items())) or "none"
            print(f"  {label:<48} {rate:6.2f} req/s   ({detail})")


def survive_outage(seconds: float) -> None:
    """A paused plan-approval run, the Prefect server stopped for `seconds` and restarted.

    Twice: once decided through `resume_flow_run` after the restart, once decided in
    teamflow's database while the server is down (as `teamflow plan approve` does when it
    cannot reach Prefect). Prints how long the run took to finish after the server was back.
    """
    import signal
    import socket
    import subprocess

    home = Path(tempfile.mkdtemp(prefix="teamflow-outage-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home / "prefect"),
        PREFECT_API_URL=api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="CRITICAL",
        PREFECT_API_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{home / 'prefect.db'}",
    )
    os.environ.update(env)
    os.environ["TEAMFLOW_HOME"] = str(home)
    os.environ["TEAMFLOW_DATABASE_URL"] = f"sqlite:///{home / 'teamflow.db'}"

    def start_server() -> subprocess.Popen:
        server = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
             "--port", str(port), "--analytics-off"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        for _ in range(1200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{api}/health", timeout=1).text.strip() == "true":
                    return server
            time.sleep(0.1)
        raise SystemExit("the Prefect server did not start")

    def stop_server(server: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)

    server = start_server()
    try:
        from prefect.client.orchestration import get_client
        from prefect.flow_runs import resume_flow_run

        from flows.plan_approval import plan_approval
        from models import approval, db
        from models import team as teams

        db.upgrade()
        teams.create_team("outage-team", description="benchmark", lead="coordinator")
        teams.add_member("outage-team", "analyst-1", model="haiku", prompt="p")
        print(f"a paused plan-approval run while the Prefect server is down for {seconds:g} s:")
        for how in ("resume_flow_run after the restart", "decided in the database meanwhile"):
            request_id = approval.new_plan_id()
            done: dict[str, Any] = {}

            def run(request_id: str = request_id, done: dict[str, Any] = done) -> None:
                try:
                    done["result"] = asyncio.run(
                        plan_approval(
                            team="outage-team", member="analyst-1", plan="## Plan",
                            summary="outage", request_id=request_id, timeout_s=3600,
                        )
                    )  # fmt: skip
                except BaseException as exc:
                    done["error"] = exc

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            with get_client(sync_client=True) as client:
                while True:
                    rows = approval.list_requests("outage-team")
                    row = next((r for r in rows if r.request_id == request_id), None)
                    if (
                        row
                        and row.flow_run_id
                        and client.read_flow_run(row.flow_run_id).state.is_paused()
                    ):
                        break
                    time.sleep(0.2)
            stop_server(server)
            if how.startswith("decided"):
                approval.decide(request_id, approve=True, decider="coordinator")
            time.sleep(seconds)
            alive = thread.is_alive()
            server = start_server()
            back = time.perf_counter()
            if how.startswith("resume"):
                resume_flow_run(
                    row.flow_run_id, run_input={"approve": True, "approver": "coordinator"}
                )
            thread.join(120)
            outcome = done.get("result", {}).get("status") or repr(done.get("error"))
            print(
                f"  {how:<40} waited through the outage: {alive};  "
                f"{outcome} {time.perf_counter() - back:.2f} s after the server was back"
            )
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
