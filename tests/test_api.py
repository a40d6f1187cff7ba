"""`teamflow api`, used as an outside program uses it: a token, JSON in, seed `001` envelopes
out, on SQLite and PostgreSQL.

The bulk runs the app in process (FastAPI's test client); one test runs the real uvicorn
server on a real socket, and one runs the curl example of docs/api.md against it.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_world import OTHER, TEAM, World, build, client, is_envelope
from cli_runner import teamflow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import approval, inbox, memory, users

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Prefect server here (a port nothing listens on): a route that starts a run
    answers 503 `Unavailable`."""
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


@pytest.fixture
def world(db_url: str, home: Path) -> World:
    return build()


@pytest.fixture
def api():
    with client() as c:
        yield c


def ok(response: httpx.Response, status: int = 200) -> Any:
    """The data of a success envelope (and the status asserted)."""
    body = response.json()
    assert response.status_code == status, body
    assert is_envelope(body) and body["status"] == "success", body
    return body["data"]


def refused(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """The error envelope of a refusal (status and kind asserted)."""
    body = response.json()
    assert response.status_code == status, body
    assert is_envelope(body) and body["status"] == "error", body
    assert body["error"] == kind, body
    assert "\n" not in body["message"]
    return body


def test_without_a_token_every_route_is_401(world: World, api) -> None:
    for path in ("/api/v1/teams", f"/api/v1/teams/{TEAM}/status", f"/api/v1/plans/{world.plan}"):
        body = refused(api.get(path), 401, "Unauthorized")
        assert "Authorization: Bearer" in body["message"]
    refused(api.get("/api/v1/teams", headers={"Authorization": "Basic x"}), 401, "Unauthorized")
    refused(
        api.get("/api/v1/teams", headers={"Authorization": "Bearer tfu_nope"}), 401, "Unauthorized"
    )
    users.revoke_user("vic")
    body = refused(api.get("/api/v1/teams", headers=world.headers("vic")), 401, "Unauthorized")
    assert "revoked" in body["message"] and world.tokens["vic"] not in body["message"]


def test_a_lead_and_a_member_run_the_team_through_the_api(world: World, api) -> None:
    lead, alice = world.headers("lena"), world.headers("alice")
    teams = ok(api.get("/api/v1/teams", headers=lead))
    assert [t["name"] for t in teams] == [TEAM]  # lena's role is for api-team only
    config = ok(api.get(f"/api/v1/teams/{TEAM}", headers=lead))
    assert config["leadAgentId"] == f"team-lead@{TEAM}"
    members = ok(api.get(f"/api/v1/teams/{TEAM}/members", headers=lead))
    assert [m["name"] for m in members] == ["team-lead", "alice", "bob", "carol"]
    assert all("prompt" not in m for m in members)

    sent = ok(
        api.post(f"/api/v1/teams/{TEAM}/messages", headers=lead,
                 json={"to": "alice", "text": "Start with the logs.", "summary": "logs"}),
        201,
    )  # fmt: skip
    assert sent["sender"] == "team-lead"
    everyone = ok(
        api.post(f"/api/v1/teams/{TEAM}/messages", headers=lead,
                 json={"to": "*", "text": "Stand-up at ten."}),
        201,
    )  # fmt: skip
    assert sorted(everyone["recipients"]) == ["alice", "bob", "carol"]
    status = ok(api.get(f"/api/v1/teams/{TEAM}/status", headers=lead))
    assert status["unread"]["alice"] == 2

    unread = ok(api.get(f"/api/v1/teams/{TEAM}/members/alice/inbox?unread=true", headers=alice))
    assert [m["text"] for m in unread] == ["Start with the logs.", "Stand-up at ten."]
    first = unread[0]["messageId"]
    marked = ok(
        api.post(f"/api/v1/teams/{TEAM}/members/alice/inbox/read", headers=alice,
                 json={"message_ids": [first]})
    )  # fmt: skip
    assert marked == {"marked": 1}
    left = ok(api.get(f"/api/v1/teams/{TEAM}/members/alice/inbox?unread=true", headers=alice))
    assert [m["text"] for m in left] == ["Stand-up at ten."]
    ok(api.post(f"/api/v1/teams/{TEAM}/members/alice/inbox/read", headers=alice))
    assert inbox.unread_count(TEAM, "alice") == 0
    reply = ok(
        api.post(f"/api/v1/teams/{TEAM}/messages", headers=alice,
                 json={"to": "team-lead", "text": "On it."}),
        201,
    )  # fmt: skip
    assert reply["sender"] == "alice"

    made = ok(
        api.post(f"/api/v1/teams/{TEAM}/tasks", headers=lead,
                 json={"title": "Write the report", "assignee_ids": ["alice"],
                       "priority": "high", "deadline": "2030-01-01T00:00:00Z",
                       "blocked_by": [world.bobs_task]}),
        201,
    )  # fmt: skip
    assert made["status"] == "pending" and made["blockedBy"] == [world.bobs_task]
    listed = ok(api.get(f"/api/v1/teams/{TEAM}/tasks", headers=alice))
    assert {t["id"] for t in listed} == {made["id"], world.bobs_task}
    assert ok(api.get(f"/api/v1/tasks/{made['id']}", headers=alice))["subject"] == (
        "Write the report"
    )
    blocked = refused(api.post(f"/api/v1/tasks/{made['id']}/run", headers=lead), 409, "Conflict")
    assert "blocked by" in blocked["message"]
    no_server = refused(
        api.post(f"/api/v1/tasks/{world.bobs_task}/run", headers=lead), 503, "Unavailable"
    )
    assert no_server["details"]["kind"].startswith("No")

    pending = ok(api.get(f"/api/v1/teams/{TEAM}/plans?pending=true", headers=lead))
    assert [p["requestId"] for p in pending] == [world.plan]
    assert ok(api.get(f"/api/v1/plans/{world.plan}", headers=alice))["status"] == "pending"
    decided = ok(
        api.post(f"/api/v1/plans/{world.plan}/decision", headers=lead,
                 json={"approve": True, "feedback": "go"})
    )  # fmt: skip
    assert (decided["status"], decided["decidedBy"]) == ("approved", "team-lead")
    assert (decided["decidedVia"], decided["decidedIdentity"]) == ("api", "user:lena")
    again = refused(
        api.post(f"/api/v1/plans/{world.plan}/decision", headers=world.headers("ada"),
                 json={"approve": False, "feedback": "no"}),
        409, "Conflict",
    )  # fmt: skip
    assert again["details"]["plan"]["decidedBy"] == "team-lead"
    row = approval.get_request(world.plan)
    assert (row.status, row.decided_via, row.decided_identity) == ("approved", "api", "user:lena")
    response = inbox.messages(TEAM, "alice", sender="team-lead")[-1]
    assert response.type == "plan_approval_response"

    assert ok(api.get(f"/api/v1/teams/{TEAM}/alerts", headers=lead)) == []
    refused(
        api.post(f"/api/v1/teams/{TEAM}/alerts/timers", headers=lead,
                 json={"name": "check", "message": "look", "after": "10m"}),
        503, "Unavailable",
    )  # fmt: skip
    memory.add(TEAM, "alice", memory_type="knowledge", scope="shared",
               content="the build breaks on Mondays")  # fmt: skip
    found = ok(api.get(f"/api/v1/teams/{TEAM}/memory/search?q=build", headers=alice))
    assert [f["memory"]["content"] for f in found] == ["the build breaks on Mondays"]
    figures = ok(api.get(f"/api/v1/teams/{TEAM}/metrics", headers=lead))
    assert figures["team"] == TEAM and "members" in figures


def test_an_approver_decides_as_itself_and_a_denial_needs_feedback(world: World, api) -> None:
    ada = world.headers("ada")
    body = refused(
        api.post(f"/api/v1/plans/{world.plan}/decision", headers=ada, json={"approve": False}),
        422, "ValidationError",
    )  # fmt: skip
    assert body["details"]["fields"] == ["feedback"]
    decided = ok(
        api.post(f"/api/v1/plans/{world.plan}/decision", headers=ada,
                 json={"approve": False, "feedback": "add a test"})
    )  # fmt: skip
    assert (decided["status"], decided["decidedBy"], decided["decidedIdentity"]) == (
        "denied", "ada", "user:ada",
    )  # fmt: skip


def test_bad_requests_are_envelopes_naming_the_field(world: World, api) -> None:
    lead = world.headers("lena")
    missing = refused(
        api.post(f"/api/v1/teams/{TEAM}/messages", headers=lead, json={"text": "x"}),
        422, "ValidationError",
    )  # fmt: skip
    assert missing["details"]["fields"] == ["to"]
    wrong = refused(
        api.post(f"/api/v1/teams/{TEAM}/tasks", headers=lead,
                 json={"title": "x", "deadline": "tomorrow", "colour": "red"}),
        422, "ValidationError",
    )  # fmt: skip
    assert wrong["details"]["fields"] == ["colour", "deadline"]
    broken = refused(
        api.post(f"/api/v1/plans/{world.plan}/decision",
                 headers={**lead, "Content-Type": "application/json"}, content=b'{"approve": tru'),
        422, "ValidationError",
    )  # fmt: skip
    assert "JSON" in broken["message"] or "json" in broken["message"]
    store = refused(
        api.post(f"/api/v1/teams/{TEAM}/tasks", headers=lead,
                 json={"title": "x", "priority": "urgent"}),
        422, "ValidationError",
    )  # fmt: skip
    assert "priority" in store["message"]
    refused(api.get("/api/v1/teams/no-such-team", headers=lead), 403, "Forbidden")
    refused(api.get("/api/v1/teams/no-such-team", headers=world.headers("vic")), 404, "NotFound")
    refused(api.get("/api/v1/tasks/not-a-uuid", headers=lead), 422, "ValidationError")
    unknown = "00000000-0000-4000-8000-000000000000"
    refused(api.get(f"/api/v1/tasks/{unknown}", headers=lead), 404, "NotFound")
    refused(api.get("/api/v1/plans/plan-nope", headers=lead), 404, "NotFound")
    refused(api.get("/api/v1/nowhere", headers=lead), 404, "NotFound")
    refused(api.delete(f"/api/v1/teams/{TEAM}", headers=lead), 405, "MethodNotAllowed")
    big = refused(
        api.post(f"/api/v1/teams/{TEAM}/messages", headers=lead,
                 json={"to": "alice", "text": "x" * (2 * 1024 * 1024)}),
        413, "PayloadTooLarge",
    )  # fmt: skip
    assert big["details"]["limit"] == 1024 * 1024
    assert inbox.unread_count(TEAM, "alice") == 0  # nothing written by any of them


def test_the_schema_and_its_docs_page(world: World, api) -> None:
    schema = api.get("/openapi.json").json()
    paths = schema["paths"]
    for path in (
        "/api/v1/teams", "/api/v1/teams/{team}", "/api/v1/teams/{team}/members",
        "/api/v1/teams/{team}/status", "/api/v1/teams/{team}/messages",
        "/api/v1/teams/{team}/members/{member}/inbox",
        "/api/v1/teams/{team}/members/{member}/inbox/read", "/api/v1/teams/{team}/tasks",
        "/api/v1/tasks/{task_id}", "/api/v1/tasks/{task_id}/run", "/api/v1/teams/{team}/plans",
        "/api/v1/plans/{request_id}", "/api/v1/plans/{request_id}/decision",
        "/api/v1/teams/{team}/alerts/timers", "/api/v1/teams/{team}/alerts",
        "/api/v1/teams/{team}/memory/search", "/api/v1/teams/{team}/metrics",
    ):  # fmt: skip
        assert path in paths, path
    decision = paths["/api/v1/plans/{request_id}/decision"]["post"]
    assert {"401", "403", "404", "409", "422"} <= set(decision["responses"])
    assert "HTTPBearer" in schema["components"]["securitySchemes"]
    docs = api.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


ROUTES_WITH_BODIES = [
    "/api/v1/teams/api-team/messages",
    "/api/v1/teams/api-team/tasks",
    "/api/v1/teams/api-team/members/alice/inbox/read",
    "/api/v1/plans/PLAN/decision",
    "/api/v1/teams/api-team/alerts/timers",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10,
)  # fmt: skip
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {},
        optional={"to": json_values, "text": json_values, "title": json_values,
                  "approve": json_values, "feedback": json_values, "message_ids": json_values,
                  "name": json_values, "message": json_values, "after": json_values},
    ).map(lambda v: json.dumps(v).encode()),
)  # fmt: skip


