"""Plan approvals and shutdowns in the database: decided once, answered once, on both databases.

These tests use the stores (and the CLI in real processes) without Prefect; the flows that
wait on them are tested in test_plan_approval.py and test_shutdown.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team
from freezegun import freeze_time

from models import approval, inbox, inbox_message, plan_timeout, shutdown
from models import team as teams
from models.approval import AlreadyDecided, ApprovalStatus, NotAllowed
from models.base import utcnow
from models.db import session_scope
from models.inbox_message import InboxError
from models.plan_timeout import TimeoutAction
from models.shutdown import ShutdownError, ShutdownStatus
from models.team_settings import ApprovalError, TimeoutPolicy

pytestmark = pytest.mark.usefixtures("db_url", "home")

# CLI wording and imports are the same on both databases: those tests run on SQLite only.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

PLAN = "## Analysis Plan\n\n1. Load Q4 sales data\n2. Calculate revenue trends"
ROOT = Path(__file__).resolve().parent.parent


def configure(**settings: object) -> None:
    """Sets team settings of research-team (approvers, timeouts, ...)."""
    with session_scope() as s:
        row = teams.get_team(TEAM, session=s)
        row.settings = {**row.settings, **settings}
        s.add(row)


def responses(member: str = "analyst-1") -> list[dict]:
    """The plan_approval_response payloads in a member's inbox."""
    rows = inbox.messages(TEAM, member)
    return [r.payload for r in rows if r.type == "plan_approval_response"]


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return run_teamflow(args, cwd=ROOT, stdin_devnull=False)


# --- statuses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enum", "sets"),
    [
        (ApprovalStatus, (ApprovalStatus.open(), ApprovalStatus.decided())),
        (ShutdownStatus, (ShutdownStatus.open(), ShutdownStatus.done())),
    ],
)
def test_status_sets_cover_their_enum_without_overlap(enum: type, sets: tuple) -> None:
    first, second = sets
    assert first | second == set(enum)
    assert not first & second


# --- requests and decisions ----------------------------------------------------------------


def test_request_goes_to_the_leads_inbox_as_the_seeds_plan_approval_request() -> None:
    research_team()
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 analysis plan", timeout=600)
    assert row.status == ApprovalStatus.PENDING
    assert row.request_id.startswith("plan-")
    assert row.deadline - row.requested_at == timedelta(seconds=600)
    assert row.timeout_policy == TimeoutPolicy.DENY
    message = inbox.messages(TEAM, "coordinator")[-1]
    assert message.type == "plan_approval_request"
    assert message.sender == "analyst-1"
    assert json.loads(message.text) == {
        "type": "plan_approval_request",
        "from": "analyst-1",
        "plan": PLAN,
        "summary": "Q4 analysis plan",
        "timestamp": message.payload["timestamp"],
        "requestId": row.request_id,
    }
    assert [r.request_id for r in approval.list_requests(TEAM, pending=True)] == [row.request_id]


def test_lead_approves_and_the_member_gets_one_response() -> None:
    research_team()
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan")
    decided = approval.decide(
        row.request_id, approve=True, decider="coordinator", feedback="Also compare with Q3."
    )
    assert decided.status == ApprovalStatus.APPROVED
    assert decided.decided_by == "coordinator"
    assert decided.decided_at is not None and decided.responded_at is not None
    assert responses() == [
        {
            "type": "plan_approval_response",
            "requestId": row.request_id,
            "approve": True,
            "feedback": "Also compare with Q3.",
            "timestamp": responses()[0]["timestamp"],
        }
    ]
    assert approval.respond(row.request_id) is None  # sent already: nothing more goes out
    assert len(responses()) == 1
    assert approval.list_requests(TEAM, pending=True) == []


def test_second_decision_is_refused_saying_who_decided_when() -> None:
    research_team()
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan")
    first = approval.decide(row.request_id, approve=True, decider="coordinator")
    with pytest.raises(AlreadyDecided) as refused:
        approval.decide(row.request_id, approve=False, decider="coordinator", feedback="no")
    stamp = approval._iso(first.decided_at)
    assert (
        str(refused.value)
        == f"plan {row.request_id} was already approved by coordinator at {stamp}"
    )
    assert approval.get_request(row.request_id).status == ApprovalStatus.APPROVED
    assert len(responses()) == 1


