"""Approve, edit and reject with the `openai` runtime (issue 34): a member whose steps come
from an OpenAI-compatible endpoint (the fake server of `tests/fakes`, real HTTP) asks for
three calls in one step; the lead decides each; the member's next request to the endpoint
carries what each decision did, and its token budget counts the endpoint's `usage`.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from factories import TEAM
from fakes.openai_server import FakeOpenAI
from sqlmodel import select
from test_tool_approval import conversation_texts, pending, start, team, teamflow  # noqa: F401

from models import inbox, membership, tool_approval
from models import team as teams
from models.db import session_scope
from models.task import TaskMetricsRow

KEY = "sk-test-tools"


def test_an_openai_member_gets_each_decision_applied_and_its_usage_counted(
    team: str,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMFLOW_TEST_OPENAI_KEY", KEY)
    teams.update_settings(TEAM, {"approve_tools": ["echo_json"]})
    calls = [
        {"action": "echo_json", "type": "tool", "params": {"n": n}, "execution": "SYNC"}
        for n in (1, 2, 3)
    ]
    first = {"status": "EXECUTING", "thoughts": [{"type": "PLAN", "content": "count thrice"}],
             "actions": calls, "stop": False, "response": None}  # fmt: skip
    last = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "done"}
    with FakeOpenAI(api_key=KEY) as server:
        server.reply(json.dumps(first), prompt_tokens=100, completion_tokens=20)
        server.reply(json.dumps(last), prompt_tokens=90, completion_tokens=10)
        membership.add_member(
            TEAM, "analyst-1", model="haiku", prompt="You count.",
            runtime={"kind": "openai", "base_url": server.base_url, "model": "gpt-4o-mini",
                     "api_key_env": "TEAMFLOW_TEST_OPENAI_KEY", "timeout": 10},
        )  # fmt: skip
        # 120 tokens after the first step, 220 after the second: over 80% of 250 then.
        out = teamflow("member", "set", TEAM, "analyst-1", "--budget-tokens", "250")
        assert out.returncode == 0, out.stderr
        run = start()
        one, two, three = pending(3)
        assert [r.params for r in (one, two, three)] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert len({r.batch_id for r in (one, two, three)}) == 1  # one run, one form
        env = dict(os.environ)
        for args in (
            ("approve", one.call_id),
            ("edit", two.call_id, "--params", '{"n": 20}'),
            ("reject", three.call_id, "--feedback", "three is too many"),
        ):
            decided = teamflow("action", *args)
            assert decided.returncode == 0, decided.stderr
        result = run.result()
        del env
    work = result["members"]["analyst-1"]
    assert (result["status"], work["ok"], work["response"], work["steps"]) == (
        "completed", True, "done", 2,
    )  # fmt: skip
    # The member's second request carries each call's result: run, run edited, rejected.
    second = json.dumps(server.requests[1]["body"]["messages"]).replace("\\", "")
    flat = second.replace('"', "")
    assert re.search(r"n: 1\b", flat) and re.search(r"n: 20\b", flat), second
    assert "rejected by coordinator: three is too many" in second
    rows = {r.call_id: r for r in tool_approval.list_calls(TEAM)}
    assert rows[one.call_id].executed_at is not None and rows[two.call_id].executed_at is not None
    assert rows[three.call_id].executed_at is None
    edits = [t for t in conversation_texts(run) if "params edited by coordinator" in t]
    assert len(edits) == 1
    # Tokens: the endpoint's usage, per step (120 + 100), against the budget of 250.
    with session_scope() as s:
        (row,) = s.exec(select(TaskMetricsRow).where(TaskMetricsRow.member == "analyst-1")).all()
        assert row.tokens == 220
    alarms = [
        m for m in inbox.messages(TEAM, "coordinator")
        if m.type == "system_alert" and (m.meta or {}).get("member") == "analyst-1"
    ]  # fmt: skip
    assert len(alarms) == 1 and "220 of its 250 tokens" in alarms[0].text
