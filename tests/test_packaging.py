"""The built wheel holds what an installed teamflow runs: every built-in tool program and its
`000` definition (`flows/toolbox/`), every module of the `teamflow` command line (`flows/cli/`),
and the `teamflow` console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# A wheel built by pip from a copy of the sources, seconds of CPU: `make test-fast` leaves it out.
pytestmark = pytest.mark.system

ROOT = Path(__file__).parents[1]


def build_wheel(tmp_path: Path) -> zipfile.ZipFile:
    """Builds teamflow's wheel offline from a copy of the sources (a build writes `build/` and
    `*.egg-info` beside the sources, so not into the work tree)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for package in ("models", "flows"):
        shutil.copytree(ROOT / package, source / package, ignore=junk)
    out = tmp_path / "wheel"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, (
        "building the wheel failed (setuptools 70.1+ builds wheels without the `wheel` "
        "package; `pip install -e '.[dev]'` installs it):\n" + result.stdout + result.stderr
    )
    [wheel] = out.glob("teamflow-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_wheel_holds_the_toolbox_the_cli_and_the_console_script(tmp_path: Path) -> None:
    with build_wheel(tmp_path) as wheel:
        names = set(wheel.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = wheel.read(entry_points).decode()

    toolbox = sorted((ROOT / "flows" / "toolbox").glob("*.json"))
    programs = sorted((ROOT / "flows" / "toolbox").glob("*.py"))
    assert len(toolbox) >= 5
    assert {p.stem for p in toolbox} <= {p.stem for p in programs}
    for file in [*toolbox, *programs]:
        assert f"flows/toolbox/{file.name}" in names, file.name

    cli = sorted((ROOT / "flows" / "cli").glob("*.py"))
    assert {"__init__.py", "__main__.py", "app.py"} <= {p.name for p in cli}
    for file in cli:
        assert f"flows/cli/{file.name}" in names, file.name
    assert "flows/cli.py" not in names
    assert "flows/tools.py" in names

    assert "teamflow = flows.cli:console" in scripts