def test_only_the_lead_and_configured_approvers_decide_and_never_their_own_plan() -> None:
    research_team(analysts=3)
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan")
    with pytest.raises(
        NotAllowed, match=r"analyst-2 may not decide plans .* \(allowed: coordinator\)"
    ):
        approval.decide(row.request_id, approve=True, decider="analyst-2")
    configure(approvers=["analyst-1", "analyst-2"])
    with pytest.raises(NotAllowed, match="analyst-1 may not decide its own plan"):
        approval.decide(row.request_id, approve=True, decider="analyst-1")
    assert approval.get_request(row.request_id).status == ApprovalStatus.PENDING
    assert responses() == []
    decided = approval.decide(row.request_id, approve=True, decider="analyst-2")
    assert decided.decided_by == "analyst-2"
    assert inbox.messages(TEAM, "analyst-1")[-1].sender == "analyst-2"


def test_the_lead_needs_no_approval_and_shut_down_members_cannot_ask() -> None:
    research_team()
    with pytest.raises(ApprovalError, match="leads team"):
        approval.request_plan(TEAM, "coordinator", PLAN, "mine")
    teams.set_member(TEAM, "analyst-2", is_active=False)
    with pytest.raises(ValueError, match="shut down"):
        approval.request_plan(TEAM, "analyst-2", PLAN, "late")


def test_denied_plans_are_revised_up_to_the_limit_then_rejected() -> None:
    research_team()
    first = approval.request_plan(TEAM, "analyst-1", PLAN, "v1")
    approval.decide(
        first.request_id, approve=False, decider="coordinator", feedback="Regions first."
    )
    assert responses()[-1]["approve"] is False
    assert responses()[-1]["feedback"] == "Regions first."

    second = approval.request_plan(
        TEAM, "analyst-1", PLAN + "\n0. Regions", "v2", previous_request_id=first.request_id
    )
    assert (second.revision, second.previous_request_id) == (2, first.request_id)
    with pytest.raises(ApprovalError, match="revised already"):
        approval.request_plan(
            TEAM, "analyst-1", PLAN, "v2 again", previous_request_id=first.request_id
        )
    with pytest.raises(ApprovalError, match="only a denied plan can be revised"):
        approval.request_plan(TEAM, "analyst-1", PLAN, "v3", previous_request_id=second.request_id)
    approval.decide(second.request_id, approve=False, decider="coordinator", feedback="Segments?")

    third = approval.request_plan(
        TEAM, "analyst-1", PLAN, "v3", previous_request_id=second.request_id
    )
    last = approval.decide(third.request_id, approve=False, decider="coordinator", feedback="No.")
    assert third.revision == 3
    assert last.status == ApprovalStatus.REJECTED
    assert last.cause == "denied by coordinator at revision 3: the revision limit (3) is reached"
    assert responses()[-1]["approve"] is False
    assert "revision limit is reached" in responses()[-1]["feedback"]
    with pytest.raises(ApprovalError, match=f"plan {third.request_id} was rejected: denied by"):
        approval.request_plan(TEAM, "analyst-1", PLAN, "v4", previous_request_id=third.request_id)
    assert [r.status for r in approval.list_requests(TEAM)] == ["denied", "denied", "rejected"]


def test_the_revision_limit_is_a_team_setting() -> None:
    research_team()
    configure(plan_max_revisions=1)
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "only chance")
    assert approval.decide(row.request_id, approve=False, decider="coordinator").status == (
        ApprovalStatus.REJECTED
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"plan_timeout_policy": "shrug"}, "plan_timeout_policy 'shrug' is not one of"),
        ({"approvers": "analyst-1"}, "approvers must be a list"),
        ({"plan_timeout_seconds": -5}, "plan_timeout_seconds must be a positive number"),
    ],
)
def test_malformed_team_settings_are_refused_by_name(setting: dict, message: str) -> None:
    research_team()
    configure(**setting)
    with pytest.raises(ApprovalError, match=message):
        approval.request_plan(TEAM, "analyst-1", PLAN, "plan")


