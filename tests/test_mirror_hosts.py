"""The team files across machines (issue 36, item 2): one mirror host.

Two hosts share one teamflow database, each with its own `TEAMFLOW_HOME`: the mirror host
(`TEAMFLOW_MIRROR` on, the default) and a worker host (`off`). The test acts as each in
turn (the settings follow the environment). The worker host's commits write no team file
anywhere; the mirror host's catch-up (what its `teamflow worker` runs every
`TEAMFLOW_MIRROR_FOLLOW_SECONDS`) writes them on the mirror host, where a message an
outside tool appended with the `004` jq recipe is taken in once and kept, whatever the
worker host commits meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect_server import teamflow

from models import inbox, membership, mirror
from models.inbox_files import sync
from models.mirror_follow import catch_up
from models.task_status import ExecutionStatus, set_member_status

TEAM = "mirror-team"
OUTSIDE = {
    "from": "coordinator",
    "text": "appended by jq on the mirror host",
    "summary": "from outside",
    "timestamp": "2026-02-16T10:40:00.000Z",
    "color": "yellow",
    "read": False,
    "messageId": "msg-outside-1",
}


def texts(path: Path) -> list[str]:
    return [e["text"] for e in json.loads(path.read_text())]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_one_mirror_host_writes_and_takes_in_the_team_files(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror_home, worker_home = tmp_path / "mirror", tmp_path / "worker"

    @contextlib.contextmanager
    def on(home: Path) -> Iterator[Path]:
        with monkeypatch.context() as m:
            m.setenv("TEAMFLOW_HOME", str(home))
            m.setenv("TEAMFLOW_MIRROR", "on" if home == mirror_home else "off")
            yield home

    with on(worker_home):  # the team is made on a worker host: it writes no file
        membership.create_team(TEAM, description="two hosts", lead="lead")
        membership.add_member(TEAM, "m1", model="haiku", prompt="p")
        inbox.send(TEAM, to="m1", sender="lead", text="from the worker host 1")
    path = mirror.inbox_path(TEAM, "m1", mirror_home)
    with on(mirror_home):
        assert not path.exists()
        catch_up()  # what the mirror host's worker does every few seconds
        assert texts(path)[-1] == "from the worker host 1"
        assert (mirror_home / "teams" / TEAM / "config.json").exists()
        # An outside tool on the mirror host appends with the 004 recipe (no lock).
        recipe = 'jq "$1" "$2" > "$2.tmp" && mv "$2.tmp" "$2"'
        program = ". += [" + json.dumps(OUTSIDE) + "]"
        jq = shutil.which("jq")
        if jq is None:  # the same bytes, written as the recipe would
            entries = json.loads(path.read_text())
            tmp = path.with_name("m1.json.tmp")
            tmp.write_text(json.dumps([*entries, OUTSIDE], indent=2))
            tmp.replace(path)
        else:
            subprocess.run(["sh", "-c", recipe, "sh", program, str(path)], check=True, timeout=60)
    with on(worker_home):  # the worker host goes on: its commits leave the file alone
        inbox.send(TEAM, to="m1", sender="lead", text="from the worker host 2")
        membership.add_member(TEAM, "m2", model="haiku", prompt="p")
        set_member_status(TEAM, "m1", status=ExecutionStatus.RUNNING)
    assert texts(path)[-1] == OUTSIDE["text"]  # nobody overwrote the outside append
    with on(mirror_home):
        catch_up()
        catch_up()
        assert set(sync(TEAM).values()) == {(0, 0)}  # taken in already, once
        on_file = texts(path)
        assert on_file.count(OUTSIDE["text"]) == 1
        assert on_file[-2:] == [OUTSIDE["text"], "from the worker host 2"] or on_file[-2:] == [
            "from the worker host 2",
            OUTSIDE["text"],
        ]
        stored = [m.text for m in inbox.messages(TEAM, "m1")]
        assert stored.count(OUTSIDE["text"]) == 1 and stored == on_file
        config = json.loads((mirror_home / "teams" / TEAM / "config.json").read_text())
        assert [m["name"] for m in config["members"]][-1] == "m2"
        status = mirror.member_tasks_dir(TEAM, "m1", mirror_home) / "task-status.json"
        assert json.loads(status.read_text())["status"] == "running"
        assert catch_up() == []  # current: nothing more to write
    # The worker host wrote no team file at all, and refuses to take any in.
    assert not (worker_home / "teams").exists()
    assert not list(worker_home.rglob("*.json"))
    env = {"TEAMFLOW_DATABASE_URL": db_url, "TEAMFLOW_HOME": str(worker_home),
           "TEAMFLOW_MIRROR": "off"}  # fmt: skip
    refused = teamflow(["sync", TEAM], env)
    assert refused.returncode == 1 and "mirror host" in refused.stderr
