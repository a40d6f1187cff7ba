"""teamflow's worker: a Prefect process worker that runs teamflow's flows in its own process.

Prefect's process worker polls its pool every 10 s and starts a new Python process for each
run, about 3 s more before the run is Running. An agent team hands out many short runs, so
this worker, still of type `process` and pulling from the same `teamflow` pool:

- hears about new runs at once: it subscribes to the server's event stream for
  `prefect.flow-run.Scheduled` events of its pool and polls right away, with a short poll
  as the fallback;
- runs teamflow's own flows (deployment entrypoints under `flows/`) in a thread of this
  long-lived process, where Prefect and teamflow are imported already; any other
  deployment in the pool runs as a subprocess, as the stock process worker runs it;
- keeps each of those threads' event loop and Prefect API clients from one run to the next
  (`FlowThreads`): a run that makes its own clients (one async, two sync) pays for three
  SSL contexts, a CSRF token and new connections, about 0.1 s of CPU on a small machine.

Every worker also keeps teamflow's clock for plan decisions (`flows.timers`): timeout
policies act at their deadlines even for runs that are suspended or died.

A run in this process dies with it. Its heartbeats (`PREFECT_FLOWS_HEARTBEAT_FREQUENCY`)
stop too, and the automation `teamflow up` installs marks it Crashed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import inspect
import os
import queue
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from prefect.client.schemas.objects import FlowRun
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventAnyResourceFilter, EventFilter, EventNameFilter
from prefect.flow_engine import AsyncFlowRunEngine
from prefect.flows import Flow
from prefect.logging.loggers import flow_run_logger
from prefect.workers.process import ProcessJobConfiguration, ProcessWorker, ProcessWorkerResult

from flows.timers import api_back, keep_time

POOL = "teamflow"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIMIT = 8
"""Runs at a time per worker (`--limit`). Two workers of 25 ran 50 agents at once without
an error on SQLite (`benchmarks/agents.py`), since `flows.server` begins the server's
transactions IMMEDIATE; before, the server refused (503) near 50."""
LEAD_SECONDS = 1
"""How early a run due later is taken from the pool (the worker's prefetch, and how long
before a run's time the timer polls): taking it (a poll, its Pending and Submitting states)
takes a few requests, so at its time it only has to start. A whole number: Prefect rounds
it down. Prefect's default, 10 s, would keep a slot (of `DEFAULT_LIMIT`) per timer due in
the next 10 s, and runs due behind them would wait for a slot and the next poll."""
TIMER_IDLE_SECONDS = 60.0
"""How long the timer waits with no future run in sight (a Scheduled event re-arms it)."""


def teamflow_flow(entrypoint: str | None) -> Flow[..., Any] | None:
    """The flow object for a deployment entrypoint of teamflow's own (`flows/x.py:fn`).

    None for any other entrypoint: such runs go to a subprocess as usual.
    """
    if not entrypoint or ":" not in entrypoint:
        return None
    path, _, name = entrypoint.rpartition(":")
    parts = path.replace("\\", "/").removeprefix("./").removesuffix(".py").split("/")
    if len(parts) < 2 or parts[0] != "flows" or not path.endswith(".py"):
        return None
    try:
        module = importlib.import_module(".".join(parts))
    except ImportError:
        return None
    candidate = getattr(module, name, None)
    return candidate if isinstance(candidate, Flow) else None


def warm_up() -> list[str]:
    """Imports the engine and the flows of `prefect.yaml` now: the first run pays for nothing.

    Returns the entrypoints that will run in this process.
    """
    import yaml

    for module in ("prefect.flow_engine", "prefect.task_engine"):
        importlib.import_module(module)

    try:
        config = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    entrypoints = [d.get("entrypoint") for d in config.get("deployments") or []]
    return [e for e in entrypoints if teamflow_flow(e) is not None]


STORAGE_LOOKUP_S = 30.0
"""How long a worker reuses the server's answer on its default result storage."""


def cache_server_result_storage() -> None:
    """Prefect asks the server for its default result storage (`GET /admin/storage`) for
    every flow run and task run that persists a result, the task runs with a blocking
    client on the run's event loop: two requests a team task. This process asks at most
    once every `STORAGE_LOOKUP_S` seconds per API, so a change of the server's default
    reaches its runs within that time.
    """
    from prefect import results
    from prefect.settings import PREFECT_API_URL

    if getattr(results._read_server_default_result_storage_block_id, "teamflow_cached", False):
        return
    read, aread = (
        results._read_server_default_result_storage_block_id,
        results._aread_server_default_result_storage_block_id,
    )
    answers: dict[str, tuple[float, Any]] = {}  # API URL -> (when asked, answer)

    def fresh() -> tuple[str, tuple[float, Any] | None]:
        url = str(PREFECT_API_URL.value())
        hit = answers.get(url)
        return url, hit if hit and time.monotonic() - hit[0] < STORAGE_LOOKUP_S else None

    def cached_read() -> Any:
        url, hit = fresh()
        if hit is None:
            hit = answers[url] = (time.monotonic(), read())
        return hit[1]

    async def cached_aread() -> Any:
        url, hit = fresh()
        if hit is None:
            hit = answers[url] = (time.monotonic(), await aread())
        return hit[1]

    cached_read.teamflow_cached = True  # type: ignore[attr-defined]
    results._read_server_default_result_storage_block_id = cached_read
    results._aread_server_default_result_storage_block_id = cached_aread


DEFINITION_READ_S = 10.0
"""How long a worker reuses a deployment or flow it read: a change reaches it within that."""


def keep_definition_reads(client: Any, seconds: float = DEFINITION_READ_S) -> None:
    """Makes `client` (a worker's) reuse what `read_deployment` and `read_flow` gave for
    `seconds`, as deep copies (Prefect merges a run's job variables into the deployment's).

    Prefect's worker reads a run's deployment twice and its flow once for every run it
    submits, and the server's CPU is what bounds team tasks a second. A deleted deployment
    still takes runs for up to `seconds`.
    """
    for name in ("read_deployment", "read_flow"):
        method = getattr(client, name)
        kept: dict[Any, tuple[float, Any]] = {}

        async def read(key: Any, _method: Any = method, _kept: dict = kept) -> Any:
            hit = _kept.get(key)
            if hit is None or time.monotonic() - hit[0] >= seconds:
                hit = _kept[key] = (time.monotonic(), await _method(key))
            return hit[1].model_copy(deep=True)

        setattr(client, name, read)


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
            clients: contextlib.AbstractAsyncContextManager[None] | None = api_clients()
            try:
                runner.run(clients.__aenter__())
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


def _api_away(exc: BaseException) -> bool:
    """Whether `exc` says the Prefect API cannot be reached for now (no answer, or 5xx)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def _due(flow_run: FlowRun) -> datetime | None:
    """When a run may start: the time of the Scheduled state it was taken in.

    `expected_start_time` stays the first time when a run is scheduled again.
    """
    return flow_run.next_scheduled_start_time or flow_run.expected_start_time


class _OnTimeEngine(AsyncFlowRunEngine):
    """Prefect's engine for async flows, holding a run's move to Running until its time.

    What the engine does before that move (the run's policy and name, two writes) is done
    while the run waits, so at its time one request starts it. Prefect's server would hold
    back an early start only to the nearest second, and then at the client's next try.
    """

    not_before: datetime | None = None

    async def set_state(self, state: Any, force: bool = False) -> Any:
        if state.is_running() and self.not_before is not None:
            wait, self.not_before = (self.not_before - datetime.now(UTC)).total_seconds(), None
            if wait > 0:
                await asyncio.sleep(wait)
        return await super().set_state(state, force)


async def _run_on_time(flow: Flow[..., Any], flow_run: FlowRun, due: datetime) -> Any:
    """`run_flow_async` (Prefect's), on `_OnTimeEngine`: starts the run at `due`, not before."""
    from prefect.flow_engine import _flow_parameters

    engine: _OnTimeEngine = _OnTimeEngine(
        flow=flow, flow_run=flow_run, parameters=_flow_parameters(flow, flow_run, None)
    )
    engine.not_before = due
    async with engine.start():
        while engine.is_running():
            async with engine.run_context():
                await engine.call_flow_fn()
    return engine.state


def _execute(flow: Flow[..., Any], flow_run: FlowRun) -> None:
    """Runs one flow run to its end in the calling thread (on its kept event loop, if any).

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
                _run_here(_run_on_time(flow, flow_run, due))
            except Exception:  # as `run_flow` reports it
                logger.error("Engine execution exited with unexpected exception", exc_info=True)
                raise
            return
        if due is not None:
            time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        outcome = run_flow(flow, flow_run=flow_run, return_type="state", error_logger=logger)
        if inspect.isawaitable(outcome):
            _run_here(outcome)
    except (Pause, Abort):
        # Signals, not failures: the run suspended (it runs again when resumed), or the
        # server told it to stop. Its state is set already; in a process it would exit.
        pass


class TeamflowJobConfiguration(ProcessJobConfiguration):
    """Prefect's process job configuration, its settings' environment made once.

    For every run it submits, Prefect turns every setting into an environment variable
    (`_base_environment`): a fifth of a worker's CPU at 5 team tasks a second, for a value
    that changes only with the settings. It is kept per settings object here.
    """

    @classmethod
    def _base_environment(cls) -> dict[str, str]:
        global _job_environment
        from prefect.settings import get_current_settings

        settings = get_current_settings()
        kept = _job_environment
        if kept is None or kept[0] is not settings:
            kept = _job_environment = (settings, super()._base_environment())
        return dict(kept[1])


_job_environment: tuple[Any, dict[str, str]] | None = None
"""`TeamflowJobConfiguration`'s environment and the settings object it was made from."""


class TeamflowWorker(ProcessWorker):
    """A `process` worker that runs teamflow's flows in-process and hears of runs at once."""

    _description = "Runs teamflow's flows in its own process; other flows as subprocesses."
    job_configuration = TeamflowJobConfiguration

    @classmethod
    def __dispatch_key__(cls) -> str:
        # Registered under its own key: Prefect's `process` worker stays what `process` means.
        return "teamflow"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("limit", DEFAULT_LIMIT)
        kwargs.setdefault("prefetch_seconds", LEAD_SECONDS)
        super().__init__(*args, **kwargs)
        self._timers_changed = anyio.Event()
        self._entrypoints: dict[Any, str | None] = {}
        self.flow_threads = FlowThreads(self._limit or DEFAULT_LIMIT)
        self._away_since: float | None = None
        self._no_retries: tuple[Any, Any] | None = None

    async def run(
        self,
        flow_run: FlowRun,
        configuration: ProcessJobConfiguration,
        task_status: anyio.abc.TaskStatus[int] | None = None,
    ) -> ProcessWorkerResult:
        flow = teamflow_flow(await self._entrypoint(flow_run))
        if flow is None:
            return await super().run(flow_run, configuration, task_status)
        if task_status is not None:
            task_status.started(os.getpid())
        try:
            await self.flow_threads.run(_execute, flow, flow_run)
        except Exception:
            self.get_flow_run_logger(flow_run).exception("teamflow worker: the run broke off")
            return ProcessWorkerResult(status_code=1, identifier=str(os.getpid()))
        return ProcessWorkerResult(status_code=0, identifier=str(os.getpid()))

    async def setup(self) -> None:
        await super().setup()
        keep_definition_reads(self.client)

    async def get_and_submit_flow_runs(self) -> list[FlowRun]:
        """Prefect's poll, riding out an outage of the Prefect API (see `_while_away`)."""
        return await self._while_away(super().get_and_submit_flow_runs(), [])

    async def _sync_and_initialize(self) -> None:
        """Prefect's heartbeat and sync, riding out an outage of the Prefect API."""
        await self._while_away(super()._sync_and_initialize(), None)

    async def _while_away(self, call: Any, instead: Any) -> Any:
        """`await call`, or `instead` while the Prefect API is away (down, restarting).

        Prefect's worker counts failed polls and exits after about a minute of them: the
        runs waiting inside it (a plan waiting for its decision) would die with it. This
        one says once that the API is away, keeps polling, and says when it is back.
        """
        try:
            result = await call
        except Exception as exc:
            if not _api_away(exc):
                raise
            if self._away_since is None:
                self._away_since = time.monotonic()
                print(f"teamflow worker: the Prefect API is away ({exc!r}); waiting", flush=True)
            return instead
        if self._away_since is not None:
            away, self._away_since = time.monotonic() - self._away_since, None
            print(f"teamflow worker: the Prefect API is back after {away:.0f} s", flush=True)
            # A heartbeat now, not at the next interval (30 s): after an outage longer than
            # the server's offline window the pool reads "not ready", and commands refuse
            # to start runs on it until a worker beats again.
            await self._beat_now()
            api_back()  # decisions recorded meanwhile reach their suspended runs now
        return result

    async def _beat_now(self, tries: int = 10) -> None:
        """A heartbeat at once; a server just back may answer 503 for a moment, so try
        again each second, `tries` times at most (the regular heartbeat comes after)."""
        for attempt in range(tries):
            try:
                await ProcessWorker._sync_and_initialize(self)
                return
            except Exception as exc:
                if attempt == tries - 1:
                    print(
                        f"teamflow worker: heartbeat after the outage failed: {exc!r}", flush=True
                    )
                    return
                await anyio.sleep(1)

    async def kill_infrastructure(
        self,
        infrastructure_pid: str,
        configuration: ProcessJobConfiguration,
        grace_seconds: int = 30,
    ) -> None:
        # A run in this process has this process's pid: never kill ourselves for it.
        if infrastructure_pid.split(":")[-1] == str(os.getpid()):
            raise NotImplementedError("runs inside the teamflow worker are not killed")
        await super().kill_infrastructure(infrastructure_pid, configuration, grace_seconds)

    async def _give_worker_labels_to_flow_run(self, flow_run_id: Any) -> None:
        """Labels the run with this worker's name and pool: once, beside the run, not before.

        Prefect's stock server on SQLite answers this request (a read, then a write, in
        one deferred transaction) with 503 whenever another write lands in between (the
        server `teamflow up` starts, `flows.server`, waits for the lock instead), and
        Prefect's client tries again 2 s, 4 s, 8 s later: the run would wait with it, and
        under load the retries keep the server's write lock busier still. The labels only
        say which worker took the run, so a run whose one try fails goes without them.
        """
        label = super()._give_worker_labels_to_flow_run

        async def give() -> None:
            try:
                with self._without_retries():
                    await label(flow_run_id)
            except Exception as exc:
                self._logger.debug("flow run %s left without labels: %r", flow_run_id, exc)

        if self._runs_task_group is None:
            await give()
        else:
            self._runs_task_group.start_soon(give)

    def _without_retries(self) -> Any:
        """The current settings with `PREFECT_CLIENT_MAX_RETRIES` 0, as a settings context.

        Made once per settings object: `temporary_settings` builds and validates a whole
        Settings (its sources, TOML files included) each time, a fifth of a worker's CPU
        when it ran once a run."""
        import prefect.context
        from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

        context = prefect.context.get_settings_context()
        kept = self._no_retries
        if kept is None or kept[0] is not context.settings:
            updated = context.settings.copy_with_update(updates={PREFECT_CLIENT_MAX_RETRIES: 0})
            kept = self._no_retries = (context.settings, updated)
        return prefect.context.SettingsContext(profile=context.profile, settings=kept[1])

    async def _entrypoint(self, flow_run: FlowRun) -> str | None:
        if flow_run.deployment_id is None:
            return None
        if flow_run.deployment_id not in self._entrypoints:
            deployment = await self.client.read_deployment(flow_run.deployment_id)
            self._entrypoints[flow_run.deployment_id] = deployment.entrypoint
        return self._entrypoints[flow_run.deployment_id]

    async def keep_timers(self) -> None:
        """Polls `LEAD_SECONDS` before the pool's next Scheduled run is due.

        Prefect's poll (every few seconds) takes runs due within the prefetch window, so a
        run scheduled for later would start up to a poll interval late. This timer asks
        for the earliest Scheduled run beyond what its last poll covered, sleeps until just
        before it, and polls. A Scheduled event (a new timer, maybe an earlier one) re-arms
        it (`listen_for_runs`). Each wake is for a run beyond the last poll's reach, so a
        run the poll cannot take (the limit is reached, its queue is paused) is left to
        the regular poll rather than woken for again and again.
        """
        while self._work_pool is None or not self.is_setup:
            await anyio.sleep(0.1)
        covered = datetime.now(UTC)  # what the timer's last poll reached
        while True:
            changed = self._timers_changed = anyio.Event()
            try:
                due = await self._next_scheduled_start(after=covered)
            except Exception as exc:  # the regular poll still runs; ask again soon
                self._logger.debug("timer: reading the next scheduled run failed: %s", exc)
                due, wait = None, 2.0
            else:
                wait = TIMER_IDLE_SECONDS
            if due is not None:
                wait = (due - datetime.now(UTC)).total_seconds() - LEAD_SECONDS
            with anyio.move_on_after(max(0.0, wait)):
                await changed.wait()
            if due is None or datetime.now(UTC) < due - timedelta(seconds=LEAD_SECONDS):
                continue  # re-armed before its time: read the next run again
            covered = datetime.now(UTC) + timedelta(seconds=LEAD_SECONDS)
            try:
                await self.get_and_submit_flow_runs()
            except Exception as exc:  # the regular poll retries; it also logs
                self._logger.debug("timer: poll failed: %s", exc)

    async def _next_scheduled_start(self, after: datetime) -> datetime | None:
        """When the pool's earliest Scheduled run due after `after` is due; one small read."""
        from prefect.client.schemas.filters import (
            FlowRunFilter,
            FlowRunFilterNextScheduledStartTime,
            FlowRunFilterState,
            FlowRunFilterStateType,
            WorkPoolFilter,
            WorkPoolFilterName,
            WorkQueueFilter,
            WorkQueueFilterName,
        )
        from prefect.client.schemas.objects import StateType
        from prefect.client.schemas.sorting import FlowRunSort

        queues = sorted(self._work_queues)
        runs = await self.client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                next_scheduled_start_time=FlowRunFilterNextScheduledStartTime(after_=after),
            ),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[self._work_pool_name])),
            work_queue_filter=(
                WorkQueueFilter(name=WorkQueueFilterName(any_=queues)) if queues else None
            ),
            sort=FlowRunSort.NEXT_SCHEDULED_START_TIME_ASC,
            limit=1,
        )
        return runs[0].next_scheduled_start_time if runs else None

    async def listen_for_runs(self) -> None:
        """Polls as soon as the server says a run was scheduled in this worker's pool.

        Events only wake the poller: a burst of scheduled runs costs one poll, not one each.
        """
        while self._work_pool is None or not self.is_setup:
            await anyio.sleep(0.1)
        wake = anyio.Event()
        pool_filter = EventFilter(
            # `Resuming`: a suspended run that was resumed is scheduled again under that name.
            event=EventNameFilter(name=["prefect.flow-run.Scheduled", "prefect.flow-run.Resuming"]),
            any_resource=EventAnyResourceFilter(id=[f"prefect.work-pool.{self._work_pool.id}"]),
        )

        async def poll_when_woken() -> None:
            nonlocal wake
            while True:
                await wake.wait()
                wake = anyio.Event()
                if not self.is_setup:
                    continue
                try:
                    await self.get_and_submit_flow_runs()
                except Exception as exc:  # the regular poll retries; it also logs
                    self._logger.debug("poll on event failed: %s", exc)

        async with anyio.create_task_group() as group:
            group.start_soon(poll_when_woken)
            while True:
                try:
                    async with get_events_subscriber(
                        filter=pool_filter, reconnect_on_clean_close=True
                    ) as events:
                        async for _event in events:
                            wake.set()
                            self._timers_changed.set()
                except Exception as exc:  # the poll still runs; try the stream again soon
                    self._logger.debug("event stream lost (%s); reconnecting", exc)
                    await anyio.sleep(2)