# --- timeouts (pure time logic, under freezegun) -------------------------------------------


def test_timeout_policy_deny_denies_at_the_deadline_with_its_cause() -> None:
    research_team()
    with freeze_time("2026-02-16T10:00:00Z") as clock:
        row = approval.request_plan(TEAM, "analyst-1", PLAN, "plan", timeout=300, policy="deny")
        clock.tick(timedelta(seconds=299))
        assert plan_timeout.apply_timeout(row.request_id) is TimeoutAction.NONE
        clock.tick(timedelta(seconds=1))
        assert plan_timeout.apply_timeout(row.request_id) is TimeoutAction.DENY
    row = approval.get_request(row.request_id)
    assert (row.status, row.decided_by) == (ApprovalStatus.DENIED, approval.SYSTEM)
    assert row.cause == "no decision within 5 min: denied by the timeout policy"
    assert responses()[-1]["approve"] is False
    assert responses()[-1]["feedback"] == row.cause
    with pytest.raises(AlreadyDecided, match=r"already denied by system at .* \(no decision"):
        approval.decide(row.request_id, approve=True, decider="coordinator")


def test_timeout_policy_approve_approves_at_the_deadline() -> None:
    research_team()
    configure(plan_timeout_policy="approve", plan_timeout_seconds=60)
    with freeze_time("2026-02-16T10:00:00Z") as clock:
        row = approval.request_plan(TEAM, "analyst-1", PLAN, "plan")
        clock.tick(timedelta(minutes=1))
        assert plan_timeout.expire_due() == [row.request_id]
    row = approval.get_request(row.request_id)
    assert row.status == ApprovalStatus.APPROVED
    assert row.cause == "no decision within 60 s: approved by the timeout policy"
    assert responses()[-1]["approve"] is True


def test_timeout_policy_escalate_alarms_the_lead_once_then_denies_at_the_hard_limit() -> None:
    research_team()
    configure(plan_timeout_policy="escalate", plan_escalation_seconds=600)
    with freeze_time("2026-02-16T10:00:00Z") as clock:
        row = approval.request_plan(TEAM, "analyst-1", PLAN, "plan", timeout=300)
        assert row.hard_deadline - row.deadline == timedelta(seconds=600)
        clock.tick(timedelta(seconds=300))
        assert plan_timeout.apply_timeout(row.request_id) is TimeoutAction.ESCALATE
        assert plan_timeout.apply_timeout(row.request_id) is TimeoutAction.NONE  # alarmed once
        assert approval.get_request(row.request_id).status == ApprovalStatus.PENDING
        clock.tick(timedelta(seconds=599))
        assert plan_timeout.expire_due() == []
        clock.tick(timedelta(seconds=1))
        assert plan_timeout.apply_timeout(row.request_id) is TimeoutAction.DENY_AFTER_ESCALATION
    alarms = [m for m in inbox.messages(TEAM, "coordinator") if m.type == "system_alert"]
    assert len(alarms) == 1
    assert alarms[0].sender == "system"
    assert alarms[0].payload["alert_type"] == "ALARM"
    assert alarms[0].to_notification().payload.alert_type == "ALARM"
    row = approval.get_request(row.request_id)
    assert row.status == ApprovalStatus.DENIED
    assert row.cause == "no decision within 15 min, escalated to the lead: denied"


def test_a_decision_before_the_deadline_leaves_nothing_for_the_timeout() -> None:
    research_team()
    with freeze_time("2026-02-16T10:00:00Z") as clock:
        row = approval.request_plan(TEAM, "analyst-1", PLAN, "plan", timeout=60, policy="approve")
        approval.decide(row.request_id, approve=False, decider="coordinator", feedback="no")
        clock.tick(timedelta(minutes=5))
        assert plan_timeout.apply_timeout(row.request_id) is TimeoutAction.NONE
    assert approval.get_request(row.request_id).status == ApprovalStatus.DENIED
    assert len(responses()) == 1


