"""The database: settings, engine, sessions and migrations.

`TEAMFLOW_DATABASE_URL` picks the database; without it teamflow uses SQLite at
`$TEAMFLOW_HOME/teamflow.db` (`TEAMFLOW_HOME` defaults to `~/.teamflow`). SQLite runs in WAL
mode with a busy timeout so several processes can write; PostgreSQL needs only a
`postgresql+psycopg://` URL. The schema is built by Alembic migrations (`teamflow db upgrade`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlmodel import Session

from models.settings import get_settings

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
MIGRATIONS = Path(__file__).parent / "migrations"


class DatabaseError(RuntimeError):
    """The database cannot be reached or is not set up; the message says what to do."""


_engines: dict[str, sa.Engine] = {}


@sa.event.listens_for(Session, "do_orm_execute")
def _autoflush_core_statements(state: sa.orm.ORMExecuteState) -> None:
    # teamflow mixes pending ORM objects with Core statements in one session (an inbox
    # counter is added, then bumped with `UPDATE ... RETURNING`). SQLAlchemy 2.1 autoflushes
    # before a Core statement; 2.0 (pinned: Prefect 3.8.8's scheduler fails on 2.1) only
    # before ORM ones. Flushing here gives 2.1's behaviour on both. Only teamflow's
    # sessions (sqlmodel's `Session`) get it, not Prefect's.
    if not state.is_orm_statement and state.session.autoflush:
        state.session.flush()


def _on_sqlite_connect(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _on_sqlite_begin(conn) -> None:
    # Take the write lock at BEGIN: a deferred transaction that reads and then writes can hit
    # SQLITE_BUSY without waiting for the busy timeout. Connections that only read say so
    # (`execution_options(teamflow_read_only=True)`) and do not queue behind writers.
    if conn.get_execution_options().get("teamflow_read_only"):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


PRIVATE_FILE_MODE = 0o600


def private_sqlite_file(url: str) -> Path | None:
    """Makes the file of a SQLite `url` private (0600) before SQLite opens it.

    A missing file is created empty with mode 0600 (an empty file is an empty database);
    SQLite gives its `-wal` and `-shm` files the database file's mode. Files made
    readable by others before are made private again. Returns the path, None for memory.
    """
    path = sa.make_url(url).database
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
    for each in (file, Path(f"{file}-wal"), Path(f"{file}-shm")):
        with contextlib.suppress(OSError):
            if each.stat().st_uid == os.getuid() and each.stat().st_mode & 0o077:
                each.chmod(PRIVATE_FILE_MODE)
    return file


def make_engine(url: str) -> sa.Engine:
    """A new engine for `url`; SQLite gets WAL, a busy timeout and foreign keys."""
    if url.startswith("sqlite"):
        private_sqlite_file(url)
        engine = sa.create_engine(
            url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        )
        # pysqlite's own transaction handling is switched off so BEGIN IMMEDIATE is ours.
        sa.event.listen(engine, "connect", _on_sqlite_connect)
        sa.event.listen(
            engine,
            "connect",
            lambda dbapi_connection, _r: setattr(dbapi_connection, "isolation_level", None),
        )
        sa.event.listen(engine, "begin", _on_sqlite_begin)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def engine(url: str | None = None) -> sa.Engine:
    """The process-wide engine for `url` (default: the configured database)."""
    url = url or get_settings().database_url
    if url not in _engines:
        _engines[url] = make_engine(url)
    return _engines[url]


def dispose_engines() -> None:
    """Closes every pooled connection (tests, forks)."""
    for eng in _engines.values():
        eng.dispose()
    _engines.clear()


@contextmanager
def session_scope(session: Session | None = None) -> Iterator[Session]:
    """Reuses `session` if given, else opens one that commits on success, rolls back on error."""
    if session is not None:
        yield session
        return
    with Session(engine(), expire_on_commit=False) as new:
        try:
            yield new
        except BaseException:
            new.rollback()
            raise
        # Outside the `try`: an error while committing (or in what runs after the commit,
        # such as the file mirror) must surface as itself, not as a failed rollback.
        new.commit()


def in_transaction(what: str, work: Callable[[Session], T]) -> T:
    """`work(session)` in a transaction of its own, made again from the start while it fails
    with a transient database error (SQLite locked, a PostgreSQL serialization failure or a
    lost connection), for at most `TEAMFLOW_RETRY_SECONDS`.

    A session's transaction is retried whole, never from its middle: `work` must do all of
    its transaction's reads and writes, and nothing outside the database that may not
    happen twice.

    Raises:
        models.retry.GaveUp: Still failing when the time was up (one line).
    """
    from models.retry import retrying

    def attempt() -> T:
        with session_scope() as session:
            return work(session)

    return retrying(what, attempt)


def replace_row(row: Any, key: Any, *, session: Session) -> None:
    """Adds `row`, or copies its fields onto the stored row with primary key `key` (flushed)."""
    stored = session.get(type(row), key)
    if stored is None:
        session.add(row)
    else:
        for name in type(row).model_fields:
            setattr(stored, name, getattr(row, name))
    session.flush()


def alembic_config(url: str | None = None):
    """The Alembic configuration for `url`, with the migrations shipped in this package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option(
        "sqlalchemy.url", (url or get_settings().database_url).replace("%", "%%")
    )
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Applies the migrations up to `revision` (default: the newest)."""
    from alembic import command
    from alembic.util.exc import CommandError

    url = url or get_settings().database_url
    config = alembic_config(url)
    try:
        with engine(url).begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    except CommandError as exc:
        reason = (str(exc).strip().splitlines() or ["?"])[0]
        raise DatabaseError(f"no migration {revision!r} to go to: {reason}") from None
    except sa.exc.OperationalError as exc:
        reason = (str(exc.orig).strip().splitlines() or ["no answer"])[0]
        raise DatabaseError(f"cannot reach the database at {redact(url)}: {reason}") from None


def current_revision(url: str | None = None) -> str | None:
    """The migration the database is at, or None if it has none."""
    from alembic.runtime.migration import MigrationContext

    with engine(url).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def redact(url: str) -> str:
    return sa.make_url(url).render_as_string(hide_password=True)
