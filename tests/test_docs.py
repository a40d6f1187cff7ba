"""The docs site builds with `mkdocs build --strict`: a broken link or anchor fails it. The
README stays a short guide whose links into `docs/` land, and the CLI reference is what the
command line says.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, cwd=config.parent,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert {"index", "getting-started", "cli", "performance", "settings", "upstream"} <= pages
    for page in pages:
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), page
    for image in (ROOT / "docs").glob("*.png"):
        assert (site / image.name).is_file(), image.name


def test_a_broken_anchor_or_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "metrics.md"
    page.write_text(page.read_text() + "\nSee [the watchdog](alerts.md#no-such-heading).\n")
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "does not contain an anchor '#no-such-heading'" in result.stdout + result.stderr

    page.write_text(page.read_text().replace("alerts.md#no-such-heading", "no-such-page.md"))
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_the_readme_is_a_short_guide_whose_links_land(site: Path) -> None:
    text = README.read_text()
    assert len(text.encode()) <= 15_000
    for command in ("make demo", "make test", "make test-fast", "teamflow up"):
        assert command in text
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", text)
    assert len(links) >= 10
    for path, anchor in links:
        assert (ROOT / path).is_file(), path
        if anchor:
            html = site / Path(path).stem / "index.html"
            assert f'id="{anchor}"' in html.read_text(), f"{path}#{anchor}"


def test_the_cli_reference_is_what_the_command_line_says() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "gen_cli_reference.py"), "--check"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    reference = (ROOT / "docs" / "cli.md").read_text()
    from flows.cli.app import COMMANDS, GROUPS

    for name in [*COMMANDS, *GROUPS]:
        assert f"`teamflow {name}`" in reference, name