# --- the CLI, in real processes ------------------------------------------------------------


@sqlite_only
def test_cli_lists_approves_and_refuses_a_second_decision_in_one_line() -> None:
    research_team()
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan")
    listed = teamflow("plan", "list", TEAM, "--pending", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["requestId"] for r in json.loads(listed.stdout)] == [row.request_id]

    refused = teamflow("plan", "approve", row.request_id, "--as", "analyst-2")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "teamflow: error: analyst-2 may not decide plans of team research-team "
        "(allowed: coordinator)"
    ]
    approved = teamflow("plan", "approve", row.request_id, "--feedback", "Go")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"plan {row.request_id} of analyst-1 approved by coordinator"
    again = teamflow("plan", "deny", row.request_id, "--feedback", "Wait")
    assert again.returncode == 1
    assert again.stderr.strip().startswith(
        f"teamflow: error: plan {row.request_id} was already approved by coordinator at "
    )
    assert len(again.stderr.strip().splitlines()) == 1
    assert responses()[-1]["feedback"] == "Go"


@sqlite_only
def test_deny_needs_feedback() -> None:
    research_team()
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan")
    result = teamflow("plan", "deny", row.request_id)
    assert result.returncode == 2
    assert approval.get_request(row.request_id).status == ApprovalStatus.PENDING


RACE = """
import sys, time
from flows.cli import main
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))
sys.argv = ["teamflow", *sys.argv[2:]]
main()
"""


def test_concurrent_approve_and_deny_from_two_processes_make_one_decision() -> None:
    research_team()
    requests = [approval.request_plan(TEAM, "analyst-1", PLAN, f"plan {i}") for i in range(3)]
    start = f"{time.time() + 3.0:.3f}"  # every process has imported everything by then
    races = {
        row.request_id: [
            subprocess.Popen(
                [sys.executable, "-c", RACE, start, "plan", *verdict, row.request_id],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for verdict in (["approve"], ["deny", "--feedback", "No"])
        ]
        for row in requests
    }
    for request_id, procs in races.items():
        results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
        assert sorted(code for code, _, _ in results) == [0, 1], results
        loser = next(err for code, _, err in results if code == 1)
        assert f"plan {request_id} was already" in loser
        decided = approval.get_request(request_id)
        assert decided.status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)
        answers = [r for r in responses() if r["requestId"] == request_id]
        assert len(answers) == 1
        assert answers[0]["approve"] is (decided.status == ApprovalStatus.APPROVED)


# --- shutdowns -----------------------------------------------------------------------------


def test_shutdown_request_reaches_the_member_with_its_request_id() -> None:
    research_team()
    row = shutdown.request_shutdown(TEAM, "analyst-1", reason="tasks_complete", timeout=30)
    assert row.status == ShutdownStatus.REQUESTED
    assert row.request_id.startswith("req-shutdown-")
    message = inbox.messages(TEAM, "analyst-1")[-1]
    assert (message.type, message.sender, message.color) == (
        "shutdown_request",
        "coordinator",
        "yellow",
    )
    assert message.meta == {"request_id": row.request_id}
    assert message.payload["requestId"] == row.request_id
    with pytest.raises(ShutdownError, match="under way already"):
        shutdown.request_shutdown(TEAM, "analyst-1")
    with pytest.raises(ShutdownError, match="leads team"):
        shutdown.request_shutdown(TEAM, "coordinator")


