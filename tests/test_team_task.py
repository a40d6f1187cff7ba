"""The `team-task` flow: failures, plan mode, the command runtime, metrics and records."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM
from sqlmodel import select

from flows.team_task import run_team_task
from models import inbox, membership
from models import team as teams
from models.db import session_scope
from models.task import TaskMetricsRow, create_task, get_task
from models.tool import ToolDefinition, add_tool


@pytest.fixture
def team(prefect_api: str, home: Path, db_url: str) -> str:
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": "fails",
                "type": "script",
                "description": "Exits 3",
                "command": f"{sys.executable} -c \"import sys; sys.exit('bad')\"",
                "input_schema": {"type": "object", "properties": {}},
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": "echo_json",
                "type": "script",
                "description": "Prints its params",
                "command": f'{sys.executable} -c "import sys; print(sys.stdin.read())"',
                "input_schema": {
                    "type": "object",
                    "properties": {"n": {"type": "integer"}},
                    "required": ["n"],
                },
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )
    return TEAM


def _step(actions: list[dict], *, stop: bool = False, response: str | None = None) -> dict:
    return {
        "status": "SUCCESS" if stop else "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "next"}],
        "actions": actions,
        "stop": stop,
        "response": response,
    }


def _tool(name: str, params: dict) -> dict:
    return {"action": name, "type": "tool", "params": params, "execution": "SYNC"}


def _member(name: str, playbook: list[dict], **kwargs) -> None:
    membership.add_member(
        TEAM, name, model="haiku", prompt=f"You are {name}.",
        runtime={"kind": "scripted", "playbook": playbook}, **kwargs,
    )  # fmt: skip


def _run(task_id) -> dict:
    return asyncio.run(run_team_task(str(task_id)))


def test_two_members_work_in_parallel_and_everything_is_recorded(team: str, home: Path) -> None:
    for name in ("analyst-1", "analyst-2"):
        _member(
            name,
            [
                _step([_tool("echo_json", {"n": 7})]),
                _step([], stop=True, response="{result.echo_json.n}"),
            ],
        )
    task = create_task(TEAM, title="Count", assignees=["analyst-1", "analyst-2"])
    result = _run(task.id)
    assert result["status"] == "completed"
    assert {m: r["response"] for m, r in result["members"].items()} == {
        "analyst-1": "7",
        "analyst-2": "7",
    }
    assert get_task(task.id).status == "completed"
    with session_scope() as s:
        metrics = s.exec(select(TaskMetricsRow).where(TaskMetricsRow.task_id == str(task.id))).all()
        assert sorted((m.member, m.steps, m.tool_calls) for m in metrics) == [
            ("analyst-1", 2, 1), ("analyst-2", 2, 1),
        ]  # fmt: skip
        assert all(m.duration_s is not None and m.duration_s >= 0 for m in metrics)
        assert all(m.ok is True and m.tool_failures == 0 for m in metrics)  # models/metrics.py
    status = json.loads((home / "tasks" / TEAM / "analyst-1" / "task-status.json").read_text())
    assert status["status"] == "complete" and status["metrics"]["tasks_completed"] == 1
    assignment = [m for m in inbox.messages(TEAM, "analyst-1") if m.type == "task_assignment"]
    assert assignment[0].to_notification().payload.task_id == task.id
    lead = [m.type for m in inbox.messages(TEAM, "coordinator")]
    assert lead.count("idle_notification") == 2
    assert "echo_json" in (home / "tasks" / TEAM / "analyst-1" / "output.log").read_text()


def test_a_task_runs_once_even_if_started_twice(team: str) -> None:
    _member("analyst-1", [_step([], stop=True, response="done")])
    task = create_task(TEAM, title="Once", assignees=["analyst-1"])
    assert _run(task.id)["status"] == "completed"
    again = _run(task.id)
    assert again["members"] == {}
    assert again["status"] == "completed"


def test_a_task_whose_assignee_was_shut_down_stays_pending_and_unannounced(team: str) -> None:
    _member("analyst-1", [_step([], stop=True, response="done")])
    _member("analyst-2", [_step([], stop=True, response="done")])
    task = create_task(TEAM, title="Too late", assignees=["analyst-1", "analyst-2"])
    teams.set_member(TEAM, "analyst-2", is_active=False)
    with pytest.raises(ValueError, match="analyst-2"):
        _run(task.id)
    # Claim and announcement are one transaction: nothing of either is left behind.
    assert get_task(task.id).status == "pending"
    assert [m.type for m in inbox.messages(TEAM, "analyst-1")].count("task_assignment") == 0


def test_a_tool_that_exits_non_zero_fails_the_member_and_tells_the_lead(
    team: str, home: Path
) -> None:
    _member(
        "analyst-1", [_step([_tool("fails", {})]), _step([], stop=True, response="{result.fails}")]
    )
    task = create_task(TEAM, title="Doomed", assignees=["analyst-1"])
    result = _run(task.id)
    assert result["status"] == "archived"
    error = result["members"]["analyst-1"]["error"]
    assert "fails" in error
    status = json.loads((home / "tasks" / TEAM / "analyst-1" / "task-status.json").read_text())
    assert status["status"] == "error" and "fails" in status["errorMessage"]
    texts = [m.text for m in inbox.messages(TEAM, "coordinator")]
    assert any("Doomed failed" in t for t in texts)
    with session_scope() as s:
        row = s.exec(select(TaskMetricsRow).where(TaskMetricsRow.task_id == str(task.id))).one()
        assert (row.ok, row.tool_calls, row.tool_failures) == (False, 1, 1)


def test_params_that_violate_the_schema_never_run_the_tool(team: str) -> None:
    _member(
        "analyst-1",
        [_step([_tool("echo_json", {"n": "seven"})]), _step([], stop=True, response="ok")],
    )
    task = create_task(TEAM, title="Bad params", assignees=["analyst-1"])
    result = _run(task.id)
    assert result["status"] == "completed"
    from flows.runtimes import tool_results
    from models.conversation import load_conversation

    with session_scope() as s:
        conversation = load_conversation(
            session=s, agent_id=f"analyst-1@{TEAM}", conversation_id=f"task-{task.id}"
        )
    failed = tool_results(conversation)["echo_json"]
    assert failed.status.value == "FAILURE" and "n" in failed.error_message
    with session_scope() as s:
        row = s.exec(select(TaskMetricsRow).where(TaskMetricsRow.task_id == str(task.id))).one()
        assert (row.ok, row.tool_calls, row.tool_failures) == (True, 1, 1)


def test_plan_mode_refuses_tools_before_an_approved_plan(team: str) -> None:
    _member(
        "analyst-1",
        [
            _step([_tool("echo_json", {"n": 1})]),
            _step([], stop=True, response="{result.echo_json.n}"),
        ],
        plan_mode_required=True,
    )
    task = create_task(TEAM, title="Unapproved", assignees=["analyst-1"])
    result = _run(task.id)
    assert result["status"] == "archived"
    assert "plan approval is required" in result["members"]["analyst-1"]["error"]


def test_the_command_runtime_drives_a_member(team: str, tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, sys\n"
        "request = json.load(sys.stdin)\n"
        "steps = sum(1 for m in request['conversation'] if m['role'] == 'assistant')\n"
        "if steps == 0:\n"
        "    act = {'action': 'echo_json', 'type': 'tool', 'params': {'n': 5}}\n"
        "    out = {'status': 'EXECUTING', 'thoughts': [], 'actions': [act],"
        " 'stop': False, 'response': None}\n"
        "else:\n"
        "    out = {'status': 'SUCCESS', 'thoughts': [], 'actions': [], 'stop': True,"
        " 'response': 'saw ' + request['conversation'][-1]['content']['text']}\n"
        "print(json.dumps({'chimera': out, 'tokens': 42}))\n"
    )
    membership.add_member(
        TEAM, "analyst-1", model="haiku", prompt="p",
        runtime={"kind": "command", "argv": [sys.executable, str(agent)], "timeout": 30},
    )  # fmt: skip
    task = create_task(TEAM, title="External", assignees=["analyst-1"])
    result = _run(task.id)
    assert result["status"] == "completed"
    assert '"n":5' in result["members"]["analyst-1"]["response"].replace(" ", "")
    with session_scope() as s:
        row = s.exec(select(TaskMetricsRow).where(TaskMetricsRow.task_id == str(task.id))).one()
        assert row.tokens == 84


def test_an_agent_asking_again_after_a_denial_revises_its_plan_up_to_the_limit(
    team: str,
) -> None:
    """Nobody decides in time (the policy denies after 1 s): each new plan revises the
    denied one, and past the team's `plan_max_revisions` the member is told no more."""
    from models import approval

    teams.update_settings(
        TEAM, {"plan_timeout_seconds": 1, "plan_timeout_policy": "deny", "plan_max_revisions": 2}
    )

    def ask(n: int) -> dict:
        params = {"plan": f"## Plan v{n}", "summary": f"plan v{n}"}
        return _step([{"action": "request_plan_approval", "type": "internal", "params": params}])

    _member("analyst-1", [ask(1), ask(2), ask(3), _step([], stop=True)], plan_mode_required=True)
    task = create_task(TEAM, title="Revise", assignees=["analyst-1"])
    result = _run(task.id)
    assert result["status"] == "archived"
    first, second = approval.list_requests(TEAM, member="analyst-1")
    assert (first.status, first.revision, first.previous_request_id) == ("denied", 1, None)
    assert (second.status, second.revision) == ("rejected", 2)
    assert second.previous_request_id == first.request_id
    assert f"plan {second.request_id} was rejected" in result["members"]["analyst-1"]["error"]


