"""`teamflow mcp` with Prefect: an outside member's task is a team-task run that waits for its
report, its plan is a plan-approval run that the lead approves from the CLI, and the lead's
shutdown request over MCP is a shutdown-member run whose handshake the member completes, on
a real Prefect server with a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from prefect_server import prefect_server, wait_until
from teamflow_workers import register_deployments, teamflow_workers
from test_mcp import AGENT, TEAM, call, stdio

from models import approval, identity, membership, shutdown, task
from models import team as teams


@pytest.fixture
def prefect_env(db_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A Prefect server with teamflow's deployments and one worker sharing this database;
    this process (and what it starts) talks to that server."""
    shared = {"TEAMFLOW_DATABASE_URL": db_url, "TEAMFLOW_HOME": str(home)}
    with prefect_server(tmp_path) as server:
        register_deployments(server, tmp_path / "deploy.log")
        with teamflow_workers(server, tmp_path, 1, env=shared):
            for key in ("PREFECT_API_URL", "PREFECT_HOME"):
                monkeypatch.setenv(key, server.env[key])
            yield server


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_an_outside_member_gets_its_plan_approved_and_shuts_down(
    prefect_env, tmp_path: Path
) -> None:
    membership.create_team(TEAM, description="outside members with runs")
    membership.add_member(
        TEAM, "alice", model="sonnet", prompt="p", plan_mode_required=True, runtime={"kind": "mcp"}
    )

    async def lead_gives_work() -> dict:
        async with stdio() as lead:
            made = await call(lead, "task_create", team_name=TEAM, subject="Count the words")
            return await call(
                lead, "task_update", team_name=TEAM, task_id=made["id"], owner="alice"
            )

    given = anyio.run(lead_gives_work)
    assert given["run"]["flow_run_id"], given  # its team-task run waits for alice's report
    work = task.get_task(given["id"])
    token = identity.issue_token(TEAM, "alice")
    agent = subprocess.Popen(
        [
            sys.executable,
            str(AGENT),
            "--team",
            TEAM,
            "--name",
            "alice",
            "--work-dir",
            str(tmp_path / "work"),
            "--poll",
            "0.2",
            "--max-seconds",
            "400",
        ],
        env={**os.environ, "TEAMFLOW_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        plans = wait_until(
            lambda: approval.list_requests(TEAM, pending=True), 240, "alice's plan request"
        )
        assert plans[0].member == "alice" and plans[0].flow_run_id
        approved = cli("plan", "approve", plans[0].request_id, "--feedback", "go ahead")
        assert approved.returncode == 0, approved.stderr
        wait_until(lambda: task.get_task(work.id).status == "completed", 240, "the task's end")

        async def lead_asks() -> dict:
            async with stdio() as lead:
                return await call(
                    lead,
                    "send_message",
                    team_name=TEAM,
                    type="shutdown_request",
                    recipient="alice",
                    content="the work is done",
                )

        asked = anyio.run(lead_asks)
        assert agent.wait(timeout=240) == 0, agent.stdout.read()
    finally:
        if agent.poll() is None:
            agent.kill()
    wait_until(lambda: shutdown.get_shutdown(asked["request_id"]).completed_at, 240, "the shutdown")
    assert shutdown.get_shutdown(asked["request_id"]).status == "approved"
    assert not next(m for m in teams.list_members(TEAM) if m.name == "alice").is_active
    decided = approval.get_request(plans[0].request_id)
    assert (decided.status, decided.decided_by, decided.feedback) == (
        "approved",
        "team-lead",
        "go ahead",
    )
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # This process may have imported Prefect before (another test): point it here explicitly.
    with (
        temporary_settings(updates={PREFECT_API_URL: prefect_env.api}),
        get_client(sync_client=True) as client,
    ):
        runs = wait_until(
            lambda: (
                (r := client.read_flow_runs(limit=20)) and all(x.state.is_final() for x in r) and r
            ),
            120,
            "the runs to end",
        )

    def kind(name: str) -> str:
        return name.split(" ")[0] if name.startswith(("plan ", "shutdown ")) else "task"

    states = sorted((kind(r.name), r.state.type.value) for r in runs)
    assert states == [("plan", "COMPLETED"), ("shutdown", "COMPLETED"), ("task", "COMPLETED")], (
        json.dumps(states)
    )
    assert str(next(r for r in runs if kind(r.name) == "task").id) == given["run"]["flow_run_id"]