def test_approved_shutdown_makes_the_member_inactive_with_its_metadata() -> None:
    from models.task import TaskMetricsRow

    research_team()
    with session_scope() as s:
        for tokens in (5000, 7500):
            s.add(TaskMetricsRow(team=TEAM, member="analyst-1", tokens=tokens, ended_at=utcnow()))
    row = shutdown.request_shutdown(TEAM, "analyst-1", reason="tasks_complete")
    answer = json.dumps({"requestId": row.request_id, "backendType": "in-process"})
    payload = inbox_message.parse_payload("shutdown_approved", answer)
    inbox.send_payload(TEAM, to="coordinator", sender="analyst-1", payload=payload)
    taken = shutdown.take_answers(row.request_id)
    assert (taken.status, taken.backend_type) == (ShutdownStatus.APPROVED, "in-process")
    done = shutdown.complete_shutdown(row.request_id)
    assert done.completed_at is not None
    member = teams.list_members(TEAM)[1]
    assert (member.name, member.is_active) == ("analyst-1", False)
    assert member.shutdown_at == done.completed_at
    assert member.meta == {
        "tasks_completed": 2,
        "total_tokens": 12500,
        "shutdown_reason": "tasks_complete",
    }
    assert shutdown.complete_shutdown(row.request_id).completed_at == done.completed_at
    with pytest.raises(InboxError, match="shut down"):
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="still there?")
    with pytest.raises(ShutdownError, match="shut down already"):
        shutdown.request_shutdown(TEAM, "analyst-1")


def test_a_refusal_needs_a_reason_and_a_later_approval_wins() -> None:
    research_team()
    row = shutdown.request_shutdown(TEAM, "analyst-1")
    with pytest.raises(ShutdownError, match="needs a reason"):
        shutdown.answer_shutdown(row.request_id, approved=False)
    refused = shutdown.answer_shutdown(row.request_id, approved=False, reason="busy with task-7")
    assert (refused.status, refused.refusal_reason) == (ShutdownStatus.REFUSED, "busy with task-7")
    with pytest.raises(ShutdownError, match="only an approved"):
        shutdown.complete_shutdown(row.request_id)
    assert shutdown.answer_shutdown(row.request_id, approved=True).status == ShutdownStatus.APPROVED
    late = shutdown.answer_shutdown(row.request_id, approved=False, reason="changed my mind")
    assert late.status == ShutdownStatus.APPROVED


def test_forced_shutdown_is_recorded_as_forced() -> None:
    research_team()
    row = shutdown.request_shutdown(TEAM, "analyst-2", reason="over budget")
    done = shutdown.complete_shutdown(row.request_id, forced=True, cause="no answer within 30 s")
    assert (done.status, done.cause) == (ShutdownStatus.FORCED, "no answer within 30 s")
    member = next(m for m in teams.list_members(TEAM) if m.name == "analyst-2")
    assert member.is_active is False
    assert member.meta["shutdown_reason"] == "forced: no answer within 30 s"
    assert member.meta["tasks_completed"] == 0


def test_a_busy_member_is_done_once_it_says_so_after_refusing() -> None:
    research_team()
    row = shutdown.request_shutdown(TEAM, "analyst-1")
    refused = shutdown.answer_shutdown(row.request_id, approved=False, reason="busy")
    assert not shutdown.task_finished_since(TEAM, "analyst-1", refused.refused_at)
    note = inbox_message.parse_payload(
        "idle_notification", json.dumps({"from": "analyst-1", "idleReason": "task_complete"})
    )
    inbox.send_payload(TEAM, to="coordinator", sender="analyst-1", payload=note)
    assert shutdown.task_finished_since(TEAM, "analyst-1", refused.refused_at)
    again = shutdown.ask_again(row.request_id)
    assert (again.status, again.asks) == (ShutdownStatus.REQUESTED, 2)
    requests = [m for m in inbox.messages(TEAM, "analyst-1") if m.type == "shutdown_request"]
    assert len(requests) == 2


@sqlite_only
def test_cli_shutdown_checks_the_member_before_starting_anything() -> None:
    research_team()
    result = teamflow("member", "shutdown", TEAM, "coordinator")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "teamflow: error: coordinator leads team research-team: the lead is not shut down this way"
    )


NO_PREFECT = """
import sys
from flows.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m == "prefect" or m.startswith("prefect.")))
"""


