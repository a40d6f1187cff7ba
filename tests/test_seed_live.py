"""Every seed item live (issue 37): notifications sent and refused, every view of a message.

Run as a user runs them: `teamflow msg ...` commands against a real database (SQLite and
PostgreSQL), read back with `teamflow validate`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team

from models import inbox


@pytest.fixture
def env(db_url: str, home: Path) -> dict[str, str]:
    from flows.tools import install_builtin_tools

    research_team()
    install_builtin_tools()  # what `teamflow db upgrade` does: `--tool` names a stored tool
    return {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}


def teamflow(env: dict[str, str], *args: str) -> Any:
    return run_teamflow(args, env)


def ok(env: dict[str, str], *args: str) -> str:
    result = teamflow(env, *args)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    return result.stdout


def refused(result: Any, *fragments: str) -> str:
    """A refusal: exit 1 and one line `teamflow: error: ...` naming every fragment."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("teamflow: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


SEND = ("msg", "send", TEAM, "--to", "analyst-1", "--from", "coordinator")

# --- 1. every `msg send --type T` checks T's 001 payload -----------------------------------

GOOD_PAYLOADS: dict[str, dict[str, Any]] = {
    "user_message": {"content": "What's the weather?", "content_type": "text"},
    "agent_message": {"sender_agent_id": "coordinator@research-team", "content": "Go"},
    "task_assignment": {
        "task_id": "9b2e4f7a-1c3d-4e5f-8a9b-0c1d2e3f4a5b",
        "task_description": "Get weather for NYC",
        "priority": "normal",
    },
    "tool_result": {
        "tool_name": "get_forecast",
        "status": "SUCCESS",
        "result": {"t": 72},
        "error_message": None,
    },
    "system_alert": {"alert_type": "TIMER", "alert_name": "daily_sync", "message": "Sync"},
    "status_update": {"agent_id": "analyst-2@research-team", "status": "busy", "capacity": 0.8},
    "capability_broadcast": {"agent_id": "analyst-2@research-team", "capabilities": ["read"]},
}

BAD_PAYLOADS: dict[str, tuple[dict[str, Any], str]] = {
    "user_message": ({"content": "hi", "content_type": "smell"}, "content_type"),
    "agent_message": ({"content": "no sender"}, "sender_agent_id"),
    "task_assignment": (
        {"task_id": "not-a-uuid", "task_description": "d", "priority": "normal"},
        "task_id",
    ),
    "tool_result": ({"tool_name": "t", "status": "MAYBE"}, "status"),
    "system_alert": ({"alert_type": "SNOOZE", "alert_name": "x"}, "alert_type"),
    "status_update": ({"agent_id": "a", "status": "busy", "capacity": 1.5}, "capacity"),
    "capability_broadcast": ({"nonsense": 1}, "capabilities"),
}


@pytest.mark.parametrize("kind", sorted(BAD_PAYLOADS))
def test_a_bad_payload_of_every_001_type_is_refused_and_nothing_written(
    env: dict[str, str], kind: str
) -> None:
    payload, field = BAD_PAYLOADS[kind]
    before = inbox.messages(TEAM, "analyst-1")
    refused(teamflow(env, *SEND, "--type", kind, "--text", json.dumps(payload)), kind, field)
    refused(teamflow(env, *SEND, "--type", kind, "--text", "not json"), kind, "JSON")
    assert inbox.messages(TEAM, "analyst-1") == before


@pytest.mark.parametrize("kind", sorted(GOOD_PAYLOADS))
def test_a_good_payload_of_every_001_type_reads_back_as_its_notification(
    env: dict[str, str], kind: str
) -> None:
    message_id = ok(env, *SEND, "--type", kind, "--text", json.dumps(GOOD_PAYLOADS[kind]))
    row = inbox.messages(TEAM, "analyst-1")[-1]
    assert row.message_id == message_id.strip()
    notification = row.to_notification()
    assert notification.notification_type == kind
    assert notification.recipient_agent_id == "analyst-1@research-team"


# --- 2. every view of a message ------------------------------------------------------------