async def serve(pool: str = POOL, *, name: str | None = None, limit: int = DEFAULT_LIMIT) -> None:
    """Runs a teamflow worker on `pool` until cancelled."""
    in_process = warm_up()
    here = ", ".join(in_process) or "no flows"
    print(f"teamflow worker: runs {here} in this process", flush=True)
    worker = TeamflowWorker(work_pool_name=pool, name=name, limit=limit)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(worker.listen_for_runs)
            group.start_soon(worker.keep_timers)
            group.start_soon(keep_time)
            await worker.start(printer=lambda *a, **k: print(*a, **k, flush=True))
            group.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(worker.flow_threads.close)


def run_until_signalled(pool: str = POOL, *, name: str | None = None, limit: int = 8) -> None:
    """Runs `serve` until SIGINT/SIGTERM; a second signal quits without waiting for runs."""

    async def main() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as group:
                serving = anyio.CancelScope()

                async def run() -> None:
                    with serving:
                        await serve(pool, name=name, limit=limit)
                    group.cancel_scope.cancel()

                group.start_soon(run)
                async for _signal in signals:
                    if serving.cancel_called:
                        print("teamflow worker: quitting now", flush=True)
                        os._exit(1)
                    print(
                        "teamflow worker: stopping; waiting for running flows "
                        "(signal again to quit now)",
                        flush=True,
                    )
                    serving.cancel()

    anyio.run(main)
