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
This leaves out the events stored already (`skip_stored_event_batches`), as the PostgreSQL
writer does, and writes the rest with Prefect's own writer.

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
crash automation (`flows.pool_setup.ensure_crash_automation`) then sees a run's last heartbeat
without the state change that followed, and tries to mark every finished watchdog run
Crashed: "Action failed: 'Failed to set state: Run is already in terminal state
COMPLETED.'" in the server's log, and an `automation.action.failed` event in the UI, every
watchdog run. `scheduled_states_not_awaited` leaves out `follows` when it names such a
state (the first Scheduled state of a run whose `created_by` is a schedule), which has no
event to wait for.

The patches themselves live in `flows.compat` (`prefect_server`, `sqlalchemy_sqlite`),
each with the versions it was written against and a canary test; `docs/upstream.md` has
what teamflow would report upstream. `teamflow up` starts its server through this module;
arguments are `prefect server`'s.
"""

from __future__ import annotations

import sys

from flows.compat.burner_redis_pubsub import patient_pubsub_reads
from flows.compat.prefect_server import (
    immediate_sqlite_transactions,
    quiet_worker_channel_disconnects,
    scheduled_states_not_awaited,
    skip_stored_event_batches,
    slower_background_checks,
)
from flows.compat.sqlalchemy_sqlite import write_gate
from flows.compat.uvicorn_server import quieter_ticks


def main(argv: list[str] | None = None) -> None:
    """Runs `prefect server ARGV...` (default: this process's arguments)."""
    immediate_sqlite_transactions()
    skip_stored_event_batches()
    write_gate()
    quiet_worker_channel_disconnects()
    scheduled_states_not_awaited()
    slower_background_checks()
    patient_pubsub_reads()
    quieter_ticks()
    from prefect.cli import app

    sys.argv = ["prefect", "server", *(sys.argv[1:] if argv is None else argv)]
    app()


if __name__ == "__main__":
    main()
