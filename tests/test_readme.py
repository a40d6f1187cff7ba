"""The CLI blocks of the README and of the docs pages run as shown (in a throwaway home and
database).

A block is the first ```bash block under a heading of `README.md` or of a page of `docs/`;
every `teamflow` line of it runs, in order, as written. The pages say above each such block
which test runs it. (`tests/test_alert_cli.py`, `tests/test_memory_cli.py` and
`tests/test_byoa_readme.py` run the blocks that need a Prefect server, `jq` or an agent.)
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from cli_runner import teamflow

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
WALK_THROUGH = (DOCS / "getting-started.md", "## Using the CLI")
KNOWLEDGE = (DOCS / "memory-and-knowledge.md", "## Knowledge, prompt templates and projects")
TEAM_LIFE = (README, "## A team's life")


def _commands(page: Path, heading: str) -> list[str]:
    """The `teamflow` lines of the first bash block under `heading` (a whole heading line)."""
    text = page.read_text()
    assert f"\n{heading}\n" in text, f"{page.relative_to(ROOT)} has no heading {heading!r}"
    section = text.split(f"\n{heading}\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    # A command continued on the next line (`\` at the end) is one command.
    block = re.sub(r"\\\n\s*", " ", block)
    return [line for line in block.splitlines() if line.startswith("teamflow ")]


def test_the_docs_show_the_walk_through() -> None:
    assert len(_commands(*WALK_THROUGH)) >= 15


def test_every_cli_line_of_the_walk_through_runs_as_shown(tmp_path: Path) -> None:
    _run_as_shown(_commands(*WALK_THROUGH), tmp_path)


def test_the_knowledge_template_and_project_lines_run_as_shown(tmp_path: Path) -> None:
    """The section's lines, on the walk-through's team as it stands before it is deleted."""
    setup = [
        "teamflow db upgrade",
        'teamflow team create q4-team --description "Q4 sales analysis team"',
        'teamflow member add q4-team analyst-1 --model haiku --prompt "You analyse sales."',
    ]
    lines = _commands(*KNOWLEDGE)
    assert len(lines) >= 10
    _run_as_shown(setup + lines, tmp_path)


def test_the_readme_team_life_runs_as_shown(tmp_path: Path) -> None:
    lines = _commands(*TEAM_LIFE)
    assert lines[0].startswith("teamflow db upgrade") and len(lines) >= 8
    _run_as_shown(lines, tmp_path)


def _run_as_shown(lines: list[str], tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TEAMFLOW_HOME": str(tmp_path / "home"),
        "TEAMFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'teamflow.db'}",
    }
    for line in lines:
        # Files the walk-through writes to /tmp go to this test's own folder instead.
        args = [a.replace("/tmp/", f"{tmp_path}/") for a in shlex.split(line, comments=True)]
        result = teamflow(args[1:], env, cwd=ROOT)  # in process where it can be
        assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"
