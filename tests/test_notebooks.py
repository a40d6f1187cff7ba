"""The metrics notebooks, executed as `jupyter execute` runs them (a real kernel), against a
real database that teamflow's stores filled; their figures are checked against values worked
out here from what was stored."""

from __future__ import annotations

import json
import statistics
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from freezegun import freeze_time
from nbclient import NotebookClient

from models import approval, inbox, membership
from models.task import (
    ExecutionStatus,
    TaskMetricsRow,
    TaskState,
    create_task,
    move_task,
    record_metrics,
    set_member_status,
)

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TEAM = "q4-team"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def execute(path: Path, team: str | None) -> nbformat.NotebookNode:
    """Runs the notebook with its `parameters` cell set to `TEAM = team`."""
    notebook = nbformat.read(path, as_version=4)
    parameters = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1, f"{path.name} needs one cell tagged `parameters`"
    parameters[0].source = f"TEAM = {team!r}"
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    return notebook


def summary_of(notebook: nbformat.NotebookNode) -> dict:
    cell = next(c for c in notebook.cells if "summary" in c.metadata.get("tags", []))
    return json.loads(cell.outputs[0]["text"])


def test_there_is_a_metrics_notebook() -> None:
    assert "team_metrics.ipynb" in [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_runs_on_an_empty_database(path: Path, db_url: str, home: Path) -> None:
    summary = summary_of(execute(path, None))
    assert summary["members"] == [] and summary["tasks_by_status"] == []


def _metrics(member: str, task_id: uuid.UUID, seconds: float, **counts: int) -> None:
    record_metrics(
        TaskMetricsRow(
            team=TEAM, member=member, task_id=str(task_id), started_at=T0,
            ended_at=T0 + timedelta(seconds=seconds), duration_s=seconds, **counts,
        )
    )  # fmt: skip


def test_team_metrics_shows_what_teamflow_recorded(db_url: str, home: Path) -> None:
    membership.create_team(TEAM, description="Q4 sales analysis", lead="coordinator")
    for name in ("analyst-1", "analyst-2"):
        membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.")
    # Another team's records stay out of TEAM's figures.
    membership.create_team("other-team", description="Other", lead="boss")
    membership.add_member("other-team", "helper", model="haiku", prompt="p")
    create_task("other-team", title="Elsewhere", assignees=["helper"])

    both = create_task(TEAM, title="Q4 trends", assignees=["analyst-1", "analyst-2"])
    solo = create_task(TEAM, title="Regions", assignees=["analyst-1"])
    create_task(TEAM, title="Satisfaction", assignees=["analyst-2"])  # stays pending
    for task in (both, solo):
        move_task(task.id, to=TaskState.COMPLETED)
    durations = {"analyst-1": [4.0, 10.5], "analyst-2": [7.25]}
    _metrics("analyst-1", both.id, 4.0, tokens=120, steps=3, tool_calls=2)
    _metrics("analyst-1", solo.id, 10.5, tokens=80, steps=2, tool_calls=1)
    _metrics("analyst-2", both.id, 7.25, tokens=300, steps=4, tool_calls=3, approval_wait_s=90)
    set_member_status(
        TEAM, "analyst-1", status=ExecutionStatus.COMPLETE, tokens=200, completed=True
    )
    set_member_status(TEAM, "analyst-2", status=ExecutionStatus.ERROR, error_message="tool failed")

    with freeze_time(T0) as clock:
        approved = approval.request_plan(TEAM, "analyst-2", "Join the CSVs", "Plan")
        approval.request_plan(TEAM, "analyst-1", "Chart it", "Plan")  # still open
        clock.tick(90)
        approval.decide(approved.request_id, approve=True, decider="coordinator")
    inbox.send(TEAM, to="analyst-2", sender="coordinator", text="Any news?")

    summary = summary_of(execute(NOTEBOOKS[0], TEAM))
    assert summary["team"] == TEAM

    members = {m["member"]: m for m in summary["members"]}
    assert set(members) == {"analyst-1", "analyst-2"}
    for name, seconds in durations.items():
        assert members[name]["p50_duration_s"] == statistics.median(seconds)
        assert members[name]["max_duration_s"] == max(seconds)
    assert (members["analyst-1"]["tasks"], members["analyst-1"]["tokens"]) == (2, 200)
    assert (members["analyst-1"]["steps"], members["analyst-1"]["tool_calls"]) == (5, 3)
    assert members["analyst-2"]["approval_wait_s"] == 90

    status = {s["member"]: s for s in summary["status"]}
    assert status["analyst-1"]["status"] == "complete"
    assert status["analyst-1"]["tasks_completed"] == 1 and status["analyst-1"]["tokens_used"] == 200
    assert (status["analyst-2"]["status"], status["analyst-2"]["error_message"]) == (
        "error", "tool failed",
    )  # fmt: skip

    assert set(summary["status"][0]) == {
        "team", "member", "status", "tasks_completed", "tokens_used", "avg_response_time",
        "last_active_at", "error_message",
    }  # fmt: skip
    assert sorted(summary["tasks_by_status"], key=lambda t: t["status"]) == [
        {"team": TEAM, "status": "completed", "tasks": 2},
        {"team": TEAM, "status": "pending", "tasks": 1},
    ]
    plans = {p["status"]: p for p in summary["plans"]}
    assert plans["approved"] == {"team": TEAM, "status": "approved", "requests": 1,
                                 "p50_wait_s": 90.0}  # fmt: skip
    assert (plans["pending"]["requests"], plans["pending"]["p50_wait_s"]) == (1, None)

    unread = {u["recipient"]: u["unread"] for u in summary["unread"]}
    for name in ("coordinator", "analyst-1", "analyst-2"):
        assert unread.get(name, 0) == inbox.unread_count(TEAM, name)
    assert unread["analyst-2"] >= 2  # the plan's response and the lead's question

    everyone = summary_of(execute(NOTEBOOKS[0], None))
    assert {m["team"] for m in everyone["members"]} == {TEAM}  # other-team has no metrics
    assert {t["team"] for t in everyone["tasks_by_status"]} == {TEAM, "other-team"}
