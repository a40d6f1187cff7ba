"""Teams, members and inboxes through the stores, with the team files as a live mirror."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from factories import TEAM, research_team

from models import file_swap, inbox, inbox_files, inbox_message, membership, mirror, presence
from models import team as teams
from models.inbox_message import InboxError, PlanApprovalRequest
from models.team import TeamError

pytestmark = pytest.mark.usefixtures("db_url")

needs_jq = pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")


def jq(program: str, path: Path) -> object:
    out = subprocess.run(
        ["jq", "-c", program, str(path)], capture_output=True, text=True, check=True
    )
    lines = out.stdout.strip().splitlines()
    values = [json.loads(line) for line in lines]
    return values[0] if len(values) == 1 else values


def test_members_get_agent_ids_and_colours_in_the_seeds_order(home: Path) -> None:
    research_team(analysts=7)
    members = {m.name: m for m in teams.list_members(TEAM)}
    assert members["coordinator"].color == "yellow"
    colours = [members[f"analyst-{i}"].color for i in range(1, 8)]
    # 004 Terminal Color Mapping: teammates blue and green in turn; yellow, magenta, cyan and
    # red belong to roles (coordinators, specialised, reviewers, error agents).
    assert colours == ["blue", "green", "blue", "green", "blue", "green", "blue"]
    assert members["analyst-1"].agent_id == "analyst-1@research-team"
    assert all(m.is_active and m.spawned_at is not None for m in members.values())


def test_duplicate_member_and_team_are_refused(home: Path) -> None:
    research_team()
    with pytest.raises(TeamError, match="has a member named 'analyst-1' already"):
        membership.add_member(TEAM, "analyst-1", model="haiku", prompt="again")
    with pytest.raises(TeamError, match="exists already"):
        membership.create_team(TEAM, description="again")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "gpt-9"}, "model"),
        ({"color": "purple"}, "color"),
        ({"backend": "tmux"}, "tmuxPaneId"),
        ({"backend": "tmux", "tmux_pane_id": "88"}, "tmuxPaneId"),
        ({"agent_type": "wizard"}, "agentType"),
    ],
)
def test_bad_member_is_refused_and_nothing_written(home: Path, kwargs: dict, message: str) -> None:
    research_team()
    before = (home / "teams" / TEAM / "config.json").read_bytes()
    args = {"model": "haiku", "prompt": "p", **kwargs}
    with pytest.raises(TeamError, match=message):
        membership.add_member(TEAM, "analyst-9", **args)
    assert [m.name for m in teams.list_members(TEAM)] == ["coordinator", "analyst-1", "analyst-2"]
    assert (home / "teams" / TEAM / "config.json").read_bytes() == before


@pytest.mark.parametrize("name", ["../x", "/etc", "a/b", ".hidden", "x" * 65])
def test_names_that_could_leave_home_are_refused(home: Path, name: str) -> None:
    research_team()
    with pytest.raises(ValueError, match="not a member name"):
        membership.add_member(TEAM, name, model="haiku", prompt="p")
    with pytest.raises(ValueError, match="not a team name"):
        membership.create_team(name, description="d")
    assert sorted(p.name for p in (home / "teams").iterdir()) == [TEAM]


def test_send_and_read_an_inbox(home: Path) -> None:
    research_team()
    sent = inbox.send(TEAM, to="analyst-1", sender="coordinator", text="Analyze Q4", summary="Q4")
    unread = inbox.messages(TEAM, "analyst-1", unread=True)
    assert [m.text for m in unread][-1] == "Analyze Q4"
    assert sent.color == "yellow"
    assert sent.message_id.startswith("msg-")
    assert sent.timestamp.tzinfo is not None
    assert inbox.unread_count(TEAM, "analyst-1") == 2  # the system_init and this one
    assert inbox.mark_read(TEAM, "analyst-1", [sent.message_id]) == 1
    assert inbox.unread_count(TEAM, "analyst-1") == 1
    assert [m.sender for m in inbox.messages(TEAM, "analyst-1", sender="coordinator")] == [
        "coordinator"
    ]
    inbox.messages(TEAM, "analyst-1", mark_read=True)
    assert inbox.unread_count(TEAM, "analyst-1") == 0


def test_broadcast_reaches_every_active_member_but_the_sender(home: Path) -> None:
    research_team(analysts=3)
    teams.set_member(TEAM, "analyst-3", is_active=False)
    rows = inbox.broadcast(TEAM, sender="analyst-1", text="lunch?")
    assert sorted(r.recipient for r in rows) == ["analyst-2", "coordinator"]


@pytest.mark.parametrize(
    ("to", "sender", "message"),
    [
        ("ghost", "coordinator", "no member named 'ghost'"),
        ("analyst-1", "ghost", "unknown sender"),
        ("../etc", "coordinator", "not a member name"),
    ],
)
def test_undeliverable_messages_are_refused(home: Path, to: str, sender: str, message: str) -> None:
    research_team()
    with pytest.raises(ValueError, match=message):
        inbox.send(TEAM, to=to, sender=sender, text="hello")


def test_message_to_a_shut_down_member_is_refused(home: Path) -> None:
    research_team()
    teams.set_member(TEAM, "analyst-1", is_active=False)
    with pytest.raises(InboxError, match="shut down"):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="still there?")


def test_a_shut_down_member_sends_nothing_and_reports_no_work(home: Path) -> None:
    research_team()
    teams.set_member(TEAM, "analyst-1", is_active=False)
    before = inbox.unread_count(TEAM, "coordinator")
    with pytest.raises(InboxError, match=r"sender 'analyst-1' .* is shut down"):
        inbox.send(TEAM, to="coordinator", sender="analyst-1", text="one more thing")
    with pytest.raises(InboxError, match=r"sender 'analyst-1' .* is shut down"):
        inbox.broadcast(TEAM, sender="analyst-1", text="to everyone")
    with pytest.raises(InboxError, match=r"sender 'analyst-1' .* is shut down"):
        inbox.send_many(TEAM, [{"to": "coordinator", "sender": "analyst-1", "text": "x"}])
    assert inbox.unread_count(TEAM, "coordinator") == before
    with pytest.raises(TeamError, match=r"'analyst-1' .* is shut down .* 'thinking'"):
        presence.heartbeat(TEAM, "analyst-1", status="thinking")
    assert presence.heartbeat(TEAM, "analyst-1", status="offline").status == "offline"


def test_oversized_message_is_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    research_team()
    with pytest.raises(InboxError, match="over the limit"):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="x" * (1024 * 1024 + 1))
    monkeypatch.setenv("TEAMFLOW_MAX_MESSAGE_BYTES", "10")
    with pytest.raises(InboxError, match="over the limit of 10"):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="eleven char")
    assert inbox.unread_count(TEAM, "analyst-1") == 1


def test_unknown_team_is_one_clear_error(home: Path) -> None:
    with pytest.raises(TeamError, match="no team named 'nobody-here'"):
        inbox.send("nobody-here", to="a", sender="b", text="x")


def test_typed_message_reads_back_as_004_001_and_000(home: Path) -> None:
    research_team()
    request = PlanApprovalRequest.model_validate(
        {
            "from": "analyst-1",
            "plan": "1. Load\n2. Analyze",
            "summary": "Q4 plan",
            "timestamp": "2026-02-16T10:41:00.000Z",
            "requestId": "plan-xyz789",
        }
    )
    row = inbox.send_payload(TEAM, to="coordinator", sender="analyst-1", payload=request)
    entry = row.to_entry().to_wire()
    assert entry["type"] == "plan_approval_request"
    assert json.loads(entry["text"]) == request.to_wire()
    message = row.to_message().to_wire()
    assert message["message_id"] == row.message_id
    assert message["sender"] == "analyst-1"
    assert message["status"] == "sent"


def test_messages_read_back_exactly_as_the_orm_loads_them(home: Path) -> None:
    """`messages` builds its rows itself (on SQLite from the driver's own values): every
    attribute equals what SQLAlchemy's ORM loads, for plain, typed and flagged messages."""
    from sqlmodel import Session, select

    from models import db
    from models.inbox_table import InboxRow

    research_team()
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="plain", summary="s")
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="meta", metadata={"k": [1, "x"]})
    inbox.send(
        TEAM, to="analyst-1", sender="system", text="alert", type="system_alert",
        payload={"alert_type": "TIMER", "alert_name": "sync", "message": "é ✓"},
    )  # fmt: skip
    request = PlanApprovalRequest.model_validate(
        {"from": "analyst-1", "plan": "1. Load", "summary": "plan", "requestId": "plan-1",
         "timestamp": "2026-02-16T10:41:00.000Z"}
    )  # fmt: skip
    inbox.send_payload(TEAM, to="analyst-1", sender="analyst-2", payload=request)
    inbox.mark_read(TEAM, "analyst-1", [inbox.messages(TEAM, "analyst-1")[0].message_id])

    def attributes(row: InboxRow) -> dict:
        return {k: v for k, v in vars(row).items() if not k.startswith("_")}

    with Session(db.engine()) as s:
        loaded = s.exec(
            select(InboxRow)
            .where(InboxRow.team == TEAM, InboxRow.recipient == "analyst-1")
            .order_by(InboxRow.seq)
        ).all()
        expected = [attributes(r) for r in loaded]
    assert [attributes(r) for r in inbox.messages(TEAM, "analyst-1")] == expected
    unread = [attributes(r) for r in inbox.messages(TEAM, "analyst-1", unread=True)]
    assert unread == [e for e in expected if not e["read"]] and len(unread) == len(expected) - 1
    assert all(e["timestamp"].tzinfo is not None for e in expected)


