"""Runs waiting in one process share one event subscription and one batched read.

Ten plan waits in one process, each in its own thread and event loop as the worker runs
them, on a real Prefect server: they open one event stream between them, and the API reads
that back the stream are one `POST /flow_runs/filter` per poll period for all of them,
never a read per run. A resume whose event the stream did not bring is taken at the next
read.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prefect_server import Run, wait_until

from flows import run_watch


@pytest.fixture(scope="module")
def prefect_api(own_prefect_api: str) -> str:
    """A server of this module's own: its tests count all the paused runs."""
    return own_prefect_api


pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture
def watch_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A read every second, and a watch that ends soon after its last wait (before the
    module's server does)."""
    monkeypatch.setenv("TEAMFLOW_PAUSE_POLL_SECONDS", "1")
    monkeypatch.setattr(run_watch, "IDLE_S", 0.5)
    wait_until(lambda: not run_watch.watches(), 30, "the watch of an earlier test to end")
    yield
    wait_until(lambda: not run_watch.watches(), 30, "the watch to end with nobody waiting")


def waiting_run(key: str) -> Run:
    from prefect import flow

    from flows.plan_approval import PlanDecision
    from flows.waits import wait_for_input

    @flow(name="watched-wait", persist_result=False)
    async def wait() -> Any:
        decision = await wait_for_input(PlanDecision.with_initial_data(description=key))
        return None if decision is None else decision.decision

    return Run(wait())


def paused_runs(count: int) -> list[Any]:
    """The `count` runs that are paused, once they all are (newest first)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState
    from prefect.client.schemas.filters import FlowRunFilterStateType as StateType
    from prefect.client.schemas.objects import StateType as Type

    def paused() -> list[Any]:
        with get_client(sync_client=True) as client:
            state = FlowRunFilterState(type=StateType(any_=[Type.PAUSED]))
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=state))
        return runs if len(runs) == count else []

    return wait_until(paused, 60, f"{count} paused runs")


def test_a_waiter_ignores_states_from_before_its_pause_and_keeps_one_heard_early() -> None:
    async def main() -> tuple[Any, ...]:
        paused_at = datetime.now(UTC)
        stale = run_watch.Waiter(uuid.uuid4())
        stale.tell("RUNNING", paused_at - timedelta(seconds=1))  # the run before it paused
        stale.arm(paused_at)
        early = run_watch.Waiter(uuid.uuid4())
        early.tell("RUNNING", paused_at + timedelta(seconds=1))  # heard while pausing
        before_arming = await early.next(0.01)
        early.arm(paused_at)
        return await stale.next(0.05), before_arming, await early.next(1.0)

    assert asyncio.run(main()) == (None, None, "RUNNING")


def test_runs_waiting_in_one_process_share_one_stream_and_one_read(
    prefect_api: str, watch_settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.flow_runs import resume_flow_run

    subscriptions: list[Any] = []
    subscribe = run_watch.get_events_subscriber

    def counted_subscriber(*args: Any, **kwargs: Any) -> Any:
        subscriptions.append(kwargs.get("filter"))
        return subscribe(*args, **kwargs)

    monkeypatch.setattr(run_watch, "get_events_subscriber", counted_subscriber)
    runs = [waiting_run(f"wait-{i}") for i in range(10)]
    paused = paused_runs(10)
    wait_until(
        lambda: [w["waiting"] for w in run_watch.watches().values()] == [10],
        30,
        "one watch with the ten waits",
    )

    requests: collections.Counter[str] = collections.Counter()
    send = httpx.AsyncClient.send

    async def counted(self: Any, request: httpx.Request, *args: Any, **kwargs: Any) -> Any:
        parts = ["{id}" if len(p) == 36 else p for p in request.url.path.split("/")]
        requests[f"{request.method} {'/'.join(parts)}"] += 1
        return await send(self, request, *args, **kwargs)

    def reads_made() -> int:
        return next(iter(run_watch.watches().values()))["reads"]

    before = reads_made()
    monkeypatch.setattr(httpx.AsyncClient, "send", counted)
    wait_until(lambda: reads_made() >= before + 3, 60, "three reads of the waiting runs")
    monkeypatch.setattr(httpx.AsyncClient, "send", send)
    made = reads_made() - before
    reads = {k: n for k, n in requests.items() if k.split(" ")[1].startswith("/api/flow_runs")}

    assert len(subscriptions) == 1
    # Each read of all ten is one request (a read per run would be ten), and nothing
    # else reads a run; a read under way as the counting began or stopped may count once.
    assert set(reads) == {"POST /api/flow_runs/filter"}
    assert made - 1 <= reads["POST /api/flow_runs/filter"] <= made + 1

    for run in paused:
        resume_flow_run(run.id, run_input={"decision": "approve", "approver": "coordinator"})
    assert [run.result(60) for run in runs] == ["approve"] * 10


def test_a_resume_the_stream_did_not_bring_is_taken_at_the_next_read(
    prefect_api: str, watch_settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.events.filters import EventFilter, EventNameFilter
    from prefect.flow_runs import resume_flow_run

    # The stream loses events now and then; here it brings none at all.
    nothing = EventFilter(event=EventNameFilter(name=["teamflow.test.never"]))
    monkeypatch.setattr(run_watch, "state_event_filter", lambda: nothing)
    run = waiting_run("lost")
    (paused,) = paused_runs(1)

    # Nothing else can end this wait (no deadline, no database check): only the read.
    resume_flow_run(paused.id, run_input={"decision": "deny", "approver": "coordinator"})
    assert run.result(60) == "deny"


def test_a_live_wait_marked_crashed_is_paused_again_and_takes_its_decision(
    prefect_api: str, watch_settings: None
) -> None:
    """Prefect's crash automation marks a waiting run Crashed when it hears no heartbeat in
    its window (a loaded server lags); the run's process, alive, pauses it again at once,
    with the same form, and the decision made afterwards reaches it."""
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import resume_flow_run
    from prefect.states import Crashed

    run = waiting_run("marked crashed")
    (paused,) = paused_runs(1)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(
            paused.id,
            Crashed(message="Flow run marked as crashed: its heartbeats stopped."),
            force=True,
        )

        def paused_again() -> Any:
            state = client.read_flow_run(paused.id).state
            return state if state is not None and state.is_paused() else None

        def history_of_states() -> str:
            states = client.read_flow_run_states(paused.id)
            return ", ".join(f"{s.type.value} ({s.message})" for s in states)

        again = wait_until(paused_again, 30, "the run paused again", explain=history_of_states)
        history = [s.type.value for s in client.read_flow_run_states(paused.id)]
    assert again.state_details.pause_key == paused.state.state_details.pause_key
    assert history[-2:] == ["CRASHED", "PAUSED"]

    resume_flow_run(paused.id, run_input={"decision": "approve", "approver": "coordinator"})
    assert run.result(60) == "approve"
