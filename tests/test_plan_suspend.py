"""Long plan waits of deployed runs: suspended, the worker released, resumed as a person would.

One real Prefect server (restarted in one test), `teamflow up` reusing it (the deployments
of `prefect.yaml` and a `teamflow worker`), and teamflow's database on SQLite in the test's
own home. Deployed `plan-approval` runs wait in process for `TEAMFLOW_SUSPEND_AFTER_SECONDS`
(1 s here), then suspend; `teamflow plan approve` or teamflow's clock (at the deadline)
resumes them, and the worker runs them again to their end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect_server import (
    ROOT,
    Server,
    kill_pids,
    prefect_server,
    restart,
    start,
    started_pids,
    stop,
    talk_to,
    teamflow,
    wait_for_up,
    wait_until,
)

from models import approval, db, inbox, team_settings
from models.team import list_teams

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    """A Prefect server and `teamflow up` serving the deployments on it."""
    tmp = tmp_path_factory.mktemp("suspend")
    with prefect_server(tmp) as server:
        env = {
            **server.env,
            "TEAMFLOW_DATABASE_URL": f"sqlite:///{tmp / 'teamflow.db'}",
            "TEAMFLOW_SUSPEND_AFTER_SECONDS": "1",
        }
        env.pop("PREFECT_API_DATABASE_CONNECTION_URL")
        process = start(["up"], env, tmp / "up.log")
        pids: list[int] = []
        try:
            output = wait_for_up(process, tmp / "up.log")
            pids = started_pids(output)
            yield server, env
        finally:
            stop(process)
            kill_pids(pids)


@pytest.fixture
def team(served: tuple[Server, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> Any:
    """research-team in the served database, this test process pointed at both."""
    server, env = served
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", env["TEAMFLOW_DATABASE_URL"])
    monkeypatch.setenv("TEAMFLOW_HOME", env["TEAMFLOW_HOME"])
    db.dispose_engines()
    if not any(t.name == TEAM for t in list_teams()):
        research_team()
    with talk_to(server.api):
        yield server, env
    db.dispose_engines()


def request(env: dict[str, str], *extra: str) -> dict[str, Any]:
    done = teamflow(
        ["plan", "request", TEAM, "--from", "analyst-1", "--plan", "## Plan\n1. Load Q4 data",
         "--summary", "Q4 plan", "--json", *extra],
        env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_state(run_id: str) -> Any:
    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id)).state


def wait_suspended(run_id: str) -> None:
    wait_until(lambda: run_state(run_id).name == "Suspended", 180, "the run to suspend")


def wait_final(run_id: str) -> Any:
    return wait_until(lambda: (s := run_state(run_id)).is_final() and s, 240, "the run to end")


def task_run_states(run_id: str, name: str) -> list[str]:
    """The state names of the run's task runs called `name-...` (one per call)."""
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(run_id)]))
        )
    # A task run's state reaches the server as an event, after the run: None until then.
    return sorted(r.state.name if r.state else "-" for r in runs if r.name.startswith(f"{name}-"))


def messages_of(member: str, kind: str) -> list[Any]:
    return [m for m in inbox.messages(TEAM, member) if m.type == kind]


def test_a_suspended_plan_survives_a_server_restart_and_resumes_with_the_decision(
    team: tuple[Server, dict[str, str]],
) -> None:
    server, env = team
    asked = request(env)
    run_id, request_id = asked["flowRunId"], asked["requestId"]
    wait_suspended(run_id)
    # Suspended, the run holds no process: the worker is free, and the server may go away
    # for longer than a Prefect client retries (about a minute for an in-process pause).
    stop(server.process)
    time.sleep(5)
    restart(server)
    assert run_state(run_id).name == "Suspended"

    decided = teamflow(["plan", "approve", request_id, "--feedback", "Go ahead"], env)
    assert decided.returncode == 0, decided.stderr
    state = wait_final(run_id)
    assert state.is_completed(), state
    row = approval.get_request(request_id)
    assert (row.status, row.decided_by, row.feedback) == ("approved", "coordinator", "Go ahead")
    # Run again from the start after the resume, the run did not redo finished work:
    # the request was recorded once (the second call is a cache hit), one message each way.
    wait_until(
        lambda: task_run_states(run_id, "record-plan-request") == ["Cached", "Completed"],
        60,
        "the record-plan-request task runs' states (a cache hit after the resume)",
    )
    assert len([m for m in messages_of("coordinator", "plan_approval_request")
                if m.payload["requestId"] == request_id]) == 1  # fmt: skip
    [response] = [m for m in messages_of("analyst-1", "plan_approval_response")
                  if m.payload["requestId"] == request_id]  # fmt: skip
    assert response.payload["approve"] is True
    # The record outlives the run: delete it from Prefect, and teamflow still knows.
    server.deleted_runs.add(run_id)
    with get_client(sync_client=True) as client:
        client.delete_flow_run(UUID(run_id))
    listed = teamflow(["plan", "list", TEAM, "--json"], env)
    [kept] = [p for p in json.loads(listed.stdout) if p["requestId"] == request_id]
    assert (kept["status"], kept["decidedBy"], kept["flowRunId"]) == (
        "approved", "coordinator", run_id,
    )  # fmt: skip


