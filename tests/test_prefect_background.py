"""Prefect's server looks for its background tasks once a second, not four times
(`flows.compat.prefect_server.slower_background_checks`, applied by `flows.server`): the
worker Prefect's `background_worker` makes is docket's, with the longer intervals, unless a
caller names its own; a second application changes nothing."""

from __future__ import annotations

import inspect
from datetime import timedelta

import docket
from prefect.server.api import background_workers

from flows import server
from flows.compat.prefect_server import BACKGROUND_CHECK_SECONDS, slower_background_checks


def test_the_servers_background_worker_checks_once_a_second() -> None:
    queue = docket.Docket(name="teamflow-test", url="memory://")
    slower_background_checks()
    slower_background_checks()  # idempotent: one subclass of docket's Worker, not two
    patched = background_workers.Worker
    assert patched.__mro__[1] is docket.Worker
    every = timedelta(seconds=BACKGROUND_CHECK_SECONDS)
    made = patched(queue)
    assert (made.minimum_check_interval, made.scheduling_resolution) == (every, every)
    assert docket.Worker(queue).minimum_check_interval < every  # docket's own: 0.25 s
    chosen = patched(queue, minimum_check_interval=timedelta(seconds=5))
    assert chosen.minimum_check_interval == timedelta(seconds=5)
    assert "slower_background_checks()" in inspect.getsource(server.main)