def test_notification_reads_back_as_a_notification(home: Path) -> None:
    from models.notification import NotificationAdapter

    research_team()
    row = inbox.send(
        TEAM,
        to="analyst-1",
        sender="system",
        text="Time for daily sync",
        type="system_alert",
        payload={
            "alert_type": "TIMER",
            "alert_name": "daily_sync",
            "message": "Time for daily sync",
        },
    )
    notification = row.to_notification()
    assert (
        NotificationAdapter.dump_python(notification, mode="json")["payload"]["alert_type"]
        == "TIMER"
    )
    assert notification.recipient_agent_id == "analyst-1@research-team"


def test_heartbeat_updates_agent_state(home: Path) -> None:
    research_team()
    first = presence.heartbeat(TEAM, "analyst-1", status="thinking")
    second = presence.heartbeat(TEAM, "analyst-1")
    assert second.agent_id == "analyst-1@research-team"
    assert second.status == "idle"
    assert second.last_heartbeat >= first.last_heartbeat
    with pytest.raises(TeamError, match="status 'asleep'"):
        presence.heartbeat(TEAM, "analyst-1", status="asleep")


def test_status_is_the_004_export_with_unread_counts(home: Path) -> None:
    research_team()
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="go")
    teams.set_member(TEAM, "analyst-2", is_active=False)
    state = presence.team_state(TEAM)
    assert state["team"] == TEAM
    assert state["active_members"] == ["coordinator", "analyst-1"]
    assert state["total_members"] == 3
    # The lead's two: each analyst's capability_broadcast on joining.
    assert state["unread"] == {"coordinator": 2, "analyst-1": 2, "analyst-2": 1}