@pytest.mark.parametrize("route", ROUTES_WITH_BODIES)
def test_malformed_bodies_never_answer_a_5xx(route: str, db_url: str, home: Path) -> None:
    world = build()
    path = route.replace("PLAN", world.plan)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body=bodies, who=st.sampled_from(["lena", "alice", "vic"]))
    def answer(body: bytes, who: str) -> None:
        response = api.post(
            path, content=body,
            headers={**world.headers(who), "Content-Type": "application/json"},
        )  # fmt: skip
        assert response.status_code < 500 or response.json()["error"] == "Unavailable", (
            response.text
        )
        assert is_envelope(response.json()), response.text

    with client() as api:
        answer()


# --- a real server on a real socket -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(world: World) -> Iterator[str]:
    """The API's uvicorn server on a free port of this process; yields its root URL."""
    import uvicorn

    from flows.api.app import build as build_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(), host="127.0.0.1", port=port,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise AssertionError("the API server did not start")
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_a_real_server_answers_envelopes_on_a_socket(world: World, served: str) -> None:
    with httpx.Client(base_url=served, timeout=30) as http:
        assert refused(http.get("/api/v1/teams"), 401, "Unauthorized")
        teams = ok(http.get("/api/v1/teams", headers=world.headers("vic")))
        assert sorted(t["name"] for t in teams) == sorted([OTHER, TEAM])
        sent = ok(
            http.post(f"/api/v1/teams/{TEAM}/messages", headers=world.headers("bob"),
                      json={"to": "alice", "text": "over the wire"}),
            201,
        )  # fmt: skip
        assert sent["sender"] == "bob"
        refused(http.get("/api/v1/nope"), 404, "NotFound")


