"""uvicorn, in every server teamflow runs: Prefect's, the MCP server's and the REST API's."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

TICK_SECONDS = 1.0
"""How often an idle uvicorn server wakes to look after itself (uvicorn: 0.1 s)."""


def quieter_ticks() -> None:
    """Makes each uvicorn server of this process wake once a second to refresh its `Date`
    header and see whether it should stop, instead of ten times a second; a stop signal
    still wakes it at once.

    Written against uvicorn 0.54.0: `Server.main_loop` sleeps 0.1 s between calls of
    `on_tick`, which refreshes the `Date` header on every tenth call and returns whether
    the server should stop (`handle_exit`, the signal handler `capture_signals` installs,
    sets `should_exit`). Without it, every idle server teamflow runs wakes ten times a
    second for nothing: about a tenth of an idle `teamflow up`'s CPU, over its three
    servers. Here each tick counts as ten of uvicorn's, so the header is refreshed every
    tick (once a second, as before), and the stop signals' handlers also wake the loop, so
    a stop is not kept waiting for the tick. A stop asked for by setting `should_exit`
    without a signal is seen within a second. Upstream: not reported.
    """
    from uvicorn import server

    if getattr(server.Server.main_loop, "teamflow_quiet", False):
        return

    @functools.wraps(server.Server.main_loop)
    async def main_loop(self: Any) -> None:
        loop, wake = asyncio.get_running_loop(), asyncio.Event()
        _wake_on_stop_signals(lambda: loop.call_soon_threadsafe(wake.set))
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # uvicorn's `on_tick` acts on every tenth
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), TICK_SECONDS)

    main_loop.teamflow_quiet = True  # type: ignore[attr-defined]  # our patch's marker
    server.Server.main_loop = main_loop  # type: ignore[method-assign]  # the patch


def _wake_on_stop_signals(wake: Callable[[], object]) -> None:
    """Has the stop signals' handlers, as uvicorn's `capture_signals` set them (to
    `handle_exit`), also call `wake`; uvicorn restores its own when the server ends."""
    from uvicorn.server import HANDLED_SIGNALS

    if threading.current_thread() is not threading.main_thread():
        return  # uvicorn handles no signals there either
    for sig in HANDLED_SIGNALS:
        handler = signal.getsignal(sig)
        if callable(handler):
            signal.signal(sig, functools.partial(_handle_and_wake, handler, wake))


def _handle_and_wake(
    handler: Callable[[int, Any], Any],
    wake: Callable[[], object],
    sig: int,
    frame: FrameType | None,
) -> None:
    handler(sig, frame)
    with contextlib.suppress(RuntimeError):  # the server's loop has closed already
        wake()
