"""Projects (`000`) as a user runs them (a real process, both databases): a project with
milestones, tasks created into them, `project show` grouping the tasks by milestone with their
live status; refusals are one line, exit 1, and write neither a project nor a task."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from factories import TEAM, research_team
from prefect_server import teamflow as run_teamflow
from sqlmodel import Session, select

from models import db
from models.knowledge import ContextRow
from models.project import ProjectDefinition, ProjectRow, slug
from models.task import TaskRow, TaskState, move_task


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return run_teamflow(list(args))


@pytest.fixture
def team(db_url: str, home: Path) -> str:
    return research_team()


@pytest.fixture
def launch(team: str) -> str:
    """Project `q4-launch` with milestones m1-research and m2-report."""
    made = teamflow(
        "project", "create", "Q4 Launch!", "--description", "Ship the Q4 analysis",
        "--milestone", "m1-research", "--milestone", "m2-report", "--tag", "sales",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return "q4-launch"


def _count(table) -> int:
    with Session(db.engine()) as s:
        return s.exec(select(sa.func.count()).select_from(table)).one()


def _task(title: str, *args: str) -> str:
    made = teamflow("task", "create", TEAM, "--title", title, *args, "--json")
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)["id"]


def test_slug_of_a_name() -> None:
    assert slug("Q4 Launch!") == "q4-launch"
    assert slug("  Émile's  Café -- 2026 ") == "emile-s-cafe-2026"
    assert slug("!!!") == ""


def test_create_stores_a_ready_000_project_with_its_milestones(team: str) -> None:
    made = teamflow(
        "project", "create", "Q4 Launch!", "--description", "Ship the Q4 analysis",
        "--milestone", "m1-research", "--milestone", "m2-report", "--tag", "sales", "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    project = json.loads(made.stdout)
    keys = ["project_id", "name", "description", "created_at", "updated_at", "status",
            "milestones", "tags"]  # fmt: skip
    assert list(project) == keys
    assert ProjectDefinition.model_validate(project).to_wire() == project
    assert (project["project_id"], project["name"], project["status"]) == (
        "q4-launch",
        "Q4 Launch!",
        "ready",  # 000 has no `active`: a project where nothing has started is ready
    )
    assert (project["milestones"], project["tags"]) == (["m1-research", "m2-report"], ["sales"])
    own_id = teamflow("project", "create", "Other", "--description", "d", "--id", "p-7")
    assert own_id.stdout == "created project p-7 (milestones: none)\n"
    listed = json.loads(teamflow("project", "list", "--json").stdout)
    assert [p["project_id"] for p in listed] == ["p-7", "q4-launch"]


def test_show_groups_the_tasks_by_milestone_with_their_status(launch: str) -> None:
    collect = _task("Collect the sales data", "--project", launch, "--milestone", "m1-research")
    clean = _task("Clean the data", "--project", launch, "--milestone", "m1-research")
    loose = _task("Book the review room", "--project", launch)
    _task("Not in any project")
    move_task(uuid.UUID(clean), to=TaskState.IN_PROGRESS)

    shown = teamflow("project", "show", launch, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["project"]["project_id"] == launch
    assert view["milestones"] == [
        {
            "milestone_id": "m1-research",
            "tasks": [
                {"id": collect, "team": TEAM, "title": "Collect the sales data",
                 "status": "pending"},
                {"id": clean, "team": TEAM, "title": "Clean the data", "status": "in_progress"},
            ],
        },
        {"milestone_id": "m2-report", "tasks": []},
    ]  # fmt: skip
    assert view["without_milestone"] == [
        {"id": loose, "team": TEAM, "title": "Book the review room", "status": "pending"}
    ]

    text = teamflow("project", "show", launch).stdout.splitlines()
    assert text[0] == "q4-launch  Q4 Launch!  (ready) [sales]"
    assert text[2] == "milestone m1-research"
    assert text[3] == f"    {collect}  pending     Collect the sales data  [{TEAM}]"
    assert text[4] == f"    {clean}  in_progress Clean the data  [{TEAM}]"
    assert text[5:] == [
        "milestone m2-report",
        "    no tasks",
        "without milestone",
        f"    {loose}  pending     Book the review room  [{TEAM}]",
    ]


def test_a_tasks_place_is_its_000_context(launch: str) -> None:
    task_id = _task("Write the report", "--project", launch, "--milestone", "m2-report")
    with Session(db.engine()) as s:
        (context,) = s.exec(select(ContextRow)).all()
    assert context.to_wire().to_wire() | {"created_at": "-", "updated_at": "-"} == {
        "project_id": launch,
        "milestone_id": "m2-report",
        "task_id": task_id,
        "process_id": None,
        "thread_id": None,
        "branch_id": None,
        "description": "Write the report",
        "resources": [],
        "tags": [],
        "created_at": "-",
        "updated_at": "-",
        "status": "pending",
        "parent_context": {"project_id": launch, "milestone_id": "m2-report", "task_id": None},
    }


def test_task_create_into_a_project_prints_its_place(launch: str) -> None:
    made = teamflow(
        "task", "create", TEAM, "--title", "T", "--project", launch, "--milestone", "m2-report",
        "--json",
    )  # fmt: skip
    data = json.loads(made.stdout)
    assert (data["project_id"], data["milestone_id"]) == (launch, "m2-report")
    plain = json.loads(teamflow("task", "create", TEAM, "--title", "U", "--json").stdout)
    assert "project_id" not in plain  # a task outside projects prints as before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--project", "nope"], "no project 'nope'"),
        (["--project", "q4-launch", "--milestone", "m9"],
         "project 'q4-launch' has no milestone 'm9' (its milestones: m1-research, m2-report)"),
        (["--milestone", "m1-research"], "--milestone needs --project"),
    ],
)  # fmt: skip
def test_a_task_into_an_unknown_project_or_milestone_is_not_written(
    launch: str, args: list[str], says: str
) -> None:
    result = teamflow("task", "create", TEAM, "--title", "Lost", *args, "--json")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    assert (_count(TaskRow), _count(ContextRow)) == (0, 0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["Q4 Launch!", "--description", "d"], "project 'q4-launch' exists already"),
        (["Other", "--description", "d", "--id", "q4-launch"], "'q4-launch' exists already"),
        (["!!!", "--description", "d"], "cannot make a project id of the name '!!!'"),
        (["Other", "--description", "d", "--id", "a b"], "project id 'a b' is not an id"),
        (["Other", "--description", "d", "--milestone", "m 1"], "milestone 'm 1' is not an id"),
        (["Other", "--description", "d", "--milestone", "m1", "--milestone", "m1"],
         "milestone 'm1' is given twice"),
        (["Other", "--description", "d", "--tag", ""], "tags: a tag is empty"),
        ([" ", "--description", "d"], "name: empty"),
    ],
)  # fmt: skip
def test_a_refused_project_is_one_line_and_writes_nothing(
    launch: str, args: list[str], says: str
) -> None:
    result = teamflow("project", "create", *args, "--json")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    assert _count(ProjectRow) == 1


def test_show_names_an_unknown_project(team: str) -> None:
    result = teamflow("project", "show", "nope")
    assert result.returncode == 1
    assert result.stderr == "teamflow: error: no project 'nope'\n"


def _stored(project_id: str) -> dict:
    with Session(db.engine()) as s:
        return s.get(ProjectRow, project_id).to_wire().to_wire()


def test_update_changes_only_what_is_given(launch: str) -> None:
    before = _stored(launch)
    changed = teamflow(
        "project", "update", launch, "--status", "running", "--milestone", "m3-review",
        "--description", "Ship the Q4 analysis, reviewed", "--json",
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    project = json.loads(changed.stdout)
    assert ProjectDefinition.model_validate(project).to_wire() == project == _stored(launch)
    assert project == before | {
        "status": "running",
        "description": "Ship the Q4 analysis, reviewed",
        "milestones": ["m1-research", "m2-report", "m3-review"],  # added after the others
        "updated_at": project["updated_at"],
    }
    assert project["updated_at"] > before["updated_at"]
    # the new milestone takes tasks; the id and name stayed, so tasks still find the project
    _task("Review the report", "--project", launch, "--milestone", "m3-review")

    renamed = teamflow("project", "update", launch, "--name", "Q4 Launch (EMEA)", "--no-tags")
    assert renamed.stdout == (
        f"updated project {launch} (running; milestones: m1-research, m2-report, m3-review)\n"
    )
    stored = _stored(launch)
    assert (stored["project_id"], stored["name"], stored["tags"]) == (
        launch,
        "Q4 Launch (EMEA)",
        [],
    )
    # the same values again change nothing, not even updated_at
    again = teamflow("project", "update", launch, "--status", "running", "--json")
    assert json.loads(again.stdout) == stored == _stored(launch)


def test_a_milestone_is_dropped_only_while_it_holds_no_task(launch: str) -> None:
    _task("Collect the sales data", "--project", launch, "--milestone", "m1-research")
    held = teamflow("project", "update", launch, "--drop-milestone", "m1-research")
    assert held.returncode == 1
    assert held.stderr == (
        "teamflow: error: milestone 'm1-research' of project 'q4-launch' holds 1 task(s); "
        "it is dropped only when empty\n"
    )
    dropped = teamflow("project", "update", launch, "--drop-milestone", "m2-report", "--json")
    assert dropped.returncode == 0, dropped.stderr
    assert (
        json.loads(dropped.stdout)["milestones"] == ["m1-research"] == _stored(launch)["milestones"]
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "nothing to change: give --name, --description, --status, --milestone, "
             "--drop-milestone or --tag/--no-tags"),
        (["--status", "active"],
         "status: Input should be 'ready', 'running', 'pending' or 'finished'"),
        (["--name", " "], "name: empty"),
        (["--milestone", "m 3"], "milestone 'm 3' is not an id"),
        (["--milestone", "m2-report"], "project 'q4-launch' has a milestone 'm2-report' already"),
        (["--status", "running", "--drop-milestone", "m9"],
         "project 'q4-launch' has no milestone 'm9' (its milestones: m1-research, m2-report)"),
        (["--tag", ""], "tags: a tag is empty"),
        (["--tag", "x", "--no-tags"], "give --tag or --no-tags, not both"),
    ],
)  # fmt: skip
def test_a_refused_update_is_one_line_and_writes_nothing(
    launch: str, args: list[str], says: str
) -> None:
    before = _stored(launch)
    result = teamflow("project", "update", launch, *args, "--json")
    assert result.returncode == 1
    assert result.stderr.startswith(f"teamflow: error: {says}"), result.stderr
    assert result.stderr.count("\n") == 1
    assert json.loads(result.stdout)["status"] == "error"
    assert _stored(launch) == before
    unknown = teamflow("project", "update", "nope", "--status", "running")
    assert (unknown.returncode, unknown.stderr) == (1, "teamflow: error: no project 'nope'\n")


def test_delete_takes_the_project_and_leaves_its_tasks_in_their_teams(launch: str) -> None:
    task_id = _task("Collect the sales data", "--project", launch, "--milestone", "m1-research")
    asked = teamflow("project", "delete", launch)  # no terminal here to ask on
    assert asked.returncode == 1
    assert asked.stderr == (
        "teamflow: error: not deleting project q4-launch without --yes "
        "(there is no terminal to ask on)\n"
    )
    assert (_count(ProjectRow), _count(ContextRow)) == (1, 1)

    deleted = teamflow("project", "delete", launch, "--yes", "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["project_id"] == launch
    assert (_count(ProjectRow), _count(ContextRow)) == (0, 0)
    shown = teamflow("task", "show", task_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["title"] == "Collect the sales data"
    assert "project_id" not in json.loads(shown.stdout)
    gone = teamflow("project", "delete", launch, "--yes")
    assert (gone.returncode, gone.stderr) == (1, "teamflow: error: no project 'q4-launch'\n")
    # the name is free again
    again = teamflow("project", "create", "Q4 Launch!", "--description", "d")
    assert again.stdout == "created project q4-launch (milestones: none)\n"
