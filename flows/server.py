"""`python -m flows.server start ...`: Prefect's `prefect server start`, with SQLite write
transactions that wait for the write lock instead of failing.

Prefect 3.8.8 begins its transactions on SQLite with `BEGIN DEFERRED` unless a caller asks
`with_for_update`. Such a transaction reads first and takes the write lock at its first
write; if another connection committed in between, SQLite cannot let it wait (what it read
is stale) and fails it at once with "database is locked", whatever the busy timeout. On a
loaded server that is what the 503s are, and what the services log as tracebacks before
they retry: the automation triggers (`increment_bucket`), the task-run recorder, the
state validation of a run. `BEGIN IMMEDIATE` takes the write lock when the transaction
begins, waiting for it up to the busy timeout (60 s) like any other writer; Prefect already
begins that way where it passes `with_for_update=True`. This begins every transaction so.
Reads outside a transaction (most API reads) are unchanged: they never wait for a writer.

A second defect, of Prefect's SQLite event persister: after an outage, clients send again
events the server had stored already. When every event of a batch is stored already,
`_write_sqlite_events` inserts an empty row, which fails on `events.occurred`; the
persister retries the whole flush five times and drops it, with any new events in it.
This skips such a batch (`skip_stored_event_batches`), as the PostgreSQL writer does.

A third, of waiting on SQLite: a writer that finds the write lock taken sleeps in SQLite's
busy handler, 1 ms, then 2, 5, 10, ... up to 100 ms a round, and tries again; the lock may
have been free for most of that sleep, and under load a writer can lose round after round
(one `BEGIN IMMEDIATE` measured 1.5 s while each transaction took about 20 ms). All of the
server's writers are coroutines of one event loop, so `write_gate` has them take turns
there instead (FIFO, an `asyncio.Lock`): a writer waits for the gate, not in SQLite, and
goes the moment the one before it commits. Writers of other processes still meet SQLite's
lock and busy timeout, as before.

A fourth, of the worker channel (the websocket a worker keeps open to the server): a
worker that goes away while its channel is being set up (as workers do around an outage)
makes starlette raise `WebSocketDisconnected`, which Prefect 3.8.8 does not count among the
normal disconnects (`subscriptions.NORMAL_DISCONNECT_EXCEPTIONS`). The server then logs
errors for a worker that merely left: "Worker channel setup failed due to a transient
server error", "Exception in ASGI application", "Task exception was never retrieved".
`quiet_worker_channel_disconnects` counts it as a normal disconnect.

A fifth, of automations on scheduled runs: Prefect's scheduler inserts the runs of a
schedule with their first state (Scheduled) but emits no event for that state. The event
of the run's next state (Pending) still names it as the event it follows (`follows`: the
two are less than 5 minutes apart), and the automations service holds an event until the
one it follows has arrived, for up to 15 minutes (`PRECEDING_EVENT_LOOKBACK`). So every
state event of a scheduled run (Pending, Running, Completed, ...) reaches the automations
15 minutes late; only its heartbeats, which follow nothing, arrive at once. teamflow's
crash automation (`flows.up.ensure_crash_automation`) then sees a run's last heartbeat
without the state change that followed, and tries to mark every finished watchdog run
Crashed: "Action failed: 'Failed to set state: Run is already in terminal state
COMPLETED.'" in the server's log, and an `automation.action.failed` event in the UI, every
watchdog run. `scheduled_states_not_awaited` leaves out `follows` when it names such a
state, which has no event to wait for.

`teamflow up` starts its server through this module; arguments are `prefect server`'s.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import weakref
from typing import Any


def immediate_sqlite_transactions() -> None:
    """Makes Prefect's SQLite transactions begin IMMEDIATE (see the module's docstring)."""
    from prefect.server.database.configurations import AioSqliteConfiguration

    original = AioSqliteConfiguration.begin_transaction
    if getattr(original, "teamflow_immediate", False):
        return

    @functools.wraps(original)
    def begin_transaction(self: Any, session: Any, with_for_update: bool = False) -> Any:
        return original(self, session, with_for_update=True)

    begin_transaction.teamflow_immediate = True  # type: ignore[attr-defined]
    AioSqliteConfiguration.begin_transaction = begin_transaction  # type: ignore[method-assign]


def skip_stored_event_batches() -> None:
    """Makes Prefect's SQLite event writer skip a batch whose events are all stored already
    (see the module's docstring); otherwise it writes as Prefect 3.8.8 does."""
    from prefect.server.events.storage import database

    if getattr(database._write_sqlite_events, "teamflow_skips_stored", False):
        return
    import sqlalchemy as sa
    from prefect.server.database import db_injector

    @db_injector
    async def _write_sqlite_events(db: Any, session: Any, events: list[Any]) -> None:
        for batch in database._in_safe_batches(events):
            ids = {event.id for event in batch}
            found = await session.scalars(sa.select(db.Event.id).where(db.Event.id.in_(ids)))
            stored = set(found.all())
            new = [event for event in batch if event.id not in stored]
            if not new:
                continue  # Prefect 3.8.8 inserts an empty row here, and fails
            await session.execute(
                db.queries.insert(db.Event).values([event.as_database_row() for event in new])
            )
            resources = [row for event in new for row in event.as_database_resource_rows()]
            if resources:
                await session.execute(db.queries.insert(db.EventResource).values(resources))

    _write_sqlite_events.teamflow_skips_stored = True  # type: ignore[attr-defined]
    database._write_sqlite_events = _write_sqlite_events


def quiet_worker_channel_disconnects() -> None:
    """Makes the server treat a worker channel whose worker has gone as closed, not as an
    error (see the module's docstring)."""
    from prefect.server.utilities import subscriptions, worker_channel
    from starlette.websockets import WebSocketDisconnected

    if WebSocketDisconnected not in subscriptions.NORMAL_DISCONNECT_EXCEPTIONS:
        subscriptions.NORMAL_DISCONNECT_EXCEPTIONS = (
            *subscriptions.NORMAL_DISCONNECT_EXCEPTIONS,
            WebSocketDisconnected,
        )
    connection = worker_channel.WorkerChannelConnection
    send_loop = connection._send_loop
    if getattr(send_loop, "teamflow_quiet", False):
        return

    @functools.wraps(send_loop)
    async def _send_loop(self: Any, ready: Any) -> None:
        try:
            await send_loop(self, ready)
        except subscriptions.NORMAL_DISCONNECT_EXCEPTIONS:
            return  # the worker has gone: the channel ends, as its receiving side does

    _send_loop.teamflow_quiet = True  # type: ignore[attr-defined]
    connection._send_loop = _send_loop  # type: ignore[method-assign]


SCHEDULER_STATE_MESSAGE = "Flow run scheduled"
"""The message of the first state of a run Prefect's scheduler inserts (without an event)."""


def scheduled_states_not_awaited() -> None:
    """Makes the state event that follows the first state of a run made by Prefect's
    scheduler follow nothing, as there is no event to wait for (see the module's docstring)."""
    from prefect.server.orchestration import instrumentation_policies as policies
    from prefect.server.schemas.states import StateType

    original = policies.flow_run_state_change_event
    if getattr(original, "teamflow_not_awaited", False):
        return

    @functools.wraps(original)
    async def flow_run_state_change_event(*, initial_state: Any, **kwargs: Any) -> Any:
        if (
            initial_state is not None
            and initial_state.type == StateType.SCHEDULED
            and initial_state.message == SCHEDULER_STATE_MESSAGE
        ):
            kwargs["initial_state_id"] = None  # used for `follows` only
        return await original(initial_state=initial_state, **kwargs)

    flow_run_state_change_event.teamflow_not_awaited = True  # type: ignore[attr-defined]
    policies.flow_run_state_change_event = flow_run_state_change_event


GATE_WAIT_S = 30.0
"""The longest a writer waits for the gate; then it waits in SQLite (its busy timeout), as
without the gate (so a writer the gate's holder itself waits for is not stuck for good)."""
WRITES = ("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE", "INSERT", "UPDATE", "DELETE", "REPLACE")
ENDS = ("commit", "rollback", "close", "terminate")
"""What ends a connection's turn. `terminate` is how SQLAlchemy ends a connection it
invalidated (a request cancelled mid-transaction): it does not go through `close`."""

_gates: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()
_held: dict[int, asyncio.Lock] = {}
"""The gate each connection holds, by `id` of its aiosqlite connection."""


def write_gate() -> None:
    """Makes the server's SQLite writers take turns in its event loop, not in SQLite's busy
    handler (see the module's docstring).

    A connection takes the gate before a statement that writes (or `BEGIN IMMEDIATE`) and
    keeps it while its transaction lasts: until its commit, rollback, close or termination,
    or at once after a write outside a transaction (it committed itself)."""
    from sqlalchemy.dialects.sqlite import aiosqlite as adapter
    from sqlalchemy.util.concurrency import await_only

    cursor = adapter.AsyncAdapt_aiosqlite_cursor
    connection = adapter.AsyncAdapt_aiosqlite_connection
    if getattr(cursor.execute, "teamflow_gate", False):
        return

    def gated(run: Any) -> Any:
        @functools.wraps(run)
        def statement(self: Any, operation: Any, *args: Any, **kwargs: Any) -> Any:
            conn = self._adapt_connection._connection
            if id(conn) in _held or not operation.lstrip()[:15].upper().startswith(WRITES):
                return run(self, operation, *args, **kwargs)
            took = await_only(_take(id(conn)))
            try:
                return run(self, operation, *args, **kwargs)
            finally:
                if took and not _in_transaction(conn):
                    _release(id(conn))

        statement.teamflow_gate = True  # type: ignore[attr-defined]
        return statement

    def ending(end: Any) -> Any:
        @functools.wraps(end)
        def ended(self: Any) -> Any:
            try:
                return end(self)
            finally:
                _release(id(self._connection))

        return ended

    cursor.execute = gated(cursor.execute)  # type: ignore[method-assign]
    cursor.executemany = gated(cursor.executemany)  # type: ignore[method-assign]
    for name in ENDS:
        setattr(connection, name, ending(getattr(connection, name)))


async def _take(conn: int) -> bool:
    gate = _gates.setdefault(asyncio.get_running_loop(), asyncio.Lock())
    try:
        async with asyncio.timeout(GATE_WAIT_S):
            await gate.acquire()
    except TimeoutError:
        return False
    _held[conn] = gate
    return True


def _release(conn: int) -> None:
    gate = _held.pop(conn, None)
    if gate is not None:
        gate.release()


def _in_transaction(conn: Any) -> bool:
    try:
        return bool(conn.in_transaction)
    except Exception:  # closed
        return False


def main(argv: list[str] | None = None) -> None:
    """Runs `prefect server ARGV...` (default: this process's arguments)."""
    immediate_sqlite_transactions()
    skip_stored_event_batches()
    write_gate()
    quiet_worker_channel_disconnects()
    scheduled_states_not_awaited()
    from prefect.cli import app

    sys.argv = ["prefect", "server", *(sys.argv[1:] if argv is None else argv)]
    app()


if __name__ == "__main__":
    main()
