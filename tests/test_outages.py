"""Crashes and outages under `teamflow up`: nothing lost, nothing stuck (issue 18, items 5-7).

Real processes throughout: `teamflow up` on a free port with its own homes, a Prefect server
(its own, or one `up` reuses so the test can stop and restart it), a `teamflow worker`, and a
member whose agent is a real program (`command` runtime) that writes its pid and then works
for ten minutes, unless told to answer at once. Every process a test starts is stopped in a
`finally`, by process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from prefect_server import (
    ROOT,
    Server,
    base_env,
    free_port,
    kill_pids,
    pid_alive,
    prefect_server,
    restart,
    start,
    started_by_name,
    started_pids,
    stop,
    talk_to,
    teamflow,
    wait_for_up,
    wait_until,
)

from flows.tools import run_process
from flows.up import Restarts
from models import approval, db, membership

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

AGENT = """
import json, os, pathlib, sys, time
json.load(sys.stdin)
marks = pathlib.Path(os.environ["AGENT_MARKS"])
marks.mkdir(exist_ok=True)
(marks / f"agent-{os.getpid()}").write_text("")
if not (marks / "fast").exists():
    time.sleep(600)
print(json.dumps({"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True,
                  "response": "done"}))
"""


def agent_pids(marks: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("agent-")) for p in marks.glob("agent-*"))


def flow_run_state(api: str, run_id: str) -> Any:
    with talk_to(api), get_client(sync_client=True) as c:
        return c.read_flow_run(UUID(run_id)).state


def slow_member(tmp_path: Path) -> Path:
    """`runner`, whose agent program works for ten minutes until `marks/fast` exists."""
    script, marks = tmp_path / "agent.py", tmp_path / "marks"
    script.write_text(AGENT)
    membership.add_member(
        TEAM, "runner", model="haiku", prompt="p",
        runtime={"kind": "command", "argv": [sys.executable, str(script)], "timeout": 900,
                 "env": {"AGENT_MARKS": str(marks)}},
    )  # fmt: skip
    return marks


def start_task(env: dict[str, str]) -> tuple[str, str]:
    """A task for `runner`, started with `teamflow task run`; its id and its run's id."""
    created = teamflow(["task", "create", TEAM, "--title", "Slow", "--assignee", "runner"], env)
    assert created.returncode == 0, created.stderr
    task_id = created.stdout.strip()
    ran = teamflow(["task", "run", task_id, "--json"], env)
    assert ran.returncode == 0, ran.stderr
    return task_id, json.loads(ran.stdout)["flow_run_id"]


@pytest.fixture
def up_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of `teamflow up` (own port and homes); this process shares it."""
    env = base_env(tmp_path, f"http://127.0.0.1:{free_port()}/api")
    for name in ("TEAMFLOW_HOME", "PREFECT_HOME"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("TEAMFLOW_DATABASE_URL", raising=False)
    db.dispose_engines()
    yield env
    db.dispose_engines()


# --- agents die with their worker ----------------------------------------------------------

PARENT = """
import sys
from flows.tools import run_process
run_process([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); "
             "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)", sys.argv[1]],
            timeout=900)
"""


def test_an_agent_program_dies_with_the_process_that_ran_it(tmp_path: Path) -> None:
    """`run_process` (every agent command and tool) puts the program in its own process
    group, so a timeout kills all of it, and ties it to its parent: a worker killed with
    SIGKILL takes it along instead of leaving it orphaned."""
    pid_file = tmp_path / "agent.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.replace("sys.argv[1]", repr(str(pid_file)))],
        cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    agent = None
    try:
        agent = wait_until(
            lambda: pid_file.exists() and pid_file.read_text() and int(pid_file.read_text()),
            60,
            "the agent program to start",
        )
        assert pid_alive(agent)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not pid_alive(agent), 30, "the orphaned agent program to die")
    finally:
        stop(parent)
        if agent is not None and pid_alive(agent):
            os.kill(agent, signal.SIGKILL)
    assert run_process(["true"]).exit_code == 0  # programs still run as before


# --- item 5: a killed worker -----------------------------------------------------------------


def test_a_worker_that_keeps_dying_is_restarted_ever_later_until_it_holds() -> None:
    restarts = Restarts(first=1, most=8, stable=120)
    waits = [restarts.after_death(lived=3) for _ in range(6)]
    assert waits == [1, 2, 4, 8, 8, 8]
    assert restarts.after_death(lived=121) == 1  # it held a while: the count starts again
    assert restarts.after_death(lived=3) == 2


def up_on(server: Server, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a `teamflow up` that reuses `server` (so the test can stop it)."""
    env = {
        **server.env,
        "TEAMFLOW_HOME": str(tmp_path / "teamflow-home"),
        "PREFECT_HOME": str(tmp_path / "up-prefect-home"),
        **extra,
    }
    env.pop("PREFECT_API_DATABASE_CONNECTION_URL")
    return env


def test_sigterm_while_the_server_is_down_stops_everything_cleanly(
    up_env: dict[str, str], tmp_path: Path
) -> None:
    """`teamflow up` reusing a server, a member's agent at work; the server goes away;
    SIGTERM to `up`: it exits 0 without a traceback, and the worker and the agent are gone."""
    with prefect_server(tmp_path / "server") as server:
        env = up_on(server, tmp_path)
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
            marks = slow_member(tmp_path)
            start_task(env)
            [agent] = wait_until(lambda: agent_pids(marks), 120, "the agent program to start")

            stop(server.process)
            time.sleep(3)  # up and its worker notice nothing for a moment; then the signal
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(timeout=120) == 0
            text = log.read_text()
            assert "Traceback" not in text, text
            assert "stopping what teamflow up started" in text
            assert not pid_alive(worker_pid)
            assert not pid_alive(agent)
        finally:
            stop(process)
            kill_pids(pids)
            for pid in agent_pids(marks):
                if pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)