def test_delete_team_removes_rows_and_files(home: Path) -> None:
    research_team()
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="go")
    membership.delete_team(TEAM)
    assert teams.list_teams() == []
    assert not (home / "teams" / TEAM).exists()
    with pytest.raises(TeamError):
        inbox.messages(TEAM, "analyst-1")


# --- the files -----------------------------------------------------------------------------


def test_files_are_private(home: Path) -> None:
    research_team()
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="go")
    for path in [home / "teams", home / "teams" / TEAM, home / "teams" / TEAM / "inboxes"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in [home / "teams" / TEAM / "config.json", mirror.inbox_path(TEAM, "analyst-1")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@needs_jq
def test_jq_recipes_on_config_answer_as_the_database(home: Path) -> None:
    research_team()
    teams.set_member(TEAM, "analyst-2", is_active=False)
    config = home / "teams" / TEAM / "config.json"
    assert [m["name"] for m in jq(".members", config)] == ["coordinator", "analyst-1", "analyst-2"]
    active = jq(".members[] | select(.isActive == true)", config)
    assert [m["name"] for m in active] == [m.name for m in teams.list_members(TEAM, active=True)]
    one = jq('.members[] | select(.name == "analyst-1")', config)
    assert one["agentId"] == "analyst-1@research-team"
    assert (
        jq('if .name and .description and .members then "Valid" else "Missing" end', config)
        == "Valid"
    )
    valid = jq(
        ".members[] | select(.agentId and .name and .model and .isActive != null) | .name", config
    )
    assert valid == ["coordinator", "analyst-1", "analyst-2"]
    export_recipe = """{
      team: .name,
      created: .createdAt,
      active_members: [.members[] | select(.isActive == true) | .name],
      total_members: (.members | length)
    }"""
    state = jq(export_recipe, config)
    export = presence.team_state(TEAM)
    assert state == {k: export[k] for k in ("team", "created", "active_members", "total_members")}
    assert jq('.schemaVersion // "1.0.0"', config) == "1.0.0"


@needs_jq
def test_jq_recipes_on_inboxes_answer_as_the_database(home: Path) -> None:
    research_team()
    for i in range(5):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text=f"task {i}")
    inbox.send(TEAM, to="analyst-1", sender="analyst-2", text="hi")
    first = inbox.messages(TEAM, "analyst-1", sender="coordinator")[0]
    inbox.mark_read(TEAM, "analyst-1", [first.message_id])
    path = mirror.inbox_path(TEAM, "analyst-1")
    everything = jq(".", path)
    assert [e["messageId"] for e in everything] == [
        m.message_id for m in inbox.messages(TEAM, "analyst-1")
    ]
    unread = jq("[.[] | select(.read == false)]", path)
    assert [e["messageId"] for e in unread] == [
        m.message_id for m in inbox.messages(TEAM, "analyst-1", unread=True)
    ]
    assert jq("[.[] | select(.read == false)] | length", path) == inbox.unread_count(
        TEAM, "analyst-1"
    )
    from_coordinator = jq('[.[] | select(.from == "coordinator")]', path)
    assert len(from_coordinator) == 5
    assert jq('if type == "array" then "Valid" else "Must be array" end', path) == "Valid"
    assert (
        len(jq(".[] | select(.from and .text and .timestamp and (.read != null)) | .from", path))
        == 7
    )


@needs_jq
def test_sync_takes_in_a_jq_append_and_read_flags(home: Path) -> None:
    research_team()
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="first")
    path = mirror.inbox_path(TEAM, "analyst-1")
    first_id = inbox.messages(TEAM, "analyst-1")[0].message_id
    append = """. += [{"from": "coordinator", "text": "New task: analyze customer churn",
        "summary": "Churn analysis request", "timestamp": "2026-02-16T10:40:00.000Z",
        "color": "yellow", "read": false, "messageId": "msg-outside-1"}]"""
    mark = f'(.[] | select(.messageId == "{first_id}") | .read) = true'
    for program in (append, mark):
        out = subprocess.run(["jq", program, str(path)], capture_output=True, text=True, check=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(out.stdout)
        tmp.replace(path)
    report = inbox_files.sync(TEAM)
    assert report["analyst-1"] == (1, 1)
    rows = inbox.messages(TEAM, "analyst-1")
    assert rows[-1].message_id == "msg-outside-1"
    assert rows[0].read is True
    assert inbox_files.sync(TEAM)["analyst-1"] == (0, 0)  # nothing twice
    assert jq(".", path) == [r.entry_dict() for r in rows]


def test_an_outside_append_is_not_lost_when_teamflow_writes_next(home: Path) -> None:
    research_team()
    path = mirror.inbox_path(TEAM, "analyst-1")
    entries = json.loads(path.read_text())
    entries.append(
        {
            "from": "coordinator",
            "text": "from outside",
            "summary": "s",
            "timestamp": "2026-02-16T10:40:00.000Z",
            "color": "yellow",
            "read": False,
        }
    )
    path.write_text(json.dumps(entries))
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="from teamflow")
    rows = inbox.messages(TEAM, "analyst-1")
    # teamflow's message was committed before the outside one was found: both are kept.
    assert sorted(m.text for m in rows[-2:]) == ["from outside", "from teamflow"]
    on_disk = json.loads(path.read_text())
    assert on_disk == [r.entry_dict() for r in rows]
    assert all(e.get("messageId") for e in on_disk)