def _fill_inbox(env: dict[str, str]) -> None:
    ok(env, *SEND, "--text", "plain words")
    ok(env, *SEND, "--type", "status_update", "--text", json.dumps(GOOD_PAYLOADS["status_update"]))
    shutdown = {"type": "shutdown_request", "requestId": "r-1", "from": "coordinator"}
    ok(env, *SEND, "--type", "shutdown_request", "--text", json.dumps(shutdown))


@pytest.mark.parametrize(
    ("fmt", "as_format", "one_format"),
    [
        ("004", "004/inbox", "004/inbox-entry"),
        ("001", "001/notifications", "001/notification"),
        ("000", "000/messages", "000/message"),
    ],
)
def test_the_inbox_in_every_format_validates(
    env: dict[str, str], tmp_path: Path, fmt: str, as_format: str, one_format: str
) -> None:
    _fill_inbox(env)
    args = ("msg", "inbox", TEAM, "analyst-1", "--format", fmt)
    printed = json.loads(ok(env, *args, *(("--json",) if fmt == "004" else ())))
    assert len(printed) == 4  # the system init message and the three above
    file = tmp_path / f"inbox-{fmt}.json"
    file.write_text(json.dumps(printed))
    assert ok(env, "validate", str(file), "--as", as_format).startswith("ok")
    for one in printed:  # each message is one document of the single format too
        single = tmp_path / "one.json"
        single.write_text(json.dumps(one))
        assert ok(env, "validate", str(single), "--as", one_format).startswith("ok")


def test_the_three_formats_show_the_same_messages(env: dict[str, str]) -> None:
    _fill_inbox(env)
    base = ("msg", "inbox", TEAM, "analyst-1")
    entries = json.loads(ok(env, *base, "--json"))
    notes = json.loads(ok(env, *base, "--format", "001"))
    messages = json.loads(ok(env, *base, "--format", "000"))
    ids = [e["messageId"] for e in entries]
    assert [m["message_id"] for m in messages] == ids
    assert [f"msg-{n['notification_id']}" for n in notes] == ids
    assert [n["notification_type"] for n in notes] == [
        "agent_message", "agent_message", "status_update", "agent_message"
    ]  # fmt: skip
    assert notes[0]["payload"]["sender_agent_id"] == "system"
    assert notes[1]["payload"] == {
        "sender_agent_id": "coordinator@research-team", "content": "plain words"
    }  # fmt: skip
    assert notes[2]["payload"]["capacity"] == 0.8
    assert [m["type"] for m in messages] == ["event", "event", "log", "command"]
    assert messages[2]["payload"]["content"]["status"] == "busy"
    refused(teamflow(env, *base, "--format", "002"), "unknown format '002'")


def test_mark_junk_sets_the_000_status(env: dict[str, str]) -> None:
    _fill_inbox(env)
    base = ("msg", "inbox", TEAM, "analyst-1", "--format", "000")
    first = json.loads(ok(env, *base))[1]["message_id"]
    assert ok(env, "msg", "mark", TEAM, "analyst-1", first, "--junk").strip() == f"{first} junk"
    assert [m["status"] for m in json.loads(ok(env, *base))] == ["sent", "junk", "sent", "sent"]
    ok(env, "msg", "inbox", TEAM, "analyst-1", "--mark-read")
    assert [m["status"] for m in json.loads(ok(env, *base))] == ["read", "junk", "read", "read"]
    ok(env, "msg", "mark", TEAM, "analyst-1", first, "--not-junk")
    assert json.loads(ok(env, *base))[1]["status"] == "read"
    refused(teamflow(env, "msg", "mark", TEAM, "analyst-1", "msg-nope", "--junk"), "msg-nope")


# --- 3. notifications live -----------------------------------------------------------------


def _notes(env: dict[str, str], member: str, kind: str) -> list[dict[str, Any]]:
    notes = json.loads(ok(env, "msg", "inbox", TEAM, member, "--format", "001"))
    return [n for n in notes if n["notification_type"] == kind]