def test_the_curl_example_of_the_docs_runs(world: World, served: str) -> None:
    if shutil.which("curl") is None:
        pytest.skip("no curl on this machine")
    page = (ROOT / "docs" / "api.md").read_text()
    block = re.search(r"<!-- test: curl -->\n```bash\n(.*?)```", page, re.S)
    assert block, "docs/api.md lost its tested curl block"
    env = {"PATH": "/usr/bin:/bin", "TEAMFLOW_API": served + "/api/v1",
           "TOKEN": world.tokens["lena"], "TEAM": TEAM}  # fmt: skip
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [a["status"] for a in answers] == ["success", "success"]
    assert answers[1]["data"]["recipient"] == "alice"


# --- people: teamflow user ----------------------------------------------------------------------


def test_a_user_token_is_shown_once_stored_hashed_and_revocable(db_url: str, home: Path) -> None:
    import hashlib

    import sqlalchemy as sa

    from models.db import engine

    teamflow(["team", "create", TEAM, "--description", "people"])
    made = teamflow(["user", "add", "lena", "--role", "lead", "--team", TEAM, "--json"])
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    assert token.startswith("tfu_")
    with engine().connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM users")).scalars().all()
    assert stored == [hashlib.sha256(token.encode()).hexdigest()]
    listed = json.loads(teamflow(["user", "list", "--json"]).stdout)
    assert listed == [{"name": "lena", "role": "lead", "team": TEAM,
                       "createdAt": listed[0]["createdAt"], "revokedAt": None}]  # fmt: skip
    assert token not in teamflow(["user", "list"]).stdout
    twice = teamflow(["user", "add", "lena", "--role", "viewer"])
    assert twice.returncode == 1 and "exists" in twice.stderr
    bad = teamflow(["user", "add", "max", "--role", "owner"])
    assert bad.returncode == 1 and "role 'owner'" in bad.stderr
    assert teamflow(["user", "revoke", "lena"]).returncode == 0
    assert users.principal_of_bearer
    with pytest.raises(users.Unauthorized, match="revoked"):
        users.principal_of_bearer(token)


