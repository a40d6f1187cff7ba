"""The `watchdog` flow against a Prefect test server and a real team: alarms reach the lead
once per condition, dead runs are cleaned up, and team tasks keep their members' state."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from prefect.states import Crashed, Running

from flows import runner
from flows.shutdown import shutdown_member
from flows.team_task import team_task
from flows.watchdog import watchdog
from flows.watchdog_schedule import DEPLOYMENT, schedule_watchdog
from models import inbox, membership, presence
from models import team as teams
from models.agent import AgentStateRow
from models.base import utcnow
from models.db import session_scope
from models.shutdown import get_shutdown, request_shutdown
from models.task import TaskState, create_task, get_task, move_task
from models.tool import ToolDefinition, add_tool


def run_watchdog() -> dict:
    state = asyncio.run(watchdog(return_state=True))
    assert state.is_completed(), state.message
    return state.result()


def alarms_of(member: str = "coordinator") -> list[dict]:
    return [
        r.payload
        for r in inbox.messages(TEAM, member)
        if r.type == "system_alert" and r.payload["alert_type"] == "ALARM"
    ]


def status_updates(member: str = "coordinator") -> list[dict]:
    return [r.payload for r in inbox.messages(TEAM, member) if r.type == "status_update"]


def silent_for(member: str, seconds: float) -> None:
    """The member's last heartbeat was `seconds` ago (as if it stopped beating then)."""
    with session_scope() as s:
        agent_id = teams.get_member(TEAM, member, session=s).agent_id
        state = s.get(AgentStateRow, agent_id)
        state.last_heartbeat = utcnow() - timedelta(seconds=seconds)
        s.add(state)


def agent_state(member: str) -> AgentStateRow:
    with session_scope() as s:
        return s.get(AgentStateRow, teams.get_member(TEAM, member, session=s).agent_id)


async def _crash(run_id) -> None:
    async with get_client() as client:
        await client.set_flow_run_state(
            run_id,
            Crashed(message="Flow run marked as crashed: its heartbeats stopped."),
            force=True,
        )


async def _deploy(flow, name: str) -> None:
    async with get_client() as client:
        flow_id = await client.create_flow(flow)
        await client.create_deployment(flow_id=flow_id, name=name)


def test_a_silent_member_is_alarmed_once_and_again_after_coming_back(
    prefect_api: str, db_url: str, home: Path
) -> None:
    research_team()
    teams.update_settings(TEAM, {"offline_after_seconds": 90})
    presence.heartbeat(TEAM, "analyst-1", status="thinking")  # at work, then silent
    presence.heartbeat(TEAM, "analyst-2")
    silent_for("analyst-1", 120)

    delivered = [run_watchdog()["alarms"] for _ in range(3)]
    assert delivered == [[f"offline:{TEAM}:analyst-1"], [], []]
    [alarm] = alarms_of()
    assert alarm["alert_name"] == f"offline:{TEAM}:analyst-1"
    assert "analyst-1" in alarm["message"] and "offline" in alarm["message"]
    assert agent_state("analyst-1").status == "offline"
    assert agent_state("analyst-2").status == "idle"
    assert status_updates()[-1]["status"] == "offline"
    assert alarms_of("analyst-1") == []  # the lead is told, not the team

    presence.heartbeat(TEAM, "analyst-1")  # back
    assert agent_state("analyst-1").status == "idle"
    assert "back" in status_updates()[-1]["message"]
    assert run_watchdog()["alarms"] == []

    presence.heartbeat(TEAM, "analyst-1", status="executing_tools")
    silent_for("analyst-1", 120)
    assert run_watchdog()["alarms"] == [f"offline:{TEAM}:analyst-1"]
    assert run_watchdog()["alarms"] == []
    assert len(alarms_of()) == 2


def test_one_watchdog_run_checks_again_and_again_and_alarms_once(
    prefect_api: str, db_url: str, home: Path
) -> None:
    research_team()
    teams.update_settings(TEAM, {"offline_after_seconds": 90})
    presence.heartbeat(TEAM, "analyst-1", status="thinking")
    silent_for("analyst-1", 120)

    async def watchdog_runs() -> int:
        from prefect.client.schemas.filters import FlowFilter, FlowFilterName

        async with get_client() as client:
            runs = await client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["watchdog"]))
            )
            return len(runs)

    before = asyncio.run(watchdog_runs())
    state = asyncio.run(watchdog(checks=3, every=0.01, return_state=True))
    assert state.is_completed(), state.message
    assert state.result()["alarms"] == [f"offline:{TEAM}:analyst-1"]
    assert len(alarms_of()) == 1
    assert asyncio.run(watchdog_runs()) == before + 1  # three checks, one run in the UI