def bad_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.bad-*"))


def outside_entry(text: str, **fields: object) -> dict:
    """An entry as the `004` jq append recipe writes it (no messageId unless given)."""
    return {
        "from": "coordinator",
        "text": text,
        "summary": "s",
        "timestamp": "2026-02-16T10:40:00.000Z",
        "color": "yellow",
        "read": False,
        **fields,
    }


def test_sync_refuses_a_malformed_entry_naming_it_and_takes_in_the_rest(home: Path) -> None:
    research_team()
    path = mirror.inbox_path(TEAM, "analyst-1")
    entries = json.loads(path.read_text())
    entries += [outside_entry("x", timestamp="now"), outside_entry("fine")]
    path.write_text(json.dumps(entries))
    written = path.read_bytes()
    refused: dict[str, list[str]] = {}
    assert inbox_files.sync(TEAM, refused)["analyst-1"] == (1, 0)
    [line] = refused["analyst-1"]
    assert line.startswith(f"{path}: entry 1: timestamp")
    [kept] = bad_files(path)
    assert kept.read_bytes() == written and kept.name in line
    rows = inbox.messages(TEAM, "analyst-1")
    assert [r.text for r in rows][1:] == ["fine"]
    assert json.loads(path.read_text()) == [r.entry_dict() for r in rows]
    assert inbox_files.sync(TEAM, refused)["analyst-1"] == (0, 0)  # reported once: the file is ours
    assert len(refused["analyst-1"]) == 1 and len(bad_files(path)) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100 levels"),
        (b'[{"x": "' + b"a" * 4096 + b'"}]', "larger than teamflow's limit of 1024 bytes"),
    ],
    ids=["deeply nested", "over the size cap"],
)
def test_sync_refuses_an_inbox_file_beyond_the_limits_in_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, message: str
) -> None:
    from models import limits

    research_team()
    if "larger" in message:
        monkeypatch.setattr(limits, "MAX_JSON_BYTES", 1024)
    path = mirror.inbox_path(TEAM, "analyst-1")
    path.write_bytes(content)
    refused: dict[str, list[str]] = {}
    inbox_files.sync(TEAM, refused)
    [line] = refused["analyst-1"]
    assert line.startswith(str(path)) and message in line
    assert [p.read_bytes() for p in bad_files(path)] == [content]
    rows = inbox.messages(TEAM, "analyst-1")
    assert len(rows) == 1
    assert json.loads(path.read_text()) == [r.entry_dict() for r in rows]


