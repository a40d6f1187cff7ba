"""teamflow's worker: a Prefect process worker that runs teamflow's flows in its own process.

Prefect's process worker polls its pool every 10 s and starts a new Python process for each
run, about 3 s more before the run is Running. An agent team hands out many short runs, so
this worker, still of type `process` and pulling from the same `teamflow` pool:

- hears about new runs at once: it subscribes to the server's event stream for
  `prefect.flow-run.Scheduled` events of its pool and polls right away, with a short poll
  as the fallback;
- runs teamflow's own flows (deployment entrypoints under `flows/`) in a thread of this
  long-lived process, where Prefect and teamflow are imported already; any other
  deployment in the pool runs as a subprocess, as the stock process worker runs it.

Every worker also keeps teamflow's clock for plan decisions (`flows.deadlines`): timeout
policies act at their deadlines even for runs that are suspended or died.

A run in this process dies with it. Its heartbeats (`PREFECT_FLOWS_HEARTBEAT_FREQUENCY`)
stop too, and the automation `teamflow up` installs marks it Crashed.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from prefect.client.schemas.objects import FlowRun
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventAnyResourceFilter, EventFilter, EventNameFilter
from prefect.flows import Flow
from prefect.logging.loggers import flow_run_logger
from prefect.workers.process import ProcessJobConfiguration, ProcessWorker, ProcessWorkerResult

from flows.deadlines import keep_time

POOL = "teamflow"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIMIT = 8
"""Runs at a time per worker; Prefect's server on SQLite starts refusing (503) near 50."""


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


def _execute(flow: Flow[..., Any], flow_run: FlowRun) -> None:
    """Runs one flow run to its end in the calling thread (with its own event loop)."""
    from prefect.exceptions import Abort, Pause
    from prefect.flow_engine import run_flow

    try:
        outcome = run_flow(
            flow, flow_run=flow_run, return_type="state", error_logger=flow_run_logger(flow_run)
        )
        if inspect.isawaitable(outcome):
            asyncio.run(outcome)
    except (Pause, Abort):
        # Signals, not failures: the run suspended (it runs again when resumed), or the
        # server told it to stop. Its state is set already; in a process it would exit.
        pass


class TeamflowWorker(ProcessWorker):
    """A `process` worker that runs teamflow's flows in-process and hears of runs at once."""

    _description = "Runs teamflow's flows in its own process; other flows as subprocesses."

    @classmethod
    def __dispatch_key__(cls) -> str:
        # Registered under its own key: Prefect's `process` worker stays what `process` means.
        return "teamflow"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("limit", DEFAULT_LIMIT)
        super().__init__(*args, **kwargs)
        self._entrypoints: dict[Any, str | None] = {}

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
        # Runs fetched ahead of time (prefetch) start when they are due, not earlier: a
        # TIMER alert must not fire before its time.
        due = flow_run.expected_start_time or flow_run.next_scheduled_start_time
        if due is not None:
            await anyio.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        try:
            await anyio.to_thread.run_sync(_execute, flow, flow_run)
        except Exception:
            self.get_flow_run_logger(flow_run).exception("teamflow worker: the run broke off")
            return ProcessWorkerResult(status_code=1, identifier=str(os.getpid()))
        return ProcessWorkerResult(status_code=0, identifier=str(os.getpid()))

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

    async def _entrypoint(self, flow_run: FlowRun) -> str | None:
        if flow_run.deployment_id is None:
            return None
        if flow_run.deployment_id not in self._entrypoints:
            deployment = await self.client.read_deployment(flow_run.deployment_id)
            self._entrypoints[flow_run.deployment_id] = deployment.entrypoint
        return self._entrypoints[flow_run.deployment_id]

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
                except Exception as exc:  # the poll still runs; try the stream again soon
                    self._logger.debug("event stream lost (%s); reconnecting", exc)
                    await anyio.sleep(2)


async def serve(pool: str = POOL, *, name: str | None = None, limit: int = DEFAULT_LIMIT) -> None:
    """Runs a teamflow worker on `pool` until cancelled."""
    in_process = warm_up()
    here = ", ".join(in_process) or "no flows"
    print(f"teamflow worker: runs {here} in this process", flush=True)
    worker = TeamflowWorker(work_pool_name=pool, name=name, limit=limit)
    async with anyio.create_task_group() as group:
        group.start_soon(worker.listen_for_runs)
        group.start_soon(keep_time)
        await worker.start(printer=lambda *a, **k: print(*a, **k, flush=True))
        group.cancel_scope.cancel()


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
