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

`teamflow up` starts its server through this module; arguments are `prefect server`'s.
"""

from __future__ import annotations

import functools
import sys
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


def main(argv: list[str] | None = None) -> None:
    """Runs `prefect server ARGV...` (default: this process's arguments)."""
    immediate_sqlite_transactions()
    skip_stored_event_batches()
    from prefect.cli import app

    sys.argv = ["prefect", "server", *(sys.argv[1:] if argv is None else argv)]
    app()


if __name__ == "__main__":
    main()
