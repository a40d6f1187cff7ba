"""Approving, editing or rejecting single tool calls of a member (issue 34).

A scripted member works a real team task on a real Prefect server (in a background thread,
as a worker runs it); the calls its tool policy names wait in one `tool-approval` run, and
the test decides them as a person does: `teamflow action ...` or the run's form.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM
from prefect_server import Run, wait_until

from flows.team_task import run_team_task
from models import inbox, membership, tool_approval
from models import team as teams
from models.conversation import load_conversation
from models.db import session_scope
from models.task import create_task
from models.tool import ToolDefinition, add_tool

ROOT = Path(__file__).resolve().parent.parent


def _tool(tool_id: str, description: str, properties: dict, required: list[str]) -> None:
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": tool_id,
                "type": "script",
                "description": description,
                "command": f'{sys.executable} -c "import sys; print(sys.stdin.read())"',
                "input_schema": {"type": "object", "properties": properties, "required": required},
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )


@pytest.fixture
def team(prefect_api: str, home: Path, db_url: str) -> str:
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    _tool("echo_json", "Prints its params", {"n": {"type": "integer"}}, ["n"])
    _tool(
        "save_note",
        "Writes a note to a file",
        {"path": {"type": "string", "x-teamflow-writes": True}, "text": {"type": "string"}},
        ["path"],
    )
    return TEAM


def teamflow(*args: str) -> Any:
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return run_teamflow(args, env, cwd=ROOT, stdin_devnull=False)


def step(actions: list[dict], *, stop: bool = False, response: str | None = None) -> dict:
    return {
        "status": "SUCCESS" if stop else "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "count the rows"}],
        "actions": actions,
        "stop": stop,
        "response": response,
    }


def call(name: str, params: dict, **extra: Any) -> dict:
    return {"action": name, "type": "tool", "params": params, "execution": "SYNC", **extra}


def member(name: str, playbook: list[dict]) -> None:
    membership.add_member(
        TEAM, name, model="haiku", prompt=f"You are {name}.",
        runtime={"kind": "scripted", "playbook": playbook},
    )  # fmt: skip


def start(title: str = "Count", assignee: str = "analyst-1") -> Run:
    task = create_task(TEAM, title=title, assignees=[assignee])
    run = Run(run_team_task(str(task.id)))
    run.task_id = str(task.id)  # type: ignore[attr-defined]
    return run


def pending(count: int = 1, timeout: float = 60) -> list[tool_approval.ToolApproval]:
    """The team's pending calls, once `count` of them wait in a paused run."""

    def ready() -> list[tool_approval.ToolApproval] | None:
        rows = tool_approval.list_calls(TEAM, pending=True)
        if len(rows) >= count and all(r.flow_run_id for r in rows) and _paused(rows[0]):
            return rows
        return None

    return wait_until(ready, timeout, f"{count} pending tool calls", interval=0.05)


def _paused(row: tool_approval.ToolApproval) -> bool:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(row.flow_run_id)).state
    return state is not None and state.is_paused()


def conversation_texts(run: Run, name: str = "analyst-1") -> list[str]:
    with session_scope() as s:
        rows = load_conversation(
            session=s, agent_id=f"{name}@{TEAM}", conversation_id=f"task-{run.task_id}"
        )
    return [json.dumps(m.model_dump(mode="json")) for m in rows]


