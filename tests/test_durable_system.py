"""Durable members under `teamflow up`, end to end (issue 31, items 1 and 4).

Real processes: `teamflow up` on a free port with its own homes (its Prefect server, its
worker, the crash automation and the watchdog), teamflow's database on SQLite or on
PostgreSQL, and a member whose agent is a real program (`command` runtime) that calls a tool
appending one line per step to a file. The agent holds at a chosen step until the test says
go, so the test knows where the member is when it kills (or freezes) the worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from prefect_server import (
    base_env,
    free_port,
    kill_pids,
    pid_alive,
    start,
    started_by_name,
    started_pids,
    stop,
    talk_to,
    teamflow,
    wait_for_up,
    wait_until,
)
from teamflow_workers import postgres_databases

from models import db, inbox, membership
from models.task import get_task
from models.tool import ToolDefinition, add_tool

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

POSTGRES_URL = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")
MEMBER = "runner"
STEPS = 4
"""Steps that each append a line (`step-1` ... `step-4`); the next one stops."""
ASYNC_STEP = 2
"""This step's tool call is ASYNC: its own run, its result in the member's inbox."""

AGENT = """
import json, os, pathlib, sys, time
request = json.load(sys.stdin)
marks = pathlib.Path(os.environ["AGENT_MARKS"])
marks.mkdir(exist_ok=True)
n = 1 + sum(1 for m in request["conversation"] if m["role"] == "assistant")
(marks / f"asked-{n}-{os.getpid()}").write_text("")
if n == int(os.environ["AGENT_HOLD"]) and not (marks / "go").exists():
    (marks / f"agent-{os.getpid()}").write_text("")
    while not (marks / "go").exists():
        time.sleep(0.1)
if n <= int(os.environ["AGENT_STEPS"]):
    mode = "ASYNC" if n == int(os.environ["AGENT_ASYNC"]) else "SYNC"
    action = {"action": "append_line", "type": "tool", "params": {"line": f"step-{n}"},
              "execution": mode}
    out = {"status": "EXECUTING", "thoughts": [], "actions": [action], "stop": False,
           "response": None}
else:
    out = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "done"}
print(json.dumps(out))
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def up_env(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """The environment of `teamflow up` (own port and homes; teamflow's database on SQLite
    or PostgreSQL); this process shares it."""
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}/api")
    env |= {
        "TEAMFLOW_CRASH_AFTER_SECONDS": "45",
        "TEAMFLOW_WATCHDOG_EVERY": "5s",
        "TEAMFLOW_RESUME_BACKOFF_SECONDS": "1",
        "TEAMFLOW_WORKER_ALIVE_SECONDS": "20",
    }
    with contextlib.ExitStack() as stack:
        if request.param == "postgres":
            if not POSTGRES_URL:
                pytest.skip("TEAMFLOW_TEST_POSTGRES_URL is not set")
            _, url = stack.enter_context(postgres_databases(POSTGRES_URL))
            env["TEAMFLOW_DATABASE_URL"] = url
        else:
            monkeypatch.delenv("TEAMFLOW_DATABASE_URL", raising=False)
        for name in ("TEAMFLOW_HOME", "PREFECT_HOME", "TEAMFLOW_DATABASE_URL"):
            if name in env:
                monkeypatch.setenv(name, env[name])
        db.dispose_engines()
        yield env
        db.dispose_engines()


def append_tool(lines: Path) -> None:
    """`append_line`: appends its `line` param to `lines` (a side effect a test can count)."""
    code = (
        "import json, sys; p = json.load(sys.stdin); "
        f"open({str(lines)!r}, 'a').write(p['line'] + chr(10)); print('{{}}')"
    )
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": "append_line",
                "type": "script",
                "description": "Appends a line to the test's file",
                "command": f'{sys.executable} -c "{code}"',
                "input_schema": {
                    "type": "object",
                    "properties": {"line": {"type": "string"}},
                    "required": ["line"],
                },
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )


def line_member(tmp_path: Path, hold: int) -> Path:
    """`runner`, whose agent appends a line per step and holds at step `hold` until
    `marks/go` exists. Returns the marks folder."""
    script, marks = tmp_path / "agent.py", tmp_path / "marks"
    script.write_text(AGENT)
    env = {"AGENT_MARKS": str(marks), "AGENT_HOLD": str(hold), "AGENT_STEPS": str(STEPS),
           "AGENT_ASYNC": str(ASYNC_STEP)}  # fmt: skip
    membership.add_member(
        TEAM, MEMBER, model="haiku", prompt="p",
        runtime={"kind": "command", "argv": [sys.executable, str(script)], "timeout": 900,
                 "env": env},
    )  # fmt: skip
    return marks


