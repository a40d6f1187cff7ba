"""A member's runtime through the CLI, as a user sets it: `member add|set|show`, refusals,
the runtime in the team files (export, import, backup, restore), and the refusal of a member
that cannot run when a task is assigned to it or run. Real processes, real databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import TEAM, research_team
from test_backup import team_files, write_folder
from test_cli_teams import config_on_disk, env, everything, ok, ok_json, refused, teamflow

from models import team as teams
from models.task import create_task, list_tasks

__all__ = ["env"]  # the fixture, from test_cli_teams

AGENT = ["--runtime", "command", "--command", "python3 examples/echo_agent.py"]
STEP = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "done"}


def new_team(env: dict[str, str], lead: str = "coordinator") -> None:
    ok(env, "team", "create", TEAM, "--description", "Q4 sales team", "--lead", lead)


def add(env: dict[str, str], name: str, *runtime: str) -> None:
    ok(env, "member", "add", TEAM, name, "--model", "haiku", "--prompt", "You analyse.", *runtime)


def shown(env: dict[str, str], name: str) -> dict:
    return ok_json(env, "member", "show", TEAM, name)


def test_add_set_and_show_each_runtime_kind(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    new_team(env)
    ok(env, "tool", "add", "--builtin")
    add(env, "analyst-1", *AGENT, "--timeout", "30", "--env", "MODE=short", "--tool", "write_file")
    data = shown(env, "analyst-1")
    assert data["runtime"] == {
        "kind": "command",
        "argv": ["python3", "examples/echo_agent.py"],
        "cwd": str(Path.cwd()),
        "env": {"MODE": "short"},
        "timeout": 30.0,
        "tools": ["write_file"],
    }
    assert (data["canRun"], data["problem"], data["tools"]) == (True, None, ["write_file"])
    (member,) = [m for m in config_on_disk(home)["members"] if m["name"] == "analyst-1"]
    assert member["metadata"]["runtime"] == data["runtime"]

    # Another kind: its settings start afresh; the member's tools stay.
    ok(env, "member", "set", TEAM, "analyst-1", "--runtime", "openai", "--base-url",
       "http://127.0.0.1:11434/v1/", "--llm-model", "llama3.2",
       "--api-key-env", "MY_LLM_KEY")  # fmt: skip
    assert shown(env, "analyst-1")["runtime"] == {
        "kind": "openai",
        "base_url": "http://127.0.0.1:11434/v1",
        "model": "llama3.2",
        "api_key_env": "MY_LLM_KEY",
        "tools": ["write_file"],
    }
    # The same kind: only what is named changes; a Secret block replaces the variable.
    ok(env, "member", "set", TEAM, "analyst-1", "--api-key-secret", "llm-key", "--timeout", "5")
    runtime = shown(env, "analyst-1")["runtime"]
    assert (runtime["api_key_secret"], runtime["timeout"], runtime["model"]) == (
        "llm-key",
        5.0,
        "llama3.2",
    )
    assert "api_key_env" not in runtime
    text = ok(env, "member", "show", TEAM, "analyst-1")
    assert "api_key      from Prefect Secret block llm-key" in text
    assert "can_run      yes" in text

    # A playbook file's content is checked and stored, not its path.
    playbook = tmp_path / "playbook.json"
    playbook.write_text(json.dumps({"playbook": [STEP]}))
    ok(env, "member", "set", TEAM, "analyst-1", "--runtime", "scripted",
       "--playbook", str(playbook), "--all-tools", "--model", "sonnet",
       "--prompt", "You summarise.", "--plan-mode-required")  # fmt: skip
    playbook.unlink()
    data = shown(env, "analyst-1")
    assert data["runtime"] == {"kind": "scripted", "playbook": [STEP]}
    assert (data["model"], data["prompt"], data["planModeRequired"], data["tools"]) == (
        "sonnet", "You summarise.", True, None,
    )  # fmt: skip
    assert ok(env, "member", "set", TEAM, "analyst-1", "--no-plan-mode-required") == (
        f"updated analyst-1@{TEAM}\n"
    )
    assert shown(env, "analyst-1")["planModeRequired"] is False

    # No runtime: shown as such, with the line that sets one.
    add(env, "analyst-2")
    text = ok(env, "member", "show", TEAM, "analyst-2")
    assert "runtime      none" in text
    assert (
        "can_run      no: it has no runtime; set one with "
        f"teamflow member set {TEAM} analyst-2 --runtime" in text
    )


BAD = [
    (["--runtime", "bogus"], "'bogus' is unknown"),
    (["--runtime", "command"], "needs --command"),
    (["--runtime", "command", "--command", "  "], "--command is empty"),
    (["--runtime", "command", "--command", "python3 'unclosed"], "--command cannot be split"),
    ([*AGENT, "--env", "NOEQUALS"], "'NOEQUALS' is not NAME=VALUE"),
    ([*AGENT, "--env", "1X=2"], "not an environment variable name"),
    ([*AGENT, "--env", "OPENAI_API_KEY=sk-secret-1"], "stores no secrets"),
    ([*AGENT, "--timeout", "nan"], "--timeout must be a finite number of seconds"),
    ([*AGENT, "--timeout", "inf"], "--timeout must be a finite number of seconds"),
    ([*AGENT, "--timeout", "0"], "--timeout must be a finite number of seconds"),
    ([*AGENT, "--cwd", "/no/such/folder"], "--cwd /no/such/folder: no such folder"),
    (["--runtime", "openai", "--base-url", "localhost:11434", "--llm-model", "m"], "--base-url"),
    (["--runtime", "openai", "--base-url", "ftp://x/v1", "--llm-model", "m"], "not an http(s) URL"),
    (["--runtime", "openai", "--base-url", "http://x/v1"], "needs --llm-model"),
    (["--runtime", "openai", "--llm-model", "m"], "needs --base-url"),
    (["--runtime", "openai", "--base-url", "http://x/v1", "--llm-model", "m",
      "--api-key-env", "sk-secret-1"], "'sk-secret-1' is not an environment variable"),
    (["--runtime", "openai", "--base-url", "http://x/v1", "--llm-model", "m",
      "--api-key-env", "K", "--api-key-secret", "k"], "not both"),
    (["--runtime", "openai", "--command", "x"], "--command is for --runtime command, not openai"),
    (["--command", "x"], "--command is for --runtime command"),
    (["--runtime", "scripted"], "needs --playbook"),
    (["--runtime", "scripted", "--playbook", "/no/such.json"], "no such file"),
]  # fmt: skip


def test_bad_runtime_options_are_one_line_and_write_nothing(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    new_team(env)
    add(env, "analyst-1", *AGENT)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("[{")
    not_chimera = tmp_path / "not-chimera.json"
    not_chimera.write_text(json.dumps([{"status": "MAYBE"}]))
    cases = [
        *BAD,
        (["--runtime", "scripted", "--playbook", str(bad_json)], "not valid JSON"),
        (
            ["--runtime", "scripted", "--playbook", str(not_chimera)],
            "step 1 is not a valid Chimera",
        ),
    ]
    before = everything(home)
    for options, fragment in cases:
        refused(
            teamflow(
                env,
                "member",
                "add",
                TEAM,
                "analyst-9",
                "--model",
                "haiku",
                "--prompt",
                "p",
                *options,
            ),
            fragment,
        )
    for options, fragment in cases[::4]:
        if options[:2] == ["--runtime", "command"] and fragment == "needs --command":
            continue  # analyst-1 has a command already: the same kind keeps it
        refused(teamflow(env, "member", "set", TEAM, "analyst-1", *options), fragment)
    refused(
        teamflow(env, "member", "set", TEAM, "analyst-1", "--model", "gpt-9"),
        "'gpt-9' is not allowed",
    )
    refused(
        teamflow(env, "member", "set", TEAM, "nobody", "--prompt", "p"), "no member named 'nobody'"
    )
    refused(teamflow(env, "member", "show", TEAM, "nobody"), "no member named 'nobody'")
    assert everything(home) == before
    assert "sk-secret-1" not in json.dumps(before[0]) and "sk-secret-1" not in str(before[1])


def test_a_member_that_cannot_run_is_refused_at_assignment_and_at_run(
    env: dict[str, str], home: Path
) -> None:
    research_team()  # its analysts have no runtime
    hint = f"set one with teamflow member set {TEAM} analyst-1 --runtime command --command"
    refused(
        teamflow(env, "task", "create", TEAM, "--title", "Summarise Q4", "--assignee", "analyst-1"),
        "member analyst-1 of research-team cannot run tasks: it has no runtime", hint,
    )  # fmt: skip
    assert list_tasks(TEAM) == []

    # A task assigned before (from Python, or by an older teamflow) is refused at `task run`,
    # before any run starts: no Prefect server is needed to hear it.
    task = create_task(TEAM, title="Summarise Q4", assignees=["analyst-1"])
    for local in ([], ["--local"]):
        refused(teamflow(env, "task", "run", str(task.id), *local), "cannot run tasks", hint)
    # A runtime that cannot work (a scripted one without a playbook, set from Python) too.
    teams.set_member(TEAM, "analyst-1", runtime={"kind": "scripted"})
    refused(
        teamflow(env, "task", "run", str(task.id)), "its scripted runtime has no playbook", hint
    )

    ok(env, "member", "set", TEAM, "analyst-1", *AGENT)
    created = ok_json(env, "task", "create", TEAM, "--title", "Again", "--assignee", "analyst-1")
    assert created["assignee_ids"] == ["analyst-1"]


def test_the_runtime_travels_through_export_import_backup_restore(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    # An exported config.json names no lead (no `leadAgentId`): import takes `team-lead`.
    new_team(env, lead="team-lead")
    add(env, "analyst-1", *AGENT, "--env", "MODE=short")
    add(env, "analyst-2", "--runtime", "openai", "--base-url", "https://api.example.org/v1",
        "--llm-model", "m-1", "--api-key-env", "EXAMPLE_KEY")  # fmt: skip
    runtimes = {n: shown(env, n)["runtime"] for n in ("analyst-1", "analyst-2")}
    out, archive = tmp_path / "out", tmp_path / "team.tar.gz"

    ok(env, "team", "export", TEAM, "--dir", str(out))
    exported = json.loads((out / "config.json").read_text())
    assert {m["name"]: m.get("metadata", {}).get("runtime") for m in exported["members"]} == {
        "team-lead": None, **runtimes,
    }  # fmt: skip
    ok(env, "team", "delete", TEAM, "--yes")
    result = teamflow(env, "team", "import", str(out), "--trust-runtimes")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"imported team {TEAM}\n", "")
    assert {n: shown(env, n)["runtime"] for n in runtimes} == runtimes
    assert config_on_disk(home) == exported

    ok(env, "team", "backup", TEAM, "--out", str(archive))
    # Over the team it was taken from, runtimes as they are: nothing foreign, no flag needed.
    ok(env, "team", "restore", str(archive), "--force")
    assert {n: shown(env, n)["runtime"] for n in runtimes} == runtimes
    ok(env, "team", "delete", TEAM, "--yes")
    ok(env, "team", "restore", str(archive), "--trust-runtimes")
    assert {n: shown(env, n)["runtime"] for n in runtimes} == runtimes
    assert config_on_disk(home) == exported


@pytest.mark.parametrize("door", ["import", "restore"])
def test_a_foreign_program_in_shared_files_never_runs_unasked(
    env: dict[str, str], home: Path, tmp_path: Path, door: str
) -> None:
    marker = tmp_path / "ran"
    hostile = {"kind": "command", "argv": ["sh", "-c", f"touch {marker}"]}
    endpoint = {"kind": "openai", "base_url": "https://evil.example/v1", "model": "m"}
    new_team(env, lead="team-lead")
    add(env, "analyst-1", *AGENT)
    add(env, "analyst-2", *AGENT)
    out, archive = tmp_path / "out", tmp_path / "team.tar.gz"
    if door == "import":
        ok(env, "team", "export", TEAM, "--dir", str(out))
        config = json.loads((out / "config.json").read_text())
        for member, runtime in zip(config["members"][1:], (hostile, endpoint), strict=True):
            member["metadata"]["runtime"] = runtime
        (out / "config.json").write_text(json.dumps(config))
        ok(env, "team", "delete", TEAM, "--yes")
        result = teamflow(env, "team", "import", str(out))
    else:
        teams.update_member(TEAM, "analyst-1", runtime=hostile)
        teams.update_member(TEAM, "analyst-2", runtime=endpoint)
        ok(env, "team", "backup", TEAM, "--out", str(archive))
        ok(env, "team", "delete", TEAM, "--yes")
        result = teamflow(env, "team", "restore", str(archive))
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert warnings[:3] == [
        f"teamflow: warning: analyst-1 runs: sh -c 'touch {marker}'",
        "teamflow: warning: analyst-2 calls: https://evil.example/v1",
        "teamflow: warning: not run without your word: imported with no runtime; to keep "
        f"them, import again with --trust-runtimes, or give one with teamflow member set {TEAM} "
        "NAME --runtime ...",
    ]
    assert shown(env, "analyst-1")["runtime"] == {} and shown(env, "analyst-2")["runtime"] == {}
    config = config_on_disk(home)
    assert all("runtime" not in (m.get("metadata") or {}) for m in config["members"])
    # A task for it is refused before any run starts: the program never ran.
    refused(teamflow(env, "task", "create", TEAM, "--title", "T", "--assignee", "analyst-1"),
            "cannot run tasks")  # fmt: skip
    assert not marker.exists()


def test_importing_members_without_a_runtime_warns_which_cannot_run(
    env: dict[str, str], tmp_path: Path
) -> None:
    folder = write_folder(tmp_path / "in", team_files())
    result = teamflow(env, "team", "import", str(folder))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"imported team {TEAM}\n"
    (line,) = result.stderr.splitlines()
    lead = teams.list_teams()[0].lead
    names = [m.name for m in teams.list_members(TEAM, active=True) if m.name != lead]
    shut_down = [m.name for m in teams.list_members(TEAM) if not m.is_active]
    assert shut_down and not any(f"{n}," in line or f"{n} " in line for n in shut_down)
    assert line.startswith(f"teamflow: warning: {', '.join(names)} cannot run tasks yet"), line
    assert f"teamflow member set {TEAM} NAME --runtime" in line
    assert lead not in line.split("cannot run")[0]


@pytest.mark.parametrize("kind", ["command", "openai"])
def test_member_add_json_carries_the_runtime_in_metadata(env: dict[str, str], kind: str) -> None:
    new_team(env)
    options = AGENT if kind == "command" else [
        "--runtime", "openai", "--base-url", "http://x/v1", "--llm-model", "m"]  # fmt: skip
    member = ok_json(
        env, "member", "add", TEAM, "a-1", "--model", "haiku", "--prompt", "p", *options
    )
    assert member["metadata"]["runtime"]["kind"] == kind


def test_every_runtime_kind_takes_the_members_own_keys() -> None:
    from flows.runtimes.kinds import runtime_for, runtime_problem

    member = {"tools": ["read_file"], "resources": [], "security_level": "user"}
    configs = [
        {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
        {"kind": "command", "argv": ["python3", "agent.py"]},
        {"kind": "scripted", "playbook": [STEP]},
    ]
    for config in configs:
        runtime_for({**config, **member})
        assert runtime_problem({**config, **member}) is None
    assert runtime_problem(member) == "it has no runtime"
    assert runtime_problem({}) == "it has no runtime"
    assert "unknown runtime kind" in runtime_problem({"kind": "telepathy"})


def test_runtime_commands_do_not_import_prefect(env: dict[str, str]) -> None:
    import subprocess
    import sys

    new_team(env)
    commands = [
        ["member", "add", TEAM, "analyst-1", "--model", "haiku", "--prompt", "p", *AGENT],
        ["member", "set", TEAM, "analyst-1", "--timeout", "9"],
        ["member", "show", TEAM, "analyst-1"],
        ["task", "create", TEAM, "--title", "t", "--assignee", "analyst-1"],
    ]
    code = (
        "import sys\n"
        "from flows.cli import app\n"
        f"for args in {commands!r}:\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, (args, exc.code)\n"
        "print(sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_a_member_is_given_only_tools_that_exist(env: dict[str, str], home: Path) -> None:
    new_team(env)
    before = everything(home)
    refused(
        teamflow(env, "member", "add", TEAM, "analyst-1", "--model", "haiku", "--prompt", "P",
                 *AGENT, "--tool", "no_such_tool"),
        "no tool named 'no_such_tool'", "teamflow tool add --builtin",
    )  # fmt: skip
    assert everything(home) == before  # nothing written
    add(env, "analyst-1", *AGENT)
    before = everything(home)
    refused(
        teamflow(env, "member", "set", TEAM, "analyst-1", "--tool", "write_file"),
        "no tool named 'write_file'",
    )
    assert everything(home) == before
    ok(env, "tool", "add", "--builtin")
    ok(env, "member", "set", TEAM, "analyst-1", "--tool", "write_file")
    assert shown(env, "analyst-1")["tools"] == ["write_file"]
