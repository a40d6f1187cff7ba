"""Read flags patched in place: a mark-read changes only its entries in the inbox file, the
next send appends as any other does, and a reader without a lock only ever sees JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import TEAM, research_team

from models import file_swap, inbox, inbox_files, mirror

pytestmark = pytest.mark.usefixtures("db_url")


def file_entries(path: Path) -> list[dict]:
    return json.loads(path.read_bytes())


def db_entries(member: str = "analyst-1") -> list[dict]:
    return [row.entry_dict() for row in inbox.messages(TEAM, member)]


def whole_writes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "written whole" in r.getMessage()]


def test_mark_read_patches_the_file_in_place_and_the_next_send_appends(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    research_team()
    sent = [inbox.send(TEAM, to="analyst-1", sender="coordinator", text=f"m{i}") for i in range(6)]
    path = mirror.inbox_path(TEAM, "analyst-1")
    inode = path.stat().st_ino
    before = path.read_bytes()
    caplog.set_level("INFO", logger="teamflow.inbox")

    assert inbox.mark_read(TEAM, "analyst-1", [sent[1].message_id, sent[4].message_id]) == 2

    after = path.read_bytes()
    assert path.stat().st_ino == inode  # the same file, changed in place
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(changed) <= 2 * 5  # five bytes per flag, nothing else
    entries = file_entries(path)
    read = {e["messageId"] for e in entries if e["read"]}
    assert sent[1].message_id in read and sent[4].message_id in read
    assert sent[0].message_id not in read
    assert entries == db_entries()

    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="after")
    entries = file_entries(path)
    assert entries == db_entries()
    assert entries[-1]["text"] == "after"
    assert [e["read"] for e in entries if e["messageId"] in read] == [True, True]
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="and again")
    assert file_entries(path) == db_entries()
    assert whole_writes(caplog) == []  # patched, then appended: never written whole


def test_reading_with_mark_read_and_marking_all_patch_in_place(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    research_team()
    for i in range(5):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text=f"m{i}")
    path = mirror.inbox_path(TEAM, "analyst-1")
    inode = path.stat().st_ino
    caplog.set_level("INFO", logger="teamflow.inbox")

    unread = inbox.messages(TEAM, "analyst-1", unread=True, mark_read=True)
    assert len(unread) == 6  # the system prompt and five
    assert path.stat().st_ino == inode
    assert all(e["read"] for e in file_entries(path))
    assert inbox.unread_count(TEAM, "analyst-1") == 0
    assert inbox.messages(TEAM, "analyst-1", unread=True) == []

    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="new")
    inbox.mark_read(TEAM, "analyst-1")
    assert file_entries(path) == db_entries()
    assert [e["read"] for e in file_entries(path)] == [True] * 7
    assert whole_writes(caplog) == []


def test_a_flag_set_by_another_tool_is_taken_in_and_the_rest_still_patched(home: Path) -> None:
    research_team()
    sent = [inbox.send(TEAM, to="analyst-1", sender="coordinator", text=f"m{i}") for i in range(3)]
    path = mirror.inbox_path(TEAM, "analyst-1")
    entries = file_entries(path)
    entries[1]["read"] = True  # as Claude Code's tools mark a message read
    path.write_text(json.dumps(entries, indent=2))
    inbox.mark_read(TEAM, "analyst-1", [sent[2].message_id])
    assert file_entries(path) == db_entries()
    assert [e["read"] for e in file_entries(path)][1:] == [True, False, True]
    assert inbox.unread_count(TEAM, "analyst-1") == 2


def test_a_reader_of_the_spare_makes_the_next_send_write_the_file_whole(home: Path) -> None:
    research_team()
    sent = [inbox.send(TEAM, to="analyst-1", sender="coordinator", text=f"m{i}") for i in range(3)]
    path = mirror.inbox_path(TEAM, "analyst-1")
    spare = file_swap.spare_path(path)
    assert spare.exists()
    with open(spare, "rb"):  # a reader still reading the version before: no lease
        inbox.mark_read(TEAM, "analyst-1", [sent[0].message_id])
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="next")
    assert file_entries(path) == db_entries()
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="then")
    inbox.mark_read(TEAM, "analyst-1", [sent[1].message_id])
    inbox.send(TEAM, to="analyst-1", sender="coordinator", text="last")
    assert file_entries(path) == db_entries()
    inbox_files.sync(TEAM)
    assert file_entries(path) == db_entries()


READER = """
import json, sys
from pathlib import Path
path, ready, stop = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
reads = bad = 0
ready.touch()
while not stop.exists():
    with open(path, "rb") as f:  # no lock, in chunks, as jq reads
        chunks = []
        while chunk := f.read(4096):
            chunks.append(chunk)
    try:
        json.loads(b"".join(chunks))
    except ValueError:
        bad += 1
    reads += 1
print(reads, bad)
"""


@pytest.mark.system  # writer and reader processes racing for seconds
def test_a_reader_without_a_lock_only_ever_reads_valid_json(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    research_team()
    rows = inbox.send_many(
        TEAM,
        [{"to": "analyst-1", "sender": "coordinator", "text": f"m{i} " * 40} for i in range(400)],
    )
    path = mirror.inbox_path(TEAM, "analyst-1")
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), str(ready), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        while not ready.exists() and reader.poll() is None:
            time.sleep(0.01)
        caplog.set_level("INFO", logger="teamflow.inbox")
        for row in rows:
            inbox.mark_read(TEAM, "analyst-1", [row.message_id])
        # Patched in place but for a flag whose `false` a page boundary splits before its
        # `s` (3 in 4096): about 0.3 of these 400 in a file of 48 pages.
        assert len(whole_writes(caplog)) < 10
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    reads, bad = map(int, out.split())
    assert reads > 0
    assert bad == 0
    assert file_entries(path) == db_entries()
