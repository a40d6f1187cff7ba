"""Watching runs that wait: one event subscription and one batched read per process.

A paused run hears its resume on Prefect's event stream. With a subscription of its own and
a read of its run every 10 s, N waiting runs held N websockets and sent N/10 requests a
second (50 a second at 500). Here every run waiting in this process shares one
subscription, to the state events of all flow runs, and one read of all of them
(`read_flow_runs` filtered by id, in chunks) every `TEAMFLOW_PAUSE_POLL_SECONDS` (default
10). The read is the fallback for an event the stream lost. While the stream is down the
watch reads every couple of seconds and subscribes again; after every (re)subscription it
reads once, so nothing slips through the gap.

Waiting runs live in different threads, each with its own event loop (the worker's
`FlowThreads`, `asyncio.run` in tests), so the watch runs in a thread of its own, one per
Prefect API URL, and wakes a waiter through the waiter's loop. It stops after
`IDLE_S` with nobody waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import anyio
import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
from prefect.exceptions import PrefectHTTPStatusError
from prefect.logging import get_logger
from prefect.settings import PREFECT_API_URL, temporary_settings

from models.settings import get_settings

ENDING = frozenset({"CANCELLING", "CANCELLED", "FAILED", "CRASHED", "COMPLETED"})
"""State types that end a wait: someone cancelled (or otherwise ended) the paused run."""
WAKING = ENDING | {"RUNNING"}
RETRY_S = 2.0
"""While the stream or the API is away: read and subscribe again this often."""
IDLE_S = 30.0
READ_CHUNK = 200

logger = get_logger("teamflow.run_watch")


def poll_seconds() -> float:
    return get_settings().pause_poll_seconds


def state_event_filter() -> EventFilter:
    """The events that say a run is running again, or was ended while it waited."""
    names = ["Running", "Cancelling", "Cancelled", "Failed", "Crashed", "Completed"]
    return EventFilter(
        event=EventNameFilter(name=[f"prefect.flow-run.{n}" for n in names]),
        resource=EventResourceFilter(id_prefix=["prefect.flow-run."]),
    )


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` means the Prefect API is away for now (down, restarting, overloaded)."""
    if isinstance(exc, PrefectHTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


class Waiter:
    """One run's wait: woken, in its own loop, by the first state after `since`."""

    def __init__(self, run_id: uuid.UUID) -> None:
        self.run_id = run_id
        self.loop = asyncio.get_running_loop()
        self.woken = asyncio.Event()
        self.kind: str | None = None
        self._since: datetime | None = None
        self._early: list[tuple[str, datetime]] = []
        self._lock = threading.Lock()

    def arm(self, since: datetime) -> None:
        """From now on, a state at or after `since` wakes the wait (the paused state's time)."""
        with self._lock:
            self._since = since
            early, self._early = self._early, []
        for kind, at in early:  # heard while the pause was being proposed
            self.tell(kind, at)

    def rearm(self, since: datetime) -> None:
        """Waits again, for a state at or after `since` (the run was paused again)."""
        with self._lock:
            self.kind = None
            self.woken.clear()
        self.arm(since)

    def tell(self, kind: str, at: datetime) -> None:
        """Called from the watch's thread."""
        with self._lock:
            if self._since is None:
                self._early.append((kind, at))
                return
            if at < self._since or self.kind is not None:
                return
            self.kind = kind
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(self.woken.set)

    async def next(self, timeout: float) -> str | None:
        """The state type that ended the wait (RUNNING or one of ENDING), or None for now."""
        with anyio.move_on_after(timeout):
            await self.woken.wait()
        return self.kind


class _Watch:
    def __init__(self, url: str) -> None:
        self.url = url
        self.waiters: dict[uuid.UUID, set[Waiter]] = {}
        self.ready = threading.Event()
        self.reads = 0
        self.idle_since = time.monotonic()
        context = contextvars.copy_context()  # the settings of the first waiter
        self.thread = threading.Thread(
            target=context.run, args=(asyncio.run, self._serve()), daemon=True, name="run-watch"
        )

    def _tell(self, run_id: uuid.UUID, kind: str, at: datetime) -> None:
        with _LOCK:
            waiters = list(self.waiters.get(run_id, ()))
        for waiter in waiters:
            waiter.tell(kind, at)

    def _stop_if_idle(self) -> bool:
        with _LOCK:
            if self.waiters or time.monotonic() - self.idle_since < IDLE_S:
                return False
            _WATCHES.pop(self.url, None)
            return True

    async def _serve(self) -> None:
        # Its own API, whatever the environment says later: a watch whose server went away
        # must not reach another one (or start Prefect's ephemeral server) instead.
        with temporary_settings({PREFECT_API_URL: self.url}):
            await self._serve_url()

    async def _serve_url(self) -> None:
        async with get_client() as client:
            while True:
                subscriber = await self._subscribe()
                self.ready.set()
                try:
                    if await self._listen(client, subscriber):
                        return
                except Exception:  # a bug of ours: log it, and keep the waits served
                    logger.exception("The run watch failed; it starts again")
                finally:
                    if subscriber is not None:
                        with contextlib.suppress(Exception):
                            await subscriber.__aexit__(None, None, None)
                await anyio.sleep(RETRY_S)

    async def _subscribe(self) -> Any:
        subscriber = get_events_subscriber(filter=state_event_filter(), reconnection_attempts=0)
        try:
            return await subscriber.__aenter__()
        except Exception as exc:
            if not self.ready.is_set() or unreachable(exc):
                logger.warning("No event stream (%s): reading waiting runs until there is", exc)
            return None

    async def _listen(self, client: Any, subscriber: Any) -> bool:
        """Hears and reads until the stream breaks (False) or nobody waits for a while (True)."""
        last_read = -float("inf")
        while True:
            if self.waiters:
                self.idle_since = time.monotonic()
            elif self._stop_if_idle():
                return True
            if time.monotonic() - last_read >= (RETRY_S if subscriber is None else poll_seconds()):
                last_read = time.monotonic()
                await self._read_all(client)
            if subscriber is None:
                return False
            try:
                with anyio.move_on_after(1.0):
                    event = await subscriber.__anext__()
                    kind = event.resource.get("prefect.state-type")
                    if kind in WAKING:
                        with contextlib.suppress(ValueError):
                            run_id = uuid.UUID(event.resource.id.removeprefix("prefect.flow-run."))
                            self._tell(run_id, kind, event.occurred)
            except Exception as exc:
                logger.warning("Event stream lost (%s); reading waiting runs until it is back", exc)
                return False

    async def _read_all(self, client: Any) -> None:
        with _LOCK:
            ids = list(self.waiters)
        for start in range(0, len(ids), READ_CHUNK):
            chunk = ids[start : start + READ_CHUNK]
            try:
                runs = await client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=chunk)),
                    limit=len(chunk),
                )
            except Exception as exc:
                if not unreachable(exc):
                    logger.exception("Reading waiting runs failed")
                return  # away: the next round tries again
            self.reads += 1
            for run in runs:
                state = run.state
                if state is not None and state.type.value in WAKING:
                    self._tell(run.id, state.type.value, state.timestamp)