def test_a_command_agent_sees_the_denial_in_its_conversation_and_the_run_fails_at_the_limit(
    team: str, tmp_path: Path
) -> None:
    """The denial's note is a user message of the conversation: the agent revises its plan
    from it. Denied at the limit, the run ends Failed naming the member, step and reason."""
    from flows.team_task import TaskFailed, team_task
    from models import approval

    teams.update_settings(
        TEAM, {"plan_timeout_seconds": 1, "plan_timeout_policy": "deny", "plan_max_revisions": 2}
    )
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, sys\n"
        "request = json.load(sys.stdin)\n"
        "last = request['conversation'][-1]['content']\n"
        "text = last.get('text', '') if isinstance(last, dict) else ''\n"
        "plan = 'v1' if len(request['conversation']) == 2 else 'revised: ' + text\n"
        "act = {'action': 'request_plan_approval', 'type': 'internal',"
        " 'params': {'plan': plan, 'summary': 'plan'}}\n"
        "out = {'status': 'EXECUTING', 'thoughts': [], 'actions': [act], 'stop': False,"
        " 'response': None}\n"
        "print(json.dumps(out))\n"
    )
    membership.add_member(
        TEAM, "analyst-1", model="haiku", prompt="p", plan_mode_required=True,
        runtime={"kind": "command", "argv": [sys.executable, str(agent)], "timeout": 30},
    )  # fmt: skip
    task = create_task(TEAM, title="Revise", assignees=["analyst-1"])
    with pytest.raises(TaskFailed) as failed:
        asyncio.run(team_task(str(task.id)))
    first, second = approval.list_requests(TEAM, member="analyst-1")
    assert second.plan.startswith(f"revised: Plan {first.request_id} (revision 1 of at most 2)")
    assert "was denied" in second.plan and "Revise the plan" in second.plan
    assert str(failed.value) == (
        f"analyst-1 failed at step 2: plan {second.request_id} was rejected: {second.cause}"
    )
    assert failed.value.outcome["status"] == "archived"
    assert get_task(task.id).status == "archived"


