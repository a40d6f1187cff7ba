"""The README's CLI walk-through runs as shown (in a throwaway home and database)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def _commands(heading: str = "## Using the CLI") -> list[str]:
    section = README.read_text().split(heading, 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    # A command continued on the next line (`\` at the end) is one command.
    block = re.sub(r"\\\n\s*", " ", block)
    return [line for line in block.splitlines() if line.startswith("teamflow ")]


def test_the_readme_shows_the_walk_through() -> None:
    assert len(_commands()) >= 15


def test_every_cli_line_of_the_readme_runs_as_shown(tmp_path: Path) -> None:
    _run_as_shown(_commands(), tmp_path)


def test_the_knowledge_template_and_project_lines_run_as_shown(tmp_path: Path) -> None:
    """The section's lines, on the walk-through's team as it stands before it is deleted."""
    setup = [
        "teamflow db upgrade",
        'teamflow team create q4-team --description "Q4 sales analysis team"',
        'teamflow member add q4-team analyst-1 --model haiku --prompt "You analyse sales."',
    ]
    lines = _commands("### Knowledge, prompt templates and projects")
    assert len(lines) >= 10
    _run_as_shown(setup + lines, tmp_path)


def _run_as_shown(lines: list[str], tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TEAMFLOW_HOME": str(tmp_path / "home"),
        "TEAMFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'teamflow.db'}",
    }
    root = README.parent
    for line in lines:
        # Files the walk-through writes to /tmp go to this test's own folder instead.
        args = [a.replace("/tmp/", f"{tmp_path}/") for a in shlex.split(line, comments=True)]
        result = subprocess.run(
            [sys.executable, "-m", "flows.cli", *args[1:]],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
            timeout=120,
        )
        assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"
