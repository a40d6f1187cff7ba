"""Timers and teamflow's clock: every timer goes off on time, every deadline is acted on.

A `plan-approval` run waiting in process acts on its own deadline (`flows.waits`). A
suspended run holds no process, and a run whose process died holds none either, so every
`teamflow worker` keeps the time as well: it sleeps until the next deadline in teamflow's
database (looking again at least every `poll_s` for new requests), applies the team's
policy to every request that is due (`models.plan_timeout.expire_due`; a conditional update,
so several workers never decide one request twice), and resumes the suspended runs of the
requests it decided, so that they finish (`flows.waits.resume_suspended`). Prefect's own
pause expiry would only fail such runs, and only every 5 s, 200 paused runs per pass
(`benchmarks/approval.py --deadlines` compares them).

Tool calls that wait for a person (`models.tool_approval`) have deadlines too: the clock
applies their timeout policy and resumes the team-task runs that suspended while their step
waited (`flows.tool_gate`), and the reconciliation resumes those whose calls were decided
while Prefect was away.

The same clock delivers TIMER alerts at their due time (`flows.system_alert.fire_due_timers`,
the delivery the timer's own `system-alert` run also makes, exactly once between them), so a
timer is on time even while Prefect's server is slow to start the timer's run. Timers are
created, paused and cancelled in Prefect by `flows.alerts` (`teamflow alert ...`).

Every `reconcile_s` it also resumes suspended runs whose request was decided while Prefect
could not be reached (`teamflow plan approve` during a server restart records the decision
and says the run will find it), and at once when the worker sees the Prefect API come back
after an outage (`api_back`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio

from flows import waits
from models import alert, plan_timeout
from models.base import utcnow
from models.settings import get_settings

RECONCILE_S = 15.0
"""How often suspended runs are matched against decisions made without resuming them."""
BULK = waits.BULK
"""Requests decided in one transaction: the runs one request resumes (`waits.BULK`)."""

logger = logging.getLogger("teamflow.timers")

_api_back = threading.Event()


def api_back() -> None:
    """Says the Prefect API is back after an outage: the clock reconciles at its next tick
    (decisions recorded meanwhile reach their suspended runs within about a second)."""
    _api_back.set()


async def keep_time(*, poll_s: float | None = None, reconcile_s: float = RECONCILE_S) -> None:
    """Applies timeout policies at their deadlines and resumes what they decided; forever.

    Resuming runs talks to Prefect and may take seconds for hundreds of runs; it happens
    beside the clock, so the next deadline is never kept waiting for it. One Prefect client
    serves every resume and reconciliation: a client of its own each (three every
    `reconcile_s`) cost an idle worker more CPU than all else it does, an SSL context each.
    """
    from prefect.context import AsyncClientContext

    async with AsyncClientContext.get_or_create():
        await _keep_time(poll_s or get_settings().deadline_poll_seconds, reconcile_s)


async def _keep_time(poll_s: float, reconcile_s: float) -> None:
    send, receive = anyio.create_memory_object_stream[list[str]](max_buffer_size=1000)

    async def resumer() -> None:
        async for request_ids in receive:
            try:
                runs = await anyio.to_thread.run_sync(plan_timeout.decided_with_runs, request_ids)
                await waits.resume_suspended(runs)
            except Exception as exc:  # Prefect is away: the reconciliation catches up
                logger.warning("teamflow clock: resuming %d plan(s): %s", len(request_ids), exc)

    async with anyio.create_task_group() as group:
        group.start_soon(resumer)
        last_reconcile = -reconcile_s
        due = True  # the first round looks at everything
        while True:
            try:
                ticked = due
                if ticked:
                    await tick(committed=lambda ids: anyio.from_thread.run(send.send, ids))
                back = _api_back.is_set()
                if back or anyio.current_time() - last_reconcile >= reconcile_s:
                    _api_back.clear()
                    last_reconcile = anyio.current_time()
                    group.start_soon(_reconcile)
                wait, due = await _until_next(poll_s)
                if ticked and wait == 0:  # a tick acts on all that is due: this one is stuck
                    wait = poll_s  # (a timer whose delivery failed); its own run retries
            except Exception as exc:  # the database is away: try again next round
                logger.warning("teamflow clock: %s", exc)
                wait, due = poll_s, True
            await anyio.sleep(wait)


async def _reconcile() -> None:
    from flows.outside import resume_reported_runs

    try:
        await resume_decided_suspended_runs()
        # A report through MCP resumes its task's run at once; this catches what it missed
        # (Prefect away, or the report came just before the run suspended).
        await resume_reported_runs()
    except Exception as exc:
        logger.warning("teamflow clock: %s", exc)


async def tick(committed: Callable[[list[str]], None] | None = None) -> list[str]:
    """Delivers the due timers, applies the policy of every due request; returns the ids of
    the requests acted on. `committed` hears them batch by batch, once each batch is
    committed, in a worker thread: the clock resumes a batch's runs while it decides the
    next (`expire_due`)."""
    from flows.system_alert import fire_due_timers

    fired = await anyio.to_thread.run_sync(lambda: fire_due_timers())
    if fired:
        logger.info("teamflow clock: %d timer(s) went off: %s", len(fired), fired)
    acted = await anyio.to_thread.run_sync(
        lambda: plan_timeout.expire_due(batch=BULK, committed=committed)
    )
    if acted:
        logger.info("teamflow clock: timeout policy applied to %d plan(s)", len(acted))
    await expire_tool_calls()
    return acted


async def expire_tool_calls() -> int:
    """Applies the timeout policy to tool calls past their deadline and resumes the
    team-task runs that suspended while they waited (`flows.tool_gate`). Returns how many
    runs it resumed."""
    from models import tool_approval

    runs = await anyio.to_thread.run_sync(lambda: tool_approval.expire_due())
    if not runs:
        return 0
    logger.info("teamflow clock: timeout policy applied to tool calls of %d run(s)", len(runs))
    try:
        return await waits.resume_suspended(runs)
    except Exception as exc:  # Prefect is away: the reconciliation catches up
        logger.warning("teamflow clock: resuming %d run(s): %s", len(runs), exc)
        return 0


async def _until_next(poll_s: float) -> tuple[float, bool]:
    """How long the clock sleeps (at most `poll_s`), and whether anything is due when it
    wakes: an idle clock looks in one transaction a round, and ticks only when it must."""

    def next_due() -> Any:
        from models import tool_approval
        from models.db import session_scope

        with session_scope() as s:
            found = (
                plan_timeout.next_due(session=s),
                alert.next_timer_due(session=s),
                tool_approval.next_due(session=s),
            )
        return min((d for d in found if d is not None), default=None)

    due = await anyio.to_thread.run_sync(next_due)
    if due is None:
        return poll_s, False
    seconds = max((due - utcnow()).total_seconds(), 0.0)
    return min(seconds, poll_s), seconds <= poll_s


async def resume_decided_suspended_runs() -> int:
    """Resumes every suspended `plan-approval` run whose request is decided already, and
    every suspended `team-task` run whose held step's tool calls are."""
    from flows.plan_approval import FLOW_NAME
    from flows.team_task import FLOW_NAME as TEAM_TASK
    from models import tool_approval

    plans = await waits.resume_decided([FLOW_NAME], plan_timeout.decided_runs)
    return plans + await waits.resume_decided([TEAM_TASK], tool_approval.decided_runs)