def held_agents(marks: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("agent-")) for p in marks.glob("agent-*"))


def asked(marks: Path) -> Counter[int]:
    """How many times the agent was asked for each step."""
    return Counter(int(p.name.split("-")[1]) for p in marks.glob("asked-*"))


def flow_run(api: str, run_id: str) -> Any:
    with talk_to(api), get_client(sync_client=True) as c:
        return c.read_flow_run(UUID(run_id))


def async_result_arrived() -> bool:
    rows = inbox.messages(TEAM, MEMBER, sender="system")
    return any(r.type == "tool_result" for r in rows)


def start_line_task(env: dict[str, str]) -> tuple[str, str]:
    created = teamflow(["task", "create", TEAM, "--title", "Lines", "--assignee", MEMBER], env)
    assert created.returncode == 0, created.stderr
    task_id = created.stdout.strip()
    ran = teamflow(["task", "run", task_id, "--json"], env)
    assert ran.returncode == 0, ran.stderr
    return task_id, json.loads(ran.stdout)["flow_run_id"]


def shown(task_id: str, env: dict[str, str]) -> dict[str, Any]:
    result = teamflow(["task", "show", task_id, "--json"], env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_worker_killed_mid_task_is_resumed_and_each_tool_call_ran_once(
    up_env: dict[str, str], tmp_path: Path
) -> None:
    """kill -9 of the worker while the member's agent thinks about step 3 (steps 1 and 2
    done, step 2's ASYNC result delivered): `up` marks the run Crashed as it restarts the
    worker (the test waits less than the automation's 45 s), the watchdog resumes the task
    in a new run (in the worker `up` started again), which goes on from step 3: steps 1
    and 2 are neither asked for again nor run again. Each step's line is in the file
    exactly once, and `task show` counts the resume."""
    env, api = up_env, up_env["PREFECT_API_URL"]
    log = tmp_path / "up.log"
    process = start(["up"], env, log)
    pids: list[int] = []
    marks = tmp_path / "marks"
    try:
        output = wait_for_up(process, log)
        pids = started_pids(output)
        worker_pid = started_by_name(output)["worker"]
        db.upgrade()
        research_team()
        lines = tmp_path / "lines.txt"
        append_tool(lines)
        marks = line_member(tmp_path, hold=3)
        task_id, run_id = start_line_task(env)
        [agent] = wait_until(lambda: held_agents(marks), 180, "the agent to hold at step 3")
        wait_until(async_result_arrived, 60, "step 2's ASYNC result")
        assert lines.read_text().split() == ["step-1", "step-2"]

        os.kill(worker_pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(agent), 30, "the agent to die with its worker")
        (marks / "go").write_text("")
        text = wait_until(lambda: "restarted, pid" in (t := log.read_text()) and t, 180, "worker")
        pids += started_pids(text.replace("restarted, pid", "started, pid"))

        task = wait_until(
            lambda: (t := get_task(task_id)).status in ("completed", "archived") and t,
            300, "the task to be resumed and to complete", interval=1,
        )  # fmt: skip
        assert task.status == "completed", task.reason
        assert Counter(lines.read_text().split()) == {f"step-{n}": 1 for n in range(1, 5)}
        counts = asked(marks)
        assert counts[1] == counts[2] == 1, counts  # recorded responses: not asked again
        assert counts[3] == 2  # the step the agent was thinking about when it died
        data = shown(task_id, env)
        assert data["resumes"] == 1 and data["run_id"] not in (None, run_id), data
        assert "resumed (1 of 3)" in data["reason"]
        first = flow_run(api, run_id)
        assert first.state.is_crashed(), first.state
        assert f"(pid {worker_pid}) died (exit -9)" in first.state.message
        resume = flow_run(api, data["run_id"])
        assert resume.state.is_completed() and "resume" in resume.tags, resume.state
        assert resume.name.endswith("resume 1"), resume.name
    finally:
        stop(process)
        kill_pids(pids)
        for pid in held_agents(marks):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
