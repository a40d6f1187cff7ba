"""`teamflow mcp` with Prefect: an outside member's task is a team-task run that waits for its
report, its plan is a plan-approval run that the lead approves from the CLI, and the lead's
shutdown request over MCP is a shutdown-member run whose handshake the member completes, on
a real Prefect server with a real worker."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from cli_runner import subprocess_teamflow
from prefect_server import talk_to, wait_until
from teamflow_workers import teamflow_workers
from test_mcp import AGENT, TEAM, agent_teamflow, call, stdio, tmux_socket  # noqa: F401 (a fixture)

from models import approval, identity, membership, shutdown, task
from models import team as teams

pytestmark = pytest.mark.system  # a real Prefect server and worker for each test


@pytest.fixture
def prefect_env(
    deployed_prefect, db_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The module's Prefect server with teamflow's deployments and one worker of this test
    sharing this database; this process (and what it starts) talks to that server."""
    server = deployed_prefect
    shared = {"TEAMFLOW_DATABASE_URL": db_url, "TEAMFLOW_HOME": str(home)}
    with teamflow_workers(server, tmp_path, 1, env=shared):
        for key in ("PREFECT_API_URL", "PREFECT_HOME"):
            monkeypatch.setenv(key, server.env[key])
        yield server


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess_teamflow(args, stdin_devnull=False)


