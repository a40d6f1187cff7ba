"""A team-task run whose step's tool calls wait long suspends; decided later, it goes on.

A real Prefect server with teamflow's deployments, `teamflow worker` processes and teamflow's
database (SQLite or PostgreSQL) shared with this test. A scripted member's step asks for a
call its tool policy names; the `tool-approval` run waits in process for
`TEAMFLOW_SUSPEND_AFTER_SECONDS` (1 s here), then the team-task run suspends: its worker is
free. The worker is stopped; `teamflow action approve` records the decision and resumes the
run; a new worker runs the flow again from the start, the member goes on with its held step
(its agent is not asked again), and the call runs exactly once. Nobody deciding lets
teamflow's clock apply the timeout policy and resume the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from cli_runner import teamflow
from prefect_server import talk_to, wait_until
from teamflow_workers import teamflow_workers

from models import membership, tool_approval
from models import team as teams
from models.task import create_task, get_task
from models.tool import ToolDefinition, add_tool

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

TEAM = "research-team"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def served(
    deployed_prefect, db_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The module's Prefect server with the deployments; the workers are the test's to
    start. Its runs are told apart by id."""
    server = deployed_prefect
    shared = {
        "TEAMFLOW_DATABASE_URL": db_url,
        "TEAMFLOW_HOME": str(home),
        "TEAMFLOW_SUSPEND_AFTER_SECONDS": "1",
    }
    for key in ("PREFECT_API_URL", "PREFECT_HOME"):
        monkeypatch.setenv(key, server.env[key])
    # This process's Prefect settings too (another module's server may have been its API).
    with talk_to(server.api):
        yield server, shared


def team_with_a_guarded_tool(calls_file: Path) -> None:
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    writer = (
        "import sys; open(sys.argv[1], 'a').write(sys.stdin.read().strip() + chr(10)); print(1)"
    )
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": "count_rows", "type": "script", "description": "Counts the rows",
                "command": f'{sys.executable} -c "{writer}" {calls_file}',
                "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                 "required": ["n"]},
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )  # fmt: skip
    step = {"status": "EXECUTING", "thoughts": [{"type": "PLAN", "content": "count"}],
            "actions": [{"action": "count_rows", "type": "tool", "params": {"n": 3},
                         "execution": "SYNC"}], "stop": False, "response": None}  # fmt: skip
    done = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "3"}
    membership.add_member(
        TEAM, "analyst-1", model="haiku", prompt="You count.",
        runtime={"kind": "scripted", "playbook": [step, done]},
    )  # fmt: skip
    teams.update_settings(TEAM, {"approve_tools": ["count_rows"]})


def run_state(run_id: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id)).state


def start(title: str) -> tuple[str, str]:
    from flows.runner import start_task

    task = create_task(TEAM, title=title, assignees=["analyst-1"])
    return str(task.id), str(start_task(str(task.id)).id)


def suspended_call(run_id: str) -> tool_approval.ToolApproval:
    """The waiting call, once the team-task run `run_id` suspended for it."""

    def ready() -> tool_approval.ToolApproval | None:
        rows = tool_approval.list_calls(TEAM, pending=True)
        if rows and rows[0].flow_run_id == run_id and run_state(run_id).name == "Suspended":
            return rows[0]
        return None

    return wait_until(ready, 180, "the team-task run to suspend", interval=0.2)


def final(run_id: str) -> Any:
    return wait_until(lambda: (s := run_state(run_id)).is_final() and s, 240, "the run's end")


def test_a_suspended_tool_approval_decided_after_a_worker_restart_runs_the_call_once(
    served, tmp_path: Path
) -> None:
    server, shared = served
    calls_file = tmp_path / "calls.txt"
    team_with_a_guarded_tool(calls_file)
    with teamflow_workers(server, tmp_path / "first", 1, env=shared):
        task_id, run_id = start("Count")
        call = suspended_call(run_id)
    # The worker is gone; the run, suspended, holds no process. Decide now.
    decided = teamflow(["action", "approve", call.call_id], dict(os.environ), cwd=ROOT)
    assert decided.returncode == 0, decided.stderr
    assert "not resumed" not in decided.stderr
    assert not calls_file.exists()  # nothing ran before its decision
    with teamflow_workers(server, tmp_path / "second", 1, env=shared):
        state = final(run_id)
    assert state.is_completed(), state
    assert calls_file.read_text().splitlines() == ['{"n": 3}']  # exactly once
    row = tool_approval.get_call(call.call_id)
    assert (row.status, row.decided_by) == ("approved", "coordinator")
    assert row.executed_at is not None
    assert get_task(task_id).status == "completed"
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        history = [s.name for s in client.read_flow_run_states(UUID(run_id))]
    assert "Suspended" in history, history


def test_a_suspended_tool_approval_nobody_decides_is_decided_by_the_clock(
    served, tmp_path: Path
) -> None:
    server, shared = served
    calls_file = tmp_path / "calls.txt"
    team_with_a_guarded_tool(calls_file)
    # 20 s: time for a busy worker to start the run and suspend it before the deadline.
    teams.update_settings(TEAM, {"tool_timeout_seconds": 20, "tool_timeout_policy": "deny"})
    with teamflow_workers(server, tmp_path / "only", 1, env=shared):
        _task, run_id = start("Count")
        call = suspended_call(run_id)
        state = final(run_id)
    assert state.is_completed(), state  # the member got a FAILURE result and went on
    assert not calls_file.exists()
    row = tool_approval.get_call(call.call_id)
    assert (row.status, row.decided_by, row.cause) == (
        "rejected", "system", "denied by the timeout policy",
    )  # fmt: skip
    assert row.executed_at is None


def test_a_suspended_run_resumed_from_its_form_records_the_decisions_of_the_form(
    served, tmp_path: Path
) -> None:
    """As the Prefect UI does: resume the suspended team-task run with its form's input,
    nothing recorded beforehand; the run records the edit itself and runs the call so."""
    from prefect.flow_runs import resume_flow_run

    server, shared = served
    calls_file = tmp_path / "calls.txt"
    team_with_a_guarded_tool(calls_file)
    with teamflow_workers(server, tmp_path / "only", 1, env=shared):
        task_id, run_id = start("Count")
        call = suspended_call(run_id)
        decision = {"call_id": call.call_id, "decision": "edit", "params": '{"n": 30}'}
        resume_flow_run(
            UUID(run_id), run_input={"decisions": [decision], "approver": "coordinator"}
        )
        state = final(run_id)
    assert state.is_completed(), state
    assert calls_file.read_text().splitlines() == ['{"n": 30}']
    row = tool_approval.get_call(call.call_id)
    assert (row.status, row.new_params, row.door) == ("edited", {"n": 30}, "prefect-ui")
    assert get_task(task_id).status == "completed"
