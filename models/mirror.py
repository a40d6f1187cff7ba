"""The team files: a live, lossless mirror of the database in the `004` layout.

Under `$TEAMFLOW_HOME`: `teams/{team}/config.json`, `teams/{team}/inboxes/{member}.json`,
`tasks/{team}/{member}/...`. The database is the source of truth; after every change the
files are rewritten atomically (temp file in the same folder, fsync, rename) under an `flock`
on `inboxes/.lock` (or `.lock` beside `config.json`), the lock that cooperating agent-team
tools take, so the `004` jq recipes work on the files and nothing is lost.

Only the mirror host writes them (`TEAMFLOW_MIRROR`, on by default): a process with it off
writes no team file after its commits, and the mirror host's worker writes the files those
commits made stale (`models.mirror_follow`).

An inbox file is brought up to date by appending the entries that came after the last one
written, unless something else changed (a read flag), when it is rewritten whole. An append
costs what the new entries cost, not the inbox's size: they are written in place into the
spare copy `.{member}.json.spare` (the version before the current one, which no reader has
open) and that copy is swapped in whole (`file_swap.append_to_spare` says why readers that take no
lock still never see a partial array). A small
state file beside it (`.{member}.json.state`) records what teamflow last wrote; a file that no
longer matches it was changed by someone else, and those changes (appended messages, read
flags set) are taken into the database before the file is written again.

Writers that take no lock (`jq ... f > f.tmp && mv f.tmp f`) are covered too: a new version
is put in place with `renameat2(RENAME_EXCHANGE)` (`file_swap.swap_in`), which hands back the
file it replaced, so the caller can take in a file moved there after it read (see
`models.inbox_files.refresh_file` for the argument).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.base import check_member_name, check_team_name
from models.settings import get_settings

DIR_MODE = 0o700
FILE_MODE = 0o600


class PathError(ValueError):
    """A name or path that would leave `$TEAMFLOW_HOME`."""


def home() -> Path:
    return get_settings().home


def _inside(path: Path, root: Path) -> Path:
    # Names are validated (no `/`, no leading `.`) before they reach a path, so `path` is
    # below `root` by construction; this guards against a component that is a symlink.
    if os.path.islink(path.parent) or os.path.islink(path):
        raise PathError(f"{path} is a symlink; teamflow does not follow links under its home")
    return path


def team_dir(team: str, root: Path | None = None) -> Path:
    """`teams/{team}`; the name is validated before any path is built."""
    check_team_name(team)
    root = root or home()
    return _inside(root / "teams" / team, root)


def config_path(team: str, root: Path | None = None) -> Path:
    return team_dir(team, root) / "config.json"


def inbox_dir(team: str, root: Path | None = None) -> Path:
    return team_dir(team, root) / "inboxes"


def inbox_path(team: str, member: str, root: Path | None = None) -> Path:
    check_member_name(member)
    return inbox_dir(team, root) / f"{member}.json"


def tasks_dir(team: str, root: Path | None = None) -> Path:
    """`tasks/{team}`."""
    check_team_name(team)
    root = root or home()
    return _inside(root / "tasks" / team, root)


def member_tasks_dir(team: str, member: str, root: Path | None = None) -> Path:
    check_member_name(member)
    return tasks_dir(team, root) / member


def ensure_dir(path: Path) -> Path:
    """Creates `path` and any missing parents, each with mode 0700."""
    if path.is_dir():
        return path
    missing = []
    for parent in (path, *path.parents):
        if parent.exists():
            break
        missing.append(parent)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=DIR_MODE)
        folder.chmod(DIR_MODE)
    return path


@contextlib.contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Holds an exclusive `flock` on `lock_file` (created 0600 if missing)."""
    ensure_dir(lock_file.parent)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> os.stat_result:
    """Writes `data` to `path` atomically: a temp file beside it, fsync, rename."""
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return path.stat()


def dump_json(data: Any) -> bytes:
    """JSON as the `004` examples write it: two-space indent, UTF-8, trailing newline."""
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


_encode = json.JSONEncoder(ensure_ascii=False).encode
"""JSON without indentation, by the C encoder (`indent` makes `json` build a pure-Python
encoder on every call, the largest cost of writing an entry)."""