GET_ROUTES = [
    "/api/v1/teams/api-team/members/alice/inbox",
    "/api/v1/teams/api-team/tasks",
    "/api/v1/teams/api-team/plans",
    "/api/v1/teams/api-team/memory/search",
    "/api/v1/tasks/{x}",
    "/api/v1/plans/{x}",
    "/api/v1/teams/{x}/status",
]

query_values = st.text(max_size=12) | st.sampled_from(["true", "false", "0", "-1", "99999"])


def test_malformed_queries_and_path_parts_never_answer_a_5xx(db_url: str, home: Path) -> None:
    world = build()

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        route=st.sampled_from(GET_ROUTES),
        part=st.text(min_size=1, max_size=20).filter(lambda t: "/" not in t and t not in ".."),
        query=st.dictionaries(
            st.sampled_from(["unread", "pending", "status", "q", "agent", "limit"]),
            query_values,
            max_size=4,
        ),
        who=st.sampled_from(["lena", "alice", "vic"]),
    )
    def answer(route: str, part: str, query: dict[str, str], who: str) -> None:
        from urllib.parse import quote

        path = route.replace("{x}", quote(part, safe=""))
        response = api.get(path, params=query, headers=world.headers(who))
        assert response.status_code < 500, response.text
        assert is_envelope(response.json()), response.text

    with client() as api:
        answer()
