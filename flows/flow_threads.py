"""Where `teamflow worker` runs teamflow's flow runs: threads of its own process, each keeping
its event loop and Prefect API clients from one run to the next.

A run that makes its own clients (one async, two sync) pays for three SSL contexts, a CSRF
token and new connections, about 0.1 s of CPU on a small machine; a thread here makes them
once (`api_clients`). A run taken ahead of its time (the worker's prefetch) starts at its
time, never earlier (`run_flow_here`): a TIMER alert must not fire before it is due.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
from prefect.client.schemas.objects import FlowRun
from prefect.flows import Flow
from prefect.logging.loggers import flow_run_logger

from flows.compat.prefect_worker import cache_server_result_storage, run_on_time


@contextlib.asynccontextmanager
async def api_clients() -> AsyncIterator[None]:
    """Prefect's API clients (async and sync), made once for every flow run inside, and the
    server's default result storage asked once in a while (`cache_server_result_storage`).

    Without it, every flow run makes its own: an SSL context each (loading certifi's bundle,
    about 25 ms of CPU here), a CSRF token, new connections.
    """
    from prefect.context import AsyncClientContext, SyncClientContext

    cache_server_result_storage()

    with SyncClientContext.get_or_create():
        async with AsyncClientContext.get_or_create():
            yield


class FlowThreads:
    """The threads teamflow's flow runs run in; each keeps its event loop and API clients.

    A thread runs one flow run at a time, on an event loop it keeps from run to run (what a
    run leaves behind on it is cancelled, as `asyncio.run` would), inside `api_clients()`.
    Threads start as runs need them, up to `size`.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._jobs: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in one of the threads; a running call is waited for, even if cancelled."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._busy += 1
            if self._busy > len(self._threads) and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._serve, name=f"teamflow-runs-{len(self._threads) + 1}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._jobs.put((fn, args, future))
        try:
            with anyio.CancelScope(shield=True):
                return await asyncio.wrap_future(future)
        finally:
            with self._lock:
                self._busy -= 1

    def close(self, timeout: float = 10) -> None:
        """Ends the threads once their runs are over (closing their clients and loops)."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout)

    def _serve(self) -> None:
        with asyncio.Runner() as runner:
            opened = api_clients()
            clients: contextlib.AbstractAsyncContextManager[None] | None = opened
            try:
                runner.run(opened.__aenter__())
            except Exception as exc:  # the server is away: each run makes its own clients
                print(f"teamflow worker: API clients not kept ({exc!r})", flush=True)
                clients = None
            _this_thread.runner = runner
            try:
                while (job := self._jobs.get()) is not None:
                    fn, args, future = job
                    if not future.set_running_or_notify_cancel():
                        continue
                    try:
                        future.set_result(fn(*args))
                    except BaseException as exc:
                        future.set_exception(exc)
            finally:
                _this_thread.runner = None
                if clients is not None:
                    runner.run(clients.__aexit__(None, None, None))


_this_thread = threading.local()


def _run_here(awaitable: Any) -> Any:
    """Runs `awaitable` on this thread's kept event loop (`FlowThreads`), else on a new one."""

    async def main() -> Any:
        return await awaitable

    runner: asyncio.Runner | None = getattr(_this_thread, "runner", None)
    if runner is None:
        return asyncio.run(main())
    try:
        return runner.run(main())
    finally:
        runner.run(_cancel_leftovers())


async def _cancel_leftovers() -> None:
    """Cancels the tasks a run left on the loop, as `asyncio.run` does when it ends."""
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for leftover in leftovers:
        leftover.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)


def _due(flow_run: FlowRun) -> datetime | None:
    """When a run may start: the time of the Scheduled state it was taken in.

    `expected_start_time` stays the first time when a run is scheduled again.
    """
    return flow_run.next_scheduled_start_time or flow_run.expected_start_time


def run_flow_here(flow: Flow[..., Any], flow_run: FlowRun) -> None:
    """Runs one flow run to its end in the calling thread (on its kept event loop, if any);
    `FlowThreads.run(run_flow_here, flow, flow_run)` runs it in one of the threads.

    A run taken ahead of its time (the worker's prefetch) starts at its time, never
    earlier: a TIMER alert must not fire before it is due.
    """
    from prefect.exceptions import Abort, Pause
    from prefect.flow_engine import run_flow

    due = _due(flow_run)
    logger = flow_run_logger(flow_run)
    try:
        if due is not None and flow.isasync and not flow.isgenerator:
            try:
                _run_here(run_on_time(flow, flow_run, due))
            except Exception:  # as `run_flow` reports it
                logger.error("Engine execution exited with unexpected exception", exc_info=True)
                raise
            return
        if due is not None:
            time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        outcome = run_flow(flow, flow_run=flow_run, return_type="state", error_logger=logger)  # type: ignore[arg-type]  # a LoggerAdapter logs as a Logger
        if inspect.isawaitable(outcome):
            _run_here(outcome)
    except (Pause, Abort):
        # Signals, not failures: the run suspended (it runs again when resumed), or the
        # server told it to stop. Its state is set already; in a process it would exit.
        pass