def entry_block(entry: dict) -> bytes:
    """`entry` as an element of `array_bytes`' array: `json.dumps(entry, indent=2)`, each line
    indented two more spaces (no line of it is blank: strings escape their line breaks).

    Built a member at a time: flat values (every one of an entry teamflow writes but
    `metadata` and extra keys) by the C encoder, the others as `json.dumps` indents them."""
    lines = []
    for key, value in entry.items():
        if not isinstance(key, str):  # JSON would write it as a string: leave that to json
            return (
                ("  " + json.dumps(entry, indent=2, ensure_ascii=False))
                .replace("\n", "\n  ")
                .encode()
            )
        if isinstance(value, (dict, list, tuple)) and value:
            text = json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n    ")
        else:
            text = _encode(value)
        lines.append(f"    {_encode(key)}: {text}")
    if not lines:
        return b"  {}"
    return ("  {\n" + ",\n".join(lines) + "\n  }").encode()


def array_bytes(entries: list[dict]) -> bytes:
    if not entries:
        return b"[]\n"
    return b"[\n" + b",\n".join(entry_block(e) for e in entries) + b"\n]\n"


def append_bytes(old: bytes, entries: list[dict]) -> bytes | None:
    """`old` (an array this module wrote) with `entries` added; None if `old` is not one."""
    if old == b"[]\n":
        return array_bytes(entries)
    if not old.startswith(b"[\n") or not old.endswith(b"\n]\n"):
        return None
    return old[:-3] + b",\n" + b",\n".join(entry_block(e) for e in entries) + b"\n]\n"


# --- what teamflow last wrote --------------------------------------------------------------


@dataclass
class FileState:
    """What teamflow last wrote to a mirrored file, to tell its own writes from others'."""

    size: int
    mtime_ns: int
    ino: int
    seq: int = 0
    version: int = 0
    spare: dict | None = None
    """The spare copy (`spare_path`) as a `FileState` of its own, if there is one."""

    @classmethod
    def of(
        cls, stat: os.stat_result, seq: int = 0, version: int = 0, spare: FileState | None = None
    ) -> FileState:
        kept = None if spare is None else {**spare.__dict__, "spare": None}
        return cls(stat.st_size, stat.st_mtime_ns, stat.st_ino, seq, version, kept)

    def spare_state(self) -> FileState | None:
        return None if not isinstance(self.spare, dict) else FileState(**self.spare)

    def matches(self, stat: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ino) == (
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ino,
        )


STATE_FILE_CAP = 4096  # a state file is a few numbers; anything bigger is not ours


def _state_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.state")


def read_state(path: Path) -> FileState | None:
    try:
        fd = os.open(_state_path(path), os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, STATE_FILE_CAP + 1)  # a regular file reads whole
        finally:
            os.close(fd)
        if len(data) > STATE_FILE_CAP:
            return None
        fields = json.loads(data)
        if fields.pop("check", None) != _checksum(fields):
            return None  # read while being written, or not ours
        return FileState(**fields)
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return None


def write_all(fd: int, data: bytes, offset: int) -> None:
    """Writes all of `data` at `offset` of the open file `fd`."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def write_state(path: Path, state: FileState) -> None:
    # Written in place, under the same lock, not fsynced: a torn or lost state file only
    # costs one full rewrite after checking the file for outside changes (idempotent).
    # Not truncated either: on ext4, truncating a file whose last version is still being
    # written back waits for the disk, and every append would. The new state is written
    # over the old one, padded with spaces to its length (JSON allows them); a reader that
    # takes no lock (`models.inbox_files._written_at`) may read a mix of the two, which its
    # checksum refuses.
    fields = state.__dict__
    data = json.dumps({**fields, "check": _checksum(fields)}).encode()
    fd = os.open(_state_path(path), os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        size = os.fstat(fd).st_size
        write_all(fd, data.ljust(size), 0)
    finally:
        os.close(fd)


def _checksum(fields: dict) -> int:
    import zlib

    return zlib.crc32(json.dumps(fields, sort_keys=True).encode())


def changed_outside(path: Path) -> bool:
    """True if `path` exists and is not what teamflow last wrote there."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    state = read_state(path)
    return state is None or not state.matches(stat)


# --- written after every commit -----------------------------------------------------------

_writers: dict[str, Any] = {}


def register(kind: str, writer: Any) -> None:
    """`writer(key)` brings the files of `kind` (e.g. "inbox") for `key` up to date."""
    _writers[kind] = writer


def writer(kind: str) -> Any:
    """The writer registered for `kind` (`models.mirror_follow` calls it as a commit would)."""
    return _writers[kind]


