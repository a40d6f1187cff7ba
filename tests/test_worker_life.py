"""A live run is never left declared dead (issue 31, item 4): a run its worker still runs,
marked Crashed by Prefect's crash automation (its heartbeats reached a loaded server late),
is set back to Running at the worker's next beat and ends Completed; a run that was in a
worker stalled past `TEAMFLOW_WORKER_ALIVE_SECONDS` is not revived (its task may have been
resumed elsewhere).

A real Prefect server; the run in a thread of this process, as the worker runs it, with the
worker's beat thread (`flows.worker_life.keep_beating`) beating in teamflow's database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prefect_server import Run, wait_until

from flows import worker_life
from models.db import session_scope
from models.worker_beat import WorkerBeat

pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture
def beating(
    prefect_api: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[threading.Event]:
    """This process as the worker `w-life`, beating every 0.2 s; stopped afterwards."""
    monkeypatch.setenv("TEAMFLOW_WORKER_BEAT_SECONDS", "0.2")
    worker_life.set_worker_name("w-life")
    stop = threading.Event()
    thread = worker_life.keep_beating(stop)
    yield stop
    stop.set()
    thread.join(10)
    worker_life.set_worker_name(None)


def busy_run(release: threading.Event) -> tuple[Run, list[str]]:
    """A flow run, busy here (listed as running in this process) until `release` is set."""
    from prefect import flow
    from prefect.context import get_run_context

    ids: list[str] = []

    @flow(name="busy-member", persist_result=False)
    def busy() -> str:
        run_id = str(get_run_context().flow_run.id)  # type: ignore[union-attr]
        with worker_life.running(run_id):
            ids.append(run_id)
            release.wait(120)
        return "done"

    async def go() -> Any:
        return busy()

    run = Run(go())
    wait_until(lambda: ids, 60, "the run to start")
    return run, ids


def state_of(run_id: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id).state


def last_beat() -> Any:
    with session_scope() as s:
        row = s.get(WorkerBeat, "w-life")
        return row.beat_at if row is not None else None


def mark_crashed(run_id: str) -> None:
    """What Prefect's crash automation does to a run whose heartbeats stopped."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(
            run_id, Crashed(message="Flow run marked as crashed: its heartbeats stopped."),
            force=True,
        )  # fmt: skip


def test_a_busy_run_marked_crashed_in_a_live_worker_is_running_again_and_completes(
    beating: threading.Event,
) -> None:
    release = threading.Event()
    run, (run_id,) = busy_run(release)
    try:
        wait_until(lambda: state_of(run_id).is_running(), 60, "the run to be Running")
        mark_crashed(run_id)
        again = wait_until(
            lambda: (s := state_of(run_id)).is_running() and "still running" in (s.message or "")
            and s, 60, "the worker to set it back to Running",
        )  # fmt: skip
        assert "w-life" in again.message and "heartbeats stopped" in again.message
    finally:
        release.set()
    assert run.result(60) == "done"
    assert state_of(run_id).is_completed()


def test_a_run_of_a_worker_that_stalled_past_the_window_is_not_revived(
    beating: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stall past the window forfeits the runs that were here then: marked Crashed, they
    stay so, beat after beat."""
    release = threading.Event()
    run, (run_id,) = busy_run(release)
    try:
        with worker_life._lock:  # what the beat thread does after a stall past the window
            worker_life._forfeited.update(worker_life._runs)
        # A beat after it: a check of states that began before the forfeit is over.
        seen = last_beat()
        wait_until(lambda: last_beat() > seen, 30, "a beat after the forfeit")
        mark_crashed(run_id)
        for _ in range(2):  # a whole beat (and the check of states after it) since
            seen = last_beat()
            wait_until(lambda: last_beat() > seen, 30, "the next beat")  # noqa: B023
        assert state_of(run_id).is_crashed()
    finally:
        release.set()
    run.result(60)


def test_a_run_the_worker_took_but_is_still_starting_is_not_handed_back(
    beating: threading.Event,
) -> None:
    """On a loaded machine a worker may take seconds between taking a run (Pending) and
    starting it. Its beats list the run all that time, so the watchdog does not hand the
    run back to the pool for another worker to run a second time; once the worker lets it
    go unstarted, and the window has passed, the watchdog hands it back."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.states import Pending

    from flows.team_task import team_task
    from flows.watchdog import hand_back_stranded
    from models.worker_beat import live_runs

    async def taken() -> str:
        async with get_client() as client:
            if not any(p.name == "teamflow" for p in await client.read_work_pools()):
                await client.create_work_pool(WorkPoolCreate(name="teamflow", type="process"))
            deployment = await client.create_deployment(
                flow_id=await client.create_flow(team_task),
                name="being-started",
                work_pool_name="teamflow",
            )
            run = await client.create_flow_run_from_deployment(deployment, state=Pending())
            return str(run.id)

    run_id = asyncio.run(taken())
    starting = {run_id}
    worker_life.set_taken_runs(lambda: set(starting))
    try:
        wait_until(lambda: run_id in live_runs(), 30, "the beat to list the run it is starting")
        assert run_id not in asyncio.run(hand_back_stranded(older_than=0))
        assert state_of(run_id).type.value == "PENDING"
        starting.clear()  # the worker gave the run up unstarted (its machine died, say)
        wait_until(lambda: run_id not in live_runs(), 30, "a beat without the run")
        assert run_id in asyncio.run(hand_back_stranded(older_than=0))
        assert state_of(run_id).type.value == "SCHEDULED"
    finally:
        worker_life.set_taken_runs(frozenset)


def _beat_as(name: str, runs: list[str], seconds_ago: float) -> None:
    """Worker `name`'s last beat, `seconds_ago`, listing `runs`."""
    from datetime import timedelta

    from models.base import utcnow
    from models.worker_beat import beat

    beat(name, 4242, "elsewhere", runs)
    with session_scope() as s:
        row = s.get(WorkerBeat, name)
        assert row is not None
        row.beat_at = utcnow() - timedelta(seconds=seconds_ago)
        s.add(row)


def runs_listed(name: str) -> list[str]:
    with session_scope() as s:
        row = s.get(WorkerBeat, name)
        return list(row.runs) if row is not None else []


def test_the_runs_a_dead_worker_listed_are_marked_crashed_with_its_exit(
    prefect_api: str, db_url: str
) -> None:
    """What `teamflow up` does when its worker dies (`end_dead_worker`): the runs of its last
    beat Crashed at once, with its pid and exit code; a run it did not list stays Running."""
    release = threading.Event()
    dead_run, (dead_id,) = busy_run(release)
    other_run, (other_id,) = busy_run(release)
    try:
        wait_until(lambda: state_of(dead_id).is_running(), 60, "the run to be Running")
        wait_until(lambda: state_of(other_id).is_running(), 60, "the run to be Running")
        _beat_as("w-dead", [dead_id], seconds_ago=1)
        assert worker_life.end_dead_worker("w-dead", 4242, -9) == [dead_id]
        state = state_of(dead_id)
        assert state.is_crashed() and "its worker 'w-dead' (pid 4242) died (exit -9)" in (
            state.message
        ), state
        assert runs_listed("w-dead") == [] and state_of(other_id).is_running()
    finally:
        release.set()
    dead_run.thread.join(60)
    other_run.result(60)
