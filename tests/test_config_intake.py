"""`config.json` both ways (models/config_intake.py): the seed `004` "Updating Config" jq
recipes, run as the seed writes them, are taken in by `teamflow sync` and before teamflow
writes the file again; an invalid edit is refused in one line and kept aside."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from cli_runner import teamflow
from factories import TEAM, research_team

from models import config_intake, membership, mirror
from models import team as teams
from models.db import session_scope

pytestmark = pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")

ROOT = Path(__file__).parent.parent
NOW = "$(date -u +%Y-%m-%dT%H:%M:%S.000Z)"
ADD_MEMBER = (
    """jq '.members += [{
  "agentId": "worker-2@research-team",
  "name": "worker-2",
  "agentType": "general-purpose",
  "model": "haiku",
  "prompt": "...",
  "color": "green",
  "tmuxPaneId": "%89",
  "backendType": "tmux",
  "isActive": true,
  "spawnedAt": "'"""
    + NOW
    + """'"
}]' config.json > config.json.tmp && mv config.json.tmp config.json"""
)
INACTIVE = """jq '(.members[] | select(.name == "analyst-1") | .isActive) = false' config.json"""
SHUTDOWN_AT = (
    """jq '(.members[] | select(.name == "analyst-2") | .shutdownAt) = "'"""
    + NOW
    + """'"' config.json"""
)


def recipe(command: str) -> None:
    """Runs a seed recipe in the team's folder; one that prints (as the seed's second and
    third do) is written back the way the first one does."""
    if "> config.json.tmp" not in command:
        command += " > config.json.tmp && mv config.json.tmp config.json"
    subprocess.run(["bash", "-c", command], cwd=mirror.team_dir(TEAM), check=True)


def members() -> dict[str, bool]:
    with session_scope() as s:
        config = teams.config_of(teams.get_team(TEAM, session=s), session=s)
        return {m.name: m.is_active for m in config.members}


def on_file() -> dict[str, bool]:
    config = json.loads(mirror.config_path(TEAM).read_text())
    return {m["name"]: m["isActive"] for m in config["members"]}


def test_the_seed_recipes_are_taken_in_by_sync(db_url: str, home: Path) -> None:
    research_team()
    recipe(ADD_MEMBER)
    recipe(INACTIVE)
    recipe(SHUTDOWN_AT)
    result = teamflow(["sync", TEAM], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "worker-2 joined (added to config.json)" in result.stdout
    assert "analyst-1 is inactive (config.json says so)" in result.stdout
    assert members() == {
        "coordinator": True, "analyst-1": False, "analyst-2": False, "worker-2": True,
    }  # fmt: skip
    with session_scope() as s:
        worker = teams.get_member(TEAM, "worker-2", session=s)
        assert (worker.tmux_pane_id, worker.backend_type, worker.runtime) == ("%89", "tmux", {})
        assert teams.get_member(TEAM, "analyst-2", session=s).shutdown_at is not None
    assert (mirror.inbox_dir(TEAM) / "worker-2.json").exists()
    assert teamflow(["sync", TEAM], cwd=ROOT).stdout.splitlines() == [
        "took in 0 new messages and 0 read flags"
    ]


def test_an_edit_is_taken_in_before_teamflow_writes_the_file_again(db_url: str, home: Path) -> None:
    research_team()
    recipe(ADD_MEMBER)
    membership.add_member(TEAM, "analyst-3", model="opus", prompt="You are analyst 3.")
    assert "worker-2" in members() and "analyst-3" in members()
    assert on_file() == members()  # nothing the jq recipe added vanished


def test_an_invalid_edit_is_refused_in_one_line_and_kept_aside(db_url: str, home: Path) -> None:
    research_team()
    recipe("""jq '(.members[] | select(.name == "analyst-1") | .color) = "purple"' config.json""")
    edited = mirror.config_path(TEAM).read_bytes()
    result = teamflow(["sync", TEAM], cwd=ROOT)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"teamflow: refused: config.json of {TEAM} refused:") and "color" in line
    [kept] = mirror.team_dir(TEAM).glob("config.json.bad-*")
    assert kept.read_bytes() == edited and kept.name in line
    assert on_file() == members()  # written again from the database
    assert json.loads(mirror.config_path(TEAM).read_text())["members"][1]["color"] != "purple"


def test_a_folder_restored_with_tar_is_taken_in_by_sync(
    db_url: str, home: Path, tmp_path: Path
) -> None:
    research_team()
    archive = tmp_path / "backup.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(mirror.team_dir(TEAM), arcname=f"teams/{TEAM}")
    recipe(ADD_MEMBER)  # a backup taken after the edit...
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(mirror.team_dir(TEAM), arcname=f"teams/{TEAM}")
    shutil.rmtree(mirror.team_dir(TEAM))
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(home)], check=True)  # restored
    assert config_intake.take_in(TEAM).joined == ["worker-2"]
    assert members()["worker-2"] is True


