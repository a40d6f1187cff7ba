"""Putting a new version of a file in place when others write it too, and losing nothing.

What the inbox files (`models.inbox_files.refresh_file`) are written with:

- `snapshot`: the file at a path now, held open, so its bytes are read from that very file
  even if another writer moves a new one over the path meanwhile.
- `swap_in`: a new version swapped in with `renameat2(RENAME_EXCHANGE)`, which hands back
  the file it replaced (so a file an outside writer moved in after the read is not lost).
- `append_to_spare`: an append in O(entries), written into the spare copy (the version
  before the current one, which no reader has open) and swapped in whole.
- `keep_as_spare`, `set_aside`: what becomes of the file a swap took out.

Where files cannot be exchanged, a new version is renamed over the path instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.mirror import (
    FILE_MODE,
    FileState,
    array_bytes,
    ensure_dir,
    entry_block,
    write_all,
    write_atomic,
)


class Snapshot:
    """One version of a file, held open: its stat, and its bytes when asked for.

    Read through the open descriptor, so the bytes are those of the inode `stat` names even
    if another writer moves a new file over the path meanwhile.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.stat = os.fstat(fd)
        self._data: bytes | None = None
        self.error: str | None = None

    def same_file(self, other: os.stat_result | None) -> bool:
        return other is not None and FileState.of(self.stat).matches(other)

    def read(self, cap: int | None = None) -> bytes | None:
        """The file's bytes; None (and `error` says why) if it is larger than `cap`."""
        from models import limits

        if self._data is not None or self.error is not None:
            return self._data
        cap = limits.MAX_JSON_BYTES if cap is None else cap
        chunks, size = [], 0
        while size <= cap:
            chunk = os.pread(self.fd, cap + 1 - size, size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > cap:
            self.error = f"{self.path}: larger than teamflow's limit of {cap} bytes"
            return None
        self._data = b"".join(chunks)
        return self._data


@contextlib.contextmanager
def snapshot(path: Path) -> Iterator[Snapshot | None]:
    """The file at `path` now, held open (None if there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        yield None
        return
    try:
        yield Snapshot(path, fd)
    finally:
        os.close(fd)


# --- swapping a new version in ------------------------------------------------------------

AT_FDCWD = -100
RENAME_EXCHANGE = 2
_renameat2: Any = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swaps the files at `a` and `b` (`renameat2(RENAME_EXCHANGE)`).

    False where the system or the file system cannot (then nothing happened);
    `FileNotFoundError` if `b` does not exist.
    """
    global _renameat2
    if _renameat2 is None:
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _renameat2 = libc.renameat2
            _renameat2.argtypes = [
                ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint,
            ]  # fmt: skip
            _renameat2.restype = ctypes.c_int
        except (OSError, AttributeError):
            _renameat2 = False
    if _renameat2 is False:
        return False
    import ctypes
    import errno

    if _renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


@dataclass
class Swapped:
    """The outcome of `swap_in`.

    `written`: the new file is at the path (its `stat`). `old`: where the file that was at
    the path just before now is (a temp name beside it; the caller removes or keeps it),
    with `old_stat`; None if there was none.
    """

    written: bool
    stat: os.stat_result
    old: Path | None
    old_stat: os.stat_result | None


def swap_in(path: Path, data: bytes) -> Swapped:
    """Writes `data` to a temp file beside `path` and puts it at `path`, never clobbering.

    Unlike a plain rename, the file that was at `path` is not destroyed: it is handed back
    (`Swapped.old`), so a caller can see whether it is the version it read or one that an
    unlocked outside writer moved there after, and take that one in. With
    `renameat2(RENAME_EXCHANGE)` the path always holds a whole file; where that is not
    supported the old file is moved aside first and the new one linked in without
    replacing anything (a reader may then briefly find no file; if another file appears in
    that moment the new one is not put in: `written` is False and the caller tries again).
    """
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            stat = os.fstat(f.fileno())
        try:
            if _exchange(tmp, path):
                return Swapped(True, stat, tmp, os.lstat(tmp))
        except FileNotFoundError:
            pass  # no file at `path`: link ours in below
        aside = None
        if path.exists():
            aside = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.old")
            with contextlib.suppress(FileNotFoundError):
                os.rename(path, aside)
        old_stat = os.lstat(aside) if aside is not None and aside.exists() else None
        old = aside if old_stat is not None else None
        try:
            os.link(tmp, path)
        except FileExistsError:
            tmp.unlink()
            return Swapped(False, stat, old, old_stat)
        tmp.unlink()
        return Swapped(True, stat, old, old_stat)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def spare_path(path: Path) -> Path:
    """`.{name}.spare`: the version of `path` before the current one, kept to append to."""
    return path.with_name(f".{path.name}.spare")


def append_to_spare(path: Path, spare: FileState, entries: list[dict]) -> Swapped | None:
    """Appends `entries` to the spare copy of `path` in place and swaps it in: O(entries).

    None (and nothing at `path` changed) where that cannot be done safely; the caller then
    writes the whole file (`swap_in`). Why readers never see a partial array:

    - The file at `path` is never changed in place. Readers that take no lock (the `004`
      jq recipes) open the path and read to the end in several reads; a file changed under
      them could be read half old, half new (on Linux a buffered read is not even atomic
      against one write, and jq reads in chunks), so an in-place append at the path itself
      is not safe for them however it is written.
    - Instead, teamflow keeps the version before the current one as `.{name}.spare` (the
      file the last swap took out). To append, it opens the spare and takes a write lease
      on it (`fcntl(F_SETLEASE, F_WRLCK)`), which the kernel grants only while no other
      process has the file open: a reader still reading that older version makes it fail,
      and teamflow writes the whole file instead. While the lease is held, anyone opening
      the spare waits until it is released (no signal is sent to teamflow: owner 0).
    - The spare gets the entries it lacks written over its closing `]` (it is one or more
      versions behind; its `FileState` says which), is fsynced, the lease released, and
      it is swapped with the file at the path (`renameat2(RENAME_EXCHANGE)`): readers see
      the old whole file or the new whole file, never a mix. The file swapped out becomes
      the spare, as in `swap_in`, so outside writers are detected the same way.
    - A crash while the spare is written leaves the path's file whole and fsynced; the
      spare no longer matches its recorded state and is not used again.
    """
    sp = spare_path(path)
    try:
        fd = os.open(sp, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        stat = os.fstat(fd)
        if not spare.matches(stat):
            return None
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError:
            return None  # open elsewhere (a reader of that version), or no leases here
        try:
            fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
            size = stat.st_size
            if size == 3 and os.pread(fd, 3, 0) == b"[]\n":
                data, offset = array_bytes(entries), 0
            elif os.pread(fd, 2, 0) == b"[\n" and os.pread(fd, 3, size - 3) == b"\n]\n":
                blocks = b",\n".join(entry_block(e) for e in entries)
                data, offset = b",\n" + blocks + b"\n]\n", size - 3
            else:
                return None
            write_all(fd, data, offset)
            os.fsync(fd)
            stat = os.fstat(fd)
        finally:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)
    try:
        if not _exchange(sp, path):
            return None
    except FileNotFoundError:
        return None  # nothing at the path: the caller writes it whole
    return Swapped(True, stat, sp, os.lstat(sp))


def keep_as_spare(path: Path, old: Path) -> bool:
    """Keeps `old` (what a swap took out of `path`) as the spare copy of `path`.

    Not where files cannot be exchanged (the spare could not be swapped in): `old` is
    removed and False returned.
    """
    if _renameat2 is False:
        old.unlink()
        with contextlib.suppress(FileNotFoundError):
            spare_path(path).unlink()
        return False
    if old != spare_path(path):
        os.replace(old, spare_path(path))
    return True


def set_aside(path: Path, old: Path | None, data: bytes | None) -> Path:
    """Keeps a file teamflow could not read as `{path}.bad-{time}`: `old` (the file itself,
    renamed) if given, else `data` (the bytes that were read from it)."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    bad = path.with_name(f"{path.name}.bad-{stamp}-{uuid.uuid4().hex[:6]}")
    if old is not None:
        os.rename(old, bad)
    else:
        write_atomic(bad, data or b"")
    return bad
