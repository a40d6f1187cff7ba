"""Waiting for a decision inside a flow run: pushed, suspended when long, resumed by event.

A flow run that needs someone's decision (a lead's on a plan, on a member's tool calls or
budget, or an outside agent's answer) waits here, and the waits behave the same whatever is
decided:

- **In process, pushed.** The run pauses with a form (a Prefect `RunInput`, shown on the
  paused run in the Prefect UI) and hears its resume on Prefect's event stream at once, not
  at a poll (`flows.run_watch`: every run waiting in this process shares one subscription
  and one batched read every `TEAMFLOW_PAUSE_POLL_SECONDS`, the read a fallback for a lost
  event). It also asks `decided()` every `TEAMFLOW_PAUSE_CHECK_SECONDS` (default 2), which
  costs Prefect nothing and catches a decision whose resume did not get through. A wait
  outlives a restart of the Prefect server.
- **Suspended when long.** A run started from a deployment waits in process for
  `TEAMFLOW_SUSPEND_AFTER_SECONDS` (default 60), then suspends: its worker is free and its
  state lives in Prefect's database only. A resume reschedules it; a worker runs the flow
  again from the start, each task whose result was persisted returns it, and each wait that
  fired before returns the input it got (a wait's key is the same in every run of the flow).
- **Timeouts.** A wait ends with None at `until`; the caller then applies its timeout
  policy. A suspended run holds no process to notice its deadline: teamflow's clock in every
  worker (`flows.timers`) applies the policy and resumes the run (`resume_suspended`), and
  reconciles suspended runs whose decision was recorded while Prefect was away
  (`resume_decided`).

How to use it, in a flow (the `plan-approval` flow, `flows/plan_approval.py`, is one):

    attempt = 0
    while not await decided():  # the decision lives in teamflow's database
        if due is not None and utcnow() >= due:
            await apply_my_timeout_policy(...)  # a task: runs once across resumes
            continue
        attempt += 1
        answer = await wait_for_decision(
            "tool call", call_id, MyDecision, attempt=attempt, until=due, decided=decided
        )
        if answer is not None:
            await record_my_decision(answer.model_dump(mode="json"), attempt)  # a task

and whoever decides records the decision first, then resumes the run with the form's input
(`prefect.flow_runs.resume_flow_run(run_id, run_input=...)`); a resume that fails is no
loss, since the run finds the decision in the database by itself. The forms' schemas are
saved before a run pauses, so a resume never finds its schema missing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar
from uuid import UUID

import anyio
import orjson
from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.exceptions import Pause, PrefectHTTPStatusError
from prefect.input import RunInput
from prefect.input.run_input import Keyset
from prefect.states import Cancelled, Paused, Running, Suspended
from pydantic import ValidationError

from flows import run_watch
from flows.compat.prefect_client import keyed_for_input, propose_state
from flows.compat.prefect_engine import abort_with_state, leave_suspended, refused_as_repeat
from flows.run_watch import ENDING, unreachable
from models.base import utcnow
from models.settings import get_settings

PREFECT_PAUSE_MARGIN_S = 600
"""Prefect's own pause timeout lies this far past teamflow's, so teamflow always acts first."""
RESUMING_AT_ONCE = 4
"""Requests of `bulk_set_state` under way at once."""
BULK = 50
"""Runs one `bulk_set_state` request reschedules: the most Prefect's server takes."""
PAGE = 200
"""The most runs one Prefect API query returns."""

T = TypeVar("T", bound=RunInput)


