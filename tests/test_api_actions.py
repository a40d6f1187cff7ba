"""The REST API's door for tool calls that wait for a person (issue 34): list, read, decide.

The calls are recorded as a member's step records them (`models.tool_approval`), without a
run waiting (a decision resumes a run only when there is one); the decisions go through the
same `decide_action` as `teamflow action ...`, and the rule table says who may decide.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_world import OTHER, TEAM, World, build, client, is_envelope
from cli_runner import teamflow

from models import tool_approval
from models.tool import ToolDefinition, add_tool

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


@pytest.fixture
def world(db_url: str, home: Path) -> World:
    made = build()
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
    calls = [
        {"position": i, "tool_id": "echo_json", "params": {"n": i}, "reasons": ["asked"]}
        for i in range(3)
    ]
    tool_approval.request_calls(TEAM, "alice", "calls-api", calls, task_title="count")
    tool_approval.request_calls(
        TEAM, "bob", "budget-api",
        [{"position": 0, "tool_id": "budget", "params": {"kind": "tokens", "spent": 126,
          "budget": 100}, "reasons": ["budget exhausted: 126 of 100 tokens spent"]}],
    )  # fmt: skip
    return made


@pytest.fixture
def api():
    with client() as c:
        yield c


def ok(response: httpx.Response, status: int = 200) -> Any:
    body = response.json()
    assert response.status_code == status, body
    assert is_envelope(body) and body["status"] == "success", body
    return body["data"]


def refused(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    body = response.json()
    assert response.status_code == status, body
    assert is_envelope(body) and body["status"] == "error", body
    assert body["error"] == kind and "\n" not in body["message"], body
    return body


def decide(api, world: World, who: str, call_id: str, **body: Any) -> httpx.Response:
    return api.post(f"/api/v1/actions/{call_id}/decision", headers=world.headers(who), json=body)


def test_a_lead_lists_reads_and_decides_once_and_a_second_decision_conflicts(
    world: World, api
) -> None:
    pending = ok(
        api.get(f"/api/v1/teams/{TEAM}/actions?pending=true", headers=world.headers("lena"))
    )
    assert [c["callId"] for c in pending] == [
        "calls-api-0", "calls-api-1", "calls-api-2", "budget-api-0",
    ]  # fmt: skip
    # Its member and the viewer read a call; another team's lead does not.
    assert ok(api.get("/api/v1/actions/calls-api-0", headers=world.headers("alice")))["params"] == {
        "n": 0
    }
    assert ok(api.get("/api/v1/actions/calls-api-0", headers=world.headers("vic")))["status"] == (
        "pending"
    )
    refused(api.get("/api/v1/actions/calls-api-0", headers=world.headers("otto")), 403, "Forbidden")
    refused(api.get(f"/api/v1/teams/{OTHER}/actions", headers=world.headers("lena")), 403,
            "Forbidden")  # fmt: skip
    refused(api.get("/api/v1/actions/calls-nope", headers=world.headers("lena")), 404, "NotFound")

    decided = ok(decide(api, world, "lena", "calls-api-0", decision="approve"))
    assert (decided["status"], decided["decidedBy"], decided["door"]) == (
        "approved", "team-lead", "api",
    )  # fmt: skip
    again = refused(
        decide(api, world, "ada", "calls-api-0", decision="reject", feedback="no"), 409, "Conflict"
    )
    assert again["details"]["action"]["decidedBy"] == "team-lead"
    assert "already approved by team-lead" in again["message"]
    assert [c["callId"] for c in ok(api.get(
        f"/api/v1/teams/{TEAM}/actions?pending=true", headers=world.headers("lena")))] == [
        "calls-api-1", "calls-api-2", "budget-api-0",
    ]  # fmt: skip
    everything = ok(api.get(f"/api/v1/teams/{TEAM}/actions", headers=world.headers("lena")))
    assert len(everything) == 4


def test_who_may_decide_is_the_rule_tables_and_bad_decisions_name_the_field(
    world: World, api
) -> None:
    # The member whose call it is, a member who is no approver, a viewer, another team's lead.
    for who in ("alice", "bob", "vic", "otto"):
        refused(decide(api, world, who, "calls-api-1", decision="approve"), 403, "Forbidden")
    body = refused(decide(api, world, "ada", "calls-api-1", decision="reject"), 422,
                   "ValidationError")  # fmt: skip
    assert body["details"]["fields"] == ["feedback"]
    body = refused(decide(api, world, "ada", "calls-api-1", decision="edit"), 422,
                   "ValidationError")  # fmt: skip
    assert body["details"]["fields"] == ["params"]
    body = refused(decide(api, world, "ada", "calls-api-1", decision="edit", params={"n": "x"}),
                   422, "ValidationError")  # fmt: skip
    assert "do not fit tool echo_json" in body["message"]
    body = refused(decide(api, world, "ada", "calls-api-1", decision="maybe"), 422,
                   "ValidationError")  # fmt: skip
    assert body["details"]["fields"] == ["decision"]
    assert tool_approval.get_call("calls-api-1").is_open  # nothing written by any of them
    # An approver user decides as itself; so does a member the team lists as an approver.
    edited = ok(decide(api, world, "ada", "calls-api-1", decision="edit", params={"n": 41}))
    assert (edited["status"], edited["decidedBy"], edited["newParams"]) == (
        "edited", "ada", {"n": 41},
    )  # fmt: skip
    rejected = ok(decide(api, world, "lena", "calls-api-2", decision="reject",
                         feedback="count the rows first"))  # fmt: skip
    assert (rejected["status"], rejected["feedback"]) == ("rejected", "count the rows first")


def test_a_budget_request_is_approved_with_the_new_budget(world: World, api) -> None:
    body = refused(decide(api, world, "lena", "budget-api-0", decision="approve"), 422,
                   "ValidationError")  # fmt: skip
    assert "needs a new budget_tokens above the 126 spent" in body["message"]
    decided = ok(decide(api, world, "lena", "budget-api-0", decision="approve",
                        params={"budget_tokens": 500}))  # fmt: skip
    assert (decided["status"], decided["newParams"]) == ("approved", {"budget_tokens": 500})


def test_the_cli_needs_a_deciders_token_once_the_team_has_users(world: World) -> None:
    out = teamflow(["action", "approve", "calls-api-1"], dict(os.environ), cwd=ROOT)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out
    assert "the team has users" in out.stderr
    env = {**os.environ, "TEAMFLOW_TOKEN": world.tokens["lena"]}
    out = teamflow(["action", "approve", "calls-api-1"], env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert tool_approval.get_call("calls-api-1").decided_by == "team-lead"


def test_the_schema_lists_the_action_routes(world: World, api) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for path in (
        "/api/v1/teams/{team}/actions", "/api/v1/actions/{call_id}",
        "/api/v1/actions/{call_id}/decision",
    ):  # fmt: skip
        assert path in paths, path
    decision = paths["/api/v1/actions/{call_id}/decision"]["post"]
    assert {"401", "403", "404", "409", "422"} <= set(decision["responses"])
