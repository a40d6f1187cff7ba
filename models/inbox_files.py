"""The inbox files: `inboxes/{member}.json`, the `004` mirror of each inbox, both ways.

After every change to an inbox its file is brought up to date (`refresh_file`, registered
with `models.mirror`), and what others wrote there (new entries, read flags) is first taken
into the database (`take_in`); `sync` does that for every inbox of a team. The file is
written under `inboxes/.lock`, and `refresh_file` says why nothing an outside writer puts
there is lost.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError

from models import db, file_swap, inbox_flags, mirror
from models.base import format_js_timestamp, table_of
from models.db import session_scope
from models.inbox_message import InboxError, InboxMessage, check_text
from models.inbox_table import (
    InboxCounter,
    InboxRow,
    ResultAttributes,
    bump,
    entry_of,
    set_read,
)
from models.limits import LimitError, loads_json, salvage_array
from models.team import list_members
from models.wire_support import error_lines

log = logging.getLogger("teamflow.inbox")

MAX_ROUNDS = 100
"""How often one refresh writes the file again because an outside writer raced it."""


def read_entries(
    path: Path | str, data: bytes | None, error: str | None = None
) -> tuple[list[InboxMessage], list[str]]:
    """The valid entries of an inbox file's bytes, and one line per thing refused.

    Each entry is held to what a send is held to (`InboxMessage`, `check_text`); a refused
    entry does not stop the others. A file that is not JSON gives the whole entries before
    the damage (a truncated file keeps all but its last); `data` None is a file that could
    not be read (`error` says why).
    """
    if data is None:
        return [], [error or f"{path}: could not be read"]
    refused: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [f"{path}: not valid JSON: {exc}"]
    try:
        items = loads_json(text, what=str(path))
    except (LimitError, ValueError) as exc:
        items = salvage_array(text, what=str(path))
        line = str(exc) if isinstance(exc, LimitError) else f"{path}: not valid JSON: {exc}"
        if items:
            line += f" (the {len(items)} entries before it are kept)"
        refused.append(line.splitlines()[0])
    if not isinstance(items, list):
        return [], [f"{path}: an inbox file must be a JSON array"]
    entries: list[InboxMessage] = []
    for i, item in enumerate(items):
        try:
            entry = InboxMessage.model_validate(item)
            check_text(entry.text)
        except ValidationError as exc:
            refused.append(f"{path}: entry {i}: {error_lines(exc)[0]}")
            continue
        except InboxError as exc:
            refused.append(f"{path}: entry {i}: {exc}")
            continue
        entries.append(entry)
    return entries, refused


def refresh_file(
    team: str, member: str, refused: list[str] | None = None, *, version: int | None = None
) -> tuple[int, int]:
    """Brings `inboxes/{member}.json` up to date, first taking in what others wrote there.

    `version`: what the caller needs the file to show (the inbox counter's version after
    its commit); a file that teamflow wrote at that version or a later one is left as it is.

    Returns what was taken in: (messages added, messages marked read). What could not be
    taken in (a file that is not JSON, an invalid or oversized entry) is one line each,
    added to `refused` if given, else logged; such a file is kept beside the inbox as
    `{member}.json.bad-{time}` and the inbox written again from the database, so one bad
    file never makes a send fail, or the next ones.

    An append costs O(new entries): they go into the spare copy, which is swapped in
    (`file_swap.append_to_spare`); the file is written whole only after a change that is no
    append (read flags), an outside change, a repair, or when the spare cannot be used (a
    reader still has it open). Sends from several processes are grouped: each commits its
    row, then waits for the lock; whoever holds it writes every entry committed so far, and
    the others find the file already at their version (or past it) and write nothing.

    Outside writers that do not take `inboxes/.lock` (the `004` jq append recipe: read the
    file, write `f.tmp`, `mv f.tmp f`) lose nothing that teamflow could have seen:

    - Under the lock, teamflow opens the file and keeps it open. If it is not the version
      teamflow last wrote (`.state`: inode, size, mtime), its entries are taken into the
      database first, read through that descriptor.
    - The new version is swapped in with `renameat2(RENAME_EXCHANGE)` (`file_swap.swap_in`,
      or `file_swap.append_to_spare`),
      which hands back the file that was at the path at the moment of the swap instead of
      destroying it. If that is the file read (same inode, size, mtime), nothing came in
      between and it becomes the spare copy. Otherwise an outside writer moved its file in after
      teamflow read: that file is taken in now and the inbox written again (and so on, up
      to `MAX_ROUNDS`; what was taken in last is then written by the next refresh).
    - So every file an outside writer moves in is either swapped out by teamflow (and
      taken in then) or still at the path (taken in by the next refresh, which sees it is
      not teamflow's version). Its entries can only be missed if another unlocked writer
      replaces it first, from a read made before it: outside writers racing each other,
      which no reader can see.
    - The one window the other way: a jq writer reads the file, teamflow swaps its new
      version in, then the jq `mv` puts the older content back. teamflow's new entries are
      then missing from the file but are in the database; the file is not teamflow's
      version any more, so the next refresh (the next send, `teamflow sync`) takes in the
      jq entry and writes the whole inbox from the database again. Once the writers stop,
      one `sync` leaves file and database equal, with every message once.
    """
    path = mirror.inbox_path(team, member)
    taken = [0, 0]

    def take(entries: list[InboxMessage]) -> bool:
        added, marked = take_in(team, member, entries)
        taken[0] += added
        taken[1] += marked
        return bool(added or marked)

    def report(lines: list[str], kept: Path | None) -> None:
        where = f" (the file is kept as {kept.name})" if kept is not None else ""
        for line in lines:
            if refused is not None:
                refused.append(line + where)
            else:
                log.warning("teamflow: %s%s", line, where)

    if version is not None and _written_at(path, version):
        return 0, 0  # without waiting for the lock, which the process writing it holds
    with mirror.inbox_lock(team):
        for _ in range(MAX_ROUNDS):
            with file_swap.snapshot(path) as snap:
                state = mirror.read_state(path)
                ours = snap is not None and state is not None and state.matches(snap.stat)
                mine = state if ours else None  # the state of the file read, when it is ours
                if mine is not None and version is not None and mine.version >= version:
                    break  # what the caller committed is in the file already
                bad: list[str] = []
                if snap is not None and not ours:
                    entries, bad = read_entries(path, snap.read(), snap.error)
                    take(entries)
                with db.engine().connect().execution_options(teamflow_read_only=True) as conn:
                    spare = mine.spare_state() if mine is not None else None
                    # The counter and the entries after the oldest version an append could
                    # start from, in one statement (one snapshot on PostgreSQL too).
                    since = spare.seq if spare is not None else mine.seq if mine is not None else 0
                    found = _counter_and_entries(conn, team, member, since)
                    if found is None:  # the member is gone
                        break
                    (seq, version), fetched = found
                    if mine is not None and (seq, version) == (mine.seq, mine.version):
                        break  # another writer already wrote this version
                    if ours and state and seq == state.seq and version > state.version and not bad:
                        patched = _patch_flags(team, member, path, state, version)
                        if patched:
                            break
                    read = (conn, team, member, since, fetched, seq)
                    swapped = None
                    if spare is not None and _appended_since(spare, seq, version):
                        after = _entries_after(*read, spare.seq)
                        swapped = file_swap.append_to_spare(path, spare, after)
                    if swapped is None:
                        data = None
                        if (
                            mine is not None
                            and snap is not None
                            and _appended_since(mine, seq, version)
                        ):
                            old = snap.read()
                            if old is not None:
                                data = mirror.append_bytes(old, _entries_after(*read, mine.seq))
                        if data is None:
                            data = mirror.array_bytes(_entries_after(*read, 0))
                            log.info("teamflow: inbox file %s written whole", path)
                        swapped = file_swap.swap_in(path, data)
                if snap is not None and snap.same_file(swapped.old_stat):
                    outside = None  # what was swapped out is the file read
                    assert swapped.old is not None and swapped.old_stat is not None, "swapped out"
                    kept = None
                    if bad:
                        report(bad, file_swap.set_aside(path, swapped.old, None))
                    elif (
                        mine is not None and swapped.written
                    ):  # a version teamflow wrote: the new spare
                        if file_swap.keep_as_spare(path, swapped.old):
                            kept = mirror.FileState.of(swapped.old_stat, mine.seq, mine.version)
                    else:
                        swapped.old.unlink()
                else:
                    outside = swapped.old  # moved in by another writer after the read
                    kept = None
                    if bad:
                        data = snap.read() if snap is not None else None
                        report(bad, file_swap.set_aside(path, None, data) if data else None)
                if swapped.written:
                    state = mirror.FileState.of(swapped.stat, seq, version, kept)
                    mirror.write_state(path, state)
                again = not swapped.written
            if outside is not None:
                with file_swap.snapshot(outside) as other:
                    entries, bad = read_entries(path, other.read(), other.error)  # type: ignore[union-attr]  # the file swapped out exists
                again = take(entries) or again
                if bad:
                    report(bad, file_swap.set_aside(path, outside, None))
                else:
                    outside.unlink()
            if not again:
                break
    return taken[0], taken[1]


def _patch_flags(team: str, member: str, path: Path, state: mirror.FileState, version: int) -> bool:
    """Marks read in place what this process's mark-reads since the file's version marked
    (`inbox_flags`); False (nothing changed) where the file must be written whole."""
    rows = inbox_flags.marked(team, member, state.version, version)
    if rows is None:
        return False
    patched = inbox_flags.patch(path, state, rows, version)
    if patched is None:
        return False
    mirror.write_state(path, patched)
    return True


def _written_at(path: Path, version: int) -> bool:
    """True if the file at `path` is one teamflow wrote at `version` or later.

    Safe without the lock: a file at the path is never changed in place, so if the path
    holds the very file the state describes (inode, size, mtime), that file has the state's
    version. A state file read half written does not parse and says nothing.
    """
    state = mirror.read_state(path)
    if state is None or state.version < version:
        return False
    try:
        return state.matches(os.lstat(path))
    except OSError:
        return False


def _appended_since(state: mirror.FileState, seq: int, version: int) -> bool:
    """True if the inbox changed only by appends since the version `state` describes."""
    return seq >= state.seq and version - state.version == seq - state.seq


def _counter_and_entries(
    conn: sa.Connection, team: str, member: str, since: int
) -> tuple[tuple[int, int], list[tuple[int, dict[str, Any]]]] | None:
    """The inbox counter (seq, version) and the entries with `since` < seq <= its seq, each
    as (seq, entry), oldest first; None if the inbox has no counter (its member is gone)."""
    params = {"the_team": team, "the_member": member, "since": since}
    counter = None
    entries = []
    for row in conn.execute(_statement("counter_entries"), params):
        mapping = row._mapping
        counter = (mapping["counter_seq"], mapping["counter_version"])
        if mapping["seq"] is not None:  # None: no entry (an outer join)
            entries.append((mapping["seq"], entry_of(ResultAttributes(mapping))))
    return None if counter is None else (counter, entries)


def _entries_after(
    conn: sa.Connection,
    team: str,
    member: str,
    since: int,
    fetched: list[tuple[int, dict[str, Any]]],
    until: int,
    first: int,
) -> list[dict[str, Any]]:
    """The entries with `first` < seq <= `until`: from `fetched` (those after `since`) if it
    holds them, else read."""
    if first >= since:
        return [entry for seq, entry in fetched if seq > first]
    return _entries(conn, team, member, first, until)


def _entries(
    conn: sa.Connection, team: str, member: str, since: int, until: int
) -> list[dict[str, Any]]:
    """The inbox's entries with `since` < seq <= `until`, oldest first."""
    params = {"team": team, "member": member, "since": since, "until": until}
    rows = conn.execute(_statement("entries"), params)
    return [entry_of(ResultAttributes(row._mapping)) for row in rows]


def _content_key(sender: str, timestamp: Any, text: str) -> tuple[str, str, str]:
    return sender, format_js_timestamp(timestamp), text


def take_in(team: str, member: str, entries: list[InboxMessage]) -> tuple[int, int]:
    """Takes an inbox file's (valid) entries into the database: the new ones, and read flags.

    Returns (messages added, messages marked read). An entry with a `messageId` is the
    message with that id. One without (as Claude Code's team tools write them: `from, text,
    timestamp, read, summary, color`, e.g. when they mark messages read) is the stored
    message with the same sender, timestamp and text, each stored message matched at most
    once; only one that matches none is new. A read flag is only ever set, never cleared.
    """
    added = marked = 0
    with session_scope() as s:
        table = table_of(InboxRow)
        rows = s.execute(
            sa.select(table.c.message_id, table.c.sender, table.c.timestamp, table.c.text,
                      table.c.read)
            .where(table.c.team == team, table.c.recipient == member)
            .order_by(table.c.seq)
        ).all()  # fmt: skip
        known = {r.message_id: r.read for r in rows}
        named = {e.message_id for e in entries if e.message_id}
        by_content: dict[tuple[str, str, str], list[str]] = {}
        for r in rows:
            if r.message_id not in named:
                key = _content_key(r.sender, r.timestamp, r.text)
                by_content.setdefault(key, []).append(r.message_id)
        to_mark: list[str] = []
        for entry in entries:
            message_id = entry.message_id
            if message_id is None:
                same = by_content.get(_content_key(entry.from_, entry.timestamp, entry.text))
                message_id = same.pop(0) if same else None
            if message_id is not None and message_id in known:  # its keys are all ids
                if entry.read and not known[message_id]:
                    to_mark.append(message_id)
                    known[message_id] = True
                continue
            row = InboxRow.from_entry(team, member, entry)
            row.fields_set = None  # written back with its (possibly new) messageId
            row.seq = bump(team, member, appended=True, session=s)
            s.add(row)
            known[row.message_id] = row.read
            added += 1
        if to_mark:
            marked = set_read(team, member, to_mark, session=s)
        s.info.pop("teamflow_mirror", None)  # the caller holds the lock and writes the file
        s.info.pop("teamflow_mirror_versions", None)
        inbox_flags.forget(s)
    return added, marked


def sync(team: str, refused: dict[str, list[str]] | None = None) -> dict[str, tuple[int, int]]:
    """Takes in every inbox file of `team`; returns (added, marked read) per member.

    What could not be taken in is one line each in `refused[member]` (logged if `refused`
    is not given); the rest is taken in (see `refresh_file`).
    """
    report = {}
    for m in list_members(team):
        lines = refused.setdefault(m.name, []) if refused is not None else None
        report[m.name] = refresh_file(team, m.name, lines)
    return report


def _write_inbox(team: str, member: str, version: int | None = None) -> None:
    refresh_file(team, member, version=version)


mirror.register("inbox", _write_inbox)


@functools.cache
def _statement(name: str) -> Any:
    """A statement of the mirror's reads, built once per process: building one anew (and
    computing its cache key) costs more than running it."""
    p = sa.bindparam
    counters = table_of(InboxCounter)
    rows = table_of(InboxRow)
    if name == "counter_entries":
        entry = (
            (rows.c.team == counters.c.team)
            & (rows.c.recipient == counters.c.member)
            & (rows.c.seq > p("since"))
            & (rows.c.seq <= counters.c.seq)
        )
        return (
            sa.select(
                counters.c.seq.label("counter_seq"),
                counters.c.version.label("counter_version"),
                rows,
            )
            .select_from(counters.outerjoin(rows, entry))
            .where((counters.c.team == p("the_team")) & (counters.c.member == p("the_member")))
            .order_by(rows.c.seq)
        )
    if name == "entries":
        return (
            sa.select(rows)
            .where(
                rows.c.team == p("team"),
                rows.c.recipient == p("member"),
                rows.c.seq > p("since"),
                rows.c.seq <= p("until"),
            )
            .order_by(rows.c.seq)
        )
    raise KeyError(name)