def test_the_lead_hears_each_members_capabilities_on_joining_and_on_a_tool_change(
    env: dict[str, str],
) -> None:
    joined = _notes(env, "coordinator", "capability_broadcast")
    assert [n["payload"]["agent_id"] for n in joined] == [
        "analyst-1@research-team", "analyst-2@research-team"
    ]  # fmt: skip
    assert joined[0]["source"] == "analyst-1"
    assert joined[0]["payload"]["status"] == "available"
    ok(
        env,
        "member",
        "set",
        TEAM,
        "analyst-1",
        "--tool",
        "read_csv_summary",
        "--tool",
        "write_file",
    )
    [*_, changed] = _notes(env, "coordinator", "capability_broadcast")
    assert changed["payload"]["capabilities"] == ["read_csv_summary", "write_file"]
    ok(env, "member", "set", TEAM, "analyst-1", "--model", "opus")  # tools unchanged: no news
    assert len(_notes(env, "coordinator", "capability_broadcast")) == 3


def test_an_unassigned_task_goes_to_the_idle_member_whose_tools_match(
    env: dict[str, str], session: Any
) -> None:
    from models import dependencies, task

    ok(env, "member", "set", TEAM, "analyst-1", "--tool", "read_csv_summary")
    ok(env, "member", "set", TEAM, "analyst-2", "--tool", "write_file")
    plain = task.create_task(TEAM, title="Anything")
    csv = task.create_task(TEAM, title="Tabulate", params={"capabilities": ["write_file"]})
    usable = lambda runtime: True  # noqa: E731
    with session.begin():
        assert dependencies.before_claim(csv.id, usable, session=session) == (["analyst-2"], None)
    with session.begin():
        assert dependencies.before_claim(plain.id, usable, session=session) == (["analyst-1"], None)


def test_msg_ask_sends_a_user_message_with_its_content_type_and_session(
    env: dict[str, str],
) -> None:
    args = ("msg", "ask", TEAM, "analyst-1", "--text", "Oi, uma sugestão de almoço?")
    ok(env, *args, "--session", "device_laptop_xyz")
    ok(env, *args[:-1], "img-42", "--content-type", "image_id")
    ok(env, *args[:-1], "bom dia", "--content-type", "voice_transcript")
    first, second, third = _notes(env, "analyst-1", "user_message")
    assert third["payload"]["content_type"] == "voice_transcript"
    assert first["payload"] == {
        "content": "Oi, uma sugestão de almoço?", "content_type": "text",
        "session_id": "device_laptop_xyz",
    }  # fmt: skip
    assert first["source"] == "coordinator"  # the local user speaks from the lead's seat
    assert second["payload"]["content_type"] == "image_id"
    before = inbox.messages(TEAM, "analyst-1")
    refused(teamflow(env, *args, "--content-type", "smell"), "content type 'smell'")
    refused(teamflow(env, "msg", "ask", TEAM, "nobody", "--text", "hi"), "nobody")
    assert inbox.messages(TEAM, "analyst-1") == before


def test_a_members_message_to_another_is_a_typed_agent_message_with_attachments(
    env: dict[str, str],
) -> None:
    from models import notify

    notify.agent_message(
        TEAM, to="analyst-2", sender="analyst-1", text="See my table",
        attachments=["artifacts/analysis.csv"],
    )  # fmt: skip
    [note] = _notes(env, "analyst-2", "agent_message")[-1:]
    assert note["payload"] == {
        "sender_agent_id": "analyst-1@research-team", "content": "See my table",
        "attachments": ["artifacts/analysis.csv"],
    }  # fmt: skip
    [entry] = json.loads(ok(env, "msg", "inbox", TEAM, "analyst-2", "--json"))[-1:]
    assert entry["type"] == "agent_message" and entry["text"] == "See my table"


def test_a_status_update_carries_the_current_task_and_capacity(env: dict[str, str]) -> None:
    from models import task

    row = task.create_task(TEAM, title="Q4 revenue by region", assignees=["analyst-1"])
    task.move_task(row.id, to=task.TaskState.IN_PROGRESS)
    ok(env, "member", "heartbeat", TEAM, "analyst-1", "--status", "thinking")
    ok(env, "member", "heartbeat", TEAM, "analyst-2", "--status", "idle")
    busy, idle = _notes(env, "coordinator", "status_update")
    assert busy["payload"]["current_task"] == "Q4 revenue by region"
    assert busy["payload"]["capacity"] == 1.0 and busy["payload"]["status"] == "busy"
    assert idle["payload"]["capacity"] == 0.0 and idle["payload"].get("current_task") is None


