"""`teamflow memory` as a user runs it (a real process, both databases): add, search, show,
forget; bad input is one line, a non-zero exit and nothing written; the README's memory
commands run as shown."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import forkserver
import pytest
import sqlalchemy as sa
from factories import TEAM, research_team
from prefect_server import teamflow as run_teamflow
from sqlmodel import Session, select

from models import db
from models.memory import MemoryRow

ROOT = Path(__file__).resolve().parent.parent


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return run_teamflow(list(args))


@pytest.fixture
def team(db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("TEAMFLOW_EMBEDDINGS_URL", raising=False)
    return research_team()


def _count() -> int:
    with Session(db.engine()) as s:
        return s.exec(select(sa.func.count()).select_from(MemoryRow)).one()


def test_add_search_show_forget(team: str) -> None:
    added = teamflow(
        "memory", "add", team, "--agent", "analyst-1", "--type", "knowledge", "--scope",
        "shared", "--content", "Churn rose after the price change", "--importance", "0.7",
        "--confidence", "0.6", "--tag", "churn", "--tag", "pricing", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    memory = json.loads(added.stdout)
    assert memory["agent_id"] == f"analyst-1@{TEAM}"
    assert (memory["importance"], memory["confidence"]) == (0.7, 0.6)
    assert memory["tags"] == ["churn", "pricing"]
    mid = memory["memory_id"]

    private = teamflow(
        "memory", "add", team, "--agent", "analyst-2", "--type", "agent_procedure",
        "--scope", "individual", "--content", "Check churn by cohort first",
    )  # fmt: skip
    assert re.fullmatch(r"remembered \S+ \(agent_procedure, individual\)\n", private.stdout)

    found = teamflow("memory", "search", team, "price churn", "--agent", "coordinator", "--json")
    assert found.returncode == 0, found.stderr
    results = json.loads(found.stdout)
    assert [r["memory"]["memory_id"] for r in results] == [mid]  # not analyst-2's own
    assert 0 < results[0]["score"] <= 1

    text = teamflow("memory", "search", team, "churn", "--agent", "analyst-2")
    assert text.stdout.count("churn") >= 2  # both: the shared one and analyst-2's own

    shown = teamflow("memory", "show", team, mid, "--json")
    assert json.loads(shown.stdout)["access_count"] == 3  # two searches and this read

    gone = teamflow("memory", "forget", team, mid)
    assert gone.stdout == f"forgot {mid}\n"
    again = teamflow("memory", "show", team, mid)
    assert again.returncode == 1
    assert again.stderr == f"teamflow: error: team {TEAM!r} has no memory {mid!r}\n"


BASE = ["--agent", "analyst-1", "--type", "knowledge", "--scope", "shared", "--content", "ok"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["memory", "add", "no-team", *BASE], "no team named 'no-team'"),
        (["memory", "add", TEAM, *BASE, "--agent", "ghost"], "no member named 'ghost'"),
        (["memory", "add", TEAM, *BASE, "--type", "opinion"], "memory_type: Input should be"),
        (["memory", "add", TEAM, *BASE, "--scope", "team"], "scope: Input should be"),
        (["memory", "add", TEAM, *BASE, "--importance", "nan"], "--importance must be"),
        (["memory", "add", TEAM, *BASE, "--confidence", "inf"], "--confidence must be"),
        (["memory", "add", TEAM, *BASE, "--importance", "1.01"], "--importance must be"),
        (["memory", "add", TEAM, *BASE, "--content", "x" * 8001], "at most 8000"),
        (["memory", "add", TEAM, *BASE, "--related", "nope"], "related_memories"),
        (["memory", "search", TEAM, "x", "--agent", "ghost"], "no member named 'ghost'"),
        (["memory", "search", TEAM, "x", "--agent", "analyst-1", "--type", "y"], "memory type"),
        (["memory", "show", TEAM, "not-a-uuid"], "is not a memory id"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(team: str, args: list[str], says: str) -> None:
    result = teamflow(*args, "--json")
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    assert _count() == 0


def _readme_memory_block() -> str:
    page = ROOT / "docs" / "memory-and-knowledge.md"
    section = page.read_text().split("## Memory: what agents remember", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_the_readme_memory_commands_run_as_shown(db_url: str, home: Path) -> None:
    setup = [
        ["team", "create", "q4-team", "--description", "Q4", "--lead", "coordinator"],
        ["member", "add", "q4-team", "analyst-1", "--model", "haiku", "--prompt", "p"],
    ]
    for args in setup:
        assert teamflow(*args).returncode == 0
    # `teamflow` is the real command, forked from the tests' fork server (`forkserver`).
    command = shlex.join(forkserver.command(forkserver.TEAMFLOW, "flows.cli", []))
    script = "set -euo pipefail\n" + f'teamflow() {{ {command} "$@"; }}\n' + _readme_memory_block()
    result = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ),  # `flows` from ROOT, the working directory
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Retry the CRM export" in result.stdout
    assert "forgot " in result.stdout
    assert _count() == 1  # the individual memory stays
