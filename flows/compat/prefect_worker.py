"""teamflow's changes to Prefect's worker, engine and result storage (3.8.8), made in
`teamflow worker` (`flows.worker`, `flows.flow_threads`): a worker that runs teamflow's flows
in its own process, hears of runs at once and rides out an outage of the Prefect API.

Each function or class is a patch (`flows.compat.PATCHES` lists it with the fingerprints of
what it leans on; `tests/test_compat.py` fails when that changes): re-check it when Prefect
moves.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from prefect.client.schemas.objects import FlowRun
from prefect.flow_engine import AsyncFlowRunEngine
from prefect.flows import Flow
from prefect.workers.process import ProcessJobConfiguration, ProcessWorker

STORAGE_LOOKUP_S = 30.0
"""How long a worker reuses the server's answer on its default result storage."""
DEFINITION_READ_S = 10.0
"""How long a worker reuses a deployment or flow it read: a change reaches it within that."""


def cache_server_result_storage() -> None:
    """Makes this process ask the server for its default result storage (`GET
    /admin/storage`) at most once every `STORAGE_LOOKUP_S` seconds per API, so a change of
    the server's default reaches its runs within that time.

    Written against Prefect 3.8.8: `prefect.results._read_server_default_result_storage_
    block_id` and its async twin ask for every flow run and task run that persists a
    result, the task runs with a blocking client on the run's event loop. Without it, a
    team task costs two more requests and the server's CPU bounds team tasks a second.
    Upstream: not reported (a cache, or a setting for its lifetime, in `prefect.results`).
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

    @functools.wraps(read)
    def cached_read() -> Any:
        url, hit = fresh()
        if hit is None:
            hit = answers[url] = (time.monotonic(), read())
        return hit[1]

    @functools.wraps(aread)
    async def cached_aread() -> Any:
        url, hit = fresh()
        if hit is None:
            hit = answers[url] = (time.monotonic(), await aread())
        return hit[1]

    cached_read.teamflow_cached = True  # type: ignore[attr-defined]  # our patch's marker
    results._read_server_default_result_storage_block_id = cached_read
    results._aread_server_default_result_storage_block_id = cached_aread


def keep_definition_reads(client: Any, seconds: float = DEFINITION_READ_S) -> None:
    """Makes `client` (a worker's) reuse what `read_deployment` and `read_flow` gave for
    `seconds`, as deep copies (Prefect merges a run's job variables into the deployment's).
    A deleted deployment still takes runs for up to `seconds`.

    Written against Prefect 3.8.8: the worker reads a run's deployment twice
    (`BaseWorker._submit_run`, `BaseJobConfiguration.resolve_for_flow_run`) and its flow
    once for every run it submits. Without it, the server's CPU, which bounds team tasks a
    second, goes to reading the same rows again. Upstream: not reported.
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


class _OnTimeEngine(AsyncFlowRunEngine):
    """Prefect's engine for async flows, holding a run's move to Running until `not_before`."""

    not_before: datetime | None = None

    async def set_state(self, state: Any, force: bool = False) -> Any:
        if state.is_running() and self.not_before is not None:
            wait, self.not_before = (self.not_before - datetime.now(UTC)).total_seconds(), None
            if wait > 0:
                await asyncio.sleep(wait)
        return await super().set_state(state, force)


async def run_on_time(flow: Flow[..., Any], flow_run: FlowRun, due: datetime) -> Any:
    """Prefect's `run_flow_async`, on an engine that starts the run at `due`, not before.

    What the engine does before the move to Running (the run's policy and name, two
    writes) is done while the run waits, so at its time one request starts it.

    Written against Prefect 3.8.8: `AsyncFlowRunEngine.set_state`, the private
    `flow_engine._flow_parameters`, and the loop of `run_flow_async`, copied here. Without
    it, a run taken ahead of its time (the worker's prefetch) starts early, or, held back
    by the server, up to a second late and then at the client's next try: a TIMER alert
    fires off time. Upstream: not reported (a `not_before` for a submitted run).
    """
    from prefect.flow_engine import _flow_parameters

    engine = _OnTimeEngine(
        flow=flow, flow_run=flow_run, parameters=_flow_parameters(flow, flow_run, None)
    )
    engine.not_before = due
    async with engine.start():
        while engine.is_running():
            async with engine.run_context():
                await engine.call_flow_fn()  # type: ignore[unused-coroutine]  # typed loosely upstream
    return engine.state


class KeptEnvironmentJobConfiguration(ProcessJobConfiguration):
    """Prefect's process job configuration, its settings' environment made once per
    settings object.

    Written against Prefect 3.8.8, `BaseJobConfiguration._base_environment`: for every run
    it submits, Prefect turns every setting into an environment variable. Without it, that
    is a fifth of a worker's CPU at 5 team tasks a second, for a value that changes only
    with the settings. Upstream: not reported.
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
"""`KeptEnvironmentJobConfiguration`'s environment and the settings object it was made from."""


class ProcessWorkerHooks:
    """Mixed in before Prefect's `ProcessWorker` (a mixin, so Prefect's registry of worker
    types does not take it for one): the private parts of the process worker that teamflow's
    worker changes, behind public names. `sync_with_server` wraps the heartbeat and sync,
    `beat_now` beats at once, the worker's labels are given to a run once and beside it,
    and the pool, queues, limit, logger and the runs being started are readable; a run
    whose submission fails is let go, not the worker; a run that `starts_at_once` goes from
    Pending to Running without Prefect's Submitting state.

    Written against Prefect 3.8.8 (`BaseWorker._sync_and_initialize`,
    `_give_worker_labels_to_flow_run`, `_runs_task_group`, `_work_pool_name`,
    `_work_queues`, `_work_pool`, `_limit`, `_logger`, `_submitting_flow_run_ids`,
    `_propose_submitting_state`). Without
    it, the worker exits after about a minute of failed syncs (the runs waiting in it die
    with it); a run waits for the labels' retries (2 s, 4 s, 8 s) whenever a stock server on
    SQLite answers 503; and a run the worker took but has not started yet (slow on a loaded
    machine) is not in its beats, so the watchdog hands it back to the pool meanwhile; and
    one failed read of a run's deployment ends the worker (`_submit_run`); and every run
    of teamflow's, started in the worker's own process, costs the server a Submitting state
    change and its event for nothing.
    Upstream: the exit is PrefectHQ/prefect#16977 and #9052 (workers stop on server errors
    and network problems); the labels' retries are not reported.
    """

    _no_retries: tuple[Any, Any] | None = None
    _work_pool: Any
    _work_pool_name: str
    _work_queues: set[str]
    _limit: int | None
    _logger: Any
    _runs_task_group: Any
    _submitting_flow_run_ids: set[Any]
    _cancelling_observer: Any
    is_setup: bool

    async def _submit_run(self, flow_run: Any) -> None:
        """Prefect's submission of a run this worker took, which lets an error of its first
        request (the read of the run's deployment, past the client's retries: an API
        replica that died mid-request, a server too loaded to answer) out of the runs'
        task group, and so ends the worker with every run in it. Here the run is let go
        instead: its slot freed, still Scheduled for the next poll (a run left Pending is
        handed back by the watchdog), and the worker goes on."""
        try:
            await super()._submit_run(flow_run)  # type: ignore[misc]  # a mixin of ProcessWorker
        except Exception as exc:
            self._logger.warning(
                "flow run %s not submitted (%r); left to the pool for the next poll",
                flow_run.id,
                exc,
            )
            self._release_limit_slot(flow_run.id)  # type: ignore[attr-defined]  # ProcessWorker's
            self._submitting_flow_run_ids.discard(flow_run.id)
            if self._cancelling_observer is not None:
                self._cancelling_observer.remove_in_flight_flow_run_id(flow_run.id)

    def submitting_run_ids(self) -> set[str]:
        """The runs this worker took (it proposed Pending, or is about to) and has not
        reported started yet; safe to call from any thread (a set's copy holds the GIL)."""
        return {str(run_id) for run_id in self._submitting_flow_run_ids.copy()}

    @property
    def pool_ready(self) -> bool:
        """Whether the worker is set up and has read its work pool."""
        return self._work_pool is not None and self.is_setup

    @property
    def pool_name(self) -> str:
        return self._work_pool_name

    @property
    def queue_names(self) -> list[str]:
        return sorted(self._work_queues)

    @property
    def run_limit(self) -> int | None:
        return self._limit

    @property
    def worker_logger(self) -> Any:
        return self._logger

    async def sync_with_server(self, sync: Awaitable[None]) -> None:
        """Prefect's heartbeat and sync (`sync`); a subclass may wrap it."""
        await sync

    async def _sync_and_initialize(self) -> None:
        await self.sync_with_server(super()._sync_and_initialize())  # type: ignore[misc]  # a mixin of ProcessWorker

    async def beat_now(self) -> None:
        """One heartbeat and sync at once, as Prefect's worker does at its interval."""
        await ProcessWorker._sync_and_initialize(self)  # type: ignore[arg-type]  # self is one

    async def _give_worker_labels_to_flow_run(self, flow_run_id: Any) -> None:
        """Labels the run with this worker's name and pool: once, beside the run, not
        before. The labels only say which worker took the run, so a run whose one try
        fails goes without them."""
        label = super()._give_worker_labels_to_flow_run  # type: ignore[misc]  # a mixin of ProcessWorker

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

    async def _propose_submitting_state(self, flow_run: Any) -> None:
        """Prefect's Submitting state, which says the run's infrastructure is being made;
        left out for a run that `starts_at_once` (it has none to make: its Running state
        follows within milliseconds), which spares the server a state change and its event
        a run."""
        if await self.starts_at_once(flow_run):
            return
        await super()._propose_submitting_state(flow_run)  # type: ignore[misc]  # a mixin of ProcessWorker

    async def starts_at_once(self, flow_run: Any) -> bool:
        """Whether `flow_run` starts in this process, with no infrastructure to make."""
        return False

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
