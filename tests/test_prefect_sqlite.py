"""Prefect's server on SQLite: a transaction that reads, then writes, waits for a writer
instead of failing, writers of the server take turns at a gate instead of polling SQLite's
lock, and events sent again after an outage are not a failed flush (`flows.server`, which
`teamflow up` starts the server with).

The scenario is the one that made Prefect's services log "database is locked" under load
(the automation triggers' `increment_bucket`, the task-run recorder, a run's state
validation) and its API answer 503: transaction A reads, B writes and commits, A writes.
It runs on Prefect's own SQLite configuration and a real database file.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prefect.server.database.configurations import AioSqliteConfiguration

from flows.compat import sqlalchemy_sqlite as gate
from flows.compat.prefect_server import immediate_sqlite_transactions, skip_stored_event_batches
from flows.compat.sqlalchemy_sqlite import write_gate


async def _read_then_write(path: Path) -> list[str]:
    """A reads, B writes and commits meanwhile, then A writes; returns the rows written."""
    config = AioSqliteConfiguration(connection_url=f"sqlite+aiosqlite:///{path}")
    engine = await config.engine()
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE bucket (who TEXT)"))
        b_may_write = asyncio.Event()

        async def b() -> None:
            await b_may_write.wait()
            session = await config.session(engine)
            async with session, config.begin_transaction(session):
                await session.execute(sa.text("INSERT INTO bucket VALUES ('b')"))

        writer = asyncio.create_task(b())
        session = await config.session(engine)
        async with session, config.begin_transaction(session):
            await session.execute(sa.text("SELECT count(*) FROM bucket"))
            begun: list[str] = []  # B's BEGIN, as it goes to SQLite (A has begun already)

            def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
                if statement.startswith("BEGIN"):
                    begun.append(statement)

            sa.event.listen(engine.sync_engine, "before_cursor_execute", before)
            b_may_write.set()
            # B commits (its BEGIN DEFERRED need not wait for A), or it waits for the
            # write lock A holds (its BEGIN IMMEDIATE).
            async with asyncio.timeout(60):  # a bound against a hang, not a measure
                while not (writer.done() or "BEGIN IMMEDIATE" in begun):
                    await asyncio.sleep(0.01)
            await session.execute(sa.text("INSERT INTO bucket VALUES ('a')"))
        await writer
        async with engine.connect() as conn:
            return [row[0] for row in await conn.execute(sa.text("SELECT who FROM bucket"))]
    finally:
        await engine.dispose()


def test_prefects_own_sqlite_transactions_fail_a_read_then_write_at_once(tmp_path: Path) -> None:
    """What Prefect 3.8.8 does by itself: if this stops failing, Prefect has fixed it and
    `flows.server` can go."""
    with pytest.raises(sa.exc.OperationalError, match="database is locked"):
        asyncio.run(_read_then_write(tmp_path / "prefect.db"))


def test_with_flows_server_the_reader_holds_the_write_lock_and_the_other_writer_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = AioSqliteConfiguration.begin_transaction
    monkeypatch.setattr(AioSqliteConfiguration, "begin_transaction", original)  # undone after
    immediate_sqlite_transactions()
    immediate_sqlite_transactions()  # a second call changes nothing
    assert AioSqliteConfiguration.begin_transaction.__wrapped__ is original

    assert asyncio.run(_read_then_write(tmp_path / "prefect.db")) == ["a", "b"]


async def _two_writers(
    path: Path, *, a_ends: str = "commit", b_gives_up: bool = False
) -> list[str]:
    """A writes in a transaction and holds it until B has tried to write (with
    `b_gives_up`, until B has ended); B writes meanwhile (the first of its two writes
    outside a transaction), then again; then A ends (`a_ends`: commit,
    rollback, or its connection invalidated). SQLite's busy timeout is 0: a writer that has
    to wait in SQLite fails at once. Returns the rows written."""
    from sqlalchemy.ext.asyncio import create_async_engine

    turns_asked = 0  # A's write asks the gate for a turn first, B's second
    take = gate._take

    async def counted(conn: int) -> bool:
        nonlocal turns_asked
        turns_asked += 1
        return await take(conn)

    gate._take = counted  # type: ignore[assignment]
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}", connect_args={"timeout": 0})
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("PRAGMA journal_mode = WAL"))
            await conn.execute(sa.text("CREATE TABLE bucket (who TEXT)"))
        a_wrote = asyncio.Event()

        async def b() -> None:
            await a_wrote.wait()
            async with engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await auto.execute(sa.text("INSERT INTO bucket VALUES ('b')"))
            async with engine.begin() as conn:
                await conn.execute(sa.text("INSERT INTO bucket VALUES ('b2')"))

        writer = asyncio.create_task(b())
        async with engine.connect() as conn:
            await conn.execute(sa.text("INSERT INTO bucket VALUES ('a')"))
            a_wrote.set()
            # B has tried to write: it failed (no gate), or it waits at the gate behind A.
            async with asyncio.timeout(60):  # a bound against a hang, not a measure
                while not (writer.done() or (turns_asked >= 2 and not b_gives_up)):
                    await asyncio.sleep(0.01)
            if a_ends == "invalidate":  # as SQLAlchemy ends a connection of a cancelled request
                await conn.invalidate()
            else:
                await (conn.commit() if a_ends == "commit" else conn.rollback())
        await writer
        async with engine.connect() as conn:
            return [row[0] for row in await conn.execute(sa.text("SELECT who FROM bucket"))]
    finally:
        gate._take = take  # type: ignore[assignment]
        await engine.dispose()


@pytest.fixture
def gate_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`write_gate`'s changes to SQLAlchemy's aiosqlite adapter are undone after the test."""
    from sqlalchemy.dialects.sqlite import aiosqlite as adapter

    for cls, names in (
        (adapter.AsyncAdapt_aiosqlite_cursor, ("execute", "executemany")),
        (adapter.AsyncAdapt_aiosqlite_connection, gate.ENDS),
    ):
        for name in names:
            monkeypatch.setattr(cls, name, getattr(cls, name))