# --- a restored folder taken in by `teamflow team import --replace` --------------------------


def _tar(archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(mirror.team_dir(TEAM), arcname=f"teams/{TEAM}")


def _inbox_texts(name: str) -> list[str]:
    from models import inbox

    return [m.text for m in inbox.messages(TEAM, name)]


def test_a_folder_restored_with_tar_is_taken_in_by_team_import_replace(
    db_url: str, home: Path, tmp_path: Path
) -> None:
    from models import inbox
    from models.task import create_task, get_task

    research_team()
    recipe(ADD_MEMBER)  # taken in on the next write
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="Start with the west region")
    archive = tmp_path / f"{TEAM}-20260216.tar.gz"
    _tar(archive)  # the seed's backup
    kept = {name: _inbox_texts(name) for name in members()}  # worker-2: not taken in yet
    task = create_task(TEAM, title="Q4 sales", assignees=["analyst-1"])
    teams.update_settings(TEAM, {"concurrency": 3})
    membership.add_member(TEAM, "analyst-3", model="opus", prompt="You are analyst 3.")
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="After the backup")
    shutil.rmtree(mirror.team_dir(TEAM))
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(home)], check=True)  # the seed's

    result = teamflow(["team", "import", str(mirror.team_dir(TEAM)), "--replace"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"replaced team {TEAM}"
    assert members() == {
        "coordinator": True, "analyst-1": True, "analyst-2": True, "worker-2": True,
    }  # fmt: skip
    assert {name: _inbox_texts(name) for name in members()} == {**kept, "worker-2": []}
    assert on_file() == members()
    assert sorted(p.name for p in mirror.inbox_dir(TEAM).glob("*.json")) == [
        "analyst-1.json", "analyst-2.json", "coordinator.json", "worker-2.json",
    ]  # fmt: skip
    on_disk = json.loads((mirror.inbox_dir(TEAM) / "analyst-1.json").read_text())
    assert [e["text"] for e in on_disk] == kept["analyst-1"]
    assert get_task(task.id).title == "Q4 sales"  # the team's other records stay
    with session_scope() as s:
        team = teams.get_team(TEAM, session=s)
        assert (team.lead, team.settings) == ("coordinator", {"concurrency": 3})
    again = teamflow(["team", "import", str(mirror.team_dir(TEAM))], cwd=ROOT)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"teamflow: error: team '{TEAM}' exists already (import with --replace to replace it)"
    )


def _files() -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in mirror.team_dir(TEAM).rglob("*") if p.is_file())


def test_import_replace_refuses_a_bad_folder_in_one_line_and_writes_nothing(
    db_url: str, home: Path, tmp_path: Path
) -> None:
    research_team()
    folder = tmp_path / TEAM
    shutil.copytree(mirror.team_dir(TEAM), folder)
    config = json.loads((folder / "config.json").read_text())
    config["members"][1]["color"] = "purple"
    (folder / "config.json").write_text(json.dumps(config))
    before = members(), _files()
    result = teamflow(["team", "import", str(folder), "--replace"], cwd=ROOT)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"teamflow: error: {folder}/config.json: members[1].color"), line
    assert (members(), _files()) == before


def test_import_replace_asks_consent_for_a_foreign_program(
    db_url: str, home: Path, tmp_path: Path
) -> None:
    research_team()
    marker = tmp_path / "ran"
    folder = tmp_path / TEAM
    shutil.copytree(mirror.team_dir(TEAM), folder)
    config = json.loads((folder / "config.json").read_text())
    foreign = {"kind": "command", "argv": ["sh", "-c", f"touch {marker}"]}
    config["members"][1].setdefault("metadata", {})["runtime"] = foreign
    (folder / "config.json").write_text(json.dumps(config))

    def runtime() -> dict:
        with session_scope() as s:
            return teams.get_member(TEAM, "analyst-1", session=s).runtime or {}

    result = teamflow(["team", "import", str(folder), "--replace"], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert f"teamflow: warning: analyst-1 runs: sh -c 'touch {marker}'" in result.stderr
    assert "--trust-runtimes" in result.stderr
    assert runtime() == {}  # imported without it
    trusted = teamflow(["team", "import", str(folder), "--replace", "--trust-runtimes"], cwd=ROOT)
    assert trusted.returncode == 0 and "runs:" not in trusted.stderr
    assert runtime() == foreign
    # The database holds that runtime now: the same folder again needs no new word.
    same = teamflow(["team", "import", str(folder), "--replace"], cwd=ROOT)
    assert same.returncode == 0 and "runs:" not in same.stderr and runtime() == foreign
    assert not marker.exists()  # imported, never run
