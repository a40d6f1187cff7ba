"""Team tasks in the store, the 003 console rendering, and `teamflow log`."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_runner import subprocess_teamflow
from factories import FIXTURES, TEAM, research_team

from flows.render import render
from models.conversation import Conversation
from models.task import TaskError, TaskState, create_task, get_task, list_tasks, move_task
from models.task_status import ExecutionStatus, set_member_status

pytestmark = pytest.mark.usefixtures("db_url")


def test_the_seed_conversation_renders_as_the_seeds_console_log() -> None:
    conversation = Conversation.model_validate(
        json.loads((FIXTURES / "003_conversation.json").read_text())
    )
    assert render(list(conversation)) == (FIXTURES / "003_console.txt").read_text()
    text = render(list(conversation))
    assert "🧠 System:" in text and "🔧 getThreadHistory (ascending: false)" in text
    assert "Ã" not in text  # no mojibake


def test_the_assistant_header_takes_the_members_colour() -> None:
    conversation = Conversation.model_validate(
        json.loads((FIXTURES / "003_conversation.json").read_text())
    )
    assert "\033[34m🤖 Assistant [Turn 1]\033[0m" in render(list(conversation), color="blue")


def test_create_list_show_a_task(home: Path) -> None:
    research_team()
    deadline = datetime(2026, 2, 20, 17, tzinfo=UTC)
    row = create_task(
        TEAM, title="Q4 sales analysis", description="Top 3 trends",
        assignees=["analyst-1", "analyst-2"], creator="coordinator", priority="high",
        deadline=deadline, params={"sales_path": "/data/q4-sales.csv"},
    )  # fmt: skip
    again = get_task(str(row.id))
    assert again.status == "pending"
    assert [a.assignee_id for a in again.assignees] == ["analyst-1", "analyst-2"]
    assert again.deadline == deadline
    assert again.params == {"sales_path": "/data/q4-sales.csv"}
    assert again.to_wire().to_wire()["assignee_ids"] == ["analyst-1", "analyst-2"]
    assert [t.id for t in list_tasks(TEAM)] == [row.id]
    assert list_tasks(TEAM, status="completed") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"title": ""}, "title"),
        ({"title": "x" * 501}, "title"),
        ({"assignees": ["ghost"]}, "no member named 'ghost'"),
        ({"assignees": ["analyst-1", "analyst-1"]}, "assignee"),
        ({"priority": "urgent"}, "priority 'urgent'"),
        ({"deadline": datetime(2026, 1, 1)}, "timezone"),
    ],
)
def test_bad_tasks_are_refused(home: Path, kwargs: dict, message: str) -> None:
    research_team()
    args = {"title": "t", "assignees": ["analyst-1"], **kwargs}
    with pytest.raises(ValueError, match=message):
        create_task(TEAM, **args)
    assert list_tasks(TEAM) == []


def test_unknown_or_malformed_task_ids(home: Path) -> None:
    with pytest.raises(TaskError, match="not a task id"):
        get_task("../x")
    with pytest.raises(TaskError, match="no task with id"):
        get_task("00000000-0000-0000-0000-000000000000")


def test_only_one_of_several_starters_claims_a_task(home: Path) -> None:
    research_team()
    row = create_task(TEAM, title="t", assignees=["analyst-1"])
    results: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                move_task(row.id, to=TaskState.IN_PROGRESS, only_from={TaskState.PENDING})
            )
        )
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 5 + [True]
    assert get_task(row.id).status == "in_progress"


def test_member_status_is_mirrored_to_task_status_json(home: Path) -> None:
    research_team()
    set_member_status(TEAM, "analyst-1", status=ExecutionStatus.RUNNING)
    set_member_status(
        TEAM, "analyst-1", status=ExecutionStatus.COMPLETE, tokens=1200, completed=True,
        response_time=120,
    )  # fmt: skip
    data = json.loads((home / "tasks" / TEAM / "analyst-1" / "task-status.json").read_text())
    assert data["agentId"] == "analyst-1@research-team"
    assert data["status"] == "complete"
    assert data["metrics"] == {"tokens_used": 1200, "tasks_completed": 1, "avg_response_time": 120}
    assert data["completedAt"].endswith("Z")
    set_member_status(TEAM, "analyst-1", status=ExecutionStatus.ERROR, error_message="boom")
    data = json.loads((home / "tasks" / TEAM / "analyst-1" / "task-status.json").read_text())
    assert (data["status"], data["errorMessage"]) == ("error", "boom")


def test_status_counts_every_completion_when_workers_update_a_member_at_once(home: Path) -> None:
    """Runs of one member's tasks on several workers update its one status row: none is lost."""
    research_team()
    errors: list[BaseException] = []

    def one_task() -> None:
        try:
            set_member_status(TEAM, "analyst-1", status=ExecutionStatus.RUNNING)
            set_member_status(
                TEAM, "analyst-1", status=ExecutionStatus.COMPLETE, tokens=10, completed=True
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one_task) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    data = json.loads((home / "tasks" / TEAM / "analyst-1" / "task-status.json").read_text())
    assert data["status"] == "complete"
    assert (data["metrics"]["tasks_completed"], data["metrics"]["tokens_used"]) == (8, 80)


def test_log_of_a_member_without_steps(home: Path, db_url: str) -> None:
    research_team()
    env = {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}
    result = subprocess_teamflow(["log", TEAM, "analyst-1"], env, stdin_devnull=False)
    assert result.returncode == 0, result.stderr
    assert "no conversation yet" in result.stdout
    bad = subprocess_teamflow(["log", TEAM, "ghost"], env, stdin_devnull=False)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "teamflow: error: team 'research-team' has no member named 'ghost'"
