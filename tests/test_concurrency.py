"""Many processes writing one inbox at once: nothing lost, nothing twice, the file agrees.

Every writer is a real OS process started with the test's `TEAMFLOW_DATABASE_URL` and
`TEAMFLOW_HOME`; they wait at a barrier (a file appearing) so they really contend for the
database and for `inboxes/.lock`. Runs on SQLite and, where configured, on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import forkserver
import pytest
from factories import TEAM, research_team

from models import inbox, inbox_files, inbox_table, mirror

# Many real processes at once, seconds each: end to end, left out of `make test-fast`.
pytestmark = [pytest.mark.usefixtures("db_url"), pytest.mark.system]

RECIPIENT = "analyst-1"
REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 120.0
RUN_TIMEOUT = 900.0

# argv: prefix count barrier. Imports first, then waits at the barrier, then sends.
API_SENDER = f"""
import sys, time
from pathlib import Path
from models import inbox
prefix, count, barrier = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
(barrier / f"ready-{{prefix}}").touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
for i in range(count):
    inbox.send({TEAM!r}, to={RECIPIENT!r}, sender="coordinator", text=f"{{prefix}}-{{i}}")
"""

CLI_SENDER = f"""
import subprocess, sys, time
from pathlib import Path
prefix, count, barrier = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
teamflow = sys.argv[4:]  # `python -m flows.cli`, through the tests' fork server
(barrier / f"ready-{{prefix}}").touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
for i in range(count):
    subprocess.run(
        [*teamflow, "msg", "send", {TEAM!r}, "--to", {RECIPIENT!r},
         "--from", "coordinator", "--text", f"{{prefix}}-{{i}}"],
        check=True, stdout=subprocess.DEVNULL, timeout=120,
    )
"""

# A cooperating agent-team tool: under `flock` on inboxes/.lock it reads the file, adds one
# entry shaped as the 004 "Add new message" jq recipe makes it, writes `inbox.json.tmp` and
# moves it over the file, as `jq '. += [...]' inbox.json > inbox.json.tmp && mv` does.
OUTSIDE_WRITER = f"""
import fcntl, json, os, sys, time, uuid
from datetime import datetime, timezone
from pathlib import Path
from models import mirror
prefix, count, barrier = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
path = mirror.inbox_path({TEAM!r}, {RECIPIENT!r})
lock = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
(barrier / f"ready-{{prefix}}").touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
for i in range(count):
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        entries = json.loads(path.read_text())
        entries += [{{
            "from": "coordinator",
            "text": f"{{prefix}}-{{i}}",
            "summary": "Churn analysis request",
            "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "color": "yellow",
            "read": False,
            "messageId": f"msg-{{uuid.uuid4()}}",
        }}]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(entries, indent=2) + "\\n")
        tmp.replace(path)
        ours = path.stat().st_ino
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
    # Until teamflow has written the file again (it took our entry in), for at most 50 ms.
    waited = time.monotonic() + 0.05
    while time.monotonic() < waited and path.stat().st_ino == ours:
        time.sleep(0.002)
"""

# The `004` "Add new message" recipe as a shell runs it, without any lock against teamflow:
# `jq '. += [{...}]' f > f.tmp && mv f.tmp f`. The two jq writers only take turns with each
# other (their own lock file, not inboxes/.lock): two unlocked outside writers racing each
# other lose each other's entries (both read, both move in) before any reader can see them.
JQ_WRITER = f"""
import fcntl, json, os, subprocess, sys, time, uuid
from datetime import datetime, timezone
from pathlib import Path
from models import mirror
prefix, count, barrier = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
path = mirror.inbox_path({TEAM!r}, {RECIPIENT!r})
lock = os.open(barrier / "jq.lock", os.O_RDWR | os.O_CREAT, 0o600)
recipe = 'jq "$1" "$2" > "$2.tmp" && mv "$2.tmp" "$2"'
(barrier / f"ready-{{prefix}}").touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
for i in range(count):
    entry = {{
        "from": "coordinator",
        "text": f"{{prefix}}-{{i}}",
        "summary": "Churn analysis request",
        "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "color": "yellow",
        "read": False,
        "messageId": f"msg-{{uuid.uuid4()}}",
    }}
    program = ". += [" + json.dumps(entry) + "]"
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        subprocess.run(["sh", "-c", recipe, "sh", program, str(path)], check=True, timeout=120)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
"""


# argv: prefix final barrier. Reads the inbox file as the seed's jq readers do (no lock), in
# small chunks, over and over until it holds `final` entries; every 4th time also `jq
# length`. Writes what it saw to `barrier/{prefix}.json`.
READER = f"""
import json, shutil, subprocess, sys, time
from pathlib import Path
from models import mirror
prefix, final, barrier = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
path = mirror.inbox_path({TEAM!r}, {RECIPIENT!r})
jq = shutil.which("jq")
(barrier / f"ready-{{prefix}}").touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
reads, bad, lengths, n = 0, [], set(), 0
deadline = time.monotonic() + {RUN_TIMEOUT}
while n < final and time.monotonic() < deadline:
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while chunk := f.read(1024):
            chunks.append(chunk)
    data = b"".join(chunks)
    reads += 1
    try:
        n = len(json.loads(data))
        lengths.add(n)
    except ValueError as exc:
        bad.append(f"json.loads: {{exc}} ({{len(data)}} bytes)")
    if jq and reads % 4 == 0:
        out = subprocess.run([jq, "length", str(path)], capture_output=True, text=True)
        if out.returncode != 0 or not out.stdout.strip().isdigit():
            bad.append(f"jq length: {{out.stdout.strip()[:80]}} {{out.stderr.strip()[:200]}}")
        else:
            lengths.add(int(out.stdout))