def test_without_the_gate_a_writer_that_finds_the_lock_taken_waits_in_sqlite(
    tmp_path: Path,
) -> None:
    """SQLite makes it wait in its busy handler (sleeping, then trying again); with a busy
    timeout of 0 it fails at once, which is how this shows it."""
    with pytest.raises(sa.exc.OperationalError, match="database is locked"):
        asyncio.run(_two_writers(tmp_path / "prefect.db"))


@pytest.mark.usefixtures("gate_undone")
@pytest.mark.parametrize("a_ends", ["commit", "rollback", "invalidate"])
def test_with_the_gate_a_writer_waits_its_turn_and_goes_when_the_transaction_ends(
    tmp_path: Path, a_ends: str
) -> None:
    write_gate()
    write_gate()  # a second call changes nothing
    written = asyncio.run(_two_writers(tmp_path / "prefect.db", a_ends=a_ends))
    assert written == (["a", "b", "b2"] if a_ends == "commit" else ["b", "b2"])
    assert gate._held == {}  # every turn ended: commit, rollback, termination, autocommit


@pytest.mark.usefixtures("gate_undone")
def test_a_writer_that_waited_too_long_for_the_gate_asks_sqlite_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So a writer that the gate's holder itself waits for is never stuck for good: it
    meets SQLite's lock and busy timeout, as without the gate."""
    monkeypatch.setattr(gate, "GATE_WAIT_S", 0.05)
    write_gate()
    with pytest.raises(sa.exc.OperationalError, match="database is locked"):
        asyncio.run(_two_writers(tmp_path / "prefect.db", b_gives_up=True))
    assert gate._held == {}


async def _write_events_again(path: Path) -> list[str]:
    """Writes an event, the same event again (a client resending after an outage), then it
    with a new one, as Prefect's event persister writes them; returns the events stored."""
    from prefect.server.database.orm_models import Base, Event, EventResource
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.server.events.storage.database import write_events
    from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL, temporary_settings

    url = f"sqlite+aiosqlite:///{path}"
    config = AioSqliteConfiguration(connection_url=url)
    engine = await config.engine()

    def event(name: str) -> ReceivedEvent:
        resource = {"prefect.resource.id": f"teamflow.{name}"}
        return ReceivedEvent(
            id=uuid.uuid4(), occurred=datetime.now(UTC), event=name, resource=resource
        )

    first, second = event("first"), event("second")
    try:
        async with engine.begin() as conn:
            tables = [Event.__table__, EventResource.__table__]
            await conn.run_sync(Base.metadata.create_all, tables=tables)
        with temporary_settings({PREFECT_API_DATABASE_CONNECTION_URL: url}):
            for events in ([first], [first], [first, second]):
                session = await config.session(engine)
                async with session, config.begin_transaction(session):
                    await write_events(session, events)
        async with engine.connect() as conn:
            rows = await conn.execute(sa.text("SELECT event FROM events ORDER BY event"))
            return [row[0] for row in rows]
    finally:
        await engine.dispose()


