"""The plan-approval flow on a real Prefect server, decided the way a person decides.

One Prefect test server for the module; each test runs the flow in a background thread,
as a worker would, and decides from outside: the CLI in a real process, or
`resume_flow_run` (what the Prefect UI's form calls) from the test's own thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team
from prefect_server import Run, wait_until

from models import approval, inbox
from models import team as teams
from models.approval import ApprovalStatus
from models.db import session_scope

pytestmark = pytest.mark.usefixtures("db_url", "home")

# Tests of what Prefect shows or the CLI refuses run on SQLite only; the database side of
# every step is tested on both databases in test_approval_store.py.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

ROOT = Path(__file__).resolve().parent.parent
PLAN = "## Analysis Plan\n\n1. Load Q4 sales data\n2. Calculate revenue trends"


def start(request_id: str, **kwargs: Any) -> Run:
    from flows.plan_approval import plan_approval

    args = {"team": TEAM, "member": "analyst-1", "plan": PLAN, "summary": "Q4 plan", **kwargs}
    return Run(plan_approval(request_id=request_id, **args))


def flow_run(run_id: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id))


def wait_paused(request_id: str, *, after: Any = None, timeout: float = 30) -> Any:
    """The request's flow run once it is paused (in a pause other than `after`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = [r for r in approval.list_requests(TEAM) if r.request_id == request_id]
        if rows and rows[0].flow_run_id:
            run = flow_run(rows[0].flow_run_id)
            if run.state.is_paused() and (after is None or run.state.id != after.state.id):
                return run
        time.sleep(0.05)
    raise AssertionError(f"the run of {request_id} did not pause within {timeout} s")