async def wait_for_decision(
    kind: str,
    id: str,
    form: type[T],
    *,
    attempt: int = 1,
    until: datetime | None = None,
    decided: Callable[[], Awaitable[bool]] | None = None,
    suspend_after: float | None = None,
) -> T | None:
    """Waits, in the current flow run, for a decision on the `kind` `id` (e.g. "plan",
    its request id), given with `form`; returns the form's input, or None.

    None means: `until` passed, `decided()` said the wait is over (the decision is in the
    database already), or the run was resumed without input (teamflow's clock, after the
    timeout policy acted). The caller then looks at why, and waits again if it must.

    `attempt` counts the caller's waits, 1 first: each wait is keyed `{id}-{attempt}`, the
    same when a resumed run runs the flow again. A run from a deployment waits its first
    attempt in process for at most `suspend_after` seconds (default
    `TEAMFLOW_SUSPEND_AFTER_SECONDS`, 60), and suspends for the later ones; a run that cannot
    suspend (no deployment, or a subflow) waits in process, until `until`.
    """
    key = f"{id}-{attempt}"
    what = f"a decision on {kind} {id}"
    if not can_suspend():
        return await wait_for_input(form, key=key, until=until, check=decided, what=what)
    if attempt > 1:
        # Still undecided after a while in process: let the worker go until a decision
        # (or teamflow's clock, at the deadline) resumes the run.
        return await suspend_for_input(form, key=key, until=until, what=what)
    if suspend_after is None:
        suspend_after = get_settings().suspend_after_seconds
    soon = utcnow() + timedelta(seconds=suspend_after)
    in_process = soon if until is None else min(until, soon)
    return await wait_for_input(form, key=key, until=in_process, check=decided, what=what)