def test_prefects_own_event_writer_fails_on_a_batch_it_has_stored(tmp_path: Path) -> None:
    """Prefect 3.8.8's SQLite event writer inserts an empty row for a batch of events it
    has already; if this stops failing, `skip_stored_event_batches` can go."""
    with pytest.raises(
        sa.exc.IntegrityError, match=r"NOT NULL constraint failed: events\.occurred"
    ):
        asyncio.run(_write_events_again(tmp_path / "prefect.db"))


def test_with_flows_server_events_sent_again_are_skipped_and_new_ones_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.server.events.storage import database

    original = database._write_sqlite_events
    monkeypatch.setattr(database, "_write_sqlite_events", original)  # undone after
    skip_stored_event_batches()
    skip_stored_event_batches()  # a second call changes nothing
    assert database._write_sqlite_events is not original

    assert asyncio.run(_write_events_again(tmp_path / "prefect.db")) == ["first", "second"]


def test_the_log_check_tolerates_only_a_flush_retried_whole(tmp_path: Path) -> None:
    """What `assert_clean_log` lets pass: the task-run recorder's flush that failed on the
    write lock and is retried with nothing dropped, and the late events of a run the test
    deleted (retried, then dropped); any other drop, or any other error, fails."""
    from prefect_server import log_errors

    traceback = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in flush\n'
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n"
    )
    retried = (
        "14:33:56.216 | ERROR   | prefect.server.services.task_run_recorder - "
        "Error flushing 1 events (1 to retry, 0 dropped)\n" + traceback
    )
    dropped = retried.replace("(1 to retry, 0 dropped)", "(0 to retry, 1 dropped)")
    other = "14:33:57.001 | ERROR   | prefect.server - Encountered error\n" + traceback
    fine = "14:33:58.000 | INFO    | prefect.server - all well\n"
    log = tmp_path / "prefect-server.log"

    stopped = retried.replace(
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
        "asyncio.exceptions.CancelledError: Cancelled via cancel scope 7f7fd404e660",
    )
    log.write_text("banner\n" + retried + fine + stopped)
    assert log_errors(log) == []
    log.write_text(retried + dropped + fine)
    assert len(log_errors(log)) == 3 and "1 dropped" in log_errors(log)[0]
    log.write_text(fine + other)
    assert log_errors(log)[0].endswith("Encountered error")

    # A late task-run event of a flow run the test deleted: only for the runs it deleted.
    deleted, kept = "82429a92-85f1-4bd8-ade7-34dfc6a46663", "0a90c619-4515-4dcb-b427-211f51e12681"
    orphaned = retried.replace(
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n",
        "sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) FOREIGN KEY constraint failed\n"
        "[SQL: INSERT INTO task_run (flow_run_id, ...) VALUES (...)]\n"
        f"[parameters: {{'flow_run_id_m0': '{deleted}', 'task_key_m0': 'record_request'}}]\n",
    )
    log.write_text(fine + orphaned)
    assert log_errors(log, {deleted}) == []
    assert log_errors(log, {kept}) and log_errors(log)
    # After 6 attempts the recorder drops it, and its consumer retries and sets it aside.
    given_up = (
        "14:34:10.405 | ERROR   | prefect.server.services.task_run_recorder - Dropping event "
        "01a25335-7c2b-7ce9-88e1-f3a6627c24f2 after 6 failed attempts\n"
        + orphaned.replace("(1 to retry, 0 dropped)", "(0 to retry, 1 dropped)")
        + orphaned.replace(
            "prefect.server.services.task_run_recorder - Error flushing 1 events "
            "(1 to retry, 0 dropped)",
            "prefect.server.utilities.messaging.memory - Failed in consume_loop",
        )
    )
    log.write_text(fine + orphaned + given_up + fine)
    assert log_errors(log, {deleted}) == []
    assert len(log_errors(log, {kept})) == len(log_errors(log)) == 10
    log.write_text(given_up.split("\n", 1)[0] + "\n" + dropped)  # a drop of another cause
    assert len(log_errors(log, {deleted})) == 4
