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
  (`flows.flow_threads`): a run that makes its own clients (one async, two sync) pays for
  three SSL contexts, a CSRF token and new connections, about 0.1 s of CPU on a small machine.

Every worker also keeps teamflow's clock for plan decisions (`flows.timers`): timeout
policies act at their deadlines even for runs that are suspended or died.

It also beats in teamflow's database, listing the runs in its process
(`flows.worker_life`): the watchdog takes no run from a worker that still runs it.

What it changes in Prefect's own worker lives in `flows.compat.prefect_worker`. A run in
this process dies with it. Its heartbeats (`PREFECT_FLOWS_HEARTBEAT_FREQUENCY`)
stop too, and the automation `teamflow up` installs marks it Crashed.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from prefect.client.schemas.objects import FlowRun
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventAnyResourceFilter, EventFilter, EventNameFilter
from prefect.flows import Flow
from prefect.workers.process import ProcessJobConfiguration, ProcessWorker, ProcessWorkerResult

from flows.compat.prefect_client import share_tls_context
from flows.compat.prefect_worker import (
    KeptEnvironmentJobConfiguration,
    ProcessWorkerHooks,
    keep_definition_reads,
)
from flows.flow_threads import FlowThreads, run_flow_here
from flows.timers import api_back, keep_time
from flows.worker_life import (
    keep_beating,
    keep_mirroring,
    running,
    set_taken_runs,
    set_worker_name,
)

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
IDLE_POLL_SECONDS = 10.0
"""The regular poll's interval while this worker has run nothing for that long and hears
new runs by event (Prefect's own default). While it runs anything, and that long after, it
polls every `PREFECT_WORKER_QUERY_SECONDS` (2 s under `teamflow up`), so a slot that frees
takes the next queued run soon. An idle `up` spent 0.9% of a core more on 2 s polls."""
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


def _api_away(exc: BaseException) -> bool:
    """Whether `exc` says the Prefect API cannot be reached for now (no answer, or 5xx)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


class TeamflowJobConfiguration(KeptEnvironmentJobConfiguration):
    """The job configuration of teamflow's worker: Prefect's process job configuration, its
    settings' environment made once per settings object (not once per run)."""


