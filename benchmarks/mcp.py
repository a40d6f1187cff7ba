"""`teamflow mcp`: tool-call latency over stdio and HTTP beside the CLI, and many members at once.

    .venv/bin/python benchmarks/mcp.py [--calls 200] [--sessions 20] [--database URL] [--json]

On a fresh SQLite database in a temporary folder (or `--database URL`: a PostgreSQL schema
you give, emptied first is up to you), one team with a lead and `--sessions` members, each
with its token. Then:

- latency p50/p95 of `send_message` (a member to the lead) and `read_inbox` (a member's own),
  `--calls` each, over stdio (one `teamflow mcp` process, the member's token in its
  environment) and over streamable HTTP (one `teamflow mcp --http` process, the token as
  `Authorization: Bearer`), beside the same act through the CLI (`teamflow msg send`,
  `teamflow msg inbox`: a process per call, as a script would);
- `--sessions` member sessions over HTTP at once, each sending `--calls / 10` messages and
  reading its inbox as many times: errors, p95 of a call, calls per second, and the server
  process's CPU seconds for the batch (from /proc).

Printed as a table (or JSON with `--json`). Everything it starts is stopped at the end.
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
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path, and this module (`mcp.py`)
# would hide the MCP SDK's `mcp` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
TEAM = "bench-mcp"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def figures(values: list[float]) -> dict[str, float]:
    return {"p50_ms": 1000 * statistics.median(values), "p95_ms": 1000 * percentile(values, 0.95)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed_calls(client, tool: str, arguments: dict[str, Any], count: int) -> list[float]:
    took = []
    for _ in range(count):
        start = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        took.append(time.perf_counter() - start)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result.content[0].text}")
    return took


def stdio_client(token: str):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {**os.environ, "TEAMFLOW_TOKEN": token}
    command = [sys.executable, "-m", "flows.cli", "mcp"]
    return Client(StdioServerParameters(command=command[0], args=command[1:], env=env))


@asynccontextmanager
async def http_client(url: str, token: str):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def the_acts(member: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "send_message": (
            "send_message",
            {
                "team_name": TEAM,
                "type": "message",
                "recipient": "team-lead",
                "content": "progress",
                "summary": "progress",
            },
        ),
        "read_inbox": (
            "read_inbox",
            {"team_name": TEAM, "agent_name": member, "unread_only": False, "mark_as_read": False},
        ),
    }


def cli_latency(member: str, count: int) -> dict[str, list[float]]:
    commands = {
        "send_message": [
            "msg",
            "send",
            TEAM,
            "--to",
            "team-lead",
            "--from",
            member,
            "--text",
            "progress",
            "--summary",
            "progress",
        ],
        "read_inbox": ["msg", "inbox", TEAM, member],
    }
    took: dict[str, list[float]] = {}
    for act, args in commands.items():
        took[act] = []
        for _ in range(count):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "flows.cli", *args], check=True, capture_output=True
            )
            took[act].append(time.perf_counter() - start)
    return took


async def many_sessions(url: str, tokens: dict[str, str], calls: int) -> dict[str, Any]:
    took: list[float] = []
    errors: list[str] = []

    async def member(name: str, token: str) -> None:
        try:
            async with http_client(url, token) as client:
                acts = the_acts(name)
                for _ in range(calls):
                    for tool, arguments in acts.values():
                        start = time.perf_counter()
                        result = await client.call_tool(tool, arguments)
                        took.append(time.perf_counter() - start)
                        if result.is_error:
                            errors.append(result.content[0].text[:200])
        except Exception as exc:  # a session that failed counts, and the others go on
            errors.append(f"{name}: {type(exc).__name__}: {exc}"[:200])

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for name, token in tokens.items():
            group.start_soon(member, name, token)
    wall = time.perf_counter() - start
    return {
        "sessions": len(tokens),
        "calls": len(took),
        "errors": len(errors),
        "error_samples": errors[:3],
        "p95_ms": 1000 * percentile(took, 0.95),
        "calls_per_s": len(took) / wall if wall else 0.0,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--database", help="teamflow's database (default: a new SQLite file)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="teamflow-bench-mcp-") as tmp:
        os.environ["TEAMFLOW_HOME"] = str(Path(tmp) / "home")
        os.environ["TEAMFLOW_DATABASE_URL"] = args.database or f"sqlite:///{tmp}/teamflow.db"
        from models import db, identity, membership

        db.upgrade()
        membership.create_team(TEAM, description="MCP benchmark")
        names = [f"member-{n}" for n in range(1, args.sessions + 1)]
        for name in names:
            membership.add_member(TEAM, name, model="haiku", prompt="p")
        tokens = {name: identity.issue_token(TEAM, name) for name in names}
        first = names[0]
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "mcp", "--http", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("teamflow mcp --http did not start") from None
                    time.sleep(0.05)

            async def latencies() -> dict[str, dict[str, list[float]]]:
                found: dict[str, dict[str, list[float]]] = {"stdio": {}, "http": {}}
                async with stdio_client(tokens[first]) as client:
                    for act, (tool, arguments) in the_acts(first).items():
                        found["stdio"][act] = await timed_calls(client, tool, arguments, args.calls)
                async with http_client(url, tokens[first]) as client:
                    for act, (tool, arguments) in the_acts(first).items():
                        found["http"][act] = await timed_calls(client, tool, arguments, args.calls)
                return found

            measured = anyio.run(latencies)
            measured["cli"] = cli_latency(first, max(1, args.calls // 10))
            cpu_before = cpu_seconds(server.pid)
            crowd = anyio.run(many_sessions, url, tokens, max(1, args.calls // 10))
            crowd["server_cpu_s"] = cpu_seconds(server.pid) - cpu_before
        finally:
            server.terminate()
            server.wait(timeout=30)
            db.dispose_engines()

    report = {
        "latency": {
            door: {act: figures(v) for act, v in acts.items()} for door, acts in measured.items()
        },
        "sessions": crowd,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'door':<6} {'act':<13} {'p50 ms':>8} {'p95 ms':>8}")
    for door, acts in report["latency"].items():
        for act, f in acts.items():
            print(f"{door:<6} {act:<13} {f['p50_ms']:>8.1f} {f['p95_ms']:>8.1f}")
    print(
        f"{crowd['sessions']} member sessions over HTTP at once: {crowd['calls']} calls, "
        f"{crowd['errors']} errors, p95 {crowd['p95_ms']:.1f} ms, "
        f"{crowd['calls_per_s']:.0f} calls/s, server CPU {crowd['server_cpu_s']:.1f} s"
    )
    for sample in crowd["error_samples"]:
        print(f"  error: {sample}")
    return 0 if crowd["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