# --- 4. 004 details: colours by role, waiting_response --------------------------------------


def test_colours_follow_the_roles_of_the_004_table(env: dict[str, str]) -> None:
    add = ("member", "add", TEAM)
    common = ("--model", "haiku", "--prompt", "p", "--json")

    def colour(name: str, *more: str) -> str:
        return json.loads(ok(env, *add, name, *common, *more))["color"]

    assert colour("checker", "--role", "reviewer") == "cyan"
    assert colour("sql-expert", "--type", "specialized") == "magenta"
    assert colour("fixer", "--role", "error") == "red"
    assert colour("deputy", "--role", "coordinator") == "yellow"
    assert colour("analyst-3") == "blue"  # teammates: blue, green, blue, ... (1 and 2 before)
    config = json.loads((Path(env["TEAMFLOW_HOME"]) / "teams" / TEAM / "config.json").read_text())
    colours = {m["name"]: m["color"] for m in config["members"]}
    assert colours["coordinator"] == "yellow"  # the lead stays yellow
    assert [colours[f"analyst-{i}"] for i in (1, 2, 3)] == ["blue", "green", "blue"]
    refused(teamflow(env, *add, "x-1", *common, "--role", "jester"), "role 'jester'")


def test_a_member_waiting_on_someone_tells_the_lead_waiting_response(
    env: dict[str, str], tmp_path: Path
) -> None:
    from models import notify

    notify.waiting_response(TEAM, "analyst-1", on="analyst-2")
    assert notify.waiting_response(TEAM, "coordinator", on="analyst-1") is None
    [entry] = [
        e
        for e in json.loads(ok(env, "msg", "inbox", TEAM, "coordinator", "--json"))
        if e.get("type") == "idle_notification"
    ]
    note = json.loads(entry["text"])
    assert note["idleReason"] == "waiting_response" and note["from"] == "analyst-1"
    assert entry["metadata"] == {"waitingOn": "analyst-2"}
    file = tmp_path / "idle.json"
    file.write_text(entry["text"])
    assert ok(env, "validate", str(file)).strip() == "ok (004/team-message)"


# --- 5. formats used: the Agent Configuration ----------------------------------------------


def test_each_member_has_its_agent_configuration_kept_current(
    env: dict[str, str], tmp_path: Path
) -> None:
    show = ("member", "show", TEAM, "analyst-1", "--as-config")
    config = json.loads(ok(env, *show))
    assert config["agent_id"] == "analyst-1@research-team" and config["status"] == "ready"
    assert config["description"] == "You are data analyst 1. Analyze data carefully."
    ok(env, "member", "set", TEAM, "analyst-1", "--tool", "read_csv_summary", "--model", "opus")
    changed = json.loads(ok(env, *show))
    assert changed["tools"] == ["read_csv_summary"] and changed["image"].endswith(":opus")
    assert changed["created_at"] == config["created_at"]
    assert changed["updated_at"] >= config["updated_at"]
    file = tmp_path / "agent.json"
    file.write_text(json.dumps(changed))
    assert ok(env, "validate", str(file), "--as", "000/agent-configuration").startswith("ok")


