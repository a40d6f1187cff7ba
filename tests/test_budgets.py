"""Budgets per member (issue 34): one ALARM to the lead at 80%, a wait for an extension at 100%.

A `command` agent reports the tokens of each step in its answer, as a local LLM CLI does;
the team task counts them per step against the member's (or its team's) `budget_tokens`, and
the seconds it works against `budget_seconds`. Over a budget, the member's run waits for a
`budget` request in a `tool-approval` run: `teamflow action approve ID --budget-tokens N`
lets it go on, `teamflow action reject ID --feedback WHY` stops its part with that reason,
and nobody deciding in time lets the timeout policy decide.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM
from prefect_server import Run, wait_until

from flows.team_task import run_team_task
from models import inbox, membership, tool_approval
from models import team as teams
from models.task import create_task, get_task

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def agent(prefect_api: str, home: Path, db_url: str, tmp_path: Path) -> list[str]:
    """An agent that spends 42 tokens a step and stops at its sixth step (a step takes at
    least TEAMFLOW_TEST_STEP_S seconds, 0 unless set)."""
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    script = tmp_path / "agent.py"
    script.write_text(
        "import json, os, sys, time\n"
        "time.sleep(float(os.environ.get('TEAMFLOW_TEST_STEP_S', '0')))\n"
        "request = json.load(sys.stdin)\n"
        "steps = sum(1 for m in request['conversation'] if m['role'] == 'assistant')\n"
        "done = steps >= 5\n"
        "out = {'status': 'SUCCESS' if done else 'EXECUTING', 'thoughts': [], 'actions': [],"
        " 'stop': done, 'response': 'step %d' % (steps + 1)}\n"
        "print(json.dumps({'chimera': out, 'tokens': 42}))\n"
    )
    return [sys.executable, str(script)]


def add(name: str, argv: list[str]) -> None:
    membership.add_member(
        TEAM, name, model="haiku", prompt="p",
        runtime={"kind": "command", "argv": argv, "timeout": 30},
    )  # fmt: skip


def alarms(name: str) -> list:
    return [
        m for m in inbox.messages(TEAM, "coordinator")
        if m.type == "system_alert" and (m.meta or {}).get("member") == name
        and str((m.meta or {}).get("budget_alarm", "")).startswith("budget:")
    ]  # fmt: skip


def teamflow(*args: str):
    return run_teamflow(args, dict(os.environ), cwd=ROOT)


def start(*assignees: str) -> Run:
    task = create_task(TEAM, title="Spend", assignees=list(assignees))
    run = Run(run_team_task(str(task.id)))
    run.task_id = str(task.id)  # type: ignore[attr-defined]
    return run


def budget_request(member: str, timeout: float = 90) -> tool_approval.ToolApproval:
    """The member's pending budget request, once its run waits for the decision."""

    def ready() -> tool_approval.ToolApproval | None:
        rows = [
            r for r in tool_approval.list_calls(TEAM, pending=True)
            if r.member == member and r.tool_id == "budget" and r.flow_run_id
        ]  # fmt: skip
        return rows[0] if rows else None

    return wait_until(ready, timeout, f"a budget request of {member}", interval=0.05)


def test_the_lead_is_alarmed_once_at_80_percent_and_the_member_waits_at_100_then_stops(
    agent: list[str],
) -> None:
    add("analyst-1", agent)
    out = teamflow("member", "set", TEAM, "analyst-1", "--budget-tokens", "100")
    assert out.returncode == 0, out.stderr
    run = start("analyst-1")
    request = budget_request("analyst-1")
    assert request.params == {"kind": "tokens", "spent": 126, "budget": 100}
    assert request.reasons == ["budget exhausted: 126 of 100 tokens spent"]
    (alarm,) = alarms("analyst-1")  # at 84 tokens; not again at 126
    assert alarm.payload["alert_type"] == "ALARM"
    assert "84 of its 100 tokens" in alarm.text
    listed = teamflow("action", "list", TEAM, "--pending")
    assert request.call_id in listed.stdout and "budget" in listed.stdout
    out = teamflow("action", "reject", request.call_id, "--feedback", "too costly: stop here")
    assert out.returncode == 0, out.stderr
    work = run.result()["members"]["analyst-1"]
    reason = (
        "budget exhausted: 126 of 100 tokens spent; stopped by coordinator: too costly: stop here"
    )
    assert (work["ok"], work["error"], work["steps"]) == (False, reason, 3)
    task = get_task(run.task_id)  # type: ignore[attr-defined]
    assert task.status == "archived" and reason in (task.reason or "")
    assert len(alarms("analyst-1")) == 1
    metrics = teamflow("metrics", TEAM, "--json")
    assert metrics.returncode == 0, metrics.stderr
    (budget,) = json.loads(metrics.stdout)["budgets"]
    assert budget == {
        "member": "analyst-1", "budget_tokens": 100, "spent_tokens": 126,
        "budget_seconds": None, "spent_seconds": None,
        "task_id": run.task_id, "share": 1.26, "exhausted": True,  # type: ignore[attr-defined]
    }  # fmt: skip
    text = teamflow("metrics", TEAM).stdout
    assert (
        "analyst-1: spent 126 of 100 budget tokens (126%) on its latest task, budget exhausted"
        in text
    )


