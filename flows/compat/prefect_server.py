"""teamflow's patches of Prefect's server (3.8.8), applied by `flows.server` before it runs
`prefect server start`. Why each one is there: the docstrings, `flows.server`'s docstring,
and `docs/upstream.md`.

Each function is a patch (`flows.compat.PATCHES` lists it with the fingerprints of what it
leans on; `tests/test_compat.py` fails when that changes): re-check it when Prefect moves.
Each is idempotent: a second call changes nothing.
"""

from __future__ import annotations

import functools
from typing import Any


def immediate_sqlite_transactions() -> None:
    """Makes Prefect's SQLite transactions begin IMMEDIATE: they wait for the write lock up
    to the busy timeout instead of failing when another writer committed first.

    Written against Prefect 3.8.8, `AioSqliteConfiguration.begin_transaction`, which begins
    `DEFERRED` unless the caller passes `with_for_update=True`. Without it, a loaded server
    on SQLite answers 503 ("database is locked") and its services log tracebacks. Upstream:
    the symptom is PrefectHQ/prefect#18934 (and #10188); the cause (deferred transactions
    that read, then write) is not reported.
    """
    from prefect.server.database.configurations import AioSqliteConfiguration

    original = AioSqliteConfiguration.begin_transaction
    if getattr(original, "teamflow_immediate", False):
        return

    @functools.wraps(original)
    def begin_transaction(self: Any, session: Any, with_for_update: bool = False) -> Any:
        return original(self, session, with_for_update=True)

    begin_transaction.teamflow_immediate = True  # type: ignore[attr-defined]  # our patch's marker
    AioSqliteConfiguration.begin_transaction = begin_transaction  # type: ignore[method-assign]  # the patch


def skip_stored_event_batches() -> None:
    """Makes Prefect's SQLite event writer leave out events it has stored already, then
    write the rest as Prefect does (its own `_write_sqlite_events`, called as it is).

    Written against Prefect 3.8.8, `prefect.server.events.storage.database`: when every
    event of a batch is stored already (clients send events again after an outage),
    `_write_sqlite_events` inserts an empty row, which fails on `events.occurred`. Without
    it, the persister retries the whole flush five times and drops it, with any new events
    in it. The PostgreSQL writer skips them (`ON CONFLICT DO NOTHING`). Upstream: not
    reported.
    """
    from prefect.server.events.storage import database

    original = database._write_sqlite_events
    if getattr(original, "teamflow_skips_stored", False):
        return
    import sqlalchemy as sa
    from prefect.server.database import provide_database_interface

    @functools.wraps(original)
    async def _write_sqlite_events(session: Any, events: list[Any]) -> None:
        db = provide_database_interface()
        stored: set[Any] = set()
        for batch in database._in_safe_batches(events):  # the batches Prefect's query takes
            ids = {event.id for event in batch}
            found = await session.scalars(sa.select(db.Event.id).where(db.Event.id.in_(ids)))
            stored.update(found.all())
        new = [event for event in events if event.id not in stored]
        if new:  # Prefect 3.8.8 inserts an empty row for a batch without new events
            await original(session, new)  # type: ignore[attr-defined]  # async, typed as sync-compatible

    _write_sqlite_events.teamflow_skips_stored = True  # type: ignore[attr-defined]  # our patch's marker
    database._write_sqlite_events = _write_sqlite_events


