"""burner-redis, the in-memory Redis of the background task worker (docket) in Prefect's
server."""

from __future__ import annotations

import functools
import queue
from typing import Any

POLL_SECONDS = 1.0
"""How long a pub/sub read waits in one slice when nothing arrives (burner-redis: 0.1 s)."""


class _PatientQueue(queue.Queue[Any]):
    """A queue whose blocking reads of a short slice wait `POLL_SECONDS` instead; a message
    put meanwhile still ends the wait at once."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is not None:
            timeout = max(timeout, POLL_SECONDS)
        return super().get(block, timeout)


def patient_pubsub_reads() -> None:
    """Makes a pub/sub subscriber's wait for its next message take one worker thread call a
    second instead of ten.

    Written against burner-redis 0.1.7 (as pydocket 0.27.0 and Prefect 3.8.8 use it):
    `PubSub._queue_get` waits for the next message in a worker thread, `queue.get` in
    slices of at most 0.1 s, and docket's cancellation listener asks for a message every
    0.1 s, for the server's whole life. Without it, an idle Prefect server hands a call to
    a worker thread and wakes its event loop ten times a second: about a third of its idle
    CPU (0.84 s a minute, 0.59 s with slices of 1 s; `benchmarks/idle.py`). A message
    still arrives the moment it is put: only a wait that ends empty is longer, up to a
    second, and so is a subscriber's stop. Upstream: not reported.
    """
    from burner_redis import pubsub

    init = pubsub.PubSub.__init__
    if getattr(init, "teamflow_patient", False):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._queue = _PatientQueue()

    __init__.teamflow_patient = True  # type: ignore[attr-defined]  # our patch's marker
    pubsub.PubSub.__init__ = __init__
