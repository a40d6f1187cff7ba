"""teamflow's patch of SQLAlchemy's aiosqlite adapter (2.0.58), applied in Prefect's server
by `flows.server`: the server's SQLite writers take turns in its event loop.

The patch (`flows.compat.PATCHES` lists it with the fingerprints of what it leans on;
`tests/test_compat.py` fails when that changes): re-check it when SQLAlchemy moves.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from typing import Any

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
    """Makes the server's SQLite writers take turns in its event loop (FIFO, an
    `asyncio.Lock`), not in SQLite's busy handler.

    A connection takes the gate before a statement that writes (or `BEGIN IMMEDIATE`) and
    keeps it while its transaction lasts: until its commit, rollback, close or termination,
    or at once after a write outside a transaction (it committed itself).

    Written against SQLAlchemy 2.0.58 (`AsyncAdapt_aiosqlite_cursor.execute`/`executemany`
    and `_adapt_connection._connection`, `AsyncAdapt_aiosqlite_connection`'s ends,
    `await_only`), for Prefect 3.8.8's server. Without it, a writer that finds the lock
    taken sleeps in SQLite's busy handler (1, 2, 5, ... up to 100 ms a round) while the
    lock may be free: one `BEGIN IMMEDIATE` measured 1.5 s while each transaction took about
    20 ms. Upstream: not reported (a SQLite property; an option in Prefect's server would
    be the fix, not one in SQLAlchemy).
    """
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

        statement.teamflow_gate = True  # type: ignore[attr-defined]  # our marker
        return statement

    def ending(end: Any) -> Any:
        @functools.wraps(end)
        def ended(self: Any) -> Any:
            try:
                return end(self)
            finally:
                _release(id(self._connection))

        return ended

    cursor.execute = gated(cursor.execute)  # type: ignore[method-assign]  # the patch
    cursor.executemany = gated(cursor.executemany)  # type: ignore[method-assign]  # the patch
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