async def wait_for_input(
    form: type[T],
    *,
    until: datetime | None = None,
    check: Callable[[], Awaitable[bool]] | None = None,
    check_s: float | None = None,
    key: str | None = None,
    what: str = "a decision",
) -> T | None:
    """Pauses the current flow run until it is resumed with `form`'s input; returns it.

    Unlike `prefect.flow_runs.pause_flow_run`, the run hears its resume on Prefect's event
    stream at once (`flows.run_watch`: one subscription and one batched read of every run
    waiting in this process, the read as a fallback for a lost event). The input schema is
    saved before the run pauses, so a resume can never find it missing.

    Returns None, after setting the run Running itself, when `until` passes or `check()`
    says the wait is over (e.g. the decision is in the database already), and None when
    the run was resumed without input: the caller then looks at why.

    `key` names this wait within the run. A run that was suspended and resumed runs its
    flow again from the start; a wait whose key fired before then ends at once, with the
    input it got then (or None).
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("wait_for_input runs inside a flow run")
    logger = get_run_logger()
    run_id = context.flow_run.id
    check_s = check_s or get_settings().pause_check_seconds
    remaining = (until - utcnow()).total_seconds() if until else 7 * 24 * 3600
    pause_key = key or f"teamflow-{uuid.uuid4().hex[:12]}"
    paused: State[Any] = Paused(
        timeout_seconds=int(max(remaining, 0)) + PREFECT_PAUSE_MARGIN_S,
        reschedule=False,
        pause_key=pause_key,
    )
    keyset = keyed_for_input(paused)

    async with get_client() as client, run_watch.waiting(run_id) as waiter:
        await _save_form(client, form, keyset, run_id)
        try:
            state = await propose_state(client, paused, run_id)
        except Pause as refused:
            # A loaded server answered 503 to the pause it had made, and the client's
            # retry of it was refused as a repeat: the run is paused, by this wait.
            state = refused_as_repeat(refused, pause_key)
            if state is None:
                raise
        if state.is_running():  # this wait fired before the run was suspended
            return await _read_input(client, form, keyset, run_id, patience=0)
        if not state.is_paused():
            raise RuntimeError(f"flow run cannot be paused: the server answered {state}")
        waiter.arm(state.timestamp)
        alive_s = get_settings().worker_alive_seconds
        logger.info("Waiting for %s (resume the run with its form, or use the CLI)", what)
        while True:
            if check is not None and await check():
                await _retrying(lambda: _resume_self(client, run_id), logger)
                return None
            if until is not None and utcnow() >= until:
                await _retrying(lambda: _resume_self(client, run_id), logger)
                return None
            step = check_s
            if until is not None:
                step = min(step, max((until - utcnow()).total_seconds(), 0.0))
            began = time.monotonic()
            kind = await waiter.next(step)
            if kind == "RUNNING":
                return await _retrying(lambda: _read_input(client, form, keyset, run_id), logger)
            waited = time.monotonic() - began
            if kind == "CRASHED" and waited < step + alive_s:
                again = await _pause_again(client, run_id, state, logger)
                if again is not None:
                    waiter.rearm(again.timestamp)
                    continue
            if kind in ENDING:
                logger.info("The wait ends: the run became %s (heard after %.1f s)", kind, waited)
                await _abort(client, run_id, kind)


async def suspend_for_input(
    form: type[T], *, key: str, until: datetime | None = None, what: str = "a decision"
) -> T | None:
    """Suspends the current (deployed) flow run until it is resumed; releases its worker.

    The run's process leaves at once (`Pause`); a resume reschedules the run, a worker runs
    the flow again from the start, and completed tasks whose results were persisted are not
    run again. Back at this call, with the same `key`, the suspension has fired before: it
    returns the input the run was resumed with, or None when it was resumed without any
    (teamflow's clock, `flows.timers`, resumes a run so after its timeout policy acted).
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("suspend_for_input runs inside a flow run")
    run_id = context.flow_run.id
    remaining = (until - utcnow()).total_seconds() if until else 7 * 24 * 3600
    suspended: State[Any] = Suspended(
        timeout_seconds=int(max(remaining, 0)) + PREFECT_PAUSE_MARGIN_S, pause_key=key
    )
    keyset = keyed_for_input(suspended)
    async with get_client() as client:
        await _save_form(client, form, keyset, run_id)
        state = await propose_state(client, suspended, run_id)
        if state.is_running():  # resumed: this is the run again, from the start
            return await _read_input(client, form, keyset, run_id, patience=1.0)
        if not state.is_paused():
            raise RuntimeError(f"flow run cannot be suspended: the server answered {state}")
    get_run_logger().info(
        "Suspended until %s (resume the run with its form, or use the CLI); "
        "the worker is free meanwhile",
        what,
    )
    leave_suspended(state)


def can_suspend() -> bool:
    """Whether the current run can suspend: it comes from a deployment, and is no subflow."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    return run is not None and run.deployment_id is not None and run.parent_task_run_id is None


async def _save_form(client: Any, form: type[RunInput], keyset: Any, run_id: Any) -> None:
    """Saves the form's schema for the UI and for resumes; kept if it was saved before."""
    try:
        await form.asave(keyset, flow_run_id=run_id)
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code != 409:
            raise


async def _retrying(call: Callable[[], Awaitable[Any]], logger: Any, every: float = 2.0) -> Any:
    """`call()`, tried again every `every` seconds while the Prefect API is away.

    A paused run outlives a restart of the server: it keeps waiting instead of crashing.
    """
    warned = False
    while True:
        try:
            return await call()
        except Exception as exc:
            if not unreachable(exc):
                raise
            if not warned:
                logger.warning("Prefect API unreachable (%s); trying again", exc)
                warned = True
            await anyio.sleep(every)


async def _read_input(
    client: Any, form: type[T], keyset: Keyset, run_id: Any, patience: float = 5.0
) -> T | None:
    """The input the run was resumed with; None if it was resumed without any.

    The server announces the Running state before the input it stored with it is readable,
    so a missing input is read again for a moment before giving up.
    """
    from prefect.exceptions import ObjectNotFound

    deadline = anyio.current_time() + patience
    delay = 0.01
    while True:
        try:
            value = await client.read_flow_run_input(flow_run_id=run_id, key=keyset["response"])
        except ObjectNotFound:
            value = None
        except PrefectHTTPStatusError as exc:
            if exc.response.status_code != 404:
                raise
            value = None
        if value:
            try:
                return form.model_validate(orjson.loads(value))
            except ValidationError:
                return None  # the server checked it against the schema; be safe anyway
        if anyio.current_time() >= deadline:
            return None
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.25)