_LOCK = threading.Lock()
_WATCHES: dict[str, _Watch] = {}


@contextlib.asynccontextmanager
async def waiting(run_id: uuid.UUID | str) -> AsyncIterator[Waiter]:
    """Registers a wait for `run_id` with this process's watch; arm it once the run is paused.

    Returns once the watch listens (or knows it cannot, and reads instead), so an event that
    follows the pause is heard.
    """
    waiter = Waiter(uuid.UUID(str(run_id)))
    url = str(PREFECT_API_URL.value())
    with _LOCK:
        watch = _WATCHES.get(url)
        if watch is None:
            watch = _WATCHES[url] = _Watch(url)
            watch.thread.start()
        watch.waiters.setdefault(waiter.run_id, set()).add(waiter)
    try:
        while not watch.ready.is_set():
            await anyio.sleep(0.005)
        yield waiter
    finally:
        with _LOCK:
            mine = watch.waiters.get(waiter.run_id, set())
            mine.discard(waiter)
            if not mine:
                watch.waiters.pop(waiter.run_id, None)


def waiting_runs() -> set[str]:
    """The runs of this process that wait for input now (their wait handles their state)."""
    with _LOCK:
        return {str(run_id) for watch in _WATCHES.values() for run_id in watch.waiters}


def watches() -> dict[str, Any]:
    """What each watch in this process is doing: waiting runs and reads made (for tests)."""
    with _LOCK:
        return {url: {"waiting": len(w.waiters), "reads": w.reads} for url, w in _WATCHES.items()}
