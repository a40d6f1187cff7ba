"""Teams, members and messages through `teamflow`, run as a user runs it: real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team
from test_backup import read_folder, team_files, write_folder

from models import backup, db, membership, presence
from models import team as teams
from models.tables import metadata


@pytest.fixture
def env(db_url: str, home: Path) -> dict[str, str]:
    """What a user's shell has: where teamflow keeps its files and its database."""
    return {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}


def teamflow(env: dict[str, str], *args: str, **more_env: str) -> subprocess.CompletedProcess:
    return run_teamflow(args, {**env, **more_env})


def ok(env: dict[str, str], *args: str) -> str:
    """Runs a command that must succeed; its stdout."""
    result = teamflow(env, *args)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    assert result.stderr == "", result.stderr
    return result.stdout


def ok_json(env: dict[str, str], *args: str) -> Any:
    return json.loads(ok(env, *args, "--json"))


def refused(result: subprocess.CompletedProcess, *fragments: str, code: int = 1) -> str:
    """Checks a refusal: exit `code` and one line `teamflow: error: ...` naming every fragment."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("teamflow: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def config_on_disk(home: Path) -> dict:
    return json.loads((home / "teams" / TEAM / "config.json").read_text())


def inbox_on_disk(home: Path, member: str) -> list[dict]:
    return json.loads((home / "teams" / TEAM / "inboxes" / f"{member}.json").read_text())


def everything(home: Path) -> tuple[dict[str, list[str]], dict[str, bytes]]:
    """Every row of every table and every file under TEAMFLOW_HOME but lock files."""
    rows: dict[str, list[str]] = {}
    with db.engine().connect() as conn:
        for table in metadata.sorted_tables:
            found = [
                json.dumps(dict(r._mapping), default=str) for r in conn.execute(sa.select(table))
            ]
            if found:
                rows[table.name] = sorted(found)
    files = {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }
    return rows, files


# --- a user's story ------------------------------------------------------------------------


def test_a_team_from_creation_to_a_read_inbox(env: dict[str, str], home: Path) -> None:
    created = ok_json(
        env, "team", "create", TEAM, "--description", "Q4 sales analysis team",
        "--lead", "coordinator",
    )  # fmt: skip
    assert created == {"team": TEAM, "lead": "coordinator"}
    analyst = ok_json(
        env, "member", "add", TEAM, "analyst-1", "--model", "haiku",
        "--prompt", "You are a data analyst specializing in sales trends.",
    )  # fmt: skip
    assert analyst["agentId"] == "analyst-1@research-team"
    assert (analyst["model"], analyst["color"], analyst["isActive"]) == ("haiku", "blue", True)
    added = ok(
        env, "member", "add", TEAM, "analyst-2", "--model", "sonnet",
        "--prompt", "You study customer behaviour.",
    )  # fmt: skip
    assert added.strip() == "added analyst-2@research-team (sonnet, green)"

    members = ok_json(env, "member", "list", TEAM)
    assert [m["name"] for m in members] == ["coordinator", "analyst-1", "analyst-2"]
    assert members == config_on_disk(home)["members"]
    assert ok_json(env, "team", "show", TEAM) == config_on_disk(home)

    sent = ok_json(
        env, "msg", "send", TEAM, "--from", "coordinator", "--to", "analyst-1",
        "--text", "Please analyze the sales data in /data/q4-sales.csv.",
        "--summary", "Q4 sales analysis request",
    )  # fmt: skip
    assert sent["from"] == "coordinator"
    assert (sent["color"], sent["read"], sent["summary"]) == (
        "yellow",
        False,
        "Q4 sales analysis request",
    )
    assert sent["messageId"].startswith("msg-")
    broadcast = ok_json(
        env, "msg", "broadcast", TEAM, "--from", "coordinator", "--text", "Stand-up in 5 minutes"
    )  # fmt: skip
    assert [b["to"] for b in broadcast] == ["analyst-1", "analyst-2"]

    unread = ok_json(env, "msg", "inbox", TEAM, "analyst-1", "--unread")
    assert [e.get("type") for e in unread] == ["system_init", None, None]
    assert unread[1] == sent
    assert unread == [e for e in inbox_on_disk(home, "analyst-1") if not e["read"]]

    state = ok_json(env, "status", TEAM)
    assert state == {
        "team": TEAM,
        "created": config_on_disk(home)["createdAt"],
        "active_members": ["coordinator", "analyst-1", "analyst-2"],
        "total_members": 3,
        # the lead's: each analyst's capability_broadcast on joining
        "unread": {"coordinator": 2, "analyst-1": 3, "analyst-2": 2},
    }

    shown = ok(env, "msg", "inbox", TEAM, "analyst-1", "--mark-read")
    assert "coordinator: Q4 sales analysis request" in shown
    assert all(e["read"] for e in inbox_on_disk(home, "analyst-1"))
    assert presence.team_state(TEAM)["unread"]["analyst-1"] == 0

    beat = ok_json(env, "member", "heartbeat", TEAM, "analyst-1", "--status", "thinking")
    assert (beat["agent_id"], beat["status"]) == ("analyst-1@research-team", "thinking")
    assert ok_json(env, "team", "list") == [
        {"name": TEAM, "description": "Q4 sales analysis team", "lead": "coordinator"}
    ]


def test_export_backup_delete_restore_import_through_the_cli(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    files = team_files()
    backup.import_team(write_folder(tmp_path / "in", files))
    config = ok_json(env, "team", "show", TEAM)
    assert config == config_on_disk(home) == files["config.json"]
    archive, out = tmp_path / "research-team.tar.gz", tmp_path / "out"

    assert ok(env, "team", "export", TEAM, "--dir", str(out)).startswith("exported team")
    assert read_folder(out) == files
    assert ok(env, "team", "backup", TEAM, "--out", str(archive)).startswith("backed up team")
    assert ok(env, "team", "delete", TEAM, "--yes").strip() == f"deleted team {TEAM}"
    assert teams.list_teams() == []
    assert not (home / "teams" / TEAM).exists()

    imported = teamflow(env, "team", "import", str(out), "--json")
    assert imported.returncode == 0 and json.loads(imported.stdout) == {"team": TEAM}
    # Its active analyst has no runtime: one warning line says it cannot run tasks yet.
    assert imported.stderr.startswith("teamflow: warning: analyst-1 cannot run"), imported.stderr
    assert ok_json(env, "team", "show", TEAM) == config
    membership.add_member(TEAM, "analyst-3", model="haiku", prompt="Joined after the backup.")
    refused(teamflow(env, "team", "restore", str(archive)), "exists", "--force")
    assert ok(env, "team", "restore", str(archive), "--force").strip() == f"restored team {TEAM}"
    assert config_on_disk(home) == config
    assert ok_json(env, "msg", "inbox", TEAM, "analyst-1") == files["inboxes/analyst-1.json"]


def test_sync_takes_in_what_a_jq_recipe_wrote(env: dict[str, str], home: Path) -> None:
    research_team()
    path = home / "teams" / TEAM / "inboxes" / "analyst-1.json"
    entries = json.loads(path.read_text())
    # `jq '. += [...]'` and `jq '(.[] | select(.messageId == ...) | .read) = true'`, then mv.
    entries[0]["read"] = True
    entries.append(
        {
            "from": "coordinator",
            "text": "New task: analyze customer churn",
            "summary": "Churn analysis request",
            "timestamp": "2026-02-16T10:40:00.000Z",
            "color": "yellow",
            "read": False,
            "messageId": "msg-outside-1",
        }
    )
    tmp = path.with_name("analyst-1.json.tmp")
    tmp.write_text(json.dumps(entries, indent=2))
    tmp.replace(path)

    assert ok_json(env, "sync", TEAM) == {
        "coordinator": {"added": 0, "marked_read": 0},
        "analyst-1": {"added": 1, "marked_read": 1},
        "analyst-2": {"added": 0, "marked_read": 0},
    }
    assert ok_json(env, "msg", "inbox", TEAM, "analyst-1") == entries
    assert json.loads(path.read_text()) == entries


# --- bad input: one line, exit 1, nothing written ------------------------------------------

SEND = ("msg", "send", TEAM, "--from", "coordinator", "--to", "analyst-1")
APPROVED = (*SEND, "--type", "shutdown_approved")
ADD = ("member", "add", TEAM, "analyst-9", "--prompt", "You check the numbers.")

BAD_INPUT: dict[str, tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]] = {
    "typed message, not JSON": (
        (*APPROVED, "--text", '{"requestId": "req-1", '),
        {},
        ("shutdown_approved message takes its JSON",),
    ),
    "typed message, a field missing": (
        (*APPROVED, "--text", '{"requestId": "req-1", "backendType": "tmux"}'),
        {},
        ("paneId is required when backendType is tmux",),
    ),
    "colour not in the seed's set": (
        (*ADD, "--model", "haiku", "--color", "purple"),
        {},
        ("color: Input should be 'blue'",),
    ),
    "model not allowed": (
        (*ADD, "--model", "gpt-9"),
        {},
        ("model 'gpt-9' is not allowed",),
    ),
    "heartbeat status": (
        ("member", "heartbeat", TEAM, "analyst-1", "--status", "asleep"),
        {},
        ("status 'asleep' is not one of idle, thinking",),
    ),
    "unknown team": (
        ("msg", "send", "nobody-here", "--from", "a", "--to", "b", "--text", "x"),
        {},
        ("no team named 'nobody-here'",),
    ),
    "unknown recipient": (
        ("msg", "send", TEAM, "--from", "coordinator", "--to", "ghost", "--text", "x"),
        {},
        ("no member named 'ghost'",),
    ),
    "unknown sender": (
        ("msg", "send", TEAM, "--from", "ghost", "--to", "analyst-1", "--text", "x"),
        {},
        ("unknown sender", "'ghost'"),
    ),
    "member named ../x": (
        ("member", "add", TEAM, "../x", "--model", "haiku", "--prompt", "p"),
        {},
        ("'../x' is not a member name",),
    ),
    "team named ../x": (
        ("team", "create", "../x", "--description", "d"),
        {},
        ("'../x' is not a team name",),
    ),
    "oversized message": (
        (*SEND, "--text", "x" * 101),
        {"TEAMFLOW_MAX_MESSAGE_BYTES": "100"},
        ("101 bytes is over the limit of 100",),
    ),
    "message to a shut-down member": (
        ("msg", "send", TEAM, "--from", "coordinator", "--to", "analyst-2", "--text", "hi"),
        {},
        ("member 'analyst-2' of team 'research-team' is shut down",),
    ),
}


def test_sync_and_send_over_bad_inbox_files_take_in_the_rest_and_say_what_was_refused(
    env: dict[str, str], home: Path
) -> None:
    research_team()
    path = home / "teams" / TEAM / "inboxes" / "analyst-1.json"
    entry = {
        "from": "coordinator",
        "summary": "s",
        "timestamp": "2026-02-16T10:40:00.000Z",
        "color": "yellow",
        "read": False,
    }
    big = "x" * (1024 * 1024 + 1)
    path.write_text(json.dumps([*inbox_on_disk(home, "analyst-1"), {**entry, "text": big},
                                {**entry, "text": "fine"}]))  # fmt: skip
    result = teamflow(env, "sync", TEAM)
    assert result.returncode == 1, result.stderr
    assert result.stdout == "took in 1 new messages and 0 read flags\n"
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"teamflow: refused: {path}: entry 1: message of 1048577 bytes is over the limit"
    )
    assert [e["text"] for e in inbox_on_disk(home, "analyst-1")][1:] == ["fine"]

    path.write_bytes(path.read_bytes()[:-20])  # truncated by a careless writer
    send = ("msg", "send", TEAM, "--to", "analyst-1", "--from", "coordinator", "--text", "hi")
    result = teamflow(env, *send)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()  # reported once
    assert str(path) in line and "not valid JSON" in line and "analyst-1.json.bad-" in line
    assert teamflow(env, *send).stderr == ""  # the next send has nothing to say
    texts = [e["text"] for e in inbox_on_disk(home, "analyst-1")]
    assert texts[1:] == ["fine", "hi", "hi"]


@pytest.mark.parametrize(("args", "more_env", "fragments"), BAD_INPUT.values(), ids=BAD_INPUT)
def test_bad_input_is_one_line_and_writes_nothing(
    env: dict[str, str],
    home: Path,
    args: tuple[str, ...],
    more_env: dict[str, str],
    fragments: tuple[str, ...],
) -> None:
    research_team()
    teams.set_member(TEAM, "analyst-2", is_active=False)
    before = everything(home)
    refused(teamflow(env, *args, **more_env), *fragments)
    assert everything(home) == before


def test_other_bad_input_is_one_line_and_writes_nothing(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    research_team()
    folder = write_folder(tmp_path / "in", team_files())
    inbox = folder / "inboxes" / "analyst-1.json"
    inbox.write_text(inbox.read_text().replace('"yellow"', '"purple"', 1))
    not_an_archive = tmp_path / "notes.tar.gz"
    not_an_archive.write_text("just notes\n")
    before = everything(home)

    refused(
        teamflow(env, "team", "import", str(folder)),
        f"{inbox}: entry [1].color: Input should be 'blue'",
    )
    refused(teamflow(env, "team", "restore", str(not_an_archive)), "not a teamflow backup")
    refused(teamflow(env, "team", "delete", TEAM), "without --yes")
    refused(teamflow(env, *SEND), "Missing option '--text'", "msg send --help", code=2)
    assert everything(home) == before


def refused_json(result: subprocess.CompletedProcess, kind: str, *fragments: str, code: int = 1):
    """A refusal with `--json`: the one line on stderr, and the `001` error envelope on stdout."""
    from models.api import ApiResponseAdapter, ErrorResponse

    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    [line] = result.stderr.splitlines()
    envelope = json.loads(result.stdout)
    assert set(envelope) == {"status", "error", "message", "details"}
    parsed = ApiResponseAdapter.validate_python(envelope)
    assert isinstance(parsed, ErrorResponse)
    assert (parsed.status, parsed.error) == ("error", kind)
    assert line == f"teamflow: error: {parsed.message}"
    assert parsed.details == {"exit_code": code}
    for fragment in fragments:
        assert fragment in parsed.message, (fragment, parsed.message)


def test_json_errors_are_the_001_error_envelope_on_stdout(env: dict[str, str]) -> None:
    research_team()
    refused_json(teamflow(env, "team", "show", "no-such-team", "--json"), "TeamError", "no-such")
    refused_json(
        teamflow(env, "team", "settings", TEAM, "--plan-timeout", "nan", "--json"),
        "ValidationError",
        "--plan-timeout",
    )
    refused_json(
        teamflow(env, "msg", "send", TEAM, "--to", "analyst-1", "--json"),
        "UsageError",
        "Missing option",
        code=2,
    )
    # Without --json, stdout stays empty.
    refused(teamflow(env, "team", "show", "no-such-team"), "no-such-team")


def test_validate_refuses_endless_huge_or_deeply_nested_input_in_one_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused(teamflow(env, "validate", "/dev/zero"), "/dev/zero: larger than teamflow's limit")
    refused(teamflow(env, "validate", str(deep)), f"{deep}: nested deeper than 100 levels")


def test_task_params_must_be_finite_shallow_json(env: dict[str, str], home: Path) -> None:
    research_team()
    before = everything(home)
    for params, message in [
        ('{"x": NaN}', "--params: NaN is not a JSON number"),
        ('{"x": 1e400}', "--params: 1e400 is not a JSON number"),
        ('{"x": -Infinity}', "--params: -Infinity is not a JSON number"),
        ('{"x": ' + "[" * 50_000 + "]" * 50_000 + "}", "--params: nested deeper than 100"),
    ]:
        refused(teamflow(env, "task", "create", TEAM, "--title", "t", "--params", params), message)
    assert everything(home) == before


NOT_NUMBERS = ["nan", "inf", "-inf", "1e300", "-5"]


def test_every_number_from_the_command_line_is_finite_and_in_range(
    env: dict[str, str], home: Path
) -> None:
    research_team()
    before = ok_json(env, "team", "settings", TEAM), everything(home)
    for value in NOT_NUMBERS:
        refused(
            teamflow(env, "team", "settings", TEAM, "--plan-timeout", value),
            "--plan-timeout (setting plan_timeout_seconds) must be a finite number",
        )
    for option in ("--escalation", "--shutdown-timeout"):
        refused(teamflow(env, "team", "settings", TEAM, option, "nan"), option, "finite")
    for option in ("--concurrency", "--max-revisions"):
        refused(teamflow(env, "team", "settings", TEAM, option, "10000000000"), option, "1 to")
    # Options of commands that start runs are refused before any run is started.
    refused(teamflow(env, "member", "shutdown", TEAM, "analyst-1", "--timeout", "inf"), "--timeout")
    refused(
        teamflow(env, "plan", "request", TEAM, "--from", "analyst-1", "--plan", "p",
                 "--summary", "s", "--timeout", "nan"),
        "--timeout",
    )  # fmt: skip
    refused(teamflow(env, "worker", "--limit", "0"), "--limit", "1 to")
    assert (ok_json(env, "team", "settings", TEAM), everything(home)) == before


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300, -1.0, 0])
@pytest.mark.parametrize(
    "key", ["plan_timeout_seconds", "plan_escalation_seconds", "shutdown_timeout_seconds",
            "concurrency", "plan_max_revisions"],
)  # fmt: skip
def test_the_store_refuses_a_setting_that_is_not_a_finite_number_in_range(
    db_url: str, key: str, value: float
) -> None:
    research_team()
    with pytest.raises(ValueError, match=f"setting {key} must be"):
        teams.update_settings(TEAM, {key: value})
    assert teams.update_settings(TEAM, {}) == {}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300, -1.0])
def test_a_plan_or_shutdown_timeout_that_is_not_finite_is_refused(
    db_url: str, value: float
) -> None:
    from models import approval, shutdown

    research_team()
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        approval.request_plan(TEAM, "analyst-1", "## Plan", "plan", timeout=value)
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        shutdown.request_shutdown(TEAM, "analyst-1", timeout=value)
    assert approval.list_requests(TEAM) == []


def test_team_settings_shape_who_decides_and_when_and_refuse_bad_values(
    env: dict[str, str],
) -> None:
    from models import approval
    from models import team as teams

    research_team()
    assert ok_json(env, "team", "settings", TEAM) == {}
    stored = ok_json(
        env, "team", "settings", TEAM, "--approvers", "reviewer,analyst-2",
        "--plan-timeout", "600", "--plan-policy", "escalate", "--escalation", "120",
        "--concurrency", "2",
    )  # fmt: skip
    assert stored["approvers"] == ["reviewer", "analyst-2"]
    config = teams.settings_of(TEAM)
    assert config.deciders == ("coordinator", "reviewer", "analyst-2")
    assert (config.timeout_s, config.policy, config.escalation_s) == (600, "escalate", 120)
    row = approval.request_plan(TEAM, "analyst-1", "## Plan", "plan")
    assert (row.deadline - row.requested_at).total_seconds() == 600
    assert (row.hard_deadline - row.deadline).total_seconds() == 120

    before = ok_json(env, "team", "settings", TEAM)
    refused(teamflow(env, "team", "settings", TEAM, "--plan-policy", "maybe"), "maybe", "deny")
    refused(teamflow(env, "team", "settings", TEAM, "--approvers", "../x"), "'../x'")
    refused(teamflow(env, "team", "settings", TEAM, "--plan-timeout", "0"), "plan_timeout")
    refused(teamflow(env, "team", "settings", TEAM, "--reset", "colour"), "'colour'")
    refused(teamflow(env, "team", "settings", "no-such-team"), "no-such-team")
    assert ok_json(env, "team", "settings", TEAM) == before  # nothing half-written

    after = ok_json(env, "team", "settings", TEAM, "--reset", "plan_escalation_seconds")
    assert "plan_escalation_seconds" not in after
    assert "plan_timeout_seconds = 600" in ok(env, "team", "settings", TEAM)


QUICK_EXIT = """
import atexit, sys
from flows.cli import console
atexit.register(lambda: print("exit handler ran", file=sys.stderr))
sys.argv = ["teamflow", *sys.argv[1:]]
console()
"""


def test_the_quick_exit_flushes_all_output_runs_exit_handlers_and_keeps_the_exit_code(
    env: dict[str, str],
) -> None:
    # A data command leaves with os._exit (issue 16: CLI start); what it printed, its exit
    # handlers and its exit code must be those of a normal exit.
    research_team()
    from models import inbox

    inbox.send_many(
        TEAM,
        [
            {"to": "analyst-1", "sender": "coordinator", "text": f"{i:04d} " + "x" * 500}
            for i in range(300)
        ],
    )

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", QUICK_EXIT, *args],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip

    shown = run("msg", "inbox", TEAM, "analyst-1", "--json")  # well over a pipe's 64 KiB
    assert (shown.returncode, shown.stderr) == (0, "exit handler ran\n")
    texts = [m["text"] for m in json.loads(shown.stdout)]
    assert texts[-300:] == [f"{i:04d} " + "x" * 500 for i in range(300)]

    sent = run("msg", "send", TEAM, "--to", "analyst-2", "--from", "coordinator", "--text", "hi")
    assert (sent.returncode, sent.stderr) == (0, "exit handler ran\n")
    assert inbox.messages(TEAM, "analyst-2")[-1].message_id == sent.stdout.strip()

    refused_send = run(
        "msg", "send", TEAM, "--to", "nobody", "--from", "coordinator", "--text", "?"
    )
    assert refused_send.returncode == 1
    assert refused_send.stderr.splitlines()[1:] == ["exit handler ran"]
    assert "nobody" in refused_send.stderr.splitlines()[0]

    usage = run("msg", "send", TEAM, "--to", "analyst-2")
    assert usage.returncode == 2
    assert usage.stderr.splitlines()[-1] == "exit handler ran"
