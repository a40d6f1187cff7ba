"""Import, export, backup and restore of a team: lossless, all or nothing, and safe."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import TEAM, fixture
from prefect_server import teamflow as run_teamflow
from sqlmodel import Session

from models import backup, db, inbox, inbox_files, membership, presence, project
from models import team as teams
from models.alert import Alert
from models.approval import PlanApproval
from models.backup import BackupError
from models.conversation import MessageRow
from models.dependencies import add_blockers
from models.knowledge import ContextRow
from models.project import ProjectRow
from models.shutdown import Shutdown
from models.tables import metadata
from models.task import TaskAssigneeRow, TaskMetricsRow, TaskRow, create_task
from models.task_status import TaskStatus, TaskStatusRow
from models.team import TeamError

pytestmark = pytest.mark.usefixtures("db_url")


# --- a team folder as agent-team tools write it --------------------------------------------


def team_files() -> dict[str, Any]:
    """A realistic `004` team folder: relative path -> parsed JSON.

    The seed's "Team with Members" plus what real files carry beyond the seed (`leadAgentId`,
    `joinedAt`, `cwd`, `planModeRequired`), a shut-down member, and inboxes from the seed's
    examples: one entry without `messageId`, a typed `shutdown_request` with metadata, an
    entry with a key teamflow does not know, and a typed entry whose text is its JSON.
    """
    config = fixture("004_config_members")
    config["leadAgentId"] = f"coordinator@{TEAM}"
    config["members"].insert(
        0,
        {
            "agentId": f"coordinator@{TEAM}",
            "name": "coordinator",
            "agentType": "general-purpose",
            "model": "opus",
            "prompt": "You coordinate the Q4 sales analysis.",
            "color": "yellow",
            "backendType": "in-process",
            "isActive": True,
            "joinedAt": 1771237800000,
            "cwd": "/home/user/q4",
        },
    )
    analyst_1, analyst_2 = config["members"][1:]
    analyst_1.update(joinedAt=1771238100000, cwd="/home/user/q4", planModeRequired=True)
    analyst_2.update(
        joinedAt=1771238160000,
        cwd="/home/user/q4",
        planModeRequired=False,
        isActive=False,
        shutdownAt="2026-02-16T11:46:00.000Z",
        metadata=fixture("004_member_shutdown")["metadata"],
    )
    regular = fixture("004_inbox_regular")
    regular.append(
        {
            "from": "coordinator",
            "text": "New task: analyze customer churn",
            "summary": "Churn analysis request",
            "timestamp": "2026-02-16T10:50:00.000Z",
            "color": "yellow",
            "read": False,
        }
    )
    regular.append(
        {
            "from": "analyst-2",
            "text": "Segment data is in /data/segments.csv",
            "summary": "Segment data",
            "timestamp": "2026-02-16T10:55:00.123Z",
            "color": "green",
            "read": True,
            "messageId": "msg-peer-001",
            "replyTo": "msg-task-002",
        }
    )
    idle = {
        "from": "analyst-1",
        "text": json.dumps(fixture("004_idle_complete")),
        "summary": "analyst-1 is done",
        "timestamp": "2026-02-16T11:00:00.000Z",
        "color": "blue",
        "read": False,
        "messageId": "msg-idle-001",
        "type": "idle_notification",
    }
    return {
        "config.json": config,
        "inboxes/coordinator.json": [idle],
        "inboxes/analyst-1.json": regular,
        "inboxes/analyst-2.json": fixture("004_inbox_shutdown_request"),
    }


def write_folder(folder: Path, files: dict[str, Any]) -> Path:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
    return folder


def read_folder(folder: Path) -> dict[str, Any]:
    """Every file under `folder` but teamflow's hidden bookkeeping, parsed."""
    return {
        str(p.relative_to(folder)): json.loads(p.read_text())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def row_counts() -> dict[str, int]:
    """Rows per table, for the tables that have any."""
    counts = {}
    with db.engine().connect() as conn:
        for table in metadata.sorted_tables:
            count = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            if count:
                counts[table.name] = count
    return counts


def files_under(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (folders as None), links included, not followed."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): None if p.is_dir() and not p.is_symlink() else p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.exists()
    }


# --- import and export ---------------------------------------------------------------------


def test_import_then_export_reproduces_the_folder(tmp_path: Path, home: Path) -> None:
    files = team_files()
    team = backup.import_team(write_folder(tmp_path / "in", files))
    assert (team.name, team.lead) == (TEAM, "coordinator")

    out = backup.export_team(TEAM, tmp_path / "out")
    assert read_folder(out) == files

    # The imported team is a live one: nothing is taken in twice (the entry without a
    # messageId included), and new messages go after the imported ones.
    assert inbox_files.sync(TEAM) == {
        "coordinator": (0, 0),
        "analyst-1": (0, 0),
        "analyst-2": (0, 0),
    }
    assert presence.team_state(TEAM)["unread"] == {"coordinator": 1, "analyst-1": 3, "analyst-2": 1}
    sent = inbox.send(TEAM, to="analyst-1", sender="coordinator", text="One more thing")
    again = read_folder(backup.export_team(TEAM, tmp_path / "again"))
    assert again["inboxes/analyst-1.json"] == [*files["inboxes/analyst-1.json"], sent.entry_dict()]


def test_the_mirror_of_an_imported_team_is_the_folder(tmp_path: Path, home: Path) -> None:
    files = team_files()
    backup.import_team(write_folder(tmp_path / "in", files))
    assert read_folder(home / "teams" / TEAM) == files
    sent = inbox.send(TEAM, to="analyst-1", sender="coordinator", text="One more thing")
    on_disk = read_folder(home / "teams" / TEAM)
    assert on_disk["inboxes/analyst-1.json"] == [
        *files["inboxes/analyst-1.json"],
        sent.entry_dict(),
    ]


def test_import_refuses_a_team_that_exists(tmp_path: Path, home: Path) -> None:
    folder = write_folder(tmp_path / "in", team_files())
    backup.import_team(folder)
    before = row_counts(), files_under(home)
    with pytest.raises(TeamError, match="exists already"):
        backup.import_team(folder)
    assert (row_counts(), files_under(home)) == before


def _edit(name: str, change: Callable[[Any], Any]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / name
        data = json.loads(path.read_text())
        path.write_text(json.dumps(change(data)))

    return apply


def _write(name: str, text: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / name).write_text(text)

    return apply


def _symlink(name: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / name
        target = folder.parent / "elsewhere.json"
        target.write_text(path.read_text())
        path.unlink()
        path.symlink_to(target)

    return apply


def _member(i: int, **changes: Any) -> Callable[[Any], Any]:
    def change(config: Any) -> Any:
        config["members"][i].update(changes)
        return config

    return change


def _entry(i: int, **changes: Any) -> Callable[[Any], Any]:
    def change(entries: Any) -> Any:
        entries[i].update(changes)
        return entries

    return change


def _duplicate_first(entries: list) -> list:
    return [*entries, dict(entries[0], text="again")]


MALFORMED = {
    "bad member model": (
        _edit("config.json", _member(1, model="gpt-9")),
        r"in/config\.json: members\[1\]\.model: model 'gpt-9' is not allowed",
    ),
    "bad tmux pane": (
        _edit("config.json", _member(2, tmuxPaneId="89")),
        r"in/config\.json: members\[2\]\.tmuxPaneId: String should match",
    ),
    "team name not kebab-case": (
        _edit("config.json", lambda c: {**c, "name": "Research_Team"}),
        r"in/config\.json: name: 'Research_Team' is not a team name",
    ),
    "config not JSON": (_write("config.json", '{"name": '), r"in/config\.json: not valid JSON"),
    "no config": (lambda f: (f / "config.json").unlink(), r"in/config\.json: no such file"),
    "bad colour in an inbox entry": (
        _edit("inboxes/analyst-1.json", _entry(1, color="purple")),
        r"in/inboxes/analyst-1\.json: entry \[1\]\.color: Input should be 'blue'",
    ),
    "inbox entry without read": (
        _edit("inboxes/analyst-1.json", lambda e: [*e[:2], {**e[2], "read": None}]),
        r"in/inboxes/analyst-1\.json: entry \[2\]\.read: Input should be a valid boolean",
    ),
    "inbox not an array": (
        _edit("inboxes/analyst-2.json", lambda entries: entries[0]),
        r"in/inboxes/analyst-2\.json: an inbox file must be a JSON array",
    ),
    "inbox not JSON": (
        _write("inboxes/analyst-2.json", "[{]"),
        r"in/inboxes/analyst-2\.json: not valid JSON",
    ),
    "duplicate messageId in an inbox": (
        _edit("inboxes/analyst-1.json", _duplicate_first),
        r"in/inboxes/analyst-1\.json: entry \[5\]\.messageId: 'msg-init-001' is a duplicate",
    ),
    "inbox of no member": (
        _write("inboxes/ghost.json", "[]"),
        r"in/inboxes/ghost\.json: 'ghost' is not a member in config\.json",
    ),
    "inbox file named ..json": (
        _write("inboxes/..json", "[]"),
        r"in/inboxes/\.\.json: '\.' is not a member name",
    ),
    "member named ../../../../tmp/x": (
        _edit("config.json", _member(2, name="../../../../tmp/x")),
        r"in/config\.json: members\[2\]\.name: '\.\./\.\./\.\./\.\./tmp/x' is not a member",
    ),
    "config nested too deep": (
        _write("config.json", "[" * 100_000 + "]" * 100_000),
        r"in/config\.json: nested deeper than 100 levels",
    ),
    "inbox file nested too deep": (
        _write("inboxes/analyst-1.json", '[{"a": ' * 150 + "1" + "}]" * 150),
        r"in/inboxes/analyst-1\.json: nested deeper than 100 levels",
    ),
    "NaN in an inbox file": (
        _edit(
            "inboxes/analyst-1.json", lambda e: [*e[:1], {**e[1], "metadata": {"x": float("nan")}}]
        ),
        r"in/inboxes/analyst-1\.json: NaN is not a JSON number",
    ),
    "symlinked inbox": (
        _symlink("inboxes/analyst-1.json"),
        r"in/inboxes/analyst-1\.json: a symlink; refusing to follow it",
    ),
    "inbox entry over the message size limit": (
        _edit("inboxes/analyst-1.json", _entry(1, text="x" * (1024 * 1024 + 1))),
        r"in/inboxes/analyst-1\.json: entry \[1\]\.text: message of 1048577 bytes is over the "
        r"limit of 1048576",
    ),
}


@pytest.mark.parametrize(("break_it", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_folder_is_refused_naming_file_field_and_reason(
    tmp_path: Path, home: Path, break_it: Callable[[Path], None], message: str
) -> None:
    folder = write_folder(tmp_path / "in", team_files())
    break_it(folder)
    with pytest.raises(BackupError, match=message) as refused:
        backup.import_team(folder)
    assert len(str(refused.value).splitlines()) == 1
    assert row_counts() == {}
    assert files_under(home) == {}


# --- backup and restore --------------------------------------------------------------------


def populate(tmp_path: Path, home: Path) -> None:
    """The realistic team, plus a row in every table a team's work fills, plus task files."""
    backup.import_team(write_folder(tmp_path / "in", team_files()))
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="Start with the west region")
    inbox.mark_read(TEAM, "analyst-1", ["msg-task-001"])
    presence.heartbeat(TEAM, "analyst-1", status="thinking")
    status = TaskStatus.model_validate(fixture("004_task_status"))
    with Session(db.engine()) as s:
        task = TaskRow(
            title="Q4 sales analysis",
            team=TEAM,
            creator_id=f"coordinator@{TEAM}",
            assignees=[TaskAssigneeRow(assignee_id=f"analyst-1@{TEAM}")],
        )
        s.add(task)
        s.add(TaskStatusRow.from_wire(status))
        s.add(TaskMetricsRow(team=TEAM, member="analyst-1", task_id="t-1", tokens=12500))
        s.add(MessageRow(agent_id=f"analyst-1@{TEAM}", role="system", content="You analyze."))
        s.add(
            PlanApproval(
                request_id="plan-xyz789",
                team=TEAM,
                member="analyst-1",
                plan="1. Load\n2. Analyze",
                summary="Q4 plan",
            )
        )
        s.add(Shutdown(request_id="req-shutdown-abc123", team=TEAM, member="analyst-2"))
        s.add(Alert(team=TEAM, name="daily-sync", alert_type="TIMER", message="Daily sync"))
        s.commit()
    work = home / "tasks" / TEAM / "analyst-1"
    (work / "artifacts").mkdir(parents=True)
    (work / "task-status.json").write_text(json.dumps(fixture("004_task_status"), indent=2))
    (work / "output.log").write_text("loading /data/q4-sales.csv\ndone\n")
    (work / "artifacts" / "report.md").write_text("# Q4 sales\n\nRevenue grew 12%.\n")


def snapshot(home: Path) -> tuple[dict[str, list[str]], dict[str, bytes | None]]:
    """The team's rows in every table (each table's rows sorted) and its files.

    The mirror's own bookkeeping (`.lock`, `.*.state`: inode and mtime of what it wrote,
    `.*.spare`: an inbox's version before, to append to) is left out: it is rebuilt. An
    inbox is compared as JSON: its read flags are flipped in place, space-padded.
    """
    with Session(db.engine()) as s:
        dump = backup._team_rows(s, TEAM)
    rows = {
        table: sorted(json.dumps(r, sort_keys=True, default=str) for r in table_rows)
        for table, table_rows in dump.items()
    }
    files: dict[str, bytes | None] = {}
    for top in ("teams", "tasks"):
        for name, data in files_under(home / top / TEAM).items():
            if name.endswith((".state", ".lock", ".spare")):
                continue
            if name.startswith("inboxes/") and data is not None:
                # A read flag flips in place (`"read": true ,`); restore writes it anew.
                data = json.dumps(json.loads(data), sort_keys=True).encode()
            files[f"{top}/{TEAM}/{name}"] = data
    return rows, files


def test_backup_delete_restore_reproduces_the_team(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    before = snapshot(home)
    rows, files = before
    assert set(rows) >= {
        "teams", "members", "inbox_messages", "inbox_counters", "agent_state", "tasks",
        "task_assignees", "task_status", "task_metrics", "messages", "plan_approvals",
        "shutdowns", "alerts",
    }  # fmt: skip
    assert f"tasks/{TEAM}/analyst-1/artifacts/report.md" in files

    archive = backup.backup(TEAM, tmp_path / "research-team.tar.gz")
    membership.delete_team(TEAM)
    assert teams.list_teams() == []
    assert snapshot(home)[1] == {}

    assert backup.restore(archive).team == TEAM
    assert snapshot(home) == before
    assert inbox_files.sync(TEAM) == {
        "coordinator": (0, 0),
        "analyst-1": (0, 0),
        "analyst-2": (0, 0),
    }
    assert snapshot(home) == before


def test_restore_is_refused_off_the_mirror_host_and_writes_nothing(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive's files (artifacts among them) belong on the mirror host, whose catch-up
    rewrites only what the database holds: a host with TEAMFLOW_MIRROR off refuses."""
    populate(tmp_path, home)
    archive = backup.backup(TEAM, tmp_path / "research-team.tar.gz")
    membership.delete_team(TEAM)
    before = snapshot(home)
    monkeypatch.setenv("TEAMFLOW_MIRROR", "off")

    with pytest.raises(BackupError, match=r"run it on the mirror host \(TEAMFLOW_MIRROR is off"):
        backup.restore(archive)
    result = run_teamflow(["team", "restore", str(archive)])
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "TEAMFLOW_MIRROR is off here" in result.stderr
    assert snapshot(home) == before and teams.list_teams() == []

    monkeypatch.setenv("TEAMFLOW_MIRROR", "on")
    assert backup.restore(archive).team == TEAM


def test_a_backup_archive_is_private(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    old = os.umask(0o022)
    try:
        archive = backup.backup(TEAM, tmp_path / "team.tar.gz")
    finally:
        os.umask(old)
    assert archive.stat().st_mode & 0o777 == 0o600


def test_restore_refuses_an_existing_team_unless_forced(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    before = snapshot(home)
    archive = backup.backup(TEAM, tmp_path / "research-team.tar.gz")

    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="after the backup")
    membership.add_member(TEAM, "analyst-3", model="haiku", prompt="You check the numbers.")
    (home / "tasks" / TEAM / "analyst-1" / "output.log").write_text("overwritten\n")
    changed = snapshot(home)
    assert changed != before

    with pytest.raises(TeamError, match="exists; restore with --force"):
        backup.restore(archive)
    assert snapshot(home) == changed

    assert backup.restore(archive, force=True).team == TEAM
    assert snapshot(home) == before
    assert not (home / "teams" / TEAM / "inboxes" / "analyst-3.json").exists()


def _reset_id_sequences() -> None:
    """On PostgreSQL, what a new database has: every id sequence back at its start."""
    engine = db.engine()
    if engine.dialect.name != "postgresql":
        return
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            if "id" in table.c and isinstance(table.c.id.type, sa.Integer):
                conn.execute(
                    sa.text("SELECT setval(pg_get_serial_sequence(:t, 'id'), 1, false)"),
                    {"t": table.name},
                )


def test_a_restored_team_keeps_working_in_a_new_database(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    archive = backup.backup(TEAM, tmp_path / "research-team.tar.gz")
    membership.delete_team(TEAM)
    _reset_id_sequences()

    backup.restore(archive)
    sent = inbox.send(TEAM, to="analyst-1", sender="coordinator", text="Welcome back")
    assert inbox.messages(TEAM, "analyst-1")[-1].message_id == sent.message_id
    with Session(db.engine()) as s:
        s.add(Alert(team=TEAM, name="weekly", alert_type="TIMER", message="Weekly review"))
        s.add(MessageRow(agent_id=f"analyst-1@{TEAM}", role="user", content="{}"))
        s.commit()


def test_delete_leaves_no_row_of_the_team(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    membership.delete_team(TEAM)
    assert snapshot(home) == ({}, {})


# --- archive safety ------------------------------------------------------------------------


def _file(name: str, data: bytes = b"evil\n") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def build_archive(
    path: Path,
    source: Path | None,
    extra: list[tuple[tarfile.TarInfo, bytes | None]],
    *,
    keep: Callable[[tarfile.TarInfo], bool] = lambda _info: True,
) -> Path:
    """A `.tar.gz` with the members of `source` that `keep` keeps, then `extra`."""
    with tarfile.open(path, "w:gz") as out:
        if source is not None:
            with tarfile.open(source, "r:gz") as src:
                for info in src.getmembers():
                    if keep(info):
                        out.addfile(info, src.extractfile(info) if info.isfile() else None)
        for info, data in extra:
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _dump_with(change: Callable[[dict], None]) -> Callable[[Path, Path], Path]:
    """An archive like the good one, its database dump changed by `change`."""

    def make(path: Path, good: Path) -> Path:
        with tarfile.open(good, "r:gz") as src:
            dump = json.loads(src.extractfile(backup.DUMP).read())  # type: ignore[union-attr]
        change(dump)
        data = json.dumps(dump).encode()
        return build_archive(
            path, good, [_file(backup.DUMP, data)], keep=lambda i: i.name != backup.DUMP
        )

    return make


def _with(*extra: tuple[tarfile.TarInfo, bytes | None]) -> Callable[[Path, Path], Path]:
    return lambda path, good: build_archive(path, good, list(extra))


def _other_team_row(dump: dict) -> None:
    dump["rows"]["alerts"].append(
        {**dump["rows"]["alerts"][0], "id": 999, "team": "other-team", "name": "planted"}
    )


def _row(table: str, **changes: Any) -> Callable[[dict], None]:
    """Changes the first dumped row of `table`."""
    return lambda dump: dump["rows"][table][0].update(changes)


def _unknown_column(dump: dict) -> None:
    dump["rows"]["teams"][0]["owner"] = "mallory"


def _oversize_message(dump: dict) -> None:
    for row in dump["rows"]["inbox_messages"]:
        if row["message_id"] == "msg-task-001":
            row["text"] = "x" * (1024 * 1024 + 1)


def _other_team_context(dump: dict) -> None:
    dump["rows"]["contexts"] = [{"project_id": "q4-launch", "task_id": str(uuid.uuid4())}]


def _malformed_project(dump: dict) -> None:
    dump["projects"] = [{"project_id": "q4-launch", "name": ""}]


def _member_named(name: str) -> Callable[[dict], None]:
    """Renames the member at position 2 in the dump's rows (its config.json name)."""

    def change(dump: dict) -> None:
        for row in dump["rows"]["members"]:
            if row["position"] == 2:
                row["name"] = name

    return change


EVIL = "evil.txt"  # every archive below tries to put this next to TEAMFLOW_HOME

BAD_ARCHIVES: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "member ../evil": (_with(_file(f"../{EVIL}")), "refusing member"),
    "member escaping through the team folder": (
        _with(_file(f"teams/{TEAM}/../../../{EVIL}")),
        "refusing member",
    ),
    "absolute member": (
        lambda p, g: build_archive(p, g, [_file(str(p.parent / EVIL))]),
        "refusing",
    ),
    "symlink member": (
        _with(_link(f"teams/{TEAM}/inboxes/evil.json", f"../../../../{EVIL}", tarfile.SYMTYPE)),
        "refusing member",
    ),
    "hardlink member": (
        _with(_link(f"tasks/{TEAM}/analyst-1/evil", "/etc/passwd", tarfile.LNKTYPE)),
        "refusing member",
    ),
    "fifo member": (
        _with(_link(f"tasks/{TEAM}/analyst-1/fifo", "", tarfile.FIFOTYPE)),
        "refusing member",
    ),
    "member of another team": (_with(_file("teams/other-team/config.json")), "refusing member"),
    "member beside the team folders": (_with(_file(EVIL)), "refusing member"),
    "member in a folder named like the team": (
        _with(_file(f"tasks/{TEAM}-2/x")),
        "refusing member",
    ),
    "no teamflow-backup.json": (
        lambda path, good: build_archive(path, good, [], keep=lambda i: i.name != backup.DUMP),
        "has no readable teamflow-backup.json",
    ),
    "rows of another team": (_dump_with(_other_team_row), "another team"),
    "task status sleeping": (
        _dump_with(lambda dump: dump["rows"]["tasks"][0].update(status="sleeping")),
        "status 'sleeping' is not one of pending, in_progress, completed, archived",
    ),
    "task priority urgent-ish": (
        _dump_with(lambda dump: dump["rows"]["tasks"][0].update(priority="urgent-ish")),
        "priority 'urgent-ish' is not one of",
    ),
    "dump nested too deep": (
        lambda path, good: build_archive(
            path,
            good,
            [_file(backup.DUMP, b"[" * 100_000 + b"]" * 100_000)],
            keep=lambda i: i.name != backup.DUMP,
        ),
        "teamflow-backup.json: nested deeper than 100 levels",
    ),
    "member named ../../../../tmp/x": (
        _dump_with(_member_named("../../../../tmp/x")),
        r"table members row \d \(research-team, \.\./\.\./\.\./\.\./tmp/x\): "
        r"name: '\.\./\.\./\.\./\.\./tmp/x' is not a member name",
    ),
    "unknown column": (_dump_with(_unknown_column), "teams has no column 'owner'"),
    # Every table's rows are held to what its store holds them to (issue 33):
    "plan status maybe": (
        _dump_with(_row("plan_approvals", status="maybe")),
        r"table plan_approvals row 0 \(plan-xyz789\): status: 'maybe' is not one of "
        "approved, denied, pending",
    ),
    "agent state dozing": (
        _dump_with(_row("agent_state", status="dozing")),
        rf"table agent_state row 0 \(analyst-1@{TEAM}\): status: 'dozing' is not one of",
    ),
    "alert type SNOOZE": (
        _dump_with(_row("alerts", alert_type="SNOOZE")),
        r"table alerts row 0 \(\d+\): alert_type: 'SNOOZE' is not one of ALARM, "
        "SCHEDULED_EVENT, TIMER",
    ),
    "shutdown status limbo": (
        _dump_with(_row("shutdowns", status="limbo")),
        r"table shutdowns row 0 \(req-shutdown-abc123\): status: 'limbo' is not one of",
    ),
    "message role wizard": (
        _dump_with(_row("messages", role="wizard")),
        r"table messages row 0 \(\d+\): role: 'wizard' is not one of",
    ),
    "member colour purple": (
        _dump_with(_row("members", color="purple")),
        r"table members row 0 \(research-team, [\w-]+\): color: Input should be 'blue'",
    ),
    "inbox entry colour as a number": (
        _dump_with(_row("inbox_messages", color=7)),
        r"table inbox_messages row 0 \(\d+\): color: 7 is not a string",
    ),
    "a naive timestamp": (
        _dump_with(_row("plan_approvals", requested_at="2026-02-16T10:00:00")),
        "requested_at: '2026-02-16T10:00:00' is not an ISO 8601 timestamp with a timezone",
    ),
    "a count that is text": (
        _dump_with(_row("task_metrics", tokens="lots")),
        r"table task_metrics row 0 \(\d+\): tokens: 'lots' is not a whole number",
    ),
    "a run id longer than its column": (
        _dump_with(_row("shutdowns", flow_run_id="r" * 65)),
        "flow_run_id: 65 characters; at most 64",
    ),
    "a task status file that is not 004": (
        _dump_with(_row("task_status", status="napping")),
        r"table task_status row 0 \(.*\): status",
    ),
    "a project place of another team's task": (
        _dump_with(_other_team_context),
        "a row of contexts belongs to another team",
    ),
    "a malformed project": (_dump_with(_malformed_project), r"projects\[0\]\.name"),
    "message over the size limit": (
        _dump_with(_oversize_message),
        r"message 'msg-task-001': message of 1048577 bytes is over the limit of 1048576",
    ),
    "not an archive": (
        lambda path, _good: (path.write_text('{"team": "research-team"}'), path)[1],
        "not a teamflow backup",
    ),
}


@pytest.mark.parametrize(("make", "message"), BAD_ARCHIVES.values(), ids=BAD_ARCHIVES.keys())
def test_restore_refuses_an_unsafe_archive_and_writes_nothing(
    tmp_path: Path, home: Path, make: Callable[[Path, Path], Path], message: str
) -> None:
    populate(tmp_path, home)
    good = backup.backup(TEAM, tmp_path / "good.tar.gz")
    membership.delete_team(TEAM)
    bad = make(tmp_path / "bad.tar.gz", good)
    before = row_counts(), files_under(tmp_path)

    with pytest.raises(BackupError, match=message) as refused:
        backup.restore(bad)
    assert len(str(refused.value).splitlines()) == 1
    assert teams.list_teams() == []
    assert (row_counts(), files_under(tmp_path)) == before
    assert not (tmp_path / EVIL).exists()
    assert not os.path.lexists(home.parent / EVIL)


def test_restore_checks_member_sizes_before_extracting_anything(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from models import limits

    populate(tmp_path, home)
    good = backup.backup(TEAM, tmp_path / "good.tar.gz")
    membership.delete_team(TEAM)
    big = build_archive(
        tmp_path / "big.tar.gz", good, [_file(f"tasks/{TEAM}/analyst-1/big.bin", b"\0" * 65536)]
    )
    before = row_counts(), files_under(tmp_path)
    monkeypatch.setattr(limits, "MAX_ARCHIVE_MEMBER_BYTES", 1024 * 1024)
    monkeypatch.setattr(limits, "MAX_ARCHIVE_BYTES", 1024 * 1024)
    for cap, value, message in [
        ("MAX_ARCHIVE_MEMBER_BYTES", 32768, "big.bin' is 65536 bytes, over teamflow's limit"),
        ("MAX_ARCHIVE_BYTES", 65536, "files are over teamflow's limit of 65536 bytes together"),
        ("MAX_ARCHIVE_MEMBERS", 2, "more than teamflow's limit of 2 files"),
    ]:
        with monkeypatch.context() as m:
            m.setattr(limits, cap, value)
            with pytest.raises(BackupError, match=message) as refused:
                backup.restore(big)
        assert len(str(refused.value).splitlines()) == 1
        assert (row_counts(), files_under(tmp_path)) == before
    assert backup.restore(big).team == TEAM  # within the limits it restores


# --- the team's tasks in projects ----------------------------------------------------------


def place(team: str = TEAM) -> dict[str, str]:
    """Project `q4-launch` (milestones m1-research, m2-report) with three tasks of `team`: two
    in m1-research, the second blocked by the first, and one without a milestone."""
    if not project.list_projects():
        project.create_project(
            "Q4 launch", description="Ship the Q4 analysis", milestones=["m1-research",
            "m2-report"], tags=["sales"], project_id="q4-launch",
        )  # fmt: skip
    made = {}
    with Session(db.engine()) as s:
        for title, milestone in (("Collect", "m1-research"), ("Clean", "m1-research"),
                                 ("Book a room", None)):  # fmt: skip
            task = create_task(team, title=title, session=s)
            project.place_task(task, "q4-launch", milestone, session=s)
            made[title] = str(task.id)
        add_blockers(s.get(TaskRow, uuid.UUID(made["Clean"])), [made["Collect"]], session=s)
        s.commit()
    return made


def placed() -> dict[str, Any]:
    """`project show q4-launch --json`, the task ids and titles per milestone."""
    view = project.project_view("q4-launch")
    return {
        "milestones": {m: [(str(t.id), t.title) for t in ts] for m, ts in view.milestones.items()},
        "without": [(str(t.id), t.title) for t in view.without_milestone],
    }


def contexts() -> list[dict[str, Any]]:
    with Session(db.engine()) as s:
        rows = s.exec(sa.select(ContextRow).order_by(ContextRow.task_id)).scalars()
        return [row.to_wire().to_wire() for row in rows]


def test_backup_and_restore_keep_the_tasks_places_in_projects(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    tasks = place()
    shown, links, before = placed(), contexts(), snapshot(home)
    assert shown["milestones"]["m1-research"] == [(tasks["Collect"], "Collect"),
                                                  (tasks["Clean"], "Clean")]  # fmt: skip
    assert "contexts" in before[0] and "task_dependencies" in before[0]

    archive = backup.backup(TEAM, tmp_path / "team.tar.gz")
    membership.delete_team(TEAM)
    # The project stays (it is global); no place of a deleted task is left behind.
    assert contexts() == []
    assert placed() == {"milestones": {"m1-research": [], "m2-report": []}, "without": []}

    restored = backup.restore(archive)
    assert (restored.team, restored.projects_added, restored.notes) == (TEAM, [], [])
    assert (placed(), contexts(), snapshot(home)) == (shown, links, before)


def test_restore_into_a_database_without_the_project_brings_the_project(
    tmp_path: Path, home: Path
) -> None:
    populate(tmp_path, home)
    place()
    definition, shown, links = project.get_project("q4-launch").to_wire(), placed(), contexts()
    archive = backup.backup(TEAM, tmp_path / "team.tar.gz")
    membership.delete_team(TEAM)
    with db.engine().begin() as conn:  # a new database: no project either
        conn.execute(sa.delete(ProjectRow))

    restored = backup.restore(archive)
    assert (restored.projects_added, restored.notes) == (["q4-launch"], [])
    assert project.get_project("q4-launch").to_wire() == definition
    assert (placed(), contexts()) == (shown, links)


def test_a_project_here_is_kept_and_a_milestone_it_lacks_is_said(
    tmp_path: Path, home: Path
) -> None:
    populate(tmp_path, home)
    tasks = place()
    archive = backup.backup(TEAM, tmp_path / "team.tar.gz")
    membership.delete_team(TEAM)
    with db.engine().begin() as conn:  # another project under that id, without m1-research
        conn.execute(sa.delete(ProjectRow))
    here = project.create_project("Other", description="d", milestones=["m2-report"],
                                  project_id="q4-launch")  # fmt: skip

    restored = backup.restore(archive)
    assert restored.projects_added == []
    assert sorted(restored.notes) == sorted(
        f"task {tasks[t]} is in project 'q4-launch' without a milestone: the project has no "
        "milestone 'm1-research' here"
        for t in ("Collect", "Clean")
    )
    assert project.get_project("q4-launch") == here
    assert placed() == {
        "milestones": {"m2-report": []},
        "without": [(tasks["Collect"], "Collect"), (tasks["Clean"], "Clean"),
                    (tasks["Book a room"], "Book a room")],
    }  # fmt: skip
    for link in contexts():
        assert link["milestone_id"] is None
        assert link["parent_context"] == {"project_id": "q4-launch", "milestone_id": None,
                                          "task_id": None}  # fmt: skip


def test_team_delete_removes_its_places_and_keeps_other_teams(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    membership.create_team("other-team", description="Another team", lead="lead")
    place()
    theirs = place("other-team")
    membership.delete_team(TEAM)
    assert [c["task_id"] for c in contexts()] == sorted(theirs.values())
    assert placed()["milestones"]["m1-research"] == [(theirs["Collect"], "Collect"),
                                                     (theirs["Clean"], "Clean")]  # fmt: skip
    assert project.list_projects()[0].project_id == "q4-launch"


def test_team_restore_says_which_projects_it_brought(tmp_path: Path, home: Path) -> None:
    populate(tmp_path, home)
    place()
    archive = backup.backup(TEAM, tmp_path / "team.tar.gz")
    membership.delete_team(TEAM)
    with db.engine().begin() as conn:
        conn.execute(sa.delete(ProjectRow))
    result = run_teamflow(["team", "restore", str(archive)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"restored team {TEAM}\nrestored project q4-launch (this database did not have it)\n"
    )