def test_an_extension_approved_with_a_new_budget_lets_the_member_go_on(agent: list[str]) -> None:
    add("analyst-1", agent)
    assert teamflow("member", "set", TEAM, "analyst-1", "--budget-tokens", "100").returncode == 0
    run = start("analyst-1")
    request = budget_request("analyst-1")
    # Approving a budget request needs the new budget, above what was spent: nothing written.
    for extra in ((), ("--budget-tokens", "120"), ("--budget-seconds", "600")):
        out = teamflow("action", "approve", request.call_id, *extra)
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out
        assert "needs a new budget_tokens above the 126 spent" in out.stderr
    assert tool_approval.get_call(request.call_id).is_open
    out = teamflow("action", "approve", request.call_id, "--budget-tokens", "300")
    assert out.returncode == 0, out.stderr
    assert "approved by coordinator (budget_tokens 300)" in out.stdout
    work = run.result()["members"]["analyst-1"]
    assert (work["ok"], work["steps"]) == (True, 6)  # 252 tokens of the new 300
    assert tool_approval.get_call(request.call_id).new_params == {"budget_tokens": 300}
    # One ALARM per budget: at 84 of 100, at 252 of 300.
    assert sorted(m.meta["budget_alarm"].rsplit(":", 1)[1] for m in alarms("analyst-1")) == [
        "100", "300",
    ]  # fmt: skip
    again = teamflow("action", "reject", request.call_id, "--feedback", "no")
    assert again.returncode == 1 and "already approved by coordinator" in again.stderr


def test_the_team_budget_applies_to_members_without_their_own(agent: list[str]) -> None:
    add("analyst-1", agent)
    add("analyst-2", agent)
    teams.update_settings(TEAM, {"budget_tokens": 1000})
    out = teamflow("member", "set", TEAM, "analyst-2", "--budget-tokens", "200")
    assert out.returncode == 0, out.stderr
    # Nobody decides analyst-2's request: the timeout policy does (approve: as much again).
    out = teamflow("team", "settings", TEAM, "--tool-timeout", "1", "--tool-policy", "approve")
    assert out.returncode == 0, out.stderr
    run = start("analyst-1", "analyst-2")
    result = run.result()
    # 6 steps of 42 = 252: under the team's 1000; over analyst-2's own 200 at 210.
    assert result["members"]["analyst-1"]["ok"] is True and alarms("analyst-1") == []
    assert result["members"]["analyst-2"]["ok"] is True
    (request,) = tool_approval.list_calls(TEAM)
    assert (request.member, request.status, request.decided_by) == (
        "analyst-2",
        "approved",
        "system",
    )
    assert request.cause == "approved by the timeout policy"
    assert len(alarms("analyst-2")) == 1  # at 168 of 200; 252 of the new 410 is under 80%
    # No budget (0 resets the member's own): the team's applies again.
    assert teamflow("member", "set", TEAM, "analyst-2", "--budget-tokens", "0").returncode == 0
    from models.member_policy import policy_of

    assert policy_of(TEAM, "analyst-2").budget_tokens == 1000


def test_a_member_over_its_time_budget_waits_for_more_time(
    agent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMFLOW_TEST_STEP_S", "0.4")
    add("analyst-1", agent)
    out = teamflow("member", "set", TEAM, "analyst-1", "--budget-seconds", "1")
    assert out.returncode == 0, out.stderr
    shown = teamflow("team", "show", TEAM).stdout
    assert "budget_seconds=1" in shown
    run = start("analyst-1")
    request = budget_request("analyst-1")
    assert request.params["kind"] == "seconds" and request.params["budget"] == 1
    assert request.params["spent"] >= 1
    assert request.reasons[0].startswith("budget exhausted: ")
    assert request.reasons[0].endswith(" of 1 seconds of work spent")
    out = teamflow("action", "approve", request.call_id, "--budget-tokens", "500")
    assert out.returncode == 1 and "needs a new budget_seconds above" in out.stderr
    out = teamflow("action", "approve", request.call_id, "--budget-seconds", "600")
    assert out.returncode == 0, out.stderr
    work = run.result()["members"]["analyst-1"]
    assert (work["ok"], work["steps"]) == (True, 6)
    alarm = [m for m in inbox.messages(TEAM, "coordinator") if m.type == "system_alert"]
    assert any("seconds of work" in m.text for m in alarm)
    (budget,) = json.loads(teamflow("metrics", TEAM, "--json").stdout)["budgets"]
    # Against the budget it has (the extension was for this task only): spent past it.
    assert (budget["budget_seconds"], budget["budget_tokens"], budget["exhausted"]) == (
        1, None, True,
    )  # fmt: skip
    assert 1 <= budget["spent_seconds"] < 600
    assert "budget seconds" in teamflow("metrics", TEAM).stdout
