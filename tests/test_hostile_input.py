"""Every input checked the same way at every door (issue 33): hostile values given to the
command line are refused with one line and a non-zero exit, and nothing is written.

The checks live in the stores and validators (names with `fullmatch`, reserved member
names, numbers in their ranges, text caps, templates parsed when added), so the CLI, the
REST API and MCP refuse alike; these tests go through the CLI's own entry point.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import teamflow as run_teamflow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_teams import everything, ok, refused

TEAM = "tea-one"


@pytest.fixture
def env(db_url: str, home: Path) -> dict[str, str]:
    return {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}


def teamflow(env: dict[str, str], *args: str):
    return run_teamflow(args, env)


def team_with_member(env: dict[str, str]) -> None:
    ok(env, "team", "create", TEAM, "--description", "d", "--lead", "coordinator")
    ok(env, "member", "add", TEAM, "analyst-1", "--model", "haiku", "--prompt", "p")


CASES: dict[str, tuple[list[str], str]] = {
    "team name ending in a newline": (
        ["team", "create", "tea1\n", "--description", "d"], "is not a team name",
    ),
    "member name ending in a newline": (
        ["member", "add", TEAM, "bob\n", "--model", "haiku", "--prompt", "p"],
        "is not a member name",
    ),
    "member named system": (
        ["member", "add", TEAM, "system", "--model", "haiku", "--prompt", "p"],
        "'system' is a reserved name",
    ),
    "member named team-lead where another leads": (
        ["member", "add", TEAM, "team-lead", "--model", "haiku", "--prompt", "p"],
        "'team-lead' is reserved for a team's lead",
    ),
    "a runtime timeout of 1e300 seconds": (
        ["member", "set", TEAM, "analyst-1", "--runtime", "command", "--command", "x",
         "--timeout", "1e300"],
        "--timeout must be a finite number of seconds",
    ),
    "a tool nobody added": (
        ["member", "set", TEAM, "analyst-1", "--tool", "no_such_tool"], "no tool named",
    ),
    "a template with an unclosed variable": (
        ["template", "add", "greet", "--description", "d", "--template", "hi {{name"],
        "'{{' is not part of a {{name}} variable",
    ),
    "a template version past SQLite's integers": (
        ["template", "show", "greet", "--version", str(10**30)], "has no version 1000",
    ),
    "a template version of 1e30": (["template", "show", "greet", "--version", "1e30"], "--version"),
    "a summary of 10 MB": (
        ["msg", "send", TEAM, "--to", "analyst-1", "--from", "coordinator", "--text", "t",
         "--summary", "s" * 10_000_000],
        "summary: 10000000 characters; at most 2000",
    ),
    "a task description of 10 MB": (
        ["task", "create", TEAM, "--title", "t", "--description", "d" * 10_000_000],
        "description: 10000000 characters; at most 100000",
    ),
    "a project name of 10 MB": (
        ["project", "create", "n" * 10_000_000, "--id", "p-1", "--description", "d"],
        "name: 10000000 characters; at most 500",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_value_is_refused_in_one_line_and_writes_nothing(
    env: dict[str, str], home: Path, case: str
) -> None:
    team_with_member(env)
    args, fragment = CASES[case]
    before = everything(home)
    result = teamflow(env, *args)
    assert result.returncode != 0, result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("teamflow: error: ") and fragment in line, line
    assert everything(home) == before


def test_a_playbook_nested_3000_deep_is_one_line(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    team_with_member(env)
    playbook = tmp_path / "deep.json"
    playbook.write_text("[" * 3000 + "]" * 3000)
    before = everything(home)
    result = teamflow(env, "member", "set", TEAM, "analyst-1", "--runtime", "scripted",
                      "--playbook", str(playbook))  # fmt: skip
    refused(result, "nested deeper than 100 levels")
    assert everything(home) == before


def test_db_upgrade_to_no_such_migration_is_one_line(env: dict[str, str]) -> None:
    result = teamflow(env, "db", "upgrade", "../x")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("teamflow: error: no migration '../x' to go to"), line


def test_a_read_only_database_is_one_line_naming_it(tmp_path: Path) -> None:
    from models import db

    path = tmp_path / "teamflow.db"
    db.upgrade(f"sqlite:///{path}")
    # Opened read-only (the tests run as root, whom a file's mode does not stop).
    url = f"sqlite:///file:{path}?mode=ro&uri=true"
    env = {**os.environ, "TEAMFLOW_HOME": str(tmp_path), "TEAMFLOW_DATABASE_URL": url}
    result = teamflow(env, "team", "create", TEAM, "--description", "d")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"teamflow: error: the database {url} refuses to write"), line
    assert "readonly" in line


# --- generated hostile values ---------------------------------------------------------------

hostile_text = st.one_of(
    st.text(min_size=1, max_size=8).map(lambda t: f"{t}\n"),
    st.sampled_from(["system", "*", "team-lead", "", " ", "../x", "a" * 65, "x\x00y"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
        lambda t: not t.replace("-", "").replace("_", "").isalnum()
    ),
)
hostile_numbers = st.sampled_from(["1e300", "-1", "0", "nan", "inf", "1e30", str(10**30)])


def _commands(name: str, number: str) -> list[list[str]]:
    return [
        ["team", "create", name, "--description", "d"],
        ["member", "add", TEAM, name, "--model", "haiku", "--prompt", "p"],
        ["member", "set", TEAM, "analyst-1", "--runtime", "command", "--command", "x",
         "--timeout", number],
        ["template", "show", "greet", "--version", number],
        ["member", "set", TEAM, "analyst-1", "--tool", name],
    ]  # fmt: skip


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=hostile_text, number=hostile_numbers, which=st.integers(0, 4))
def test_generated_hostile_values_are_refused_in_one_line_writing_nothing(
    env: dict[str, str], home: Path, name: str, number: str, which: int
) -> None:
    if not (home / "teams" / TEAM).exists():
        team_with_member(env)
    if which == 0 and name in ("system", "team-lead"):
        name += "\n"  # fine team names; reserved only as members
    args = _commands(name, number)[which]
    before = everything(home)
    result = teamflow(env, *args)
    assert result.returncode != 0, (args, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("teamflow: error: "), (args, result.stderr)
    assert everything(home) == before
    json.dumps(args)  # the case is printable for a report


# --- a full disk, a read-only database: one line naming the file ----------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mounts small tmpfs file systems (`mount -t tmpfs -o size=...`): a disk that fills up,
    or one remounted read-only. Skips where the tests may not mount (not root)."""
    from models import db

    mounted: list[Path] = []

    def mount(name: str, size: str = "2m") -> Path:
        path = tmp_path / name
        path.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    db.dispose_engines()  # no open file keeps a mount busy
    for path in reversed(mounted):
        subprocess.run(["umount", str(path)], check=True)