def test_policy_is_set_per_team_and_member_and_shown(team: str) -> None:
    member("analyst-1", [step([], stop=True)])
    out = teamflow(
        "team", "settings", TEAM, "--approve-tools", "echo_json", "--approve-writes",
        "--approve-below-confidence", "0.5", "--approve-warnings", "--budget-tokens", "1000",
        "--tool-timeout", "30", "--tool-policy", "escalate",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "approve_tools = echo_json" in out.stdout and "budget_tokens = 1000" in out.stdout
    out = teamflow("member", "set", TEAM, "analyst-1", "--approve-tools", "save_note",
                   "--budget-tokens", "500", "--no-approve-warnings")  # fmt: skip
    assert out.returncode == 0, out.stderr
    shown = teamflow("team", "show", TEAM).stdout
    assert (
        "analyst-1" in shown and "approve_tools=save_note" in shown and "budget_tokens=500" in shown
    )
    assert "tool approvals and budget:" in shown and "approve_below_confidence=0.5" in shown
    from models.member_policy import policy_of

    policy = policy_of(TEAM, "analyst-1")
    assert policy.approve_tools == ("save_note",) and policy.budget_tokens == 500
    assert policy.approve_writes and not policy.approve_warnings
    assert policy.policy.value == "escalate" and policy.timeout_s == 30
    # Bad values: one line naming the setting, nothing written.
    for args in (
        ("team", "settings", TEAM, "--approve-below-confidence", "2"),
        ("team", "settings", TEAM, "--tool-policy", "maybe"),
        ("member", "set", TEAM, "analyst-1", "--budget-tokens", "-3"),
    ):
        bad = teamflow(*args)
        assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert policy_of(TEAM, "analyst-1").budget_tokens == 500
    assert teams.update_settings(TEAM, {})["tool_timeout_policy"] == "escalate"


def test_an_approved_call_runs_once_and_a_second_decision_conflicts(team: str) -> None:
    teams.update_settings(TEAM, {"approve_tools": ["echo_json"]})
    member("analyst-1", [step([call("echo_json", {"n": 7})]),
                         step([], stop=True, response="{result.echo_json.n}")])  # fmt: skip
    run = start()
    (row,) = pending()
    listed = teamflow("action", "list", TEAM, "--pending", "--json")
    assert [c["callId"] for c in json.loads(listed.stdout)] == [row.call_id]
    assert row.tool_id == "echo_json" and row.params == {"n": 7} and row.reasons
    assert row.description == "Prints its params" and "count the rows" in row.thoughts
    out = teamflow("action", "approve", row.call_id)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"call {row.call_id} (echo_json) of analyst-1 approved by coordinator"
    )
    result = run.result()
    assert result["status"] == "completed"
    assert result["members"]["analyst-1"]["response"] == "7"
    done = tool_approval.get_call(row.call_id)
    assert (done.status, done.decided_by, done.door) == ("approved", "coordinator", "cli")
    assert done.executed_at is not None
    again = teamflow("action", "reject", row.call_id, "--feedback", "no")
    assert again.returncode != 0
    assert f"call {row.call_id} was already approved by coordinator at " in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert tool_approval.claim_run(row.call_id) is False  # never twice


def test_an_edit_is_checked_against_the_schema_then_runs_with_the_new_params(team: str) -> None:
    teams.update_settings(TEAM, {"approve_tools": ["echo_json"]})
    member("analyst-1", [step([call("echo_json", {"n": 1})]),
                         step([], stop=True, response="{result.echo_json.n}")])  # fmt: skip
    run = start()
    (row,) = pending()
    bad = teamflow("action", "edit", row.call_id, "--params", '{"n": "nine"}')
    assert bad.returncode != 0 and "do not fit tool echo_json" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    not_json = teamflow("action", "edit", row.call_id, "--params", "{n: 9")
    assert not_json.returncode != 0 and "--params is not JSON" in not_json.stderr
    assert tool_approval.get_call(row.call_id).is_open  # nothing written
    out = teamflow("action", "edit", row.call_id, "--params", '{"n": 9}')
    assert out.returncode == 0, out.stderr
    result = run.result()
    assert result["members"]["analyst-1"]["response"] == "9"
    done = tool_approval.get_call(row.call_id)
    assert (done.status, done.params, done.new_params) == ("edited", {"n": 1}, {"n": 9})
    edits = [t for t in conversation_texts(run) if "params edited by coordinator" in t]
    assert len(edits) == 1 and '{\\"n\\": 1}' in edits[0] and '{\\"n\\": 9}' in edits[0]