# --- outside writers: entries without messageId, bad files, limits -------------------------


def test_an_outside_tool_marking_read_without_message_ids_duplicates_nothing(home: Path) -> None:
    """Claude Code's team tools rewrite an inbox with `from, text, timestamp, read, summary,
    color` only: each entry is matched to its message by sender, timestamp and text."""
    research_team()
    for text in ("one", "two", "two"):  # the same text twice: two messages, matched once each
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text=text)
    inbox.send(
        TEAM, to="analyst-1", sender="coordinator", text="typed", type="user_message",
        payload={"content": "typed", "content_type": "text"},
    )  # fmt: skip
    path = mirror.inbox_path(TEAM, "analyst-1")
    before = inbox.messages(TEAM, "analyst-1")
    keep = ("from", "text", "timestamp", "read", "summary", "color")
    rewritten = [{k: e[k] for k in keep} for e in json.loads(path.read_text())]
    for e in rewritten[1:4]:
        e["read"] = True
    rewritten.append(outside_entry("new from outside"))
    path.write_text(json.dumps(rewritten, indent=2))
    assert inbox_files.sync(TEAM)["analyst-1"] == (1, 3)
    rows = inbox.messages(TEAM, "analyst-1")
    assert [r.message_id for r in rows[:-1]] == [r.message_id for r in before]
    assert [r.read for r in rows] == [False, True, True, True, False, False]
    assert rows[-1].text == "new from outside" and rows[-1].message_id.startswith("msg-")
    assert rows[4].type == "user_message"  # kept, and back in the file
    assert json.loads(path.read_text()) == [r.entry_dict() for r in rows]
    assert inbox_files.sync(TEAM)["analyst-1"] == (0, 0)  # taken in once
    # The tool writes its view again (no ids, the new one included): still nothing twice.
    again = [{k: e[k] for k in keep} for e in json.loads(path.read_text())]
    path.write_text(json.dumps(again))
    assert inbox_files.sync(TEAM)["analyst-1"] == (0, 0)
    assert len(inbox.messages(TEAM, "analyst-1")) == 6


