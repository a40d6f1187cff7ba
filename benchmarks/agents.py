"""Many agents busy at once: errors, lost work and step latency, on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/agents.py [--agents 50] [--steps 5] [--sleep 0.5]
                                          [--workers 2] [--databases sqlite,postgres]
                                          [--postgres URL] [--keep] [--json]

For each database (`--databases`, default both): a real Prefect server, teamflow's
deployments and `--workers` `teamflow worker` processes (what `benchmarks/team_task.py`'s
throughput part starts), each started with `--limit` `--agents / --workers` (the default,
8, is what `teamflow up` starts), so that every agent can work at once. One team of
`--agents` members, each a scripted agent whose playbook is `--steps` steps of one tool
call (a `script` tool running `sleep --sleep`: the agent's own work, a process as a real
tool is) and a final step that answers. Each member gets a team task of its own, so
`--agents` `team-task` runs work at the same time. Every run is queued in the paused work
pool, the workers start, the pool is resumed, and the benchmark waits for every run to end.
SQLite is both Prefect's and teamflow's database; on PostgreSQL (URL: `--postgres`, default
`TEAMFLOW_TEST_POSTGRES_URL` or the local test database) both get a fresh database and
schema, dropped after.

Printed per database, next to the target (0 errors, 0 lost):

- errors: runs that did not end Completed; lines of the server's and workers' logs that
  report an error (a traceback, an ERROR record, an exception line: what the tests call an
  unclean log), up to the server's stop (what it logs as it stops is not the batch's),
  printed below the table by what they say, most frequent first; and the server's answers
  with status 503 (busy: its database was locked), counted by request in its access log
  (the server logs at INFO for it). Prefect's client tries a request that got a 503 again
  2, 4, 8... s later (a run waits meanwhile, and fails after the sixth try); the worker's
  request labelling a run is tried once and given up (`flows/compat/prefect_worker.py`);
- lost work: tasks not `completed` in teamflow's database; tool calls that left no
  Feedback record (expected: agents x steps); steps missing from the members'
  conversations (agents x (steps + 1)); the lead's `idle_notification`s (one per member);
- step latency p50/p95: a step's wall time beyond its tool's sleep, from what teamflow
  records: each step's assistant message is written to the conversation as the step ends
  (after its tool ran), and the conversation's opening as the member starts, so a step's
  wall time is the time from the previous step's message (or the opening) to its own. What
  is left after the sleep is the orchestration of one step: its inbox read, the step's and
  the tool's Prefect task runs, starting the tool's process, the records;
- how many runs were Running at once at the most (the agents really were busy together),
  the time from the first run's start to the last one's, and the wall time of the batch
  (first run's start to last run's end).

`--keep` keeps the temporary folder (logs, SQLite files) and says where. Everything else
it starts is stopped and removed, also when it fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the test helpers start servers and workers
os.environ["TEAMFLOW_TEST_FORKSERVER"] = "0"  # what it measures starts anew, not forked

TEAM = "busy-team"
LEAD = "lead"
DEPLOYMENT = "team-task/team-task"
POSTGRES_URL = os.environ.get(
    "TEAMFLOW_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SERVER_LOG = {"PREFECT_SERVER_LOGGING_LEVEL": "INFO"}
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
NAP = {
    "tool_id": "nap",
    "type": "script",
    "description": "Sleeps: an agent's work that takes time",
    "command": "sleep {seconds}",
    "input_schema": {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0}},
        "required": ["seconds"],
    },
    "output_schema": {"type": "object"},
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
}
FINISH = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "done"}
# A 503 in uvicorn's access log: `... "PATCH /api/flow_runs/<id>/labels HTTP/1.1" 503 ...`.
_STATUS_503 = re.compile(r'"(\w+) (\S+) HTTP/[\d.]+" 503\b')
TRACEBACK = "Traceback (most recent call last):"  # not shown: the lines after it say more
_TIME = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| ")  # a Prefect log line's time
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _playbook(steps: int, sleep: float) -> list[dict[str, Any]]:
    nap = {"action": "nap", "type": "tool", "params": {"seconds": sleep}}
    step = {"status": "EXECUTING", "thoughts": [], "actions": [nap], "stop": False,
            "response": None}  # fmt: skip
    return [step] * steps + [FINISH]


def _team(agents: int, steps: int, sleep: float) -> list[str]:
    """The team: `agents` scripted members, each `steps` naps and a final answer."""
    from models import db, membership
    from models.tool import ToolDefinition, add_tool

    db.upgrade()
    add_tool(ToolDefinition.model_validate(NAP))
    membership.create_team(TEAM, description="benchmark", lead=LEAD)
    names = [f"agent-{n:03d}" for n in range(1, agents + 1)]
    runtime = {"kind": "scripted", "playbook": _playbook(steps, sleep)}
    for name in names:
        membership.add_member(TEAM, name, model="haiku", prompt="p", runtime=runtime)
    return names


def _timing(runs: list[Any]) -> dict[str, Any]:
    """When the runs ran: the most Running at once, the time from the first one's start to
    the last one's start, and to the last one's end (the batch's wall time)."""
    ran = [r for r in runs if r.start_time and r.end_time]  # a run may end without starting
    if not ran:
        return {"at_once": 0, "starts_within_s": None, "wall_s": None}
    edges = sorted([(r.start_time, 1) for r in ran] + [(r.end_time, -1) for r in ran])
    running = peak = 0
    for _, change in edges:  # at a tie an end (-1) sorts first
        running += change
        peak = max(peak, running)
    first = min(r.start_time for r in ran)
    return {
        "at_once": peak,
        "starts_within_s": round((max(r.start_time for r in ran) - first).total_seconds(), 1),
        "wall_s": round((max(r.end_time for r in ran) - first).total_seconds(), 1),
    }


def _step_latencies(conversation: list[Any], sleep: float) -> list[float]:
    """Each step's wall time beyond its tool's sleep (see the module docstring); every step
    but the last naps."""
    from models.conversation import ConversationRole

    ends = [m.timestamp for m in conversation if m.role is ConversationRole.ASSISTANT]
    starts = [conversation[0].timestamp, *ends[:-1]] if conversation else []
    naps = [sleep] * (len(ends) - 1) + [0.0]
    return [(e - s).total_seconds() - nap for s, e, nap in zip(starts, ends, naps, strict=False)]


def _records(names: list[str], task_ids: dict[str, str], sleep: float) -> dict[str, Any]:
    """What teamflow's database holds after the batch: lost work and the steps' latencies."""
    import sqlalchemy as sa

    from models import inbox
    from models.conversation import ConversationRole, load_conversation
    from models.db import session_scope
    from models.task import list_tasks
    from models.team_config import agent_id
    from models.tool import FeedbackRow

    with session_scope() as s:
        open_tasks = [t.title for t in list_tasks(TEAM, session=s) if t.status != "completed"]
        tool_runs = s.scalar(
            sa.select(sa.func.count()).select_from(FeedbackRow).where(FeedbackRow.exit_code == 0)
        )
        idle_from = {
            r.payload.get("from")
            for r in inbox.messages(TEAM, LEAD, session=s)
            if r.type == "idle_notification" and r.payload
        }
        steps, latencies = 0, []
        for name in names:
            conversation = load_conversation(
                session=s, agent_id=agent_id(name, TEAM), conversation_id=f"task-{task_ids[name]}"
            )
            steps += sum(m.role is ConversationRole.ASSISTANT for m in conversation)
            latencies += _step_latencies(conversation, sleep)
    return {
        "tasks_not_completed": open_tasks,
        "tool_calls_recorded": tool_runs,
        "steps_recorded": steps,
        "idle_notifications": len(idle_from & set(names)),
        "latencies": latencies,
    }


def _log_problems(logs: list[Path]) -> tuple[dict[str, int], dict[str, int]]:
    """The server's 503 answers by request (`PATCH /api/flow_runs/{id}/labels`), from its
    access log, and the error lines of `logs` by what they say (times and ids left out),
    each with its count, most frequent first."""
    from prefect_server import log_errors

    text = "\n".join(log.read_text(errors="replace") for log in logs if log.exists())
    busy = Counter(
        _ID.sub("{id}", f"{method} {path}") for method, path in _STATUS_503.findall(text)
    )

    def where(log: Path) -> str:  # `prefect-server`, `worker-1`
        return log.parent.name if log.stem == "worker" else log.stem

    errors = Counter(
        _ID.sub("{id}", f"{where(log)}: {_TIME.sub('', line)}")
        for log in logs
        for line in log_errors(log)
    )
    return dict(busy.most_common()), dict(errors.most_common())


def measure(database: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One batch of `args.agents` busy agents with both databases on `database`."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_server import prefect_server
    from teamflow_workers import benchmark_databases, register_deployments, run_batch

    from flows import runner
    from models.task import create_task

    postgres_url = args.postgres if database == "postgres" else None
    with contextlib.ExitStack() as stack:
        prefect_url, shared = stack.enter_context(benchmark_databases(tmp, postgres_url))
        names = _team(args.agents, args.steps, args.sleep)
        # At INFO, the server's access log has a line per request: its 503s are counted.
        # It counts the errors in the server's log itself, below.
        server = stack.enter_context(
            prefect_server(tmp, prefect_url, env=SERVER_LOG, clean_log=False)
        )
        register_deployments(server, tmp / "deploy.log")
        stack.enter_context(temporary_settings(updates={PREFECT_API_URL: server.api}))
        client = stack.enter_context(get_client(sync_client=True))
        task_ids: dict[str, str] = {}

        def queue() -> list[Any]:
            run_ids = []
            for name in names:
                task = create_task(TEAM, title=f"work of {name}", assignees=[name])
                task_ids[name] = str(task.id)
                parameters = {"task_id": task_ids[name], "team": TEAM}
                run_ids.append(runner.start(DEPLOYMENT, parameters, require_worker=False).id)
            return run_ids

        # Each worker may run its share of the agents at once: all of them work together.
        limit = -(-args.agents // args.workers)
        runs, workers = run_batch(
            server, tmp, client, queue, count=args.workers, env=shared, limit=limit,
            timeout=1800,  # 50 agents on SQLite took 637 s once (README)
        )  # fmt: skip
        records = _records(names, task_ids, args.sleep)
        # Read while the server still runs (see the module docstring).
        busy, log_errors = _log_problems([server.log, *(w.log for w in workers)])
    latencies = records.pop("latencies")
    cuts = statistics.quantiles(latencies, n=20, method="inclusive") if latencies else [0] * 19
    failed = [f"{r.name}: {r.state.name}: {r.state.message}" for r in runs
              if not r.state.is_completed()]  # fmt: skip
    tool_calls, steps = args.agents * args.steps, args.agents * (args.steps + 1)
    lost = (
        len(records["tasks_not_completed"])
        + (tool_calls - records["tool_calls_recorded"])
        + (steps - records["steps_recorded"])
        + (args.agents - records["idle_notifications"])
    )
    return {
        "database": NAMES[database],
        "agents": args.agents,
        "steps": args.steps,
        "errors": len(failed) + sum(log_errors.values()) + sum(busy.values()),
        "lost": lost,
        "runs_not_completed": failed,
        "log_503": busy,
        "log_errors": log_errors,
        **records,
        "tool_calls_expected": tool_calls,
        "steps_expected": steps,
        "step_latency_p50_s": round(cuts[9], 3),
        "step_latency_p95_s": round(cuts[18], 3),
        **_timing(runs),
    }


def _table(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """The figures of every database side by side, the target beside them."""
    rows = [
        ("runs not Completed", lambda r: len(r["runs_not_completed"]), 0),
        ("error lines in the logs", lambda r: sum(r["log_errors"].values()), 0),
        ("503s (busy) answered", lambda r: sum(r["log_503"].values()), 0),
        ("tasks not completed", lambda r: len(r["tasks_not_completed"]), 0),
        ("tool calls recorded", lambda r: f"{r['tool_calls_recorded']}/{r['tool_calls_expected']}",
         "all"),
        ("steps recorded", lambda r: f"{r['steps_recorded']}/{r['steps_expected']}", "all"),
        ("lead's idle notices", lambda r: f"{r['idle_notifications']}/{r['agents']}", "all"),
        ("runs at once, most", lambda r: r["at_once"], args.agents),
        ("runs started within s", lambda r: r["starts_within_s"], ""),
        ("step latency p50 s", lambda r: r["step_latency_p50_s"], ""),
        ("step latency p95 s", lambda r: r["step_latency_p95_s"], ""),
        ("batch wall time s", lambda r: r["wall_s"], ""),
    ]  # fmt: skip
    lines = [
        f"{args.agents} agents at once, {args.steps} steps each (a tool sleeping {args.sleep} s, "
        f"then an answer), {args.workers} teamflow workers",
        f"{'':<25}" + "".join(f"{r['database']:>12}" for r in results) + f"{'target':>9}",
    ]
    for label, value, target in rows:
        lines.append((f"{label:<25}" + "".join(f"{value(r)!s:>12}" for r in results)
                      + f"{target!s:>9}").rstrip())  # fmt: skip
    for r in results:
        verdict = "met" if r["errors"] == r["lost"] == 0 else "NOT met"
        lines.append(f"{r['database']}: {r['errors']} errors, {r['lost']} lost: target {verdict}")
        lines += [f"  503 x{count}: {request}" for request, count in r["log_503"].items()]
        lines += [f"  {line}" for line in r["runs_not_completed"]]
        said = [(line, n) for line, n in r["log_errors"].items() if not line.endswith(TRACEBACK)]
        lines += [f"  x{n}: {line[:150]}" for line, n in said[:12]]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50, help="members working at once")
    parser.add_argument("--steps", type=int, default=5, help="tool steps per agent")
    parser.add_argument("--sleep", type=float, default=0.5, help="seconds each tool sleeps")
    parser.add_argument("--workers", type=int, default=2, help="teamflow worker processes")
    parser.add_argument(
        "--databases", default="sqlite,postgres", help="sqlite, postgres or both (comma)"
    )
    parser.add_argument("--postgres", default=POSTGRES_URL, metavar="URL",
                        help=f"the PostgreSQL server (default {POSTGRES_URL})")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    if not databases or set(databases) - set(NAMES):
        parser.error("--databases is sqlite, postgres or sqlite,postgres")
    from teamflow_workers import benchmark_environment

    benchmark_environment()

    tmp = Path(tempfile.mkdtemp(prefix="teamflow-bench-"))
    try:
        results = []
        for database in databases:
            (tmp / database).mkdir()
            results.append(measure(database, args, tmp / database))
    finally:
        if args.keep:
            print(f"kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    else:
        print("\n".join(_table(results, args)))


if __name__ == "__main__":
    main()