def _teamflow(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, against this module's Prefect server and the test's database."""
    from prefect.settings import PREFECT_API_URL

    return run_teamflow(
        args, {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}, stdin_devnull=False
    )


def test_the_task_commands_create_run_list_and_show_a_task(team: str) -> None:
    _member("analyst-1", [_step([], stop=True, response="Q4 is up 12%")])
    created = _teamflow(
        "task", "create", TEAM, "--title", "Summarise Q4", "--assignee", "analyst-1", "--json"
    )
    assert created.returncode == 0, created.stderr
    task_id = json.loads(created.stdout)["id"]

    ran = _teamflow("task", "run", task_id, "--local", "--json")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["status"] == "completed"
    assert result["members"]["analyst-1"]["response"] == "Q4 is up 12%"

    shown = json.loads(_teamflow("task", "show", task_id, "--json").stdout)
    assert (shown["id"], shown["status"], shown["assignee_ids"]) == (
        task_id, "completed", ["analyst-1"],
    )  # fmt: skip
    listed = json.loads(_teamflow("task", "list", TEAM, "--status", "completed", "--json").stdout)
    assert [t["id"] for t in listed] == [task_id]

    # A second run finds the task done and works nothing again.
    again = json.loads(_teamflow("task", "run", task_id, "--local", "--json").stdout)
    assert (again["status"], again["members"]) == ("completed", {})

    for bad, named in (
        (["task", "show", "../x"], "'../x'"),
        (["task", "list", "no-team"], "no-team"),
    ):
        refused = _teamflow(*bad)
        assert refused.returncode != 0
        assert len(refused.stderr.strip().splitlines()) == 1 and named in refused.stderr


def test_the_run_shows_each_members_numbers_and_the_team_at_a_glance(team: str) -> None:
    """What the Prefect UI shows: the team's artifact under its own key (the latest version
    on the Artifacts page), made by the run, with the members' table in it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )
    from prefect.client.schemas.sorting import ArtifactSort

    from flows.team_view import COLUMNS

    _member(
        "analyst-1",
        [_step([_tool("echo_json", {"n": 7})]), _step([], stop=True, response="7")],
    )
    _member("analyst-2", [_step([], stop=True, response="idle")])
    waiting = create_task(TEAM, title="Later", assignees=["analyst-2"])
    task = create_task(TEAM, title="Count", assignees=["analyst-1"])
    assert _run(task.id)["status"] == "completed"

    with get_client(sync_client=True) as client:
        [glance] = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["team-research-team"])),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
        on_run = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[glance.flow_run_id])
            )
        )
    assert glance.id in {a.id for a in on_run}
    assert not [a for a in on_run if a.type == "table"]  # the table is in the team's artifact
    lines = [line for line in glance.data.splitlines() if line.startswith("| ")]
    header, *body = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert header == COLUMNS
    rows = {cells[0]: dict(zip(header, cells, strict=True)) for cells in body}
    one, two = rows["analyst-1"], rows["analyst-2"]
    assert (one["tasks done"], one["steps"], one["tool calls"], one["plans"]) == (
        "1",
        "2",
        "1",
        "0",
    )
    assert (two["tasks done"], two["steps"], two["tool calls"]) == ("0", "0", "0")
    assert one["status"] == "complete" and one["active"] == "yes"
    assert one["unread"] == str(len(inbox.messages(TEAM, "analyst-1", unread=True)))
    assert glance.description == f"Team {TEAM} at a glance"
    assert glance.data.startswith(f"# Team {TEAM}\n\nLead **coordinator**.")
    assert "**Tasks:** 1 pending, 0 in progress, 1 completed, 0 archived." in glance.data
    assert "**Plans waiting for a decision:** none." in glance.data
    assert "| analyst-1 | complete | yes |" in glance.data
    assert get_task(waiting.id).status == "pending"


