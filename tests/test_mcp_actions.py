"""The MCP door for tool calls that wait for a person (issue 34): the whole MCP server
of `teamflow mcp` in process (`test_mcp.in_process`: its JSON-RPC messages over the SDK's
in-memory streams), the official SDK's client, on SQLite and PostgreSQL.

The lead's session (the local user) lists and decides; a member decides only as a listed
approver and never its own calls; a second decision is a `Conflict` envelope.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_mcp import Refused, call, in_process

from models import identity, membership, team, tool_approval
from models.tool import ToolDefinition, add_tool

TEAM = "mcp-team"


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


@pytest.fixture
def calls(db_url: str, home: Path) -> dict[str, str]:
    membership.create_team(TEAM, description="actions")
    for name in ("alice", "bob", "carol"):
        membership.add_member(TEAM, name, model="sonnet", prompt="p")
    team.update_settings(TEAM, {"approvers": ["carol", "alice"]})
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": "echo_json", "type": "script", "description": "Prints its params",
                "command": f'{sys.executable} -c "print(1)"',
                "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                 "required": ["n"]},
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )  # fmt: skip
    tool_approval.request_calls(
        TEAM, "alice", "calls-mcp",
        [{"position": i, "tool_id": "echo_json", "params": {"n": i}, "reasons": ["asked"]}
         for i in range(3)],
    )  # fmt: skip
    return {name: identity.issue_token(TEAM, name) for name in ("alice", "bob", "carol")}


def test_the_lead_and_an_approver_decide_over_mcp_and_the_member_may_not(
    calls: dict[str, str],
) -> None:
    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with in_process() as lead:
            out["pending"] = await call(lead, "action_list", team_name=TEAM, pending=True)
            out["approved"] = await call(lead, "action_decide", call_id="calls-mcp-0",
                                         decision="approve")  # fmt: skip
            out["again"] = await call(lead, "action_decide", call_id="calls-mcp-0",
                                      decision="reject", feedback="no")  # fmt: skip
            out["bad_edit"] = await call(lead, "action_decide", call_id="calls-mcp-1",
                                         decision="edit", params={"n": "many"})  # fmt: skip
            out["no_feedback"] = await call(lead, "action_decide", call_id="calls-mcp-1",
                                            decision="reject")  # fmt: skip
        async with in_process(calls["alice"]) as alice:  # an approver, but these are its calls
            out["own"] = await call(alice, "action_decide", call_id="calls-mcp-1",
                                    decision="approve")  # fmt: skip
            out["read"] = await call(alice, "action_status", call_id="calls-mcp-0")
        async with in_process(calls["bob"]) as bob:  # no approver
            out["bob"] = await call(bob, "action_decide", call_id="calls-mcp-1",
                                    decision="approve")  # fmt: skip
        async with in_process(calls["carol"]) as carol:
            out["edited"] = await call(carol, "action_decide", call_id="calls-mcp-1",
                                       decision="edit", params={"n": 7})  # fmt: skip
            out["rejected"] = await call(carol, "action_decide", call_id="calls-mcp-2",
                                         decision="reject", feedback="count first")  # fmt: skip
        return out

    out = anyio.run(scenario)
    assert [c["callId"] for c in out["pending"]] == ["calls-mcp-0", "calls-mcp-1", "calls-mcp-2"]
    assert (out["approved"]["status"], out["approved"]["decidedBy"], out["approved"]["door"]) == (
        "approved", "team-lead", "mcp",
    )  # fmt: skip
    assert isinstance(out["again"], Refused) and out["again"].kind == "Conflict"
    assert "already approved by team-lead" in out["again"].envelope["message"]
    assert isinstance(out["bad_edit"], Refused)
    assert "do not fit tool echo_json" in out["bad_edit"].envelope["message"]
    assert isinstance(out["no_feedback"], Refused)
    assert "needs feedback" in out["no_feedback"].envelope["message"]
    assert isinstance(out["own"], Refused) and "its own call" in out["own"].envelope["message"]
    assert out["read"]["status"] == "approved"
    assert isinstance(out["bob"], Refused) and out["bob"].kind == "Forbidden"
    assert (out["edited"]["status"], out["edited"]["decidedBy"], out["edited"]["newParams"]) == (
        "edited", "carol", {"n": 7},
    )  # fmt: skip
    assert (out["rejected"]["status"], out["rejected"]["feedback"]) == ("rejected", "count first")
    rows = {r.call_id: r for r in tool_approval.list_calls(TEAM)}
    assert [rows[k].status for k in sorted(rows)] == ["approved", "edited", "rejected"]
