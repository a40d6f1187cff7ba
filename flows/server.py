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


def main(argv: list[str] | None = None) -> None:
    """Runs `prefect server ARGV...` (default: this process's arguments)."""
    immediate_sqlite_transactions()
    from prefect.cli import app

    sys.argv = ["prefect", "server", *(sys.argv[1:] if argv is None else argv)]
    app()


if __name__ == "__main__":
    main()