def test_task_show_reads_the_feedback_and_the_experience_log(
    env: dict[str, str], session: Any, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from models import task, tool
    from models.agent import ExperienceLog, ExperienceLogRow

    row = task.create_task(TEAM, title="Count words", assignees=["analyst-1"])
    at = datetime(2026, 2, 16, 10, 0, tzinfo=UTC)
    tool.record_feedback(
        tool.Feedback(execution_id="ex-1", stdout="6\n", stderr="", exit_code=0, created_at=at)
    )
    log = ExperienceLog(
        log_id="log-1", agent_id="analyst-1@research-team", task_id=str(row.id),
        start_time=at, end_time=at, status="success", feedback_id="ex-1",
        created_at=at, updated_at=at,
    )  # fmt: skip
    with session.begin():
        session.add(ExperienceLogRow.from_wire(log))
    [experience] = json.loads(ok(env, "task", "show", str(row.id), "--experience"))
    assert experience["status"] == "success" and experience["feedback_id"] == "ex-1"
    [feedback] = json.loads(ok(env, "task", "show", str(row.id), "--feedback"))
    assert feedback["stdout"] == "6\n" and feedback["exit_code"] == 0
    for document, fmt in ((experience, "000/experience-log"), (feedback, "000/feedback")):
        file = tmp_path / "doc.json"
        file.write_text(json.dumps(document))
        assert ok(env, "validate", str(file), "--as", fmt).startswith("ok")


def test_each_step_writes_its_tool_calls_and_tool_results_columns(
    env: dict[str, str], session: Any
) -> None:
    import sqlalchemy as sa

    from flows.steps import _record_step
    from models.chimera_response import ChimeraResponse
    from models.conversation import MessageRow
    from models.tool import ToolResult

    response = ChimeraResponse.model_validate(
        {
            "status": "EXECUTING",
            "thoughts": [{"type": "PLAN", "content": "count"}],
            "actions": [{"action": "count_words", "type": "tool", "params": {"path": "a.txt"}}],
            "stop": False,
            "response": None,
        }
    )
    result = ToolResult.success("count_words", {"words": 6})
    _record_step("analyst-1@research-team", "conv-1", response, [result])
    rows = (
        session.exec(
            sa.select(MessageRow)
            .where(MessageRow.conversation_id == "conv-1")
            .order_by(MessageRow.id)
        )
        .scalars()
        .all()
    )
    step, answer = rows[-2:]
    assert json.loads(step.tool_calls)[0]["action"] == "count_words"
    assert json.loads(answer.tool_results) == [result.to_wire()]


def test_resource_add_list_and_show(env: dict[str, str], tmp_path: Path) -> None:
    ok(env, "resource", "add", "q4-sales", "--name", "Q4 sales", "--type", "data",
       "--path", "data/q4.csv", "--access", "read", "--tag", "sales")  # fmt: skip
    ok(env, "resource", "add", "report", "--name", "Report", "--type", "file",
       "--path", "artifacts/report.md", "--access", "write")  # fmt: skip
    listed = json.loads(ok(env, "resource", "list", "--json"))
    assert [(r["resource_id"], r["access"]) for r in listed] == [
        ("q4-sales", "read"), ("report", "write")
    ]  # fmt: skip
    shown = ok(env, "resource", "show", "q4-sales")
    file = tmp_path / "resource.json"
    file.write_text(shown)
    assert ok(env, "validate", str(file), "--as", "000/resource").startswith("ok")
    assert json.loads(shown)["tags"] == ["sales"]
    bad = ("resource", "add", "x", "--name", "X", "--path", "p")
    refused(teamflow(env, *bad, "--type", "pdf"), "type")
    refused(teamflow(env, *bad, "--type", "link", "--access", "admin"), "access")
    refused(teamflow(env, "resource", "show", "nope"), "no resource 'nope'")


def test_a_contexts_status_follows_its_task(env: dict[str, str]) -> None:
    import sqlalchemy as sa
    from sqlmodel import Session

    from models import db, task
    from models.knowledge import ContextRow

    ok(env, "project", "create", "Q4 Launch", "--description", "Ship it",
       "--milestone", "m1-research")  # fmt: skip
    made = ok(env, "task", "create", TEAM, "--title", "Research", "--project", "q4-launch",
              "--milestone", "m1-research", "--json")  # fmt: skip
    task_id = json.loads(made)["id"]

    def status() -> str:
        with Session(db.engine()) as s:
            query = sa.select(ContextRow.status).where(ContextRow.task_id == task_id)
            return s.execute(query).scalar_one()

    assert status() == "pending"
    seen = []
    for state in (task.TaskState.IN_PROGRESS, task.TaskState.COMPLETED):
        task.move_task(uuid.UUID(task_id), to=state)
        seen.append(status())
    assert seen == ["running", "finished"]


def test_member_add_and_set_give_resources_shown_by_member_show(env: dict[str, str]) -> None:
    ok(env, "resource", "add", "q4-sales", "--name", "Q4 sales", "--type", "data",
       "--path", "data/q4.csv", "--access", "read")  # fmt: skip
    ok(env, "resource", "add", "report", "--name", "Report", "--type", "file",
       "--path", "artifacts/report.md", "--access", "write")  # fmt: skip
    added = ("member", "add", TEAM, "analyst-3", "--model", "haiku", "--prompt", "Analyst 3.")
    ok(env, *added, "--resource", "q4-sales:read", "--resource", "report:write")
    shown = json.loads(ok(env, "member", "show", TEAM, "analyst-3", "--json"))
    assert shown["resources"] == [
        {"type": "data", "id": "q4-sales", "path": "data/q4.csv", "access": "read"},
        {"type": "file", "id": "report", "path": "artifacts/report.md", "access": "write"},
    ]
    assert "resources    q4-sales (read), report (write)" in ok(
        env, "member", "show", TEAM, "analyst-3"
    )
    config = json.loads(ok(env, "member", "show", TEAM, "analyst-3", "--as-config"))
    assert config["resources"] == ["q4-sales", "report"]
    ok(env, "member", "set", TEAM, "analyst-1", "--resource", "q4-sales:write")
    [given] = json.loads(ok(env, "member", "show", TEAM, "analyst-1", "--json"))["resources"]
    assert (given["id"], given["access"]) == ("q4-sales", "write")
    home = Path(env["TEAMFLOW_HOME"])
    before = (
        inbox.messages(TEAM, "analyst-1"),
        (home / "teams" / TEAM / "config.json").read_bytes(),
    )
    for spec, fragment in (
        ("nope:read", "no resource 'nope'"),
        ("q4-sales:admin", "--resource 'q4-sales:admin' is not ID:read|write"),
        ("q4-sales", "--resource 'q4-sales' is not ID:read|write"),
    ):
        refused(teamflow(env, "member", "set", TEAM, "analyst-1", "--resource", spec), fragment)
        refused(teamflow(env, *added[:3], "analyst-4", *added[4:], "--resource", spec), fragment)
    after = (
        inbox.messages(TEAM, "analyst-1"),
        (home / "teams" / TEAM / "config.json").read_bytes(),
    )
    assert after == before
    assert [m["name"] for m in json.loads(ok(env, "member", "list", TEAM, "--json"))].count(
        "analyst-4"
    ) == 0
    assert json.loads(ok(env, "member", "show", TEAM, "analyst-1", "--json"))["resources"] == [
        given
    ]


def test_task_action_looks_an_async_action_up_by_its_task_id(env: dict[str, str]) -> None:
    from flows.steps import _record_step
    from flows.tool_action import deliver_result
    from models.chimera_response import ChimeraResponse
    from models.tool import ToolResult

    started = ChimeraResponse.model_validate(
        {
            "status": "TASK_STARTED",
            "thoughts": [{"type": "PLAN", "content": "build it apart"}],
            "actions": [
                {"action": "build_tool", "type": "tool", "params": {"target": "//main:app"},
                 "execution": "ASYNC", "task_id": "build-42"},
            ],
            "stop": False,
            "response": None,
        }
    )  # fmt: skip
    _record_step("analyst-1@research-team", "task-x", started, [])
    running = json.loads(ok(env, "task", "action", "build-42", "--json"))
    assert running["state"] == "running" and running["result"] is None
    assert (running["agent_id"], running["action"]) == ("analyst-1@research-team", "build_tool")
    assert running["params"] == {"target": "//main:app"}
    result = ToolResult.success("build_tool", {"artifact": "app.tar"})
    deliver_result(TEAM, "analyst-1", "build_tool", "build-42", result.to_wire())
    finished = json.loads(ok(env, "task", "action", "build-42", "--json"))
    assert finished["state"] == "finished" and finished["result"] == result.to_wire()
    assert finished["finished_at"] >= finished["started_at"]
    text = ok(env, "task", "action", "build-42")
    assert "state        finished (SUCCESS)" in text and '{"artifact": "app.tar"}' in text
    refused(teamflow(env, "task", "action", "build-4"), "no ASYNC action has task_id 'build-4'")
    refused(teamflow(env, "task", "action", "%"), "no ASYNC action has task_id '%'")