@pytest.mark.parametrize(
    "damage",
    ["truncated", "entry without summary"],
)
def test_a_send_over_a_bad_inbox_file_succeeds_keeps_the_file_and_reports_once(
    home: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    research_team()
    path = mirror.inbox_path(TEAM, "analyst-1")
    entries = [*json.loads(path.read_text()), outside_entry("from outside")]
    if damage == "truncated":
        written = json.dumps(entries, indent=2).encode()[:-40]
    else:
        bad = outside_entry("no summary")
        del bad["summary"]
        written = json.dumps([*entries, bad], indent=2).encode()
    path.write_bytes(written)
    with caplog.at_level("WARNING", logger="teamflow.inbox"):
        row = inbox.send(TEAM, to="analyst-1", sender="coordinator", text="sent")
        for i in range(3):  # and the next sends do not fail either
            inbox.send(TEAM, to="analyst-1", sender="coordinator", text=f"later {i}")
    [kept] = bad_files(path)
    assert kept.read_bytes() == written
    [report] = [r.getMessage() for r in caplog.records]
    assert str(path) in report and kept.name in report
    assert ("not valid JSON" if damage == "truncated" else "summary") in report
    rows = inbox.messages(TEAM, "analyst-1")
    texts = [r.text for r in rows][1:]
    # The good entries of the bad file are taken in (the truncated one loses its last).
    good = [] if damage == "truncated" else ["from outside"]
    assert sorted(texts) == sorted(["sent", *good, "later 0", "later 1", "later 2"])
    assert [r.message_id for r in rows].count(row.message_id) == 1
    assert json.loads(path.read_text()) == [r.entry_dict() for r in rows]


def test_a_truncated_file_keeps_the_entries_before_the_damage(home: Path) -> None:
    research_team()
    path = mirror.inbox_path(TEAM, "analyst-1")
    entries = json.loads(path.read_text()) + [outside_entry(f"o{i}") for i in range(3)]
    path.write_bytes(json.dumps(entries, indent=2).encode()[:-30])
    refused: dict[str, list[str]] = {}
    assert inbox_files.sync(TEAM, refused)["analyst-1"] == (2, 0)
    [line] = refused["analyst-1"]
    assert "not valid JSON" in line and "the 3 entries before it are kept" in line
    assert [r.text for r in inbox.messages(TEAM, "analyst-1")][1:] == ["o0", "o1"]


def test_sync_refuses_an_oversize_entry_as_a_send_does_and_takes_in_the_rest(
    home: Path,
) -> None:
    research_team()
    big = "x" * (inbox_message.DEFAULT_MAX_MESSAGE_BYTES + 1)
    with pytest.raises(InboxError, match="over the limit of 1048576"):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text=big)
    path = mirror.inbox_path(TEAM, "analyst-1")
    entries = json.loads(path.read_text())
    entries += [outside_entry("before"), outside_entry(big), outside_entry("after")]
    path.write_text(json.dumps(entries))
    refused: dict[str, list[str]] = {}
    assert inbox_files.sync(TEAM, refused)["analyst-1"] == (2, 0)
    [line] = refused["analyst-1"]
    assert line.startswith(f"{path}: entry 2: message of 1048577 bytes is over the limit")
    assert len(line.splitlines()) == 1 and len(line) < 400
    assert [r.text for r in inbox.messages(TEAM, "analyst-1")][1:] == ["before", "after"]
    assert len(bad_files(path)) == 1


