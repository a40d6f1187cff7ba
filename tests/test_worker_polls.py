"""The worker's regular poll (`flows.worker.TeamflowWorker.get_and_submit_flow_runs`): every
call while it runs anything, or for `IDLE_POLL_SECONDS` after, or while it cannot hear new
runs by event; every `IDLE_POLL_SECONDS` once it is idle and listening (an idle `teamflow
up` spent 0.9% of a core more on polls every 2 s). Polls on events and timers
(`poll_now`) are never skipped.

The worker object against a real Prefect server, its polls counted by the time of its last.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from flows.worker import IDLE_POLL_SECONDS, TeamflowWorker

pytestmark = pytest.mark.usefixtures("home")


def test_an_idle_listening_worker_polls_seldom_and_a_busy_one_at_each_call(
    prefect_api: str,
) -> None:
    async def main() -> list[bool]:
        polled = []
        async with TeamflowWorker(work_pool_name=f"polls-{uuid.uuid4().hex[:6]}") as w:

            async def regular() -> bool:
                before = w._last_poll
                await w.get_and_submit_flow_runs()
                return w._last_poll != before

            long_ago = time.monotonic() - 2 * IDLE_POLL_SECONDS
            w._listening, w._busy_at, w._last_poll = False, long_ago, long_ago
            polled.append(await regular())  # deaf to events: polls
            w._listening, w._busy_at = True, long_ago
            polled.append(await regular())  # idle and listening, polled just now: skipped
            w._last_poll = long_ago
            polled.append(await regular())  # ... polled long ago: polls
            w.limiter.acquire_on_behalf_of_nowait("a run")
            polled.append(await regular())  # busy: polls
            w.limiter.release_on_behalf_of("a run")
            polled.append(await regular())  # just busy: polls
            w._busy_at = long_ago
            polled.append(await regular())  # idle again, polled just now: skipped
            before = w._last_poll
            await w.poll_now()  # an event or the timer: never skipped
            polled.append(w._last_poll != before)
        return polled

    assert asyncio.run(main()) == [True, False, True, True, True, False, True]
