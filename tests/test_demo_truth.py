"""The demo when the lead denies a plan, and what its runs tell Prefect.

A denied plan reaches analyst-1 as a message in its conversation, it revises the plan, the
revision links to the denied request, and the task completes; denied up to the team's limit,
analyst-1's part ends with one line saying why, and the `team-task` run ends Failed saying
who failed at which step. Either way every step logs a line on the run, the members' reports
and tables are artifacts of it, and the `tool-action` runs carry team, member and task tags.
Without a server where `PREFECT_API_URL` points, `teamflow demo` says so in one line.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_runner import subprocess_teamflow, teamflow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterTags,
    LogFilter,
    LogFilterFlowRunId,
)
from sqlmodel import Session, select

from flows import demo
from flows.cli import demo as demo_command
from models import db
from models.approval import list_requests
from models.conversation import load_conversation
from models.db import session_scope
from models.task import TaskRow, list_tasks


@pytest.fixture(scope="module")
def prefect_api(own_prefect_api: str) -> str:
    """A server of this module's own: it reads the latest `team-task` runs at large."""
    return own_prefect_api


TEAM = demo.TEAM
DENIAL = "Add a comparison with Q3 before anything else."


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefect_api: str) -> Path:
    monkeypatch.setenv("TEAMFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", f"sqlite:///{tmp_path / 'teamflow.db'}")
    monkeypatch.setenv("PREFECT_API_URL", prefect_api)  # the harness's server, no other
    return tmp_path


def _team_task_run(client: Any, task_id: str) -> Any:
    runs = client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=["team-task"])), limit=50
    )
    (run,) = [r for r in runs if r.parameters.get("task_id") == task_id]
    return run


def _logs(client: Any, run_id: Any, *wanted: str) -> list[str]:
    """The run's log messages, once a message starting with each of `wanted` arrived, or
    after a minute (logs are sent in batches, and not always in the order they were made)."""
    deadline = time.monotonic() + 60
    while True:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])), limit=200
        )
        messages = [log.message for log in logs]
        arrived = all(any(m.startswith(w) for m in messages) for w in wanted)
        if arrived or time.monotonic() > deadline:
            return messages
        time.sleep(0.2)


def _conversation(member: str, task_id: str) -> list[Any]:
    with session_scope() as s:
        return load_conversation(
            session=s, agent_id=f"{member}@{TEAM}", conversation_id=f"task-{task_id}"
        )


def test_a_denied_plan_is_revised_approved_and_the_task_completes(home: Path) -> None:
    decided: list[str] = []

    def deny_first(request: Any) -> tuple[bool, str | None]:
        decided.append(request.request_id)
        return (False, DENIAL) if len(decided) == 1 else (True, "Thanks, go ahead.")

    lines: list[str] = []
    summary = demo.run(echo=lines.append, decide=deny_first)
    task_id = summary["task"]["task_id"]
    assert summary["task"]["status"] == "completed", summary["task"]
    assert all(m["ok"] for m in summary["task"]["members"].values())
    assert [t.status for t in list_tasks(TEAM)] == ["completed", "completed"]  # and the brief

    first, second = list_requests(TEAM, member="analyst-1")
    assert (first.status, first.revision, first.feedback) == ("denied", 1, DENIAL)
    assert (second.status, second.revision) == ("approved", 2)
    assert second.previous_request_id == first.request_id
    assert DENIAL in second.plan  # the revised plan took the feedback in

    # The feedback is a message of analyst-1's conversation, from the lead, before the
    # step that revised the plan; `teamflow log` shows it.
    texts = [
        (getattr(m.content, "userid", None), getattr(m.content, "text", "") or "")
        for m in _conversation("analyst-1", task_id)
    ]
    assert any(who == demo.LEAD and DENIAL in text for who, text in texts)
    shown = subprocess_teamflow(["log", TEAM, "analyst-1"], stdin_devnull=False)
    assert shown.returncode == 0, shown.stderr
    assert DENIAL in shown.stdout

    with get_client(sync_client=True) as client:
        run = _team_task_run(client, task_id)
        assert run.state.type.value == "COMPLETED"
        lines = (
            "analyst-1 step 1: request_plan_approval",
            "analyst-1 step 2: request_plan_approval",
            "analyst-1 step 3: analyze_sales",
            "analyst-2 step 1: cross_reference_satisfaction ASYNC",
            "analyst-2 step 4: no actions (SUCCESS stop)",
        )
        logs = _logs(client, run.id, *lines)
        for line in lines:
            assert any(m.startswith(line) for m in logs), (line, logs)
        assert not any("Traceback" in m for m in logs)

        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
        by_description = {a.description: a for a in artifacts}
        report = by_description["analyst-1: artifacts/report.md"]
        assert report.type == "markdown" and "Top 3 revenue trends" in report.data
        table = by_description["analyst-2: artifacts/analysis.csv"]
        assert table.type == "table"
        assert "satisfaction" not in by_description  # only the members' own files
        assert "analyst-1: artifacts/analysis.csv" in by_description

        (action,) = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["tool-action"])),
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"task:{task_id}"])),
        )
        assert {f"team:{TEAM}", "member:analyst-2", f"task:{task_id}"} <= set(action.tags)