def mark(kind: str, key: tuple, version: int | None = None, *, session: Any) -> None:
    """Asks for the `kind` files of `key` to be written once `session` commits.

    `version`: the version of the file's content this commit makes (a counter that grows
    with every change); the writer is then called with `version=`, the highest given, and
    may leave a file that is already at it or past it as it is (another process wrote it).
    """
    session.info.setdefault("teamflow_mirror", {}).setdefault(kind, set()).add(key)
    if version is not None:
        versions = session.info.setdefault("teamflow_mirror_versions", {})
        versions[(kind, key)] = max(version, versions.get((kind, key), version))


def _after_commit(session: Any) -> None:
    # Not written yet: SQLAlchemy gives the session's connection back to the pool only after
    # this hook, and a writer reads with a connection of its own. Threads that each held one
    # and waited here for a second emptied the pool (25 team-task runs in one worker: 30 s
    # QueuePool timeouts). The files are written when the transaction has ended.
    pending = session.info.pop("teamflow_mirror", None)
    versions = session.info.pop("teamflow_mirror_versions", {})
    if not pending or not get_settings().mirror:  # not the mirror host: no team files
        return
    committed = session.info.setdefault("teamflow_mirror_committed", {})
    for kind, keys in pending.items():
        committed.setdefault(kind, set()).update(keys)
    done = session.info.setdefault("teamflow_mirror_committed_versions", {})
    for at, version in versions.items():
        done[at] = max(version, done.get(at, version))


def _after_transaction_end(session: Any, transaction: Any) -> None:
    if transaction.parent is not None:  # a savepoint or an inner transaction: not yet
        return
    pending = session.info.pop("teamflow_mirror_committed", None)
    versions = session.info.pop("teamflow_mirror_committed_versions", {})
    if not pending:
        return
    # Configs first: a new member's inbox folder exists before its first message.
    failed: OSError | None = None
    for kind in sorted(pending, key=lambda k: k != "config"):
        for key in sorted(pending[kind]):
            version = versions.get((kind, key))
            try:
                if version is None:
                    _writers[kind](*key)
                else:
                    _writers[kind](*key, version=version)
            except OSError as exc:  # a full disk, a read-only home: the others still go
                failed = failed or FilesNotWritten.of(exc, kind, key)
    if failed is not None:
        raise failed


class FilesNotWritten(OSError):
    """The database took a change but a team file could not be written after it (a full
    disk, a read-only home); one line naming the file. The file is brought up to date by
    the next change written to it."""

    @classmethod
    def of(cls, exc: OSError, kind: str, key: tuple) -> FilesNotWritten:
        # The file the user knows, not the lock or temporary file the error may name.
        if kind == "config":
            path = str(config_path(*key))
        elif kind == "inbox":
            path = str(inbox_dir(key[0]) / f"{key[1]}.json")
        else:
            path = str(exc.filename or team_dir(key[0]))
        why = exc.strerror or str(exc)
        return cls(
            f"saved in the database, but {path} could not be written: {why} "
            "(teamflow writes it again with the next change to it)"
        )


def _after_rollback(session: Any) -> None:
    session.info.pop("teamflow_mirror", None)
    session.info.pop("teamflow_mirror_versions", None)


def install() -> None:
    """Hooks the mirror onto every session's commit (idempotent)."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    if not event.contains(Session, "after_commit", _after_commit):
        event.listen(Session, "after_commit", _after_commit)
        event.listen(Session, "after_transaction_end", _after_transaction_end)
        event.listen(Session, "after_soft_rollback", lambda s, _t: _after_rollback(s))


install()


# --- writing -------------------------------------------------------------------------------


def write_config(team: str, config: dict) -> Path:
    """Writes `teams/{team}/config.json` (and creates `inboxes/`) under the config lock."""
    path = config_path(team)
    ensure_dir(inbox_dir(team))
    with locked(path.with_name(".lock")):
        stat = write_atomic(path, dump_json(config))
        write_state(path, FileState.of(stat))
    return path


def inbox_lock(team: str) -> contextlib.AbstractContextManager[None]:
    """The lock every inbox writer of `team` takes (`inboxes/.lock`)."""
    return locked(inbox_dir(team) / ".lock")


def remove_team_files(team: str) -> None:
    """Deletes `teams/{team}` and `tasks/{team}`."""
    import shutil

    for path in (team_dir(team), tasks_dir(team)):
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
