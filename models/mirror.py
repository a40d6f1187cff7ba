"""The team files: a live, lossless mirror of the database in the `004` layout.

Under `$TEAMFLOW_HOME`: `teams/{team}/config.json`, `teams/{team}/inboxes/{member}.json`,
`tasks/{team}/{member}/...`. The database is the source of truth; after every change the
files are rewritten atomically (temp file in the same folder, fsync, rename) under an `flock`
on `inboxes/.lock` (or `.lock` beside `config.json`), the lock that cooperating agent-team
tools take, so the `004` jq recipes work on the files and nothing is lost.

An inbox file is brought up to date by appending the entries that came after the last one
written, unless something else changed (a read flag), when it is rewritten whole. A small
state file beside it (`.{member}.json.state`) records what teamflow last wrote; a file that no
longer matches it was changed by someone else, and those changes (appended messages, read
flags set) are taken into the database before the file is written again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.base import check_member_name, check_team_name
from models.db import settings
from models.limits import read_capped

DIR_MODE = 0o700
FILE_MODE = 0o600


class PathError(ValueError):
    """A name or path that would leave `$TEAMFLOW_HOME`."""


def home() -> Path:
    return settings().home


def _inside(path: Path, root: Path) -> Path:
    # Names are validated (no `/`, no leading `.`) before they reach a path, so `path` is
    # below `root` by construction; this guards against a component that is a symlink.
    parent = path.parent
    if parent.is_symlink() or path.is_symlink():
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


def _entry_block(entry: dict) -> bytes:
    return textwrap.indent(json.dumps(entry, indent=2, ensure_ascii=False), "  ").encode()


def _array(entries: list[dict]) -> bytes:
    if not entries:
        return b"[]\n"
    return b"[\n" + b",\n".join(_entry_block(e) for e in entries) + b"\n]\n"


def _append(old: bytes, entries: list[dict]) -> bytes | None:
    """`old` (an array this module wrote) with `entries` added; None if `old` is not one."""
    if old == b"[]\n":
        return _array(entries)
    if not old.startswith(b"[\n") or not old.endswith(b"\n]\n"):
        return None
    return old[:-3] + b",\n" + b",\n".join(_entry_block(e) for e in entries) + b"\n]\n"


# --- what teamflow last wrote --------------------------------------------------------------


@dataclass
class FileState:
    """What teamflow last wrote to a mirrored file, to tell its own writes from others'."""

    size: int
    mtime_ns: int
    ino: int
    seq: int = 0
    version: int = 0

    @classmethod
    def of(cls, stat: os.stat_result, seq: int = 0, version: int = 0) -> FileState:
        return cls(stat.st_size, stat.st_mtime_ns, stat.st_ino, seq, version)

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
        return FileState(**json.loads(read_capped(_state_path(path), STATE_FILE_CAP)))
    except (OSError, ValueError, TypeError, RecursionError):
        return None


def write_state(path: Path, state: FileState) -> None:
    # Written in place, under the same lock, not fsynced: a torn or lost state file only
    # costs one full rewrite after checking the file for outside changes (idempotent).
    fd = os.open(_state_path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(state.__dict__))


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


def mark(session: Any, kind: str, key: tuple) -> None:
    """Asks for the `kind` files of `key` to be written once `session` commits."""
    session.info.setdefault("teamflow_mirror", {}).setdefault(kind, set()).add(key)


def _after_commit(session: Any) -> None:
    pending = session.info.pop("teamflow_mirror", None)
    if not pending:
        return
    # Configs first: a new member's inbox folder exists before its first message.
    for kind in sorted(pending, key=lambda k: k != "config"):
        for key in sorted(pending[kind]):
            _writers[kind](*key)


def _after_rollback(session: Any) -> None:
    session.info.pop("teamflow_mirror", None)


def install() -> None:
    """Hooks the mirror onto every session's commit (idempotent)."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    if not event.contains(Session, "after_commit", _after_commit):
        event.listen(Session, "after_commit", _after_commit)
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


def write_inbox(
    team: str,
    member: str,
    *,
    seq: int,
    version: int,
    appended: list[dict] | None,
    everything: Callable[[], list[dict]],
) -> Path:
    """Writes one inbox file; the caller holds `inbox_lock(team)`.

    `appended` are the entries after the last one written, when only appends happened
    (None otherwise); `everything()` gives the whole inbox when the file must be rewritten.
    """
    path = inbox_path(team, member)
    data = None
    if appended is not None and path.exists():
        data = _append(path.read_bytes(), appended) if appended else path.read_bytes()
    if data is None:
        data = _array(everything())
    stat = write_atomic(path, data)
    write_state(path, FileState.of(stat, seq, version))
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