def fill(disk: Path) -> None:
    """Writes a file on `disk` until the disk is full."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def one_line(result: Any) -> str:
    """The refusal's one line (exit 1, no traceback)."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith("teamflow: error: ") and "Traceback" not in result.stderr
    return line.removeprefix("teamflow: error: ")


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_a_full_or_read_only_disk_under_the_sqlite_database_is_one_line_naming_it(
    tiny_disk: Callable[..., Path], tmp_path: Path, how: str
) -> None:
    from models import db

    disk = tiny_disk("db")
    url = f"sqlite:///{disk / 'teamflow.db'}"
    db.upgrade(url)
    db.dispose_engines()
    env = {**os.environ, "TEAMFLOW_HOME": str(tmp_path / "home"), "TEAMFLOW_DATABASE_URL": url}
    # As root, a file's mode (chmod) stops no writer: the file system itself refuses here.
    fill(disk) if how == "full" else read_only(disk)
    line = one_line(teamflow(env, "team", "create", TEAM, "--description", "d"))
    if how == "full":
        assert line == f"the database {url} refuses to write: disk I/O error", line
        (disk / "filler").unlink()
    else:
        assert line == (
            f"the database {url} cannot be opened: unable to open database file (its folder "
            f"{disk} is read-only; SQLite writes its journal beside the file)"
        ), line
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    assert json.loads(ok(env, "team", "list", "--json")) == []  # nothing written
    assert not (tmp_path / "home" / "teams" / TEAM).exists()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_read_only_postgres_database_is_one_line_naming_it(db_url: str, home: Path) -> None:
    import sqlalchemy as sa

    url = sa.make_url(db_url)
    options = f"{url.query.get('options', '')} -cdefault_transaction_read_only=on".strip()
    read_only_url = url.update_query_dict({"options": options}).render_as_string(False)
    env = {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": read_only_url}
    line = one_line(teamflow(env, "team", "create", TEAM, "--description", "d"))
    assert line.startswith("the database postgresql+psycopg://") and "refuses to write" in line
    assert "read-only transaction" in line
    assert teamflow(env, "team", "list", "--json").stdout.strip() == "[]"
    assert not (home / "teams" / TEAM).exists()


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_a_full_or_read_only_home_is_one_line_naming_the_file(
    db_url: str, tiny_disk: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    home = tiny_disk("home", size="256k")
    monkeypatch.setenv("TEAMFLOW_HOME", str(home))
    env = {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}
    team_with_member(env)
    fill(home) if how == "full" else read_only(home)
    line = one_line(teamflow(env, "member", "add", TEAM, "bob", "--model", "haiku",
                             "--prompt", "p"))  # fmt: skip
    config = home / "teams" / TEAM / "config.json"
    why = "No space left on device" if how == "full" else "Read-only file system"
    assert line.startswith(f"saved in the database, but {config} could not be written: {why}")
    # The database took it (the line says so), and the next change writes the file again.
    assert "bob" in [m["name"] for m in json.loads(ok(env, "member", "list", TEAM, "--json"))]
    if how == "full":
        (home / "filler").unlink()
    else:
        subprocess.run(["mount", "-o", "remount,rw", str(home)], check=True)
    ok(env, "member", "set", TEAM, "bob", "--model", "opus")
    assert [m["name"] for m in json.loads(config.read_text())["members"]][-1] == "bob"