def test_a_plan_decided_while_the_server_was_away_reaches_its_waiting_run(
    up_env: dict[str, str], tmp_path: Path
) -> None:
    """A plan-approval run waits in its worker; the Prefect server stops for longer than the
    Prefect client's retries and Prefect's worker's patience (both shortened here: no retry,
    a poll every 0.5 s, after which Prefect's worker gives up within a minute of failed
    polls); `teamflow plan approve` records the decision meanwhile. Once the server is back,
    the run takes the decision and completes, in the worker `teamflow up` started."""
    with prefect_server(tmp_path / "server") as server:
        env = up_on(
            server, tmp_path,
            PREFECT_CLIENT_MAX_RETRIES="0",
            PREFECT_WORKER_QUERY_SECONDS="0.5",
            PREFECT_WORKER_HEARTBEAT_SECONDS=str(WORKER_HEARTBEAT_S),
            TEAMFLOW_SUSPEND_AFTER_SECONDS="3600",  # waits in process, as a run does at first
        )  # fmt: skip
        cli_env = up_on(server, tmp_path)  # the CLI keeps Prefect's retries (a busy 503)
        log = tmp_path / "up.log"
        process = start(["up"], env, log)
        pids: list[int] = []
        try:
            output = wait_for_up(process, log)
            pids = started_pids(output)
            worker_pid = started_by_name(output)["worker"]
            db.upgrade()
            research_team()
            asked = teamflow(
                ["plan", "request", TEAM, "--from", "analyst-1", "--plan", "## Plan\n1. Load",
                 "--summary", "Q4 plan", "--json"],
                cli_env,
            )  # fmt: skip
            assert asked.returncode == 0, asked.stderr
            run_id, request_id = (json.loads(asked.stdout)[k] for k in ("flowRunId", "requestId"))
            wait_until(lambda: flow_run_state(server.api, run_id).is_paused(), 120, "the wait")

            stop(server.process)
            decided = teamflow(["plan", "approve", request_id, "--feedback", "Go"], cli_env)
            assert decided.returncode == 0, decided.stderr
            assert approval.get_request(request_id).status == "approved"
            time.sleep(OUTAGE_S)  # longer than the client's retries
            restart(server)

            state = wait_until(
                lambda: (s := flow_run_state(server.api, run_id)).is_final() and s,
                120,
                "the run to take the decision",
                interval=0.5,
            )
            assert state.is_completed(), state
            # And teamflow goes on after the outage: once the worker is back (it beats at
            # once; the run above may hear of the server first), it takes the next plan.
            wait_until(lambda: pool_ready(server.api), 180, "the worker to be back")
            again = teamflow(
                ["plan", "request", TEAM, "--from", "analyst-1", "--plan", "## Plan 2",
                 "--summary", "after", "--json"],
                cli_env,
            )  # fmt: skip
            assert again.returncode == 0, again.stderr + worker_log(tmp_path)
            second = json.loads(again.stdout)
            wait_until(
                lambda: flow_run_state(server.api, second["flowRunId"]).is_paused(), 120, "wait 2"
            )
            assert teamflow(["plan", "approve", second["requestId"]], cli_env).returncode == 0
            wait_until(
                lambda: flow_run_state(server.api, second["flowRunId"]).is_completed(),
                120,
                "the second plan to complete",
            )
            assert process.poll() is None, log.read_text()
            assert pid_alive(worker_pid) and "restarted" not in log.read_text()
        finally:
            stop(process)
            kill_pids(pids)


WORKER_HEARTBEAT_S = 10
"""The worker's heartbeat in the outage test (Prefect's default: 30 s). The server counts a
worker offline after three missed heartbeats (30 s here, 90 s by default), and its pool then
reads "not ready" until a worker beats again: the outage below outlasts that too."""

OUTAGE_S = float(os.environ.get("TEAMFLOW_TEST_OUTAGE_SECONDS") or 45)
"""How long the server stays away. Prefect 3.8.8's worker (`critical_service_loop`, backoff=4)
exits after four rounds of three failed polls, its interval doubling each round: at a 0.5 s
poll that is 12 failures over about 22 s (29 s at most with its +-30 % jitter). The outage
outlasts it, and the pool's offline window (`WORKER_HEARTBEAT_S`), by half as much again.
(It was 90 s, sized for the default 30 s heartbeat's 90 s window; the client's retries are
off for `up` here, `PREFECT_CLIENT_MAX_RETRIES=0`, so they add nothing.)"""


def worker_log(tmp_path: Path) -> str:
    """The end of the worker's log under a test's `teamflow up` (for a failure's message)."""
    logs = sorted(tmp_path.glob("**/logs/worker.log"))
    return "\n".join(f"{p}:\n{p.read_text(errors='replace')[-4000:]}" for p in logs)


def pool_ready(api: str) -> bool:
    """Whether the server counts a worker as pulling from the `teamflow` pool."""
    with talk_to(api), get_client(sync_client=True) as client:
        return client.read_work_pool("teamflow").status.value == "READY"


# --- issue 31, item 2: `up` survives its server, and nothing survives `up` -------------------
