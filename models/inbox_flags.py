"""Read flags patched in place: a mark-read changes five bytes per message in the inbox file.

`set_read` records, in its transaction, which messages it marked read (`record`); once that
transaction commits they are kept here, per inbox and counter version, and the refresh that
follows (`models.inbox_files.refresh_file`, in this process) turns each `"read": false` of
those entries into `"read": true ` in the file at the path and in its spare copy (`patch`),
instead of writing the whole file: O(entries marked) and the distance from the file's end
to the oldest of them. Another process's mark-read, an entry it cannot find (one without a
`messageId`), or a flag across a page boundary, leaves `patch` None and the file is written
whole, as before.

Why a reader that takes no lock (the `004` jq recipes, `cat`) never sees invalid JSON:

- Only the five bytes of one flag change at a time, each flag with one `pwrite`; everything
  else in the file stays byte for byte, so however a reader splits its reads (jq reads in
  chunks) every byte outside those five is the same in the old and the new file.
- Within a page, the kernel copies a `pwrite`'s bytes into the page cache in one short copy
  under the page's lock, and a `read` copies a page out in one copy too; the bytes changed
  never span two pages (two copies a reader could see one of): a flag whose `false` crosses
  a page boundary with only its `e` on the next page becomes `"read":  true` (` tru` written
  over `fals`); one crossing it elsewhere makes `patch` refuse, and the file is written
  whole. A read
  racing the copy within those few nanoseconds is the one theoretical window (Linux takes no
  lock for a page-cache read); `true ` and `false` are both valid there, and a mix of them
  would need the reader's copy to interleave with a five-byte store: tested with a reader
  loop (`tests/test_inbox_flags.py`) that never saw one.
- A flag already `true` (set by another tool) is left as it is; the length never changes,
  so the array and every other entry keep their offsets, and the inode, so a reader that
  opened the file before reads the same file to its end.
- The spare copy (the version before, not at the path) is patched the same way under a
  write lease (`fcntl(F_SETLEASE)`), granted only while no one has it open; without the
  lease it is dropped, and the next append writes the file whole once.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from models.mirror import FileState

FLAG = b'"read": false,\n    "messageId": '
"""How `models.mirror.entry_block` writes an unread entry's flag and the key after it."""
OFFSET = len(b'"read": ')
PAGE = mmap.PAGESIZE

_committed: dict[tuple[str, str], dict[int, list[tuple[int, str]]]] = {}
"""Per inbox: its counter version -> the (seq, messageId) that version marked read."""

_INFO = "teamflow_inbox_flags"


def record(session: Any, team: str, member: str, version: int, rows: Iterable[Any]) -> None:
    """Notes, in `session`'s transaction, that `version` of the inbox marked `rows` read."""
    pending = session.info.setdefault(_INFO, {})
    pending[(team, member, version)] = [(r[0], r[1]) for r in rows]


def forget(session: Any) -> None:
    """Drops what `session` noted (its caller writes the file whole)."""
    session.info.pop(_INFO, None)


KEPT = 64
"""Versions kept per inbox: a refresh that finds its file written by another process
already (`refresh_file`'s early return) forgets nothing, so this bounds what is kept."""


def _after_commit(session: Any) -> None:
    for (team, member, version), rows in session.info.pop(_INFO, {}).items():
        known = _committed.setdefault((team, member), {})
        known[version] = rows
        for old in sorted(known)[:-KEPT]:
            del known[old]


def _after_rollback(session: Any) -> None:
    session.info.pop(_INFO, None)


def install() -> None:
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    if not event.contains(Session, "after_commit", _after_commit):
        event.listen(Session, "after_commit", _after_commit)
        event.listen(Session, "after_soft_rollback", lambda s, _t: _after_rollback(s))


install()


def marked(team: str, member: str, since: int, until: int) -> list[tuple[int, str]] | None:
    """What the versions `since` < v <= `until` of an inbox marked read, if every one of them
    was a mark-read committed by this process; None otherwise. Forgets versions <= `until`."""
    known = _committed.get((team, member), {})
    rows: list[tuple[int, str]] | None = []
    for v in range(since + 1, until + 1):
        if v not in known:
            rows = None
            break
        rows.extend(known[v])  # type: ignore[union-attr]
    for v in [v for v in known if v <= until]:
        del known[v]
    if not known:
        _committed.pop((team, member), None)
    return rows


def _offsets(fd: int, size: int, rows: list[tuple[int, str]]) -> list[tuple[int, bytes]] | None:
    """Where each entry of `rows` still unread in the file has its `false`, and the bytes
    that make it `true` there without changing a byte on another page; None if one is not
    found, or no such bytes exist (its `f`, `a` or `l` on one page and `se` on the next: 3
    in 4096 flags). Searched from the end, newest first."""
    if size == 0 or not rows:
        return [] if rows == [] else None
    found = []
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
        end = size
        for _seq, message_id in sorted(rows, reverse=True):
            key = b'"messageId": ' + json.dumps(message_id, ensure_ascii=False).encode()
            at = data.rfind(key, 0, end)
            if at < 0:
                return None
            end = at
            start = at + len(b'"messageId": ') - len(FLAG)
            if data[start : at + len(b'"messageId": ')] != FLAG:
                if b'"read": true' in data[start - 1 : at]:
                    continue  # marked already (by another tool)
                return None
            offset = start + OFFSET
            if offset // PAGE == (offset + 4) // PAGE:
                found.append((offset, b"true "))
            elif (offset + 4) % PAGE == 0:  # only the `e` on the next page: keep it there
                found.append((offset, b" tru"))  # `"read":  true`
            else:
                return None  # across a page boundary: the file is written whole
    return found


def _write(fd: int, offsets: list[tuple[int, bytes]]) -> os.stat_result:
    for offset, value in offsets:
        os.pwrite(fd, value, offset)
    if offsets:
        os.fsync(fd)
    return os.fstat(fd)


def patch(
    path: Path, state: FileState, rows: list[tuple[int, str]], version: int
) -> FileState | None:
    """Marks `rows` read in the file at `path` (teamflow's, as `state` says) and in its spare;
    the new state at `version`, or None (nothing at the path changed) if it cannot be done."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        stat = os.fstat(fd)
        if not state.matches(stat):
            return None
        offsets = _offsets(fd, stat.st_size, rows)
        if offsets is None:
            return None
        spare = _patch_spare(path, state, rows, version)
        stat = _write(fd, offsets)
    finally:
        os.close(fd)
    return FileState.of(stat, state.seq, version, spare)


def _patch_spare(
    path: Path, state: FileState, rows: list[tuple[int, str]], version: int
) -> FileState | None:
    """Patches the spare copy under a write lease; its new state (its version moved on as
    far as the file's), or None (dropped) if it cannot be patched."""
    from models.file_swap import spare_path

    spare = state.spare_state()
    if spare is None:
        return None
    try:
        fd = os.open(spare_path(path), os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        stat = os.fstat(fd)
        if not spare.matches(stat):
            return None
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError:
            return None  # a reader has it open
        try:
            fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
            offsets = _offsets(fd, stat.st_size, [r for r in rows if r[0] <= spare.seq])
            if offsets is None:
                return None
            stat = _write(fd, offsets)
        finally:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)
    return FileState.of(stat, spare.seq, spare.version + version - state.version)