def test_a_rejected_call_gives_the_member_the_feedback_and_it_revises(team: str) -> None:
    teams.update_settings(TEAM, {"approve_below_confidence": 0.5})
    member(
        "analyst-1",
        [
            step([call("echo_json", {"n": 1}, confidence=0.2)]),
            step([call("echo_json", {"n": 2}, confidence=0.9)]),  # sure now: no one is asked
            step([], stop=True, response="{result.echo_json.n}"),
        ],
    )
    run = start()
    (row,) = pending()
    assert row.reasons == ["confidence 0.2 is below 0.5"]
    out = teamflow("action", "reject", row.call_id, "--feedback", "use n=2, the Q4 rows")
    assert out.returncode == 0, out.stderr
    result = run.result()
    assert result["status"] == "completed" and result["members"]["analyst-1"]["response"] == "2"
    done = tool_approval.get_call(row.call_id)
    assert (done.status, done.executed_at, done.feedback) == (
        "rejected", None, "use n=2, the Q4 rows",
    )  # fmt: skip
    failures = [t for t in conversation_texts(run) if "FAILURE" in t]
    assert any("rejected by coordinator: use n=2, the Q4 rows" in t for t in failures)
    assert len(tool_approval.list_calls(TEAM)) == 1


def test_three_calls_of_one_step_are_one_run_and_one_form_decided_each(team: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.flow_runs import resume_flow_run

    teams.update_settings(TEAM, {"approve_tools": ["echo_json"], "approve_writes": True})
    member(
        "analyst-1",
        [
            step(
                [
                    call("echo_json", {"n": 1}),
                    call("save_note", {"path": "note.txt", "text": "hi"}),
                    call("echo_json", {"n": 3}, warnings=["large"]),
                ]
            ),
            step([], stop=True, response="{result.echo_json.n}"),
        ],
    )
    run = start()
    rows = pending(3)
    assert len({r.batch_id for r in rows}) == 1 and len({r.flow_run_id for r in rows}) == 1
    assert rows[1].reasons == ["tool save_note writes"]
    run_id = UUID(rows[0].flow_run_id)
    with get_client(sync_client=True) as client:
        paused = client.read_flow_run(run_id)
        keyset = paused.state.state_details.run_input_keyset
        schema = json.loads(client.read_flow_run_input(run_id, keyset["schema"]))
        description = json.loads(client.read_flow_run_input(run_id, keyset["description"]))
    assert list(schema["properties"]) == ["decisions", "approver"]
    assert [d["call_id"] for d in schema["properties"]["decisions"]["default"]] == [
        r.call_id for r in rows
    ]
    assert description.startswith(f"## Tool calls of analyst-1 ({TEAM})")
    assert "Writes a note to a file" in description and '"path": "note.txt"' in description
    assert "count the rows" in description and "Task:** Count" in description
    # The form decides two calls; the CLI the third.
    resume_flow_run(run_id, run_input={"approver": "coordinator", "decisions": [
        {"call_id": rows[0].call_id, "decision": "approve"},
        {"call_id": rows[1].call_id, "decision": "reject", "feedback": "no writing today"},
    ]})  # fmt: skip
    wait_until(lambda: tool_approval.open_calls(rows[0].batch_id) == 1, 30, "two decisions")
    out = teamflow("action", "edit", rows[2].call_id, "--params", '{"n": 33}')
    assert out.returncode == 0, out.stderr
    result = run.result()
    assert result["members"]["analyst-1"]["response"] == "33"
    done = [tool_approval.get_call(r.call_id) for r in rows]
    assert [d.status for d in done] == ["approved", "rejected", "edited"]
    assert [d.door for d in done] == ["prefect-ui", "prefect-ui", "cli"]
    assert not (
        Path(os.environ["TEAMFLOW_HOME"]) / "tasks" / TEAM / "analyst-1" / "note.txt"
    ).exists()
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(run_id).state.is_completed()


@pytest.mark.parametrize("policy", ["deny", "approve", "escalate"])
def test_no_decision_in_time_applies_the_policy(team: str, policy: str) -> None:
    teams.update_settings(
        TEAM, {"approve_tools": ["echo_json"], "tool_timeout_seconds": 1,
               "tool_timeout_policy": policy},
    )  # fmt: skip
    member("analyst-1", [step([call("echo_json", {"n": 4})]),
                         step([], stop=True, response="{result.echo_json}")])  # fmt: skip
    result = start().result()
    (row,) = tool_approval.list_calls(TEAM)
    alarms = [
        m for m in inbox.messages(TEAM, "coordinator")
        if m.type == "system_alert" and (m.meta or {}).get("call_id") == row.call_id
    ]  # fmt: skip
    if policy == "approve":
        assert (row.status, row.decided_by) == ("approved", "system")
        assert '"n": 4' in result["members"]["analyst-1"]["response"].replace('"n":4', '"n": 4')
        assert alarms == []
    else:
        assert (row.status, row.decided_by, row.executed_at) == ("rejected", "system", None)
        assert "nobody decided in time" in row.feedback
        assert result["members"]["analyst-1"]["ok"] is False  # its script needed the result
        assert len(alarms) == (1 if policy == "escalate" else 0)
        if policy == "escalate":
            assert row.escalated_at is not None and row.hard_deadline > row.escalated_at


def test_two_deciders_at_once_one_wins(team: str) -> None:
    from flows.decisions import decide_action
    from models.identity import Principal
    from models.team_settings import ApprovalError

    teams.update_settings(TEAM, {"approve_tools": ["echo_json"], "approvers": ["reviewer"]})
    member("analyst-1", [step([call("echo_json", {"n": 5})]),
                         step([], stop=True, response="{result.echo_json.n}")])  # fmt: skip
    run = start()
    (row,) = pending()
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def decide(decision: str, by: str, **kwargs: Any) -> None:
        barrier.wait()
        try:
            decide_action(row.call_id, decision, who=Principal.local(), decider=by, **kwargs)
            outcomes.append(f"{by} won")
        except ApprovalError as exc:
            outcomes.append(f"{by} lost: {exc}")

    threads = [
        threading.Thread(target=decide, args=("approve", "coordinator")),
        threading.Thread(target=decide, args=("reject", "reviewer"), kwargs={"feedback": "no"}),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(o.split()[1] for o in outcomes) == ["lost:", "won"]
    assert any("was already" in o for o in outcomes)
    result = run.result()
    done = tool_approval.get_call(row.call_id)
    winner = next(o.split()[0] for o in outcomes if o.endswith("won"))
    assert done.decided_by == winner
    ran = done.executed_at is not None
    assert ran == (done.status == "approved")
    assert (result["members"]["analyst-1"]["response"] == "5") == ran


def test_the_member_itself_or_a_stranger_may_not_decide(team: str) -> None:
    teams.update_settings(TEAM, {"approve_tools": ["echo_json"]})
    member("analyst-1", [step([call("echo_json", {"n": 6})]),
                         step([], stop=True, response="{result.echo_json.n}")])  # fmt: skip
    run = start()
    (row,) = pending()
    for who in ("analyst-1", "mallory"):
        out = teamflow("action", "approve", row.call_id, "--as", who)
        assert out.returncode != 0 and "may not decide" in out.stderr, out.stderr
    assert tool_approval.get_call(row.call_id).is_open
    assert teamflow("action", "approve", row.call_id).returncode == 0
    assert run.result()["members"]["analyst-1"]["response"] == "6"
    unknown = teamflow("action", "approve", "calls-nope-0")
    assert unknown.returncode != 0 and "no tool call 'calls-nope-0'" in unknown.stderr


def test_a_member_decides_tool_calls_only_as_an_approver_of_its_team(
    home: Path, db_url: str
) -> None:
    from models.identity import Action, Forbidden, Principal, authorize

    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    for name in ("analyst-1", "reviewer"):
        membership.add_member(TEAM, name, model="haiku", prompt="p")
    teams.update_settings(TEAM, {"approvers": ["reviewer"]})
    authorize(Principal.member(TEAM, "reviewer"), Action.TOOL_DECIDE, TEAM, "reviewer")
    with pytest.raises(Forbidden, match="not an approver"):
        authorize(Principal.member(TEAM, "analyst-1"), Action.TOOL_DECIDE, TEAM, "analyst-1")
    with pytest.raises(Forbidden, match="only as itself"):
        authorize(Principal.member(TEAM, "reviewer"), Action.TOOL_DECIDE, TEAM, "coordinator")
    authorize(Principal.member(TEAM, "analyst-1"), Action.TOOL_READ, TEAM)