def quiet_worker_channel_disconnects() -> None:
    """Makes the server count a worker channel whose worker has gone (starlette's
    `WebSocketDisconnected` while the channel is set up) as a normal disconnect.

    Written against Prefect 3.8.8 (`subscriptions.NORMAL_DISCONNECT_EXCEPTIONS`,
    `WorkerChannelConnection._send_loop`) and starlette 1.10. Without it, a worker that
    leaves around an outage makes the server log "Worker channel setup failed due to a
    transient server error", "Exception in ASGI application" and "Task exception was never
    retrieved". Upstream: not reported.
    """
    from prefect.server.utilities import subscriptions, worker_channel
    from starlette.websockets import WebSocketDisconnected

    if WebSocketDisconnected not in subscriptions.NORMAL_DISCONNECT_EXCEPTIONS:
        subscriptions.NORMAL_DISCONNECT_EXCEPTIONS = (  # type: ignore[assignment]  # one more
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

    _send_loop.teamflow_quiet = True  # type: ignore[attr-defined]  # our patch's marker
    connection._send_loop = _send_loop  # type: ignore[method-assign]  # the patch


BACKGROUND_CHECK_SECONDS = 1.0
"""How often the server's background task worker looks for due tasks (docket: 0.25 s)."""


def slower_background_checks() -> None:
    """Makes the server's background task worker (docket's `Worker`) look for due and new
    tasks every `BACKGROUND_CHECK_SECONDS` instead of every 0.25 s.

    Written against Prefect 3.8.8 (`background_workers.background_worker` makes
    `Worker(docket)` with docket's defaults) and pydocket 0.27.0. Without it, an idle server
    spends about a quarter of its CPU on those checks (an idle bare server measured 1.57%
    of a core, 1.15% with checks every 2 s; `benchmarks/idle.py`). Its background tasks
    (late runs, pause expirations, cancellations, marking queues ready) start up to a
    second later; each perpetual service keeps its own interval. Upstream: not reported.
    """
    from datetime import timedelta

    from prefect.server.api import background_workers

    if getattr(background_workers.Worker, "teamflow_slower", False):
        return
    every = timedelta(seconds=BACKGROUND_CHECK_SECONDS)

    class Worker(background_workers.Worker):
        teamflow_slower = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("minimum_check_interval", every)
            kwargs.setdefault("scheduling_resolution", every)
            super().__init__(*args, **kwargs)

    background_workers.Worker = Worker  # type: ignore[misc]  # the patch


SCHEDULE = "SCHEDULE"
"""`created_by.type` of the runs Prefect's scheduler inserts (`_generate_scheduled_flow_runs`)."""


def _made_by_scheduler(flow_run: Any, initial_state: Any) -> bool:
    """Whether `initial_state` is the first state of a run Prefect's scheduler inserted:
    a state of type SCHEDULED, named "Scheduled", of a run the scheduler created
    (`created_by.type` SCHEDULE) and that never ran. The scheduler inserts such a state
    without an event."""
    from prefect.server.schemas.states import StateType

    if initial_state is None or initial_state.type != StateType.SCHEDULED:
        return False
    created_by = getattr(flow_run, "created_by", None)
    kind = getattr(created_by, "type", None)
    if kind is None and isinstance(created_by, dict):
        kind = created_by.get("type")
    return (
        kind == SCHEDULE
        and initial_state.name == "Scheduled"
        and not getattr(flow_run, "run_count", 0)
    )


def scheduled_states_not_awaited() -> None:
    """Makes the state event that follows the first state of a run made by Prefect's
    scheduler follow nothing, as there is no event to wait for (`_made_by_scheduler`).

    Written against Prefect 3.8.8: the scheduler inserts runs with their Scheduled state
    but emits no event for it (`models.deployments._insert_scheduled_flow_runs`); the next
    state's event names it in `follows`, and the automations service holds such an event
    for up to 15 minutes (`PRECEDING_EVENT_LOOKBACK`). Without it, every state event of a
    scheduled run reaches automations 15 minutes late, and teamflow's crash automation
    tries to mark finished runs Crashed. Upstream: not reported.
    """
    from prefect.server.orchestration import instrumentation_policies as policies

    original = policies.flow_run_state_change_event
    if getattr(original, "teamflow_not_awaited", False):
        return

    @functools.wraps(original)
    async def flow_run_state_change_event(
        *, flow_run: Any, initial_state: Any, **kwargs: Any
    ) -> Any:
        if _made_by_scheduler(flow_run, initial_state):
            kwargs["initial_state_id"] = None  # used for `follows` only
        return await original(flow_run=flow_run, initial_state=initial_state, **kwargs)

    flow_run_state_change_event.teamflow_not_awaited = True  # type: ignore[attr-defined]  # our patch's marker
    policies.flow_run_state_change_event = flow_run_state_change_event  # type: ignore[assignment]  # same call