result = {{"reads": reads, "bad": bad[:10], "failed": len(bad), "lengths": len(lengths)}}
(barrier / f"{{prefix}}.json").write_text(json.dumps(result))
"""

# argv: prefix count barrier. Marks the whole inbox read `count` times, 20 ms apart: each
# is a change that is no append, so the file is written whole.
MARKER = f"""
import sys, time
from pathlib import Path
from models import inbox
prefix, count, barrier = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
(barrier / f"ready-{{prefix}}").touch()
while not (barrier / "go").exists():
    time.sleep(0.002)
for i in range(count):
    inbox.mark_read({TEAM!r}, {RECIPIENT!r})
    time.sleep(0.02)
"""


def run_together(writers: list[tuple[str, str, int]], workdir: Path, *args: str) -> None:
    """Runs each (code, prefix, count) as its own process, released together at a barrier;
    `args` follow the writer's own (prefix, count, barrier) on its command line.

    Fails with the process's stderr if one exits non-zero or outlives the timeout; every
    process still running when this returns or raises is killed, with the commands it ran
    (each writer leads its own process group).
    """
    barrier = workdir / "barrier"
    barrier.mkdir()
    procs: list[tuple[str, forkserver.Process, Path]] = []
    try:
        for code, prefix, count in writers:
            log = workdir / f"{prefix}.stderr"
            with log.open("wb") as err:
                # `python -c CODE ...`, forked from the fork server that has teamflow
                # imported: a writer's imports are not what this measures.
                proc = forkserver.popen(
                    forkserver.TEAMFLOW, forkserver.CODE,
                    [code, prefix, str(count), str(barrier), *args],
                    cwd=REPO,
                    env=os.environ.copy(),  # the test's TEAMFLOW_DATABASE_URL and HOME
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )  # fmt: skip
            procs.append((prefix, proc, log))
        deadline = time.monotonic() + START_TIMEOUT
        while not all((barrier / f"ready-{prefix}").exists() for prefix, _, _ in procs):
            for prefix, proc, log in procs:
                assert proc.poll() is None, f"{prefix} died at start:\n{log.read_text()}"
            assert time.monotonic() < deadline, "writers did not reach the barrier"
            time.sleep(0.01)
        (barrier / "go").touch()
        deadline = time.monotonic() + RUN_TIMEOUT
        for prefix, proc, log in procs:
            code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
            assert code == 0, f"{prefix} exited {code}:\n{log.read_text()}"
    finally:
        for _, proc, _ in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def assert_inbox_consistent(expected: set[str]) -> list[inbox_table.InboxMessageRow]:
    """Each expected text is in the inbox exactly once, `seq` is 1..N, the file equals it."""
    rows = inbox.messages(TEAM, RECIPIENT)
    texts = Counter(r.text for r in rows)
    prefixes = {t.rsplit("-", 1)[0] for t in expected}
    ours = Counter({t: n for t, n in texts.items() if t.rsplit("-", 1)[0] in prefixes})
    assert set(ours) == expected, (
        f"lost {len(expected - set(ours))}, unexpected {len(set(ours) - expected)}"
    )
    assert ours.total() == len(expected), [t for t, n in ours.items() if n > 1][:10]
    assert len({r.message_id for r in rows}) == len(rows)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    path = mirror.inbox_path(TEAM, RECIPIENT)
    assert json.loads(path.read_text(encoding="utf-8")) == [r.entry_dict() for r in rows]
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    return rows


def senders_taking_turns(rows: list[inbox_table.InboxMessageRow]) -> int:
    """How often, in inbox order, a message comes from another process than the one before."""
    prefixes = [r.text.rsplit("-", 1)[0] for r in rows[1:]]  # after the system prompt
    return sum(1 for a, b in pairwise(prefixes) if a != b)


def test_eight_processes_sending_250_messages_each_lose_and_repeat_none(
    home: Path, tmp_path: Path
) -> None:
    """As many messages as `benchmarks/inbox.py` sends from 8 processes (2,000), which
    measures their rate: here only that none is lost or repeated."""
    research_team()
    writers = [(API_SENDER, f"p{n}", 250) for n in range(8)]
    run_together(writers, tmp_path)
    rows = assert_inbox_consistent({f"p{n}-{i}" for n in range(8) for i in range(250)})
    assert len(rows) == 2001  # and the system prompt analyst-1 got when it joined
    assert senders_taking_turns(rows) > 100  # they did run at the same time
    assert inbox.unread_count(TEAM, RECIPIENT) == 2001


def test_four_cli_processes_sending_10_messages_each_lose_and_repeat_none(
    home: Path, tmp_path: Path
) -> None:
    research_team()
    teamflow = forkserver.command(forkserver.TEAMFLOW, "flows.cli", [])
    run_together([(CLI_SENDER, f"c{n}", 10) for n in range(4)], tmp_path, *teamflow)
    rows = assert_inbox_consistent({f"c{n}-{i}" for n in range(4) for i in range(10)})
    assert len(rows) == 41
    assert senders_taking_turns(rows) > 2


def test_an_outside_writer_under_the_lock_and_teamflow_senders_both_keep_every_message(
    home: Path, tmp_path: Path
) -> None:
    research_team()
    writers = [(API_SENDER, f"p{n}", 100) for n in range(4)]
    writers.append((OUTSIDE_WRITER, "out", 50))
    run_together(writers, tmp_path)
    inbox_files.sync(TEAM)
    expected = {f"p{n}-{i}" for n in range(4) for i in range(100)}
    expected |= {f"out-{i}" for i in range(50)}
    rows = assert_inbox_consistent(expected)
    assert len(rows) == 451
    # Taken in as written: the tool's messageIds are kept, and a second sync adds nothing.
    outside = [r for r in rows if r.text.startswith("out-")]
    # They were taken in while teamflow sent, not only by the last sync.
    assert min(r.seq for r in outside) < max(r.seq for r in rows if r.text.startswith("p"))
    assert all(r.message_id.startswith("msg-") and r.summary.startswith("Churn") for r in outside)
    assert inbox_files.sync(TEAM)[RECIPIENT] == (0, 0)


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_unlocked_jq_append_recipe_racing_teamflow_writers_loses_nothing(
    home: Path, tmp_path: Path
) -> None:
    """8 processes sending through teamflow and 2 running the jq recipe with no lock: after
    one `sync`, every message is in the database once and the file holds the same (the
    argument why is in `models.inbox_files.refresh_file`)."""
    research_team()
    writers = [(API_SENDER, f"p{n}", 40) for n in range(8)]
    writers += [(JQ_WRITER, f"jq{n}", 50) for n in range(2)]
    run_together(writers, tmp_path)
    inbox_files.sync(TEAM)
    expected = {f"p{n}-{i}" for n in range(8) for i in range(40)}
    expected |= {f"jq{n}-{i}" for n in range(2) for i in range(50)}
    rows = assert_inbox_consistent(expected)
    assert len(rows) == 421
    path = mirror.inbox_path(TEAM, RECIPIENT)
    leftovers = {p.name for p in path.parent.iterdir() if RECIPIENT in p.name}
    # Nothing set aside or left over; the spare copy (the version before) may be there.
    assert leftovers - {f".{path.name}.spare"} == {path.name, f".{path.name}.state"}
    assert inbox_files.sync(TEAM)[RECIPIENT] == (0, 0)


def test_readers_without_a_lock_see_a_whole_json_array_while_senders_append(
    home: Path, tmp_path: Path
) -> None:
    """Two readers loop over the file (json.loads of a chunked read, and `jq length`) while
    4 processes send and one marks messages read: every read is a valid array."""
    research_team()
    final = 1 + 4 * 150
    writers = [(API_SENDER, f"p{n}", 150) for n in range(4)]
    writers += [(READER, f"reader{n}", final) for n in range(2)]
    writers.append((MARKER, "marker", 10))
    run_together(writers, tmp_path)
    for n in range(2):
        seen = json.loads((tmp_path / "barrier" / f"reader{n}.json").read_text())
        assert seen["failed"] == 0, seen["bad"]
        assert seen["reads"] > 10 and seen["lengths"] > 2, seen  # it read while they wrote
    rows = assert_inbox_consistent({f"p{n}-{i}" for n in range(4) for i in range(150)})
    assert len(rows) == final


def test_metadata_reaches_the_inbox_file_as_it_is_in_the_database(home: Path) -> None:
    # Found while checking file == database here: the mirror built rows from the `metadata`
    # column, whose attribute is `meta`, and dropped it from the file (fixed in aeda332).
    research_team()
    path = mirror.inbox_path(TEAM, RECIPIENT)
    inbox.send(TEAM, to=RECIPIENT, sender="coordinator", text="Q4", metadata={"priority": "high"})
    assert json.loads(path.read_text())[-1]["metadata"] == {"priority": "high"}  # appended
    inbox.mark_read(TEAM, RECIPIENT)
    on_disk = json.loads(path.read_text())  # rewritten whole
    assert on_disk == [r.entry_dict() for r in inbox.messages(TEAM, RECIPIENT)]