def test_a_suspended_plan_is_decided_by_its_timeout_policy_at_the_deadline(
    team: tuple[Server, dict[str, str]],
) -> None:
    _server, env = team
    # 20 s: time for a busy worker to start the run and suspend it before the deadline (the
    # Suspended state is not polled for: it may last less than a poll on a loaded machine).
    asked = request(env, "--timeout", "20", "--policy", "deny")
    run_id, request_id = asked["flowRunId"], asked["requestId"]
    # Nobody decides: teamflow's clock in the worker applies the policy and resumes the run.
    state = wait_final(run_id)
    assert state.is_completed(), state
    with get_client(sync_client=True) as client:
        history = [s.name for s in client.read_flow_run_states(UUID(run_id))]
    assert "Suspended" in history, history
    row = approval.get_request(request_id)
    assert (row.status, row.decided_by) == ("denied", "system")
    assert row.cause == "no decision within 20 s: denied by the timeout policy"
    assert row.decided_at >= row.deadline
    [response] = [m for m in messages_of("analyst-1", "plan_approval_response")
                  if m.payload["requestId"] == request_id]  # fmt: skip
    assert response.payload["approve"] is False


def test_a_suspended_plan_resumed_from_the_form_records_the_decision_of_the_form(
    team: tuple[Server, dict[str, str]],
) -> None:
    """As the Prefect UI does: resume with the form's input, nothing recorded beforehand."""
    from prefect.flow_runs import resume_flow_run

    _server, env = team
    asked = request(env)
    run_id, request_id = asked["flowRunId"], asked["requestId"]
    wait_suspended(run_id)
    resume_flow_run(
        UUID(run_id),
        run_input={"decision": "deny", "feedback": "Add a check", "approver": "coordinator"},
    )
    assert wait_final(run_id).is_completed()
    row = approval.get_request(request_id)
    assert (row.status, row.decided_by, row.feedback) == ("denied", "coordinator", "Add a check")
    wait_until(lambda: task_run_states(run_id, "record-decision") == ["Completed"], 60, "the state")


WAIT_IN_PROCESS = """
import asyncio, json, sys
from flows.plan_approval import plan_approval
result = asyncio.run(plan_approval(team=sys.argv[1], member="analyst-1", plan="## Plan",
                                   summary="outage", request_id=sys.argv[2], timeout_s=3600))
print(json.dumps(result))
"""


def test_a_plan_waiting_in_process_outlives_a_server_outage_longer_than_client_retries(
    team: tuple[Server, dict[str, str]], tmp_path: Path
) -> None:
    """A run that is not deployed cannot suspend: it waits in its process, through an
    outage longer than its Prefect client retries (one retry here, so seconds stand in for
    the minute of the default budget), and takes the decision made after the restart."""
    server, env = team
    request_id = approval.new_plan_id()
    log, printed = tmp_path / "run.log", tmp_path / "result.json"
    with log.open("wb") as err, printed.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", WAIT_IN_PROCESS, TEAM, request_id],
            env={**env, "PREFECT_CLIENT_MAX_RETRIES": "1"}, cwd=ROOT,
            stdout=out, stderr=err, start_new_session=True,
        )  # fmt: skip
    try:
        row = wait_until(
            lambda: (r := _request(request_id)) and r.flow_run_id and r, 180, "the request"
        )
        wait_until(lambda: run_state(row.flow_run_id).is_paused(), 180, "the run to pause")
        stop(server.process)
        time.sleep(12)  # well past one retry's backoff
        assert process.poll() is None, log.read_text()[-3000:]
        restart(server)
        decided = teamflow(["plan", "deny", request_id, "--feedback", "Smaller scope"], env)
        assert decided.returncode == 0, decided.stderr
        # A bound against a hang only: a loaded machine restarts the server slowly.
        assert process.wait(timeout=240) == 0, log.read_text()[-3000:]
    finally:
        stop(process)
    result = json.loads(printed.read_text())
    assert (result["status"], result["decidedBy"], result["feedback"]) == (
        "denied", "coordinator", "Smaller scope",
    )  # fmt: skip
    assert run_state(row.flow_run_id).is_completed()


def _request(request_id: str) -> Any:
    try:
        return approval.get_request(request_id)
    except team_settings.ApprovalError:
        return None