@sqlite_only
def test_plan_commands_that_only_touch_data_do_not_import_prefect() -> None:
    research_team()
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan")
    for args in (["plan", "list", TEAM, "--json"], ["plan", "approve", row.request_id]):
        result = subprocess.run(
            [sys.executable, "-c", NO_PREFECT, *args],
            capture_output=True, text=True, cwd=ROOT, timeout=120,
        )  # fmt: skip
        assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr
    assert approval.get_request(row.request_id).status == ApprovalStatus.APPROVED


def test_next_due_follows_the_earliest_deadline_then_the_hard_deadline() -> None:
    research_team()
    configure(plan_timeout_policy="escalate", plan_escalation_seconds=600)
    with freeze_time("2026-02-16T10:00:00Z") as clock:
        assert plan_timeout.next_due() is None
        first = approval.request_plan(TEAM, "analyst-1", PLAN, "plan", timeout=300)
        approval.request_plan(TEAM, "analyst-2", PLAN, "plan", timeout=400)
        assert plan_timeout.next_due() == first.deadline
        clock.tick(timedelta(seconds=300))
        assert plan_timeout.expire_due() == [first.request_id]  # escalated: due at its hard limit
        second = approval.list_requests(TEAM, member="analyst-2")[0]
        assert plan_timeout.next_due() == second.deadline
        approval.decide(second.request_id, approve=True, decider="coordinator")
        assert plan_timeout.next_due() == approval.get_request(first.request_id).hard_deadline


def test_decided_requests_name_the_runs_to_resume() -> None:
    research_team()
    waiting = approval.request_plan(TEAM, "analyst-1", PLAN, "plan", flow_run_id="run-a")
    decided = approval.request_plan(TEAM, "analyst-2", PLAN, "plan", flow_run_id="run-b")
    approval.decide(decided.request_id, approve=False, decider="coordinator", feedback="no")
    ids = [waiting.request_id, decided.request_id]
    assert plan_timeout.decided_with_runs(ids) == ["run-b"]
    assert plan_timeout.decided_runs(["run-a", "run-b", "run-c"]) == ["run-b"]


def test_a_timeout_denial_at_the_revision_limit_rejects_the_plan() -> None:
    research_team()
    configure(plan_max_revisions=2, plan_timeout_seconds=60)
    with freeze_time("2026-02-16T10:00:00Z") as clock:
        first = approval.request_plan(TEAM, "analyst-1", PLAN, "plan")
        approval.decide(first.request_id, approve=False, decider="coordinator", feedback="more")
        second = approval.request_plan(
            TEAM, "analyst-1", PLAN, "plan", previous_request_id=first.request_id
        )
        clock.tick(timedelta(minutes=1))
        assert plan_timeout.expire_due() == [second.request_id]
    second = approval.get_request(second.request_id)
    assert second.status == ApprovalStatus.REJECTED
    assert second.cause == (
        "no decision within 60 s: denied by the timeout policy at revision 2: "
        "the revision limit (2) is reached"
    )
    assert "do not ask again" in responses()[-1]["feedback"]


@sqlite_only
def test_plan_list_and_status_link_to_the_prefect_ui_without_importing_prefect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    research_team()
    monkeypatch.setenv("PREFECT_UI_URL", "http://ui.example:4200")
    run_id = "0b8f7c3e-9d1a-4f55-9a55-3c1f2d3e4f50"
    row = approval.request_plan(TEAM, "analyst-1", PLAN, "Q4 plan", flow_run_id=run_id)
    printed = {}
    for args in (["plan", "list", TEAM], ["status", TEAM]):
        result = subprocess.run(
            [sys.executable, "-c", NO_PREFECT, *args],
            capture_output=True, text=True, cwd=ROOT, timeout=120,
        )  # fmt: skip
        lines = result.stdout.strip().splitlines()
        assert lines[-1] == "[]", result.stdout + result.stderr  # no Prefect imported
        printed[args[0]] = lines[:-1]
    assert printed["plan"][0].startswith(row.request_id)
    assert printed["plan"][1].strip() == f"waits at http://ui.example:4200/runs/flow-run/{run_id}"
    assert printed["status"][-1] == "runs: http://ui.example:4200/runs?tag=team%3Aresearch-team"