async def _abort(client: Any, run_id: Any, kind: str) -> NoReturn:
    """Ends the wait of a run someone cancelled or ended from outside.

    A cancelled run in this process has no worker process to kill, so it finishes its own
    cancellation; `Abort`, carrying the final state, tells the engine to leave it at that.
    """
    if kind == "CANCELLING":
        state = await propose_state(client, Cancelled(message="cancelled while waiting"), run_id)
    else:
        state = (await client.read_flow_run(run_id)).state
    abort_with_state(f"the run became {kind.lower()} while waiting", state)


async def _pause_again(client: Any, run_id: Any, paused: State[Any], logger: Any) -> Any:
    """Pauses again a run marked Crashed while it waits, alive, in this process; returns
    its new Paused state, or None when the run is no longer Crashed.

    Only Prefect's crash automation marks a waiting run Crashed: it heard no heartbeat in
    its window, a loaded server's lag, not a dead process (this one is waiting). The caller
    does this only when its process did not stall past `TEAMFLOW_WORKER_ALIVE_SECONDS`:
    one frozen that long may have been taken for dead and its work resumed elsewhere.
    """
    run = await client.read_flow_run(run_id)
    if run.state is None or not run.state.is_crashed():
        logger.info("Not paused again: the run is %s now", run.state and run.state.type.value)
        return None
    details = paused.state_details
    again: State[Any] = Paused(
        pause_expiration_time=details.pause_timeout,
        reschedule=False,
        pause_key=details.pause_key,
    )
    keyed_for_input(again)  # the same keys: the form, and the input a resume stores
    result = await client.set_flow_run_state(run_id, again, force=True)
    logger.warning(
        "Marked Crashed (%s) while it waits, alive, in this process: paused again",
        run.state.message or "no message",
    )
    return result.state


async def _resume_self(client: Any, run_id: Any) -> None:
    """Takes the run out of its pause when teamflow, not a person, ends the wait."""
    await propose_state(client, Running(), run_id)


# --- resuming suspended runs (teamflow's clock) ----------------------------------------------


async def resume_suspended(run_ids: list[str]) -> int:
    """Reschedules those of `run_ids` that are suspended, as Prefect's resume does but
    without input: each run finds its wait decided and finishes. Returns how many.

    A run waiting in process is left alone: it finds its decision in the database itself.
    Prefect's `bulk_set_state` does it, `BULK` runs a request (the filter keeps to the
    suspended ones), a few requests at once: 250 runs cost 5 requests, not 250 plus reads.
    """
    from flows.compat.prefect_client import bulk_reschedule_suspended

    limiter = anyio.CapacityLimiter(RESUMING_AT_ONCE)
    resumed = 0

    async def some(client: Any, ids: list[UUID]) -> None:
        nonlocal resumed
        async with limiter:
            resumed += await bulk_reschedule_suspended(client, ids, limit=BULK)

    ids = [UUID(r) for r in run_ids]
    async with get_client() as client, anyio.create_task_group() as group:
        for start in range(0, len(ids), BULK):
            group.start_soon(some, client, ids[start : start + BULK])
    return resumed


async def resume_decided(
    flow_names: Iterable[str], decided_runs: Callable[[list[str]], list[str]]
) -> int:
    """Resumes every suspended run of the flows `flow_names` whose wait is decided already:
    `decided_runs(run_ids)` (called in a worker thread) says which those are."""
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateName,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    ids: list[str] = []
    async with get_client() as client:
        while True:  # page by page: every suspended run, not just the first page
            runs = await client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=list(flow_names))),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(name=FlowRunFilterStateName(any_=["Suspended"]))
                ),
                sort=FlowRunSort.ID_DESC,
                limit=PAGE,
                offset=len(ids),
            )
            ids += [str(r.id) for r in runs]
            if len(runs) < PAGE:
                break
    decided = await anyio.to_thread.run_sync(lambda: decided_runs(ids))
    return await resume_suspended(decided) if decided else 0