def test_denied_up_to_the_limit_the_member_stops_with_a_reason_and_the_run_fails(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def always_deny(request: Any) -> tuple[bool, str | None]:
        return False, f"{DENIAL} (round {request.revision})"

    ran: list[dict[str, Any]] = []
    real_run = demo.run

    def denying_run(**kwargs: Any) -> dict[str, Any]:
        ran.append(real_run(**kwargs, decide=always_deny))
        return ran[-1]

    # `teamflow demo` itself, with a lead that denies every plan.
    monkeypatch.setattr(demo, "run", denying_run)
    with pytest.raises(typer.Exit) as exited:
        demo_command.demo(interactive=False, as_json=False)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    (summary,) = ran
    task_id = summary["task"]["task_id"]
    outcome = summary["task"]
    assert outcome["status"] == "archived"
    assert outcome["members"]["analyst-2"]["ok"]
    error = outcome["members"]["analyst-1"]["error"]
    requests = list_requests(TEAM, member="analyst-1")
    assert [(r.status, r.revision) for r in requests] == [
        ("denied", 1), ("denied", 2), ("rejected", 3),
    ]  # fmt: skip
    assert error.startswith(f"plan {requests[-1].request_id} was rejected")
    assert "revision limit (3) is reached" in error and "\n" not in error
    assert [t.status for t in list_tasks(TEAM)] == ["archived"]
    assert any(error in line for line in lines)  # the demo's summary names the reason
    # The exit says so: non-zero, a last line naming the task, the member and why (above
    # it, the run's own ERROR log line).
    assert exited.value.exit_code == 1
    assert err.splitlines()[-1] == (
        f"teamflow: error: the demo did not complete: task {task_id} (Q4 sales analysis) "
        f"archived: analyst-1: {error}"
    )
    # The record says why: the task's reason is the run's state message.
    (task,) = list_tasks(TEAM)
    assert task.reason == f"analyst-1 failed at step 3: {error}"
    shown = teamflow(["task", "show", task_id], dict(os.environ))
    assert f"reason        analyst-1 failed at step 3: {error}" in shown.stdout.splitlines()
    listed = teamflow(["task", "list", TEAM], dict(os.environ))
    assert f"(analyst-1 failed at step 3: {error})" in listed.stdout

    with get_client(sync_client=True) as client:
        run = _team_task_run(client, task_id)
        assert run.state.type.value == "FAILED"
        assert run.state.message == f"analyst-1 failed at step 3: {error}"
        logs = _logs(
            client, run.id, "analyst-1 failed at step 3", "analyst-1 step 2: request_plan_approval"
        )
        assert any(m == f"analyst-1 failed at step 3: {error}" for m in logs), logs
        assert any(m.startswith("analyst-1 step 2: request_plan_approval") for m in logs)
        assert not any("Traceback" in m for m in logs)


def test_the_demo_without_the_server_it_was_pointed_at_says_so_and_writes_nothing(
    tmp_path: Path,
) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    url = f"sqlite:///{tmp_path / 'teamflow.db'}"
    db.upgrade(url)
    env = {
        **os.environ,
        "TEAMFLOW_HOME": str(tmp_path),
        "TEAMFLOW_DATABASE_URL": url,
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
    }
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"teamflow: error: no Prefect server answers at http://127.0.0.1:{port}/api "
        "(PREFECT_API_URL); start one with `teamflow up`, or unset PREFECT_API_URL to let "
        "the demo start a temporary one"
    ]
    with Session(db.engine(url)) as s:
        assert s.exec(select(TaskRow)).all() == []
    assert not (tmp_path / "demo").exists()
