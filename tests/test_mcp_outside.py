"""Outside (MCP) members on real Prefect servers and real tmux: a task freed by its blocker
starts its team-task run as the first one did; a waiting run suspends (its worker free) and
the member's report through MCP resumes it; a member killed in its tmux pane is alarmed and
its open tasks freed, as a forced shutdown frees them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from uuid import UUID

import anyio
import pytest
from prefect_server import talk_to, wait_until
from teamflow_workers import teamflow_workers
from test_mcp import TEAM, call, cli, stdio, tmux_socket  # noqa: F401 (a fixture)
from test_mcp_runs import prefect_env  # noqa: F401 (a fixture)
from test_watchdog_flow import run_watchdog

from models import identity, inbox, membership, presence, shutdown, task
from models import team as teams


async def _as(token: str | None, tool: str, **arguments):
    async with stdio(token) as session:
        return await call(session, tool, **arguments)


def _run_state(api: str, run_id: str) -> tuple[str, str, str | None]:
    """(state type, state name, message) of a flow run on the server at `api`."""
    from prefect.client.orchestration import get_client

    with (
        talk_to(api),
        get_client(sync_client=True) as client,
    ):
        state = client.read_flow_run(UUID(run_id)).state
        assert state is not None
        return state.type.value, state.name, state.message


def _metrics() -> dict[str, dict]:
    measured = cli("metrics", TEAM, "--json")
    assert measured.returncode == 0, measured.stderr
    return {r["member"]: r for r in json.loads(measured.stdout)["members"]}


def _outside_team(*names: str) -> None:
    membership.create_team(TEAM, description="outside members")
    for name in names:
        membership.add_member(TEAM, name, model="sonnet", prompt="p", runtime={"kind": "mcp"})


@pytest.mark.system
def test_a_task_freed_by_its_blocker_starts_its_run_for_an_outside_member(
    prefect_env,  # noqa: F811 (the fixture)
) -> None:
    _outside_team("alice", "bob")

    async def lead_builds() -> tuple[dict, dict]:
        async with stdio() as lead:
            first = await call(lead, "task_create", team_name=TEAM, subject="First")
            second = await call(lead, "task_create", team_name=TEAM, subject="Second")
            await call(lead, "task_update", team_name=TEAM, task_id=second["id"],
                       add_blocked_by=[first["id"]])  # fmt: skip
            a = await call(lead, "task_update", team_name=TEAM, task_id=first["id"], owner="alice")
            b = await call(lead, "task_update", team_name=TEAM, task_id=second["id"], owner="bob")
            return a, b

    first, second = anyio.run(lead_builds)
    assert first["run"]["flow_run_id"]
    assert second["run"] == {
        "task_id": second["id"],
        "note": "it starts when its blockers complete",
    }
    wait_until(lambda: task.get_task(first["id"]).status == "in_progress", 120, "the claim")
    done = anyio.run(
        lambda: _as(
            identity.issue_token(TEAM, "alice"),
            "task_update",
            team_name=TEAM,
            task_id=first["id"],
            status="completed",
            result="done",
        )
    )
    [started] = done["started"]
    assert started["task_id"] == second["id"] and started["flow_run_id"], done
    # Bob is quicker than his run: he starts before it claims; the run takes it on all the same.
    bob = identity.issue_token(TEAM, "bob")
    anyio.run(lambda: _as(bob, "task_update", team_name=TEAM, task_id=second["id"],
                          status="in_progress"))  # fmt: skip
    wait_until(
        lambda: any(
            m.type == "task_assignment" and m.payload["task_id"] == second["id"]
            for m in inbox.messages(TEAM, "bob")
        ),
        120,
        "bob's task_assignment from his run",
    )
    anyio.run(lambda: _as(bob, "task_update", team_name=TEAM, task_id=second["id"],
                          status="completed", result="done too"))  # fmt: skip
    for run_id in (first["run"]["flow_run_id"], started["flow_run_id"]):
        wait_until(
            lambda r=run_id: _run_state(prefect_env.api, r)[0] == "COMPLETED", 120, "the runs"
        )
    members = _metrics()
    assert (members["alice"]["tasks"], members["bob"]["tasks"]) == (1, 1)


@pytest.mark.system
def test_a_freed_task_its_member_took_before_its_run_started_still_gets_its_run(
    prefect_env,  # noqa: F811 (the fixture)
) -> None:
    """The race of a close and a quick outside member: the member takes the task its blocker
    freed in the instant between the close's commit and the start of the task's run (the
    close's `_start`). The run is started all the same, and adopts the task: every task is
    still a Prefect run, and its metrics are recorded."""
    from flows.mcp.task_tools import _start
    from models.db import session_scope
    from models.dependencies import add_blockers
    from models.task_edit import TaskChanges, update_task

    _outside_team("alice", "bob")
    with session_scope() as s:
        first = task.create_task(TEAM, title="First", assignees=["alice"], session=s)
        second = task.create_task(TEAM, title="Second", assignees=["bob"], session=s)
        add_blockers(second, [str(first.id)], session=s)
        first_id, second_id = str(first.id), str(second.id)
    with session_scope() as s:  # alice's report, committed: the close claims bob's start
        done = update_task(TEAM, first_id, TaskChanges(status="completed"), session=s)
    assert [str(t) for t, _ in done.ready] == [second_id]
    bob = identity.issue_token(TEAM, "bob")
    anyio.run(lambda: _as(bob, "task_update", team_name=TEAM, task_id=second_id,
                          status="in_progress"))  # fmt: skip
    started = _start(second_id, TEAM, owner_changed=False)  # the close, after the commit
    assert started is not None and started["flow_run_id"], started
    wait_until(
        lambda: any(
            m.type == "task_assignment" and m.payload["task_id"] == second_id
            for m in inbox.messages(TEAM, "bob")
        ),
        120,
        "bob's task_assignment from his run",
    )
    anyio.run(lambda: _as(bob, "task_update", team_name=TEAM, task_id=second_id,
                          status="completed", result="done"))  # fmt: skip
    wait_until(
        lambda: _run_state(prefect_env.api, started["flow_run_id"])[0] == "COMPLETED",
        120,
        "bob's run",
    )
    assert _metrics()["bob"]["tasks"] == 1


@pytest.fixture
def suspending_prefect(
    deployed_prefect, db_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`prefect_env`, with a worker whose runs suspend after a second of waiting."""
    server = deployed_prefect
    shared = {
        "TEAMFLOW_DATABASE_URL": db_url,
        "TEAMFLOW_HOME": str(home),
        "TEAMFLOW_SUSPEND_AFTER_SECONDS": "1",
    }
    with teamflow_workers(server, tmp_path, 1, env=shared):
        for key in ("PREFECT_API_URL", "PREFECT_HOME"):
            monkeypatch.setenv(key, server.env[key])
        yield server


@pytest.mark.system
def test_a_waiting_run_suspends_and_the_members_report_resumes_it(suspending_prefect) -> None:
    api = suspending_prefect.api
    _outside_team("alice")
    alice = identity.issue_token(TEAM, "alice")

    async def lead_gives(subject: str) -> dict:
        async with stdio() as lead:
            made = await call(lead, "task_create", team_name=TEAM, subject=subject)
            return await call(lead, "task_update", team_name=TEAM, task_id=made["id"],
                              owner="alice")  # fmt: skip

    for subject, report in (("Count", "completed"), ("Count again", "failed")):
        given = anyio.run(lambda s=subject: lead_gives(s))
        run_id = given["run"]["flow_run_id"]
        wait_until(lambda r=run_id: _run_state(api, r)[1] == "Suspended", 120, "the suspension")
        assert task.get_task(given["id"]).status == "in_progress"
        anyio.run(lambda g=given, r=report: _as(alice, "task_update", team_name=TEAM,
                  task_id=g["id"], status=r, result=f"{r}: 3 words"))  # fmt: skip
        # The report itself resumed the run (`flows.reported`), not teamflow's clock later.
        assert _run_state(api, run_id)[1] != "Suspended"
        final = wait_until(
            lambda r=run_id: (s := _run_state(api, r))[0] in ("COMPLETED", "FAILED") and s,
            120,
            "the resumed run's end",
        )
        if report == "completed":
            assert final[0] == "COMPLETED"
            assert task.get_task(given["id"]).status == "completed"
        else:
            assert final[0] == "FAILED" and "failed: 3 words" in (final[2] or ""), final
            assert task.get_task(given["id"]).status == "archived"
    # Told once per task, although each run ran its flow twice (before and after suspending).
    told = [m for m in inbox.messages(TEAM, "alice") if m.type == "task_assignment"]
    assert len(told) == 2
    alice_row = _metrics()["alice"]
    assert (alice_row["tasks"], alice_row["failed"]) == (2, 1)


def test_a_forced_shutdown_frees_the_members_open_tasks(db_url: str, home: Path) -> None:
    _outside_team("alice")
    open_task = task.create_task(TEAM, title="Alice's part", assignees=["alice"])
    request = shutdown.request_shutdown(TEAM, "alice", reason="stop")
    shutdown.complete_shutdown(request.request_id, forced=True, cause="no answer within 1 s")
    freed = task.get_task(open_task.id)
    assert (freed.status, freed.assignees, freed.reason) == ("pending", [], "freed: alice stopped")
    assert freed.attempt == 1  # its next run is a new one


@pytest.mark.system
def test_a_member_killed_in_its_tmux_pane_is_alarmed_and_its_tasks_freed(
    prefect_api: str,
    db_url: str,
    home: Path,
    tmux_socket: str,  # noqa: F811 (the fixture)
) -> None:
    from flows.spawn import spawn_member

    _outside_team("alice")
    spawned = spawn_member(TEAM, "alice", command="sleep 600")
    presence.heartbeat(TEAM, "alice")  # as its MCP calls do
    open_task = task.create_task(TEAM, title="Alice's part", assignees=["alice"])
    assert run_watchdog()["alarms"] == []  # its pane runs: all well
    killed = subprocess.run(["tmux", "-S", tmux_socket, "kill-pane", "-t", spawned.pane_id])
    assert killed.returncode == 0

    assert run_watchdog()["alarms"] == [f"offline:{TEAM}:alice"]
    [alarm] = [
        m.payload
        for m in inbox.messages(TEAM, "team-lead")
        if m.type == "system_alert" and m.payload["alert_type"] == "ALARM"
    ]
    assert f"tmux pane {spawned.pane_id} is gone" in alarm["message"], alarm
    assert str(open_task.id) in alarm["message"]
    freed = task.get_task(open_task.id)
    why = f"freed: alice's tmux pane {spawned.pane_id} is gone"
    assert (freed.status, freed.assignees, freed.reason) == ("pending", [], why)
    assert run_watchdog()["alarms"] == []  # once
    alice = next(m for m in teams.list_members(TEAM) if m.name == "alice")
    assert alice.is_active  # still a member: `teamflow member spawn` starts it again
