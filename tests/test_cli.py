"""The `teamflow` command line, run as a user runs it: a real process."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def teamflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_help_lists_the_commands() -> None:
    result = teamflow("--help")
    assert result.returncode == 0
    for command in ("validate", "db", "demo"):
        assert command in result.stdout


@pytest.mark.parametrize(
    "args", [["--help"], ["validate", str(FIXTURES / "004_config_members.json")]]
)
def test_data_commands_do_not_import_prefect(args: list[str]) -> None:
    code = (
        "import sys\n"
        "from flows.cli import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_help_shows_each_paragraph_unbroken() -> None:
    """A docstring's paragraph is wrapped at 100 columns in the source; `--help` shows it
    as one paragraph that the terminal wraps, not broken where a source line ended."""
    result = teamflow("msg", "send", "--help", env={"COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    assert "...) carries its JSON as `--text`; it is checked against its format." in result.stdout


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    sub = getattr(command, "commands", None)
    if sub is None:
        yield path, command
    for name in list(sub or ()):
        yield from _commands(sub[name], [*path, name])


def test_every_commands_help_keeps_its_paragraphs_whole() -> None:
    """Every command's `--help` (rendered in process, 300 columns wide) shows each paragraph
    of its docstring on one line from its start: none is broken where its source line ended."""
    import importlib

    import typer
    from typer.testing import CliRunner

    root = importlib.import_module("flows.cli.app").app
    checked = 0
    for path, command in _commands(typer.main.get_command(root), []):
        paragraphs = inspect.cleandoc(command.callback.__doc__ or "").split("\n\n")
        result = CliRunner().invoke(root, [*path, "--help"], env={"COLUMNS": "300"})
        assert result.exit_code == 0, (path, result.output)
        lines = [line.strip() for line in result.output.splitlines()]
        for paragraph in paragraphs[1:]:
            if paragraph.startswith(("\b", "- ", "* ")) or "\n- " in paragraph:
                continue
            start = " ".join(paragraph.split())[:120].rsplit(" ", 1)[0]
            assert any(line.startswith(start) for line in lines), (path, start, result.output)
            checked += 1
    assert checked > 20  # the commands with more than a one-line summary


def test_help_imports_no_table() -> None:
    code = "import sys\nfrom flows.cli import app\n"
    code += "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlmodel', 'sqlalchemy')))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_validate_recognises_the_format_and_says_ok() -> None:
    result = teamflow("validate", str(FIXTURES / "004_config_members.json"))
    assert result.returncode == 0
    assert result.stdout.strip() == "ok (004/config)"


def test_validate_prints_one_line_per_error_with_its_path(tmp_path: Path) -> None:
    config = json.loads((FIXTURES / "004_config_members.json").read_text())
    config["name"] = "Research_Team"
    config["members"][1]["color"] = "purple"
    config["members"][1]["tmuxPaneId"] = "89"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = teamflow("validate", str(path))
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("name: ")
    assert any(line.startswith("members[1].color: ") for line in lines)
    assert any(line.startswith("members[1].tmuxPaneId: ") for line in lines)


def test_validate_json_output(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    path.write_text(
        json.dumps(
            {**json.loads((FIXTURES / "004_idle_available.json").read_text()), "idleReason": "nap"}
        )
    )
    result = teamflow("validate", "--json", str(path))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["format"] == "004/team-message"
    assert report["ok"] is False
    assert "idleReason" in report["errors"][0]


def test_validate_as_a_named_format(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(json.loads((FIXTURES / "004_inbox_regular.json").read_text())))
    assert teamflow("validate", "--as", "004/inbox", str(path)).returncode == 0
    wrong = teamflow("validate", "--as", "004/config", str(path))
    assert wrong.returncode == 1


def test_validate_unknown_format_lists_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    result = teamflow("validate", "--as", "005/nothing", str(path))
    assert result.returncode == 2
    assert "004/config" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_validate_malformed_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"name": ')
    result = teamflow("validate", str(path))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "not valid JSON" in result.stderr


def test_validate_missing_file(tmp_path: Path) -> None:
    result = teamflow("validate", str(tmp_path / "nope.json"))
    assert result.returncode == 1
    assert "no such file" in result.stderr


def test_validate_unrecognisable_document(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": "world"}')
    result = teamflow("validate", str(path))
    assert result.returncode == 2
    assert "--as" in result.stderr


def test_db_upgrade_creates_the_default_sqlite_database(tmp_path: Path) -> None:
    env = {"TEAMFLOW_HOME": str(tmp_path / "home")}
    env_without_url = {k: v for k, v in os.environ.items() if k != "TEAMFLOW_DATABASE_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "db", "upgrade", "--json"],
        capture_output=True,
        text=True,
        env={**env_without_url, **env},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["revision"]
    assert (tmp_path / "home" / "teamflow.db").exists()


def test_db_upgrade_on_an_unreachable_database_is_one_line() -> None:
    result = teamflow(
        "db",
        "upgrade",
        env={
            "TEAMFLOW_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/x?connect_timeout=2"
        },
    )
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_every_seed_example_is_recognised_and_valid(fixture: str) -> None:
    from models.formats import detect

    data = json.loads((FIXTURES / fixture).read_text())
    fmt = detect(data)
    assert fmt is not None, fixture
    assert fmt.name.startswith(fixture[:3]), (fixture, fmt.name)
    fmt.validate(data)


def test_every_format_has_a_model() -> None:
    from models.formats import FORMATS

    for fmt in FORMATS.values():
        assert fmt.adapter() is not None, fmt.name


def test_a_database_never_upgraded_is_one_line_saying_what_to_run(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TEAMFLOW_HOME": str(tmp_path / "home"),
        "TEAMFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "flows.cli", "team", "list"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "teamflow: error: teamflow's database has no tables for this yet: run `teamflow db upgrade`"
    )