class TeamflowWorker(ProcessWorkerHooks, ProcessWorker):
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
        self.flow_threads = FlowThreads(self.run_limit or DEFAULT_LIMIT)
        self._away_since: float | None = None
        self._last_poll = self._busy_at = time.monotonic()
        self._listening = False  # the event stream of new runs is connected

    async def run(
        self,
        flow_run: FlowRun,
        configuration: ProcessJobConfiguration,
        task_status: anyio.abc.TaskStatus[int] | None = None,
    ) -> ProcessWorkerResult:
        self._busy_at = time.monotonic()  # a run came: polls at the short interval again
        try:
            return await self._run(flow_run, configuration, task_status)
        finally:
            self._busy_at = time.monotonic()  # and for `IDLE_POLL_SECONDS` after it

    async def _run(
        self,
        flow_run: FlowRun,
        configuration: ProcessJobConfiguration,
        task_status: anyio.abc.TaskStatus[int] | None,
    ) -> ProcessWorkerResult:
        flow = teamflow_flow(await self._entrypoint(flow_run))
        if flow is None:
            return await super().run(flow_run, configuration, task_status)
        try:
            # Listed in this worker's own heartbeats before it stops counting as being
            # started (`submitting_run_ids`): the watchdog sees it here all along.
            with running(str(flow_run.id)):
                if task_status is not None:
                    task_status.started(os.getpid())
                await self.flow_threads.run(run_flow_here, flow, flow_run)
        except Exception:
            self.get_flow_run_logger(flow_run).exception("teamflow worker: the run broke off")
            return ProcessWorkerResult(status_code=1, identifier=str(os.getpid()))
        return ProcessWorkerResult(status_code=0, identifier=str(os.getpid()))

    async def setup(self) -> None:
        await super().setup()
        keep_definition_reads(self.client)

    async def get_and_submit_flow_runs(self) -> list[FlowRun]:
        """Prefect's regular poll, made every `IDLE_POLL_SECONDS` only while this worker is
        idle and hears new runs by event (`listen_for_runs`); else at each call."""
        now = time.monotonic()
        try:
            busy = self.limiter.borrowed_tokens > 0
        except RuntimeError:  # no limit: never idle
            busy = True
        if busy or not self._listening:
            self._busy_at = now
        elif now - self._busy_at > IDLE_POLL_SECONDS and now - self._last_poll < IDLE_POLL_SECONDS:
            return []
        return await self.poll_now()

    async def poll_now(self) -> list[FlowRun]:
        """Prefect's poll, riding out an outage of the Prefect API (see `_while_away`)."""
        self._last_poll = time.monotonic()
        return await self._while_away(super().get_and_submit_flow_runs(), [])

    async def sync_with_server(self, sync: Any) -> None:
        """Prefect's heartbeat and sync, riding out an outage of the Prefect API."""
        await self._while_away(sync, None)

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
            self._busy_at = time.monotonic()  # events are lost meanwhile: poll often after
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
            await self._beat_after_outage()
            api_back()  # decisions recorded meanwhile reach their suspended runs now
        return result

    async def _beat_after_outage(self, tries: int = 10) -> None:
        """A heartbeat at once; a server just back may answer 503 for a moment, so try
        again each second, `tries` times at most (the regular heartbeat comes after)."""
        for attempt in range(tries):
            try:
                await self.beat_now()
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

    async def starts_at_once(self, flow_run: FlowRun) -> bool:
        """A run of teamflow's own flows starts in this process: it has no Submitting state."""
        return teamflow_flow(await self._entrypoint(flow_run)) is not None

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
        while not self.pool_ready:
            await anyio.sleep(0.1)
        covered = datetime.now(UTC)  # what the timer's last poll reached
        while True:
            changed = self._timers_changed = anyio.Event()
            try:
                due = await self._next_scheduled_start(after=covered)
            except Exception as exc:  # the regular poll still runs; ask again soon
                self.worker_logger.debug("timer: reading the next scheduled run failed: %s", exc)
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
                await self.poll_now()
            except Exception as exc:  # the regular poll retries; it also logs
                self.worker_logger.debug("timer: poll failed: %s", exc)

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

        queues = self.queue_names
        runs = await self.client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                next_scheduled_start_time=FlowRunFilterNextScheduledStartTime(after_=after),
            ),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[self.pool_name])),
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
        while not self.pool_ready:
            await anyio.sleep(0.1)
        wake = anyio.Event()
        pool_filter = EventFilter(
            # `Resuming`: a suspended run that was resumed is scheduled again under that name.
            event=EventNameFilter(name=["prefect.flow-run.Scheduled", "prefect.flow-run.Resuming"]),
            any_resource=EventAnyResourceFilter(id=[f"prefect.work-pool.{self.work_pool.id}"]),
        )

        async def poll_when_woken() -> None:
            nonlocal wake
            while True:
                await wake.wait()
                wake = anyio.Event()
                if not self.is_setup:
                    continue
                try:
                    await self.poll_now()
                except Exception as exc:  # the regular poll retries; it also logs
                    self.worker_logger.debug("poll on event failed: %s", exc)

        async with anyio.create_task_group() as group:
            group.start_soon(poll_when_woken)
            while True:
                try:
                    async with get_events_subscriber(
                        filter=pool_filter, reconnect_on_clean_close=True
                    ) as events:
                        self._listening = True
                        async for _event in events:
                            wake.set()
                            self._timers_changed.set()
                except Exception as exc:  # the poll still runs; try the stream again soon
                    self.worker_logger.debug("event stream lost (%s); reconnecting", exc)
                    await anyio.sleep(2)
                finally:
                    self._listening = False


async def serve(pool: str = POOL, *, name: str | None = None, limit: int = DEFAULT_LIMIT) -> None:
    """Runs a teamflow worker on `pool` until cancelled."""
    share_tls_context()  # the clients of its loops and of runs outside its flow threads
    in_process = warm_up()
    here = ", ".join(in_process) or "no flows"
    print(f"teamflow worker: runs {here} in this process", flush=True)
    worker = TeamflowWorker(work_pool_name=pool, name=name, limit=limit)
    set_worker_name(worker.name)
    set_taken_runs(worker.submitting_run_ids)
    stop_beating = threading.Event()
    keep_beating(stop_beating)  # in teamflow's database: the watchdog asks it (item 4)
    keep_mirroring(stop_beating)  # the mirror host's team files, current with other hosts'
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(worker.listen_for_runs)
            group.start_soon(worker.keep_timers)
            group.start_soon(keep_time)
            await worker.start(printer=lambda *a, **k: print(*a, **k, flush=True))
            group.cancel_scope.cancel()
    finally:
        stop_beating.set()
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