def test_an_outside_member_gets_its_plan_approved_and_shuts_down(
    prefect_env, tmp_path: Path
) -> None:
    began = datetime.now(UTC)  # the module's server holds its earlier tests' runs too
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
            "--teamflow",
            agent_teamflow(),
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

    # This process may have imported Prefect before (another test): point it here explicitly.
    with (
        talk_to(prefect_env.api),
        get_client(sync_client=True) as client,
    ):
        runs = wait_until(
            lambda: (
                (r := _since(client.read_flow_runs(limit=200), began))
                and all(x.state.is_final() for x in r)
                and r
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


def _since(runs: list, began: datetime) -> list:
    """The runs created since `began` (the module's server holds earlier tests' runs)."""
    return [r for r in runs if r.created is not None and r.created >= began]


def _runs(api: str, count: int, began: datetime) -> list:
    """The Prefect runs made on the server at `api` since `began`, once `count` of them are
    there and all ended."""
    from prefect.client.orchestration import get_client

    with (
        talk_to(api),
        get_client(sync_client=True) as client,
    ):
        try:
            return wait_until(
                lambda: (
                    len(r := _since(client.read_flow_runs(limit=200), began)) >= count
                    and all(x.state.is_final() for x in r)
                    and r
                ),
                240,
                "the runs to end",
            )
        except AssertionError:
            runs = _since(client.read_flow_runs(limit=200), began)
            seen = [(r.name, r.state.type.value) for r in runs]
            raise AssertionError(f"the runs did not all end: {seen}") from None


def _agent(name: str, work: Path) -> subprocess.Popen:
    """The example agent as member `name`, with a new token of its own, over stdio."""
    return subprocess.Popen(
        [sys.executable, str(AGENT), "--team", TEAM, "--name", name, "--work-dir",
         str(work), "--poll", "0.2", "--max-seconds", "500", "--teamflow", agent_teamflow()],
        env={**os.environ, "TEAMFLOW_TOKEN": identity.issue_token(TEAM, name)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.system
@pytest.mark.usefixtures("tmux_socket")
def test_a_team_of_outside_clients_runs_a_task_chain_as_prefect_runs(
    prefect_env, tmp_path: Path
) -> None:
    """The lead is an MCP session (stdio, the local user); its three teammates are the
    example agent: two started by hand with their tokens, one spawned by the lead in real
    tmux. A chain of three tasks (`add_blocked_by`), one plan approved by the lead over MCP,
    then a shutdown of everyone: every step a Prefect run, counted by status and metrics."""
    began = datetime.now(UTC)  # the module's server holds its earlier tests' runs too
    work = tmp_path / "work"
    program = (
        f"{sys.executable} {AGENT} --team {{team}} --name {{name}} --work-dir {work} "
        f"--poll 0.2 --max-seconds 500 --teamflow {shlex.quote(agent_teamflow())}"
    )
    chain = [("Plan, then count", "alice"), ("Count again", "bob"), ("Count last", "carol")]

    async def lead_builds() -> tuple[dict, list[dict]]:
        async with stdio() as lead:
            await call(lead, "team_create", team_name=TEAM, description="all outside")
            await call(
                lead, "spawn_teammate", team_name=TEAM, name="alice",
                prompt="You plan, then count.", plan_mode_required=True,
            )  # fmt: skip
            await call(lead, "spawn_teammate", team_name=TEAM, name="bob", prompt="You count.")
            carol = await call(
                lead, "spawn_teammate", team_name=TEAM, name="carol", prompt="You count.",
                backend_type="tmux", command=program,
            )  # fmt: skip
            ids = []
            for subject, _ in chain:
                made = await call(
                    lead, "task_create", team_name=TEAM, subject=subject,
                    description="one two three",
                )  # fmt: skip
                ids.append(made["id"])
            for before, after in itertools.pairwise(ids):
                await call(lead, "task_update", team_name=TEAM, task_id=after,
                           add_blocked_by=[before])  # fmt: skip
            given = [
                await call(lead, "task_update", team_name=TEAM, task_id=i, owner=owner)
                for i, (_, owner) in zip(ids, chain, strict=True)
            ]
            return carol, given

    carol, given = anyio.run(lead_builds)
    assert carol["tmux_pane_id"]
    assert given[0]["run"]["flow_run_id"]  # alice's task runs at once; the others wait
    assert [g["blockedBy"] for g in given[1:]] == [[given[0]["id"]], [given[1]["id"]]]
    agents = [_agent(name, work) for name in ("alice", "bob")]
    try:
        [plan] = wait_until(
            lambda: approval.list_requests(TEAM, pending=True), 240, "alice's plan request"
        )

        async def lead_decides_then_stops_everyone() -> list[dict]:
            async with stdio() as lead:
                decided = await call(
                    lead, "send_message", team_name=TEAM, type="plan_approval_response",
                    recipient="alice", request_id=plan.request_id, approve=True,
                    content="go ahead",
                )  # fmt: skip
                assert decided["status"] == "approved", decided
                await anyio.to_thread.run_sync(
                    lambda: wait_until(
                        lambda: all(task.get_task(g["id"]).status == "completed" for g in given),
                        300,
                        "the chain",
                    )
                )
                asked = []
                for _, name in chain:
                    answer = await call(
                        lead, "send_message", team_name=TEAM, type="shutdown_request",
                        recipient=name, content="the chain is done",
                    )  # fmt: skip
                    asked.append(answer)
                return asked

        asked = anyio.run(lead_decides_then_stops_everyone)
        for agent in agents:
            assert agent.wait(timeout=240) == 0, agent.stdout.read()
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    for request in asked:
        wait_until(
            lambda r=request: shutdown.get_shutdown(r["request_id"]).completed_at,
            240,
            "the shutdowns",
        )
        assert shutdown.get_shutdown(request["request_id"]).status == "approved"
    assert approval.get_request(plan.request_id).decided_by == "team-lead"

    # Every step a Prefect run: 3 team-task runs, the plan, 3 shutdowns. An outside member's
    # report completes its task; its run records the metrics when it sees the report, so the
    # metrics are read once every run has ended.
    runs = _runs(prefect_env.api, 7, began)
    state = json.loads(cli("status", TEAM, "--json").stdout)
    assert (state["active_members"], state["total_members"]) == (["team-lead"], 4)
    measured = cli("metrics", TEAM, "--json")
    assert measured.returncode == 0, measured.stderr
    members = {r["member"]: r for r in json.loads(measured.stdout)["members"]}
    assert [members[name]["tasks"] for _, name in chain] == [1, 1, 1], members
    assert members["alice"]["plans"] == 1

    kinds = sorted((r.name.split(" ")[0], r.state.type.value) for r in runs)
    tasks = [k for k in kinds if k[0] not in ("plan", "shutdown")]
    assert tasks == [(tasks[0][0], "COMPLETED")] * 3, kinds
    assert [k for k in kinds if k[0] in ("plan", "shutdown")] == [
        ("plan", "COMPLETED"), *[("shutdown", "COMPLETED")] * 3
    ], kinds  # fmt: skip
    task_runs = {str(r.id) for r in runs if r.name.split(" ")[0] not in ("plan", "shutdown")}
    assert given[0]["run"]["flow_run_id"] in task_runs