def teamflow(*args: str, api: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return run_teamflow(args, env, cwd=ROOT, stdin_devnull=False)


def responses(member: str = "analyst-1") -> list[dict]:
    return [r.payload for r in inbox.messages(TEAM, member) if r.type == "plan_approval_response"]


@sqlite_only
def test_the_paused_run_shows_the_decision_form_with_the_plan(prefect_api: str) -> None:
    from prefect.client.orchestration import get_client

    research_team()
    run = start("plan-form-1", timeout_s=60)
    paused = wait_paused("plan-form-1")
    keyset = paused.state.state_details.run_input_keyset
    with get_client(sync_client=True) as client:
        schema = json.loads(client.read_flow_run_input(paused.id, keyset["schema"]))
        description = json.loads(client.read_flow_run_input(paused.id, keyset["description"]))
    assert schema["title"] == "PlanDecision"
    fields = schema["properties"]
    assert list(fields) == ["decision", "feedback", "approver"]
    # A required choice with nothing preset (a select in the UI), not a toggle that is off.
    assert schema["required"] == ["decision"]
    assert (fields["decision"]["enum"], "default" in fields["decision"]) == (
        ["approve", "deny"], False,
    )  # fmt: skip
    # Plain text fields, not a `str | None` type switch; the approver starts as the lead.
    assert (fields["feedback"]["type"], fields["feedback"]["default"]) == ("string", "")
    assert (fields["approver"]["type"], fields["approver"]["default"]) == ("string", "coordinator")
    assert all(field.get("description") for field in fields.values())
    assert description.startswith("## Plan of analyst-1 (research-team)")
    assert PLAN in description
    assert "**Who may decide:** coordinator " in description
    assert "teamflow plan approve plan-form-1" in description
    assert {"team:research-team", "member:analyst-1"} <= set(paused.tags)

    from prefect.flow_runs import resume_flow_run

    resume_flow_run(paused.id, run_input={"decision": "approve", "approver": "coordinator"})
    assert run.result()["status"] == ApprovalStatus.APPROVED


def test_cli_approval_resumes_the_run_which_returns_the_response(prefect_api: str) -> None:
    research_team()
    run = start("plan-cli-1")
    paused = wait_paused("plan-cli-1")
    result = teamflow("plan", "approve", "plan-cli-1", "--feedback", "Add Q3", api=prefect_api)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "plan plan-cli-1 of analyst-1 approved by coordinator"
    assert result.stderr == ""
    outcome = run.result()
    assert outcome == {
        "type": "plan_approval_response",
        "requestId": "plan-cli-1",
        "approve": True,
        "feedback": "Add Q3",
        "timestamp": outcome["timestamp"],
        "status": "approved",
        "decidedBy": "coordinator",
        "cause": "approved by coordinator",
        "revision": 1,
    }
    assert [r["requestId"] for r in responses()] == ["plan-cli-1"]
    assert flow_run(str(paused.id)).state.is_completed()


@sqlite_only
def test_denied_plan_is_revised_and_the_revision_approved(prefect_api: str) -> None:
    from prefect.flow_runs import resume_flow_run

    research_team()
    first = start("plan-rev-1")
    wait_paused("plan-rev-1")
    denied = teamflow("plan", "deny", "plan-rev-1", "--feedback", "Regions first", api=prefect_api)
    assert denied.returncode == 0, denied.stderr
    assert first.result()["approve"] is False
    assert responses()[-1]["feedback"] == "Regions first"

    second = start("plan-rev-2", plan=PLAN + "\n0. Regions", previous_request_id="plan-rev-1")
    paused = wait_paused("plan-rev-2")
    resume_flow_run(paused.id, run_input={"decision": "approve", "approver": "coordinator"})
    outcome = second.result()
    assert (outcome["approve"], outcome["revision"]) == (True, 2)
    assert approval.get_request("plan-rev-2").previous_request_id == "plan-rev-1"
    # The form proves nobody: the decision is on record as the UI's, unverified.
    row = approval.get_request("plan-rev-2")
    assert (row.decided_via, row.decided_identity) == ("ui", "unverified")
    assert approval.get_request("plan-rev-1").decided_via == "cli"


@sqlite_only
def test_a_team_that_denies_ui_decisions_refuses_the_form_and_takes_the_api(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient
    from prefect.flow_runs import resume_flow_run

    from flows.api.app import build
    from models import team, users

    monkeypatch.setenv("TEAMFLOW_PAUSE_POLL_SECONDS", "600")
    from test_api_links import Receiver

    research_team()
    receiver = Receiver()
    team.update_settings(TEAM, {"ui_decisions": "deny", "notify_webhook": receiver.url})
    run = start("plan-ui-1")
    paused = wait_paused("plan-ui-1")
    # The run told the deciders through the team's webhook, with a link each.
    receiver.close()
    [notice] = receiver.bodies
    assert notice["plan"]["requestId"] == "plan-ui-1" and "coordinator" in notice["links"]
    resume_flow_run(paused.id, run_input={"decision": "approve", "approver": "coordinator"})
    again = wait_paused("plan-ui-1", after=paused)
    told = inbox.messages(TEAM, "coordinator")[-1]
    assert "This form may not decide" in told.text and "/api/v1/plans/plan-ui-1" in told.text
    assert approval.get_request("plan-ui-1").status == ApprovalStatus.PENDING

    _, token = users.add_user("lena", "lead", team=TEAM)
    with TestClient(build()) as api:
        answer = api.post(
            "/api/v1/plans/plan-ui-1/decision",
            json={"approve": True, "feedback": "go"},
            headers={"Authorization": f"Bearer {token}"},
        ).json()
    assert answer["status"] == "success", answer
    outcome = run.result(timeout=120)
    assert (outcome["status"], outcome["decidedBy"]) == ("approved", "coordinator")
    row = approval.get_request("plan-ui-1")
    assert (row.decided_via, row.decided_identity) == ("api", "user:lena")
    assert flow_run(str(again.id)).state.is_completed()


def test_an_approver_who_may_not_decide_is_told_and_the_run_pauses_again(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.flow_runs import resume_flow_run

    # The fallback read of waiting runs is ten minutes away: a resume reaches the run on
    # the event stream, or the run does not finish in time.
    monkeypatch.setenv("TEAMFLOW_PAUSE_POLL_SECONDS", "600")
    research_team()
    run = start("plan-deny-1")
    paused = wait_paused("plan-deny-1")

    refused = teamflow("plan", "approve", "plan-deny-1", "--as", "analyst-2", api=prefect_api)
    assert refused.returncode == 1
    assert "analyst-2 may not decide plans" in refused.stderr
    assert flow_run(str(paused.id)).state.is_paused()

    # The Prefect UI's form lets anyone type a name: the run checks it and pauses again.
    resume_flow_run(paused.id, run_input={"decision": "approve", "approver": "analyst-2"})
    again = wait_paused("plan-deny-1", after=paused)
    told = inbox.messages(TEAM, "analyst-2")[-1]
    assert told.sender == "system"
    assert told.text.startswith("Decision on plan plan-deny-1 refused: analyst-2 may not")
    assert approval.get_request("plan-deny-1").status == ApprovalStatus.PENDING
    assert responses() == []

    resume_flow_run(
        again.id, run_input={"decision": "deny", "feedback": "Smaller", "approver": "coordinator"}
    )
    outcome = run.result(timeout=120)
    assert (outcome["status"], outcome["decidedBy"]) == ("denied", "coordinator")
    assert len(responses()) == 1


def run_logs(run_id: Any) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    return [log.message for log in logs]


@sqlite_only
def test_a_denial_without_feedback_is_refused_in_the_run_which_waits_again(
    prefect_api: str,
) -> None:
    from prefect.flow_runs import resume_flow_run

    research_team()
    run = start("plan-nofb-1", timeout_s=120)
    paused = wait_paused("plan-nofb-1")
    # What the form sends when the feedback box is left empty (or holds only blanks).
    resume_flow_run(paused.id, run_input={"decision": "deny", "approver": "coordinator"})
    again = wait_paused("plan-nofb-1", after=paused)
    # The run's logs reach the server in batches (every 2 s), after the run has paused again.
    wait_until(
        lambda: any(
            "Decision of coordinator refused: a denial needs feedback" in line
            for line in run_logs(again.id)
        ),
        60,
        "the refusal in the run's logs",
    )
    assert approval.get_request("plan-nofb-1").status == ApprovalStatus.PENDING
    assert responses() == []

    resume_flow_run(
        again.id, run_input={"decision": "deny", "feedback": "  ", "approver": "coordinator"}
    )
    third = wait_paused("plan-nofb-1", after=again)
    resume_flow_run(
        third.id, run_input={"decision": "deny", "feedback": "Regions", "approver": "coordinator"}
    )
    outcome = run.result()
    assert (outcome["status"], outcome["feedback"]) == ("denied", "Regions")
    assert len(responses()) == 1


@sqlite_only
def test_cli_denial_with_empty_feedback_is_refused(prefect_api: str) -> None:
    research_team()
    approval.request_plan(TEAM, "analyst-1", PLAN, "Q4", request_id="plan-nofb-2")
    denied = teamflow("plan", "deny", "plan-nofb-2", "--feedback", " ", api=prefect_api)
    assert denied.returncode == 1
    assert denied.stderr == "teamflow: error: a denial needs feedback: say what to change\n"
    assert approval.get_request("plan-nofb-2").status == ApprovalStatus.PENDING


def test_concurrent_cli_decisions_on_a_waiting_run_make_one_decision(prefect_api: str) -> None:
    research_team()
    run = start("plan-race-1")
    wait_paused("plan-race-1")
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    race = (
        "import sys, time\nfrom flows.cli import main\nimport prefect.flow_runs\n"
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
        "sys.argv = ['teamflow', *sys.argv[2:]]\nmain()\n"
    )
    at = f"{time.time() + 3.0:.3f}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", race, at, "plan", *verdict, "plan-race-1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for verdict in (["approve"], ["deny", "--feedback", "No"])
    ]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    outcome = run.result()
    winner = next(out for code, out, _ in results if code == 0)
    assert winner.strip().endswith(f"{outcome['status']} by coordinator")
    assert len(responses()) == 1
    assert responses()[0]["approve"] is outcome["approve"]


@pytest.mark.parametrize(
    ("policy", "status", "cause"),
    [
        ("deny", "denied", "no decision within 1 s: denied by the timeout policy"),
        ("approve", "approved", "no decision within 1 s: approved by the timeout policy"),
        ("escalate", "denied", "no decision within 2 s, escalated to the lead: denied"),
    ],
)
def test_no_decision_in_time_applies_the_policy(
    prefect_api: str, policy: str, status: str, cause: str
) -> None:
    research_team()
    with session_scope() as s:
        row = teams.get_team(TEAM, session=s)
        row.settings = {"plan_escalation_seconds": 1}
    run = start(f"plan-{policy}-1", timeout_s=1, policy=policy)
    outcome = run.result()
    assert (outcome["status"], outcome["decidedBy"], outcome["cause"]) == (status, "system", cause)
    alarms = [m for m in inbox.messages(TEAM, "coordinator") if m.type == "system_alert"]
    assert len(alarms) == (1 if policy == "escalate" else 0)
    assert len(responses()) == 1


def without_deployment(name: str) -> None:
    """Removes a deployment another test of this module may have registered."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectNotFound):
        client.delete_deployment(client.read_deployment_by_name(name).id)


@sqlite_only
def test_plan_request_without_teamflow_up_says_so(prefect_api: str) -> None:
    research_team()
    without_deployment("plan-approval/plan-approval")
    result = teamflow(
        "plan", "request", TEAM, "--from", "analyst-1", "--plan", PLAN, "--summary", "Q4",
        api=prefect_api,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith("teamflow: error: cannot start the plan-approval run: ")
    assert "teamflow up" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert approval.list_requests(TEAM) == []


def run_as_a_worker(flow: Any, run_id: str) -> Run:
    """Runs a deployment's flow run in a thread, as teamflow's worker does."""
    from prefect.flow_engine import run_flow

    async def execute() -> Any:
        return await run_flow(flow, flow_run=flow_run(run_id), return_type="state")

    return Run(execute())


@sqlite_only
def test_plan_request_starts_a_run_that_the_cli_decision_completes(prefect_api: str) -> None:
    from flows.plan_approval import plan_approval

    research_team()
    plan_approval.to_deployment(name="plan-approval").apply()
    asked = teamflow(
        "plan", "request", TEAM, "--from", "analyst-1", "--plan", PLAN, "--summary", "Q4",
        "--timeout", "120", "--json", api=prefect_api,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    started = json.loads(asked.stdout)
    assert started["url"].endswith(f"/runs/flow-run/{started['flowRunId']}")
    run = run_as_a_worker(plan_approval, started["flowRunId"])
    paused = wait_paused(started["requestId"])
    assert str(paused.id) == started["flowRunId"]
    assert {"team:research-team", "member:analyst-1"} <= set(paused.tags)
    approved = teamflow("plan", "approve", started["requestId"], api=prefect_api)
    assert approved.returncode == 0, approved.stderr
    assert run.result().is_completed()
    assert responses()[-1]["requestId"] == started["requestId"]
    assert approval.get_request(started["requestId"]).deadline is not None


@sqlite_only
def test_cancelling_a_waiting_run_ends_its_wait(prefect_api: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    research_team()
    run = start("plan-cancel-1", timeout_s=60)
    paused = wait_paused("plan-cancel-1")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(paused.id, Cancelling())
    run.thread.join(10)
    assert not run.thread.is_alive()
    assert flow_run(str(paused.id)).state.is_cancelled()
    assert approval.get_request("plan-cancel-1").status == ApprovalStatus.PENDING


@sqlite_only
def test_the_clock_resumes_every_decided_suspended_run_page_by_page(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Suspended runs whose request was decided while nobody resumed them (a decision made
    while Prefect was away) are found across several pages of Prefect's API, and resumed."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.states import Running, Suspended

    from flows import timers, waits
    from flows.plan_approval import plan_approval

    monkeypatch.setattr(waits, "PAGE", 2)  # five runs take three pages
    research_team()

    async def suspended_runs(count: int) -> list[str]:
        """`count` runs of a `plan-approval` deployment, suspended as a deployed run leaves
        itself (only a deployment's run can suspend); none of them executes."""
        async with get_client() as client:
            flow_id = await client.create_flow(plan_approval)
            deployment = await client.create_deployment(flow_id=flow_id, name="page-test")
            ids = []
            for _ in range(count):
                run = await client.create_flow_run_from_deployment(deployment)
                await client.set_flow_run_state(run.id, Running(), force=True)
                await client.set_flow_run_state(run.id, Suspended(timeout_seconds=3600))
                ids.append(str(run.id))
            return ids

    runs = asyncio.run(suspended_runs(5))
    for n, run_id in enumerate(runs):
        request = approval.request_plan(
            TEAM, "analyst-1", PLAN, f"plan {n}", request_id=f"plan-page-{n}", flow_run_id=run_id
        )
        if n != 2:  # one stays undecided: its run stays suspended
            approval.decide(request.request_id, approve=True, decider="coordinator")

    assert asyncio.run(timers.resume_decided_suspended_runs()) == 4
    states = {run_id: flow_run(run_id).state.name for run_id in runs}
    assert states == {
        run_id: ("Suspended" if n == 2 else "Resuming") for n, run_id in enumerate(runs)
    }