def test_a_crashed_task_run_fails_the_task_and_the_task_starts_again(
    prefect_api: str, db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without resumes (test_durable.py has those): the task is closed as failed at once.
    monkeypatch.setenv("TEAMFLOW_RESUME_ATTEMPTS", "0")
    research_team()
    asyncio.run(_deploy(team_task, "team-task"))
    task = create_task(TEAM, title="Q4 report", assignees=["analyst-1"])
    first = runner.start_task(str(task.id))
    assert runner.start_task(str(task.id)).id == first.id  # started twice: one run
    move_task(task.id, to=TaskState.IN_PROGRESS)  # its worker claimed it, then died
    asyncio.run(_crash(first.id))

    result = run_watchdog()
    assert str(first.id) in result["dead_runs"]
    assert result["alarms"] == [f"crashed:{first.id}"]
    closed = get_task(task.id)
    assert closed.status == "archived"
    assert "heartbeats stopped" in closed.reason and str(first.id) in closed.reason
    [alarm] = alarms_of()
    assert str(task.id) in alarm["message"] and "teamflow task run" in alarm["message"]
    assert run_watchdog()["alarms"] == []  # once

    again = runner.start_task(str(task.id))
    assert again.id != first.id
    reopened = get_task(task.id)
    assert (reopened.status, reopened.reason, reopened.attempt) == ("pending", None, 1)
    assert runner.start_task(str(task.id)).id == again.id
    assert run_watchdog()["alarms"] == []  # the old dead run is of the attempt before
    assert get_task(task.id).status == "pending"


def test_a_task_whose_run_crashed_before_its_claim_starts_again_once(
    prefect_api: str, db_url: str, home: Path
) -> None:
    """A run that dies between its start and its claim (its worker or its API replica went)
    leaves its task pending, which no run would take: the watchdog starts it again, once
    per dead run. A run someone cancelled is their decision: its task is left alone."""
    from prefect.states import Cancelled

    research_team()
    asyncio.run(_deploy(team_task, "team-task"))
    task = create_task(TEAM, title="Q4 report", assignees=["analyst-1"])
    other = create_task(TEAM, title="Q4 chart", assignees=["analyst-2"])
    first = runner.start_task(str(task.id))
    asyncio.run(_crash(first.id))  # before it claimed the task: still pending
    cancelled = runner.start_task(str(other.id))

    async def cancel() -> None:
        async with get_client() as client:
            await client.set_flow_run_state(cancelled.id, Cancelled(), force=True)

    asyncio.run(cancel())

    async def runs_of(task_id: uuid.UUID) -> list:
        async with get_client() as client:
            runs = await client.read_flow_runs()
        return [r for r in runs if r.parameters.get("task_id") == str(task_id)]

    assert str(first.id) in run_watchdog()["dead_runs"]
    again = [r for r in asyncio.run(runs_of(task.id)) if r.id != first.id]
    assert [r.idempotency_key for r in again] == [f"team-task-{task.id}-after-{first.id}"]
    assert again[0].state.is_scheduled() and get_task(task.id).status == "pending"
    run_watchdog()  # the dead run is still there: no second restart
    assert len(asyncio.run(runs_of(task.id))) == 2
    assert [r.id for r in asyncio.run(runs_of(other.id))] == [cancelled.id]
    assert get_task(other.id).status == "pending"


def test_a_shutdown_whose_run_died_is_forced(prefect_api: str, db_url: str, home: Path) -> None:
    research_team()

    async def dead_run() -> uuid.UUID:
        async with get_client() as client:
            run = await client.create_flow_run(
                shutdown_member, parameters={"team": TEAM, "member": "analyst-2"}, state=Running()
            )
        await _crash(run.id)
        return run.id

    run_id = asyncio.run(dead_run())
    request = request_shutdown(TEAM, "analyst-2", reason="done", flow_run_id=str(run_id))
    assert run_watchdog()["alarms"] == [f"crashed:{run_id}"]
    forced = get_shutdown(request.request_id)
    assert forced.status == "forced" and forced.completed_at is not None
    with session_scope() as s:
        assert not teams.get_member(TEAM, "analyst-2", session=s).is_active
    assert "forced" in alarms_of()[0]["message"]
    assert run_watchdog()["alarms"] == []


def test_a_team_task_keeps_its_members_state_and_tells_the_lead(
    prefect_api: str, db_url: str, home: Path
) -> None:
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": "echo_json",
                "type": "script",
                "description": "Prints its params",
                "command": f'{sys.executable} -c "import sys; print(sys.stdin.read())"',
                "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )
    step = {"status": "EXECUTING", "thoughts": [], "stop": False, "response": None}
    playbook = [
        {**step, "actions": [
            {"action": "echo_json", "type": "tool", "params": {"n": 7}, "execution": "SYNC"}
        ]},
        {**step, "status": "SUCCESS", "actions": [], "stop": True, "response": "done"},
    ]  # fmt: skip
    membership.add_member(
        TEAM, "analyst-1", model="haiku", prompt="You are analyst-1.",
        runtime={"kind": "scripted", "playbook": playbook},
    )  # fmt: skip
    presence.heartbeat(TEAM, "analyst-1")
    before = len(status_updates())
    silent_for("analyst-1", 3600)

    task = create_task(TEAM, title="Count", assignees=["analyst-1"])
    assert asyncio.run(team_task(str(task.id)))["status"] == "completed"

    state = agent_state("analyst-1")
    assert state.status == "idle"
    assert utcnow() - state.last_heartbeat < timedelta(minutes=5)
    updates = status_updates()[before:]
    # busy while it worked, idle at the end: one message per change, not per heartbeat
    assert [u["status"] for u in updates] == ["busy", "idle"]
    assert all(u["agent_id"] == f"analyst-1@{TEAM}" for u in updates)
    assert run_watchdog()["alarms"] == []


def test_the_watchdog_deployment_gets_one_interval_schedule(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_deploy(watchdog, "watchdog"))

    async def intervals() -> list[float]:
        async with get_client() as client:
            deployment = await client.read_deployment_by_name(DEPLOYMENT)
            schedules = await client.read_deployment_schedules(deployment.id)
            return [s.schedule.interval.total_seconds() for s in schedules if s.active]

    async def parameters() -> dict:
        async with get_client() as client:
            return (await client.read_deployment_by_name(DEPLOYMENT)).parameters

    # A check every 30 s, but one run per 5 minutes (12 an hour in the UI, not 120).
    assert schedule_watchdog() == 30
    assert asyncio.run(intervals()) == [300]
    assert asyncio.run(parameters()) == {"checks": 10, "every": 30}
    monkeypatch.setenv("TEAMFLOW_WATCHDOG_EVERY", "2m")
    assert schedule_watchdog() == 120
    assert schedule_watchdog() == 120
    assert asyncio.run(intervals()) == [960]
    assert asyncio.run(parameters()) == {"checks": 8, "every": 120}
    monkeypatch.setenv("TEAMFLOW_WATCHDOG_EVERY", "nan")
    with pytest.raises(ValueError, match="TEAMFLOW_WATCHDOG_EVERY"):
        schedule_watchdog()


def test_the_in_process_subflows_of_a_dead_run_are_marked_crashed(
    prefect_api: str, db_url: str, home: Path
) -> None:
    """A worker machine died while a run's plan waited in a subflow (Paused) and another
    subflow had just been made (Pending): the crash automation marks only the parent
    Crashed. The watchdog ends the subflows of a parent whose worker no longer beats, and
    leaves those of a parent a live worker still lists (Prefect only lost its heartbeats)."""
    from prefect import task
    from prefect.states import Paused, Pending

    from flows.watchdog import end_orphans
    from models.worker_beat import beat

    @task
    def step() -> None: ...

    async def family(child_state) -> tuple[uuid.UUID, uuid.UUID]:
        async with get_client() as client:
            parent = await client.create_flow_run(team_task, parameters={}, state=Running())
            link = await client.create_task_run(step, parent.id, dynamic_key="0")
            child = await client.create_flow_run(
                shutdown_member, parameters={}, parent_task_run_id=link.id, state=child_state
            )
        await _crash(parent.id)
        return parent.id, child.id

    async def states(*ids: uuid.UUID) -> list[str]:
        async with get_client() as client:
            return [(await client.read_flow_run(i)).state.type.value for i in ids]

    _, dead_paused = asyncio.run(family(Paused()))
    _, dead_pending = asyncio.run(family(Pending()))
    live_parent, live_child = asyncio.run(family(Paused()))
    beat("worker-alive", 1, "host", [str(live_parent)])
    ended = asyncio.run(end_orphans())
    assert {str(dead_paused), str(dead_pending)} <= set(ended) and str(live_child) not in ended
    assert asyncio.run(states(dead_paused, dead_pending, live_child)) == [
        "CRASHED", "CRASHED", "PAUSED"
    ]  # fmt: skip


def test_a_run_a_dead_worker_took_but_never_started_is_handed_back(
    prefect_api: str, db_url: str, home: Path
) -> None:
    """A worker took a run of the pool (Pending) and its machine died before the run began:
    no heartbeat ever came, so no automation crashes it. Past the alive window, and listed
    by no live worker, it is Scheduled again for a live worker; one a live worker lists
    stays as it is."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.states import Pending

    from flows.watchdog import hand_back_stranded
    from models.worker_beat import beat

    async def taken() -> tuple[uuid.UUID, uuid.UUID]:
        async with get_client() as client:
            with contextlib.suppress(ObjectAlreadyExists):
                await client.create_work_pool(WorkPoolCreate(name="teamflow", type="process"))
            flow_id = await client.create_flow(team_task)
            deployment = await client.create_deployment(
                flow_id=flow_id, name=f"stranded-{uuid.uuid4().hex[:6]}", work_pool_name="teamflow"
            )
            runs = [
                await client.create_flow_run_from_deployment(deployment, state=Pending())
                for _ in range(2)
            ]
            return runs[0].id, runs[1].id

    async def states(*ids: uuid.UUID) -> list[str]:
        async with get_client() as client:
            return [(await client.read_flow_run(i)).state.type.value for i in ids]

    stranded, held = asyncio.run(taken())
    beat("worker-alive", 1, "host", [str(held)])
    handed = asyncio.run(hand_back_stranded(older_than=0))  # as if the window had passed
    assert str(stranded) in handed and str(held) not in handed
    assert asyncio.run(states(stranded, held)) == ["SCHEDULED", "PENDING"]


def test_a_task_whose_blocker_closed_but_whose_start_was_lost_is_started_once(
    prefect_api: str, db_url: str, home: Path
) -> None:
    """The process that closed a blocker died between its commit (which claimed the
    dependent's start) and the start. The watchdog starts the dependent's run, once however
    often it checks; not before the window, and not for a task a run found no member for."""
    from flows.watchdog import start_unblocked
    from models import dependencies as deps

    research_team()
    asyncio.run(_deploy(team_task, "team-task"))

    def blocked_pair(title: str) -> tuple[uuid.UUID, uuid.UUID]:
        with session_scope() as s:
            first = create_task(TEAM, title=f"{title} 1", assignees=["analyst-1"], session=s)
            then = create_task(TEAM, title=f"{title} 2", assignees=["analyst-1"], session=s)
            deps.add_blockers(then, [str(first.id)], session=s)
        with session_scope() as s:  # the close's transaction; the process dies after it
            move_task(first.id, to=TaskState.COMPLETED, session=s)
            assert deps.settle(first.id, True, session=s) == [(then.id, TEAM)]
        return first.id, then.id

    _, lost = blocked_pair("lost")
    _, gated = blocked_pair("gated")
    with session_scope() as s:  # a run came and found no member for it: not lost
        deps.set_reason(gated, deps.NO_IDLE_MEMBER, session=s)

    assert (
        asyncio.run(start_unblocked(older_than=60)) == []
    )  # within the window: its closer may be starting it
    [started] = asyncio.run(start_unblocked(older_than=0))

    async def runs_of(task_id: uuid.UUID) -> list[str]:
        async with get_client() as client:
            runs = await client.read_flow_runs()
            return [str(r.id) for r in runs if r.parameters.get("task_id") == str(task_id)]

    assert asyncio.run(runs_of(lost)) == [started]
    assert asyncio.run(runs_of(gated)) == []
    assert asyncio.run(start_unblocked(older_than=0)) == []  # its run waits in the queue: found
    assert asyncio.run(runs_of(lost)) == [started]
    assert get_task(lost).status == "pending"