def test_task_run_prints_the_name_the_ui_shows(team: str) -> None:
    from uuid import UUID

    from prefect.client.orchestration import get_client

    from flows.team_task import team_task

    _member("analyst-1", [_step([], stop=True, response="done")])
    team_task.to_deployment(name="team-task").apply()
    task = create_task(TEAM, title="Summarise Q4", assignees=["analyst-1"])
    started = _teamflow("task", "run", str(task.id), "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["flow_run_id"]
    printed = _teamflow("task", "run", str(task.id))  # the same run: idempotent
    name = f"{TEAM}: Summarise Q4 (analyst-1)"
    assert printed.stdout.startswith(f"started {name}: "), printed.stdout
    assert printed.stdout.strip().endswith(f"/runs/flow-run/{run_id}")
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(UUID(run_id)).name == name


def test_an_async_run_that_dies_before_its_result_tells_the_member_why(team: str) -> None:
    """The `tool-action` run of an ASYNC action can die before it delivers (a server that
    refuses to create it, a parameter it cannot take): the member then gets a FAILURE
    `tool_result` naming the cause, not a wait for a result that never comes."""
    from flows.tool_action import async_action

    _member("analyst-1", [_step([], stop=True, response="done")])
    with pytest.raises(Exception):  # noqa: B017 - whatever Prefect raises for the bad param
        asyncio.run(
            async_action(team, "analyst-1", "echo_json", {"n": 1}, "t-1", team_task_id=object())
        )
    [result] = [m for m in inbox.messages(team, "analyst-1") if m.type == "tool_result"]
    assert result.meta == {"task_id": "t-1"}
    payload = json.loads(result.text)
    assert payload["status"] == "FAILURE"
    assert payload["error_message"].startswith("the ASYNC run of echo_json failed: ")


def test_task_action_shows_an_async_action_of_a_run_by_its_task_id(team: str) -> None:
    """A member's ASYNC action in a real run: its step gets `TASK_STARTED`, the tool runs in a
    `tool-action` run, and `teamflow task action TASK_ID` shows it with its result."""
    build = {"action": "echo_json", "type": "tool", "params": {"n": 5}, "execution": "ASYNC",
             "task_id": "echo-5"}  # fmt: skip
    _member("analyst-1", [_step([build]), _step([], stop=True, response="{result.echo_json.n}")])
    task = create_task(TEAM, title="Echo", assignees=["analyst-1"])
    assert _run(task.id)["members"]["analyst-1"]["response"] == "5"
    shown = _teamflow("task", "action", "echo-5", "--json")
    assert shown.returncode == 0, shown.stderr
    action = json.loads(shown.stdout)
    assert (action["agent_id"], action["action"], action["state"]) == (
        f"analyst-1@{TEAM}",
        "echo_json",
        "finished",
    )
    assert action["result"]["status"] == "SUCCESS" and action["result"]["result"]["n"] == 5
    log = _teamflow("log", TEAM, "analyst-1", "--json")  # the run's 003 conversation
    [conversation] = json.loads(log.stdout).values()
    assert [m["role"] for m in conversation][:3] == ["system", "user", "assistant"]
    assert {m["role"] for m in conversation} == {"system", "user", "assistant"}
    assert conversation[2]["content"]["chimera"]["status"] == "TASK_STARTED"
    unknown = _teamflow("task", "action", "echo-6")
    assert unknown.returncode == 1
    assert unknown.stderr == "teamflow: error: no ASYNC action has task_id 'echo-6'\n"