def test_send_many_delivers_in_order_with_one_file_write_per_inbox(home: Path) -> None:
    research_team()
    batch = [
        {"to": "analyst-1" if i % 2 else "analyst-2", "sender": "coordinator", "text": f"m{i}"}
        for i in range(10)
    ]
    rows = inbox.send_many(TEAM, batch)
    assert [r.text for r in rows] == [f"m{i}" for i in range(10)]
    for member in ("analyst-1", "analyst-2"):
        stored = inbox.messages(TEAM, member)
        assert [r.seq for r in stored] == list(range(1, 7))
        assert json.loads(mirror.inbox_path(TEAM, member).read_text()) == [
            r.entry_dict() for r in stored
        ]


def test_send_many_is_all_or_nothing(home: Path) -> None:
    research_team()
    batch = [
        {"to": "analyst-1", "sender": "coordinator", "text": "fine"},
        {"to": "ghost", "sender": "coordinator", "text": "lost?"},
    ]
    with pytest.raises(InboxError, match="message 1: cannot deliver"):
        inbox.send_many(TEAM, batch)
    assert [r.text for r in inbox.messages(TEAM, "analyst-1")] == [
        "You are data analyst 1. Analyze data carefully."
    ]


def test_without_rename_exchange_the_old_file_is_moved_aside_and_nothing_is_lost(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_swap, "_renameat2", False)  # as where renameat2 is not supported
    research_team()
    path = mirror.inbox_path(TEAM, "analyst-1")
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="one")
    path.write_text(json.dumps([*json.loads(path.read_text()), outside_entry("outside")]))
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="two")
    rows = inbox.messages(TEAM, "analyst-1")
    assert sorted(r.text for r in rows[1:]) == ["one", "outside", "two"]
    assert json.loads(path.read_text()) == [r.entry_dict() for r in rows]
    assert sorted(p.name for p in path.parent.iterdir() if "analyst-1" in p.name) == [
        ".analyst-1.json.state",
        "analyst-1.json",
    ]


def imported_by(args: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs `teamflow *args` in a fresh process; its output and the modules it imported."""
    code = (
        "import sys\nfrom flows.cli import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
        "print('MODULES', *sorted(sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env=os.environ.copy(),  # the test's TEAMFLOW_DATABASE_URL and TEAMFLOW_HOME
    )  # fmt: skip
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("MODULES"), result.stdout + result.stderr
    return result, last.split()[1:]


@pytest.mark.parametrize(
    "args",
    [
        ["msg", "send", TEAM, "--to", "analyst-1", "--from", "coordinator", "--text", "hi"],
        ["msg", "inbox", TEAM, "analyst-1", "--json"],
    ],
)
def test_msg_send_and_inbox_import_neither_prefect_nor_pandas(home: Path, args: list[str]) -> None:
    research_team()
    if args[1] == "inbox":
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="hi")
    result, modules = imported_by(args)
    shown = result.stdout.split("MODULES")[0]
    assert ('"hi"' if args[1] == "inbox" else "msg-") in shown, result.stdout + result.stderr
    heavy = ("prefect", "pandas", "jsonschema", "models.notification", "models.task")
    assert [m for m in modules if m.split(".")[0] in heavy or m in heavy] == []
    assert inbox.messages(TEAM, "analyst-1")[-1].text == "hi"
