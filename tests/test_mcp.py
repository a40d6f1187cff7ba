"""`teamflow mcp`, used as Claude Code or any MCP client uses it: a real server process, the
official SDK's client, over stdio and over streamable HTTP, on SQLite and PostgreSQL. The
identity rules' tests talk to the same server in process (`in_process`).

A lead session (the local user) builds a team and a task chain; a member session (its token)
reads its inbox, works its task and reports; every identity rule refuses with the `001`
error envelope and writes nothing; bad input comes back as one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
import forkserver
import pytest
import sqlalchemy as sa
from cli_runner import subprocess_teamflow
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from prefect_server import free_port, listens, wait_until

from models import approval, identity, inbox, membership, presence, shutdown, task, team
from models.db import engine, session_scope
from models.dependencies import add_blockers

TEAM = "mcp-team"


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Prefect server here (a port nothing listens on): a task given to a member cannot
    start its team-task run, and its assignees are told directly."""
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


@dataclass
class Refused:
    """A tool error: its text, and the `001` envelope it parses to."""

    text: str
    envelope: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.envelope["error"]


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """Calls a tool: its JSON result, or `Refused` with the error envelope."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        return Refused(text, json.loads(text))
    structured = result.structured_content
    if structured is not None:
        return structured["result"] if set(structured) == {"result"} else structured
    return json.loads(text)


def stdio(token: str | None = None) -> Client:
    """A session with a `teamflow mcp` process over stdio, as a `.mcp.json` starts it."""
    env = {k: v for k, v in os.environ.items() if k != "TEAMFLOW_TOKEN"}
    if token:
        env["TEAMFLOW_TOKEN"] = token
    command, *args = forkserver.command(forkserver.TEAMFLOW, "flows.cli", ["mcp"])
    return Client(
        StdioServerParameters(command=command, args=args, env=env), read_timeout_seconds=60
    )


def in_process(token: str | None = None) -> Client:
    """A session with the whole MCP server of `teamflow mcp` (`flows.mcp.app.build`) in this
    process, its JSON-RPC messages over the SDK's in-memory streams, as the session of a
    stdio process whose `TEAMFLOW_TOKEN` is `token`: what `stdio` tests at the cost of a
    process start (5 s of CPU) each time. A few tests keep `stdio` for the process itself."""
    from flows.mcp.app import build

    return Client(build(token=token), mode="legacy", read_timeout_seconds=60)


@asynccontextmanager
async def http(url: str, token: str | None = None):
    """A session with the HTTP server at `url`, with `Authorization: Bearer token` if given."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        Client(
            streamable_http_client(url, http_client=http_client), read_timeout_seconds=60
        ) as client,
    ):
        yield client


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess_teamflow(args, stdin_devnull=False)


@contextmanager
def serving(*flags: str) -> Iterator[str]:
    """`teamflow mcp --http` on a free port, with `flags`; yields its URL."""
    port = free_port()
    with tempfile.TemporaryFile() as err:
        process = forkserver.popen(
            forkserver.TEAMFLOW, "flows.cli", ["mcp", "--http", "--port", str(port), *flags],
            env=os.environ, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
        try:
            _wait_for_port(process, port, err)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture
def http_server(db_url: str, home) -> Iterator[str]:
    """`teamflow mcp --http` on a free port (local user allowed without a token)."""
    with serving("--allow-local-user") as url:
        yield url


def test_over_http_a_call_without_a_token_is_refused(db_url: str, home) -> None:
    membership.create_team(TEAM, description="tokens only")

    async def anonymous(url: str) -> Any:
        async with http(url) as nobody:
            return await call(nobody, "read_config", team_name=TEAM)

    with serving() as url:
        answer = anyio.run(anonymous, url)
    assert isinstance(answer, Refused) and answer.kind == "Unauthorized"
    assert "Authorization: Bearer" in answer.envelope["message"]
    refused = cli("mcp", "--http", "--host", "0.0.0.0", "--allow-local-user")
    assert refused.returncode == 1 and "loopback" in refused.stderr


def _wait_for_port(process: forkserver.Process, port: int, err: IO[bytes]) -> None:
    """Returns once the server listens on `port` (fails if it exits first, with `err`)."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err.seek(0)
            raise AssertionError(f"teamflow mcp --http exited: {err.read().decode()}")
        if listens(process, port):
            return
        time.sleep(0.05)
    raise AssertionError("teamflow mcp --http did not listen within 60 s")


def _counts() -> dict[str, int]:
    """Rows of the tables a refused call could write to."""
    with engine().connect() as conn:
        return {
            name: conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
            for name in (
                "teams",
                "members",
                "inbox_messages",
                "tasks",
                "plan_approvals",
                "shutdowns",
                "task_dependencies",
                "member_tokens",
            )
        }


def _unread(member: str) -> int:
    return inbox.unread_count(TEAM, member)


# --- the rule table ----------------------------------------------------------------------------


def test_every_action_has_a_rule_for_every_kind_of_caller() -> None:
    assert identity.every_action_has_a_rule() == []


def test_a_token_is_stored_hashed_and_revocable(db_url: str, home) -> None:
    membership.create_team(TEAM, description="tokens")
    membership.add_member(TEAM, "alice", model="sonnet", prompt="p")
    made = cli("member", "token", TEAM, "alice", "--json")
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    with engine().connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM member_tokens")).scalars().all()
    assert stored == [hashlib.sha256(token.encode()).hexdigest()]
    assert identity.principal_of_token(token).name == "alice"
    revoked = cli("member", "token", TEAM, "alice", "--revoke")
    assert revoked.returncode == 0 and "revoked 1 token" in revoked.stdout
    with pytest.raises(identity.Unauthorized, match="revoked"):
        identity.principal_of_token(token)
    unknown = cli("member", "token", TEAM, "nobody", "--json")
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["status"] == "error"


# --- a lead and a member over stdio -------------------------------------------------------------


@pytest.mark.system  # processes on both sides, end to end
def test_a_lead_builds_a_team_and_a_member_works_its_task(db_url: str, home) -> None:
    async def lead_builds() -> dict[str, Any]:
        async with stdio() as lead:
            made = await call(lead, "team_create", team_name=TEAM, description="MCP team")
            assert made["lead"] == "team-lead"
            for name in ("alice", "bob"):
                added = await call(
                    lead, "spawn_teammate", team_name=TEAM, name=name, prompt=f"You are {name}."
                )
                assert added["agent_id"] == f"{name}@{TEAM}"
            first = await call(
                lead,
                "task_create",
                team_name=TEAM,
                subject="Collect the data",
                active_form="Collecting the data",
            )
            second = await call(lead, "task_create", team_name=TEAM, subject="Write the report")
            chained = await call(
                lead,
                "task_update",
                team_name=TEAM,
                task_id=second["id"],
                add_blocked_by=[first["id"]],
                owner="bob",
            )
            assert chained["blockedBy"] == [first["id"]] and chained["owner"] == "bob"
            assert chained["run"]["note"] == "it starts when its blockers complete"
            given = await call(
                lead, "task_update", team_name=TEAM, task_id=first["id"], owner="alice"
            )
            assert given["owner"] == "alice" and given["activeForm"] == "Collecting the data"
            assert given["run"]["told"] == ["alice"]  # no Prefect here: told directly
            sent = await call(
                lead,
                "send_message",
                team_name=TEAM,
                type="message",
                recipient="alice",
                content="Start with the logs.",
                summary="logs",
            )
            assert sent["success"] and sent["routing"]["sender"] == "team-lead"
            config = await call(lead, "read_config", team_name=TEAM)
            assert [m["name"] for m in config["members"]] == ["team-lead", "alice", "bob"]
            assert all("prompt" not in m for m in config["members"])
            return {"first": first["id"], "second": second["id"]}

    ids = anyio.run(lead_builds)
    token = cli("member", "token", TEAM, "alice").stdout.strip()

    async def member_works() -> None:
        async with stdio(token) as alice:
            messages = await call(alice, "read_inbox", team_name=TEAM, agent_name="alice")
            kinds = [m.get("type") for m in messages]
            assert "task_assignment" in kinds
            assert any(m["text"] == "Start with the logs." for m in messages)
            assert await call(alice, "read_inbox", team_name=TEAM, agent_name="alice") == []
            reply = await call(
                alice,
                "send_message",
                team_name=TEAM,
                type="message",
                recipient="team-lead",
                content="On it.",
                summary="ack",
            )
            assert reply["routing"]["sender"] == "alice"
            beat = await call(alice, "heartbeat", status="executing_tools")
            assert beat["agent_id"] == f"alice@{TEAM}" and beat["status"] == "executing_tools"
            started = await call(
                alice, "task_update", team_name=TEAM, task_id=ids["first"], status="in_progress"
            )
            assert started["status"] == "in_progress"
            done = await call(
                alice,
                "task_update",
                team_name=TEAM,
                task_id=ids["first"],
                status="completed",
                result="42 rows collected",
            )
            assert done["status"] == "completed"
            # Its dependent is free now; bob (an outside member) is told.
            assert [s["task_id"] for s in done["started"]] == [ids["second"]]
            resource = await alice.read_resource(f"teamflow://teams/{TEAM}/inboxes/alice")
            assert json.loads(resource.contents[0].text)

    anyio.run(member_works)
    lead_inbox = inbox.messages(TEAM, "team-lead", sender="alice")
    # A member's message to the lead is a typed 001 agent_message.
    assert [m.text for m in lead_inbox if m.type == "agent_message"] == ["On it."]
    assert task.get_task(ids["first"]).status == "completed"
    assert task.get_task(ids["first"]).reason == "42 rows collected"
    bob = [m.type for m in inbox.messages(TEAM, "bob")]
    assert bob.count("task_assignment") == 1  # told when its blocker completed


# --- identity: every refusal is an envelope and writes nothing ----------------------------------


@pytest.fixture
def team_with_a_plan(db_url: str, home) -> dict[str, str]:
    membership.create_team(TEAM, description="identity")
    for name in ("alice", "bob", "carol"):
        membership.add_member(TEAM, name, model="sonnet", prompt="p")
    team.update_settings(TEAM, {"approvers": ["carol"]})
    inbox.send(TEAM, to="bob", sender="team-lead", text="for bob only")
    plan = approval.request_plan(TEAM, "alice", "1. do it", "my plan")
    bobs = task.create_task(TEAM, title="bob's task", assignees=["bob"])
    return {
        "alice": identity.issue_token(TEAM, "alice"),
        "carol": identity.issue_token(TEAM, "carol"),
        "plan": plan.request_id,
        "bobs_task": str(bobs.id),
    }


def test_the_shared_functions_apply_the_rules_themselves(team_with_a_plan: dict[str, str]) -> None:
    """The rule runs inside the function every door calls (not only at the MCP door): a
    member's principal handed to it straight is refused, and nothing is written; the local
    user (the CLI's) is not."""
    from flows.decisions import answer_shutdown, decide_plan, start_plan_request, start_shutdown

    alice = identity.Principal.member(TEAM, "alice")
    before = _counts()
    tries = [
        lambda: inbox.messages(TEAM, "bob", who=alice),
        lambda: inbox.send(TEAM, to="bob", sender="team-lead", text="x", who=alice),
        lambda: inbox.broadcast(TEAM, sender="bob", text="x", who=alice),
        lambda: decide_plan(team_with_a_plan["plan"], who=alice, approve=True),
        lambda: start_plan_request(TEAM, "bob", "1. x", "bob's plan", who=alice),
        lambda: start_shutdown(TEAM, "bob", who=alice),
        lambda: answer_shutdown(TEAM, "bob", "any", who=alice, approve=True),
    ]
    for attempt in tries:
        with pytest.raises(identity.Forbidden):
            attempt()
    assert _counts() == before
    local = identity.Principal.local()
    assert "for bob only" in [m.text for m in inbox.messages(TEAM, "bob", who=local)]
    decided = decide_plan(team_with_a_plan["plan"], who=local, approve=True)
    assert (decided.decider, decided.request.status) == ("team-lead", "approved")


REFUSED = [
    ("read_inbox", {"team_name": TEAM, "agent_name": "bob"}),
    (
        "send_message",
        {
            "team_name": TEAM,
            "type": "message",
            "recipient": "bob",
            "content": "x",
            "summary": "x",
            "sender": "team-lead",
        },
    ),
    (
        "send_message",
        {
            "team_name": TEAM,
            "type": "plan_approval_response",
            "recipient": "alice",
            "request_id": "PLAN",
            "approve": True,
        },
    ),
    ("send_message", {"team_name": TEAM, "type": "shutdown_request", "recipient": "bob"}),
    ("team_create", {"team_name": "new-team", "description": "x"}),
    ("team_delete", {"team_name": TEAM}),
    ("spawn_teammate", {"team_name": TEAM, "name": "mallory", "prompt": "x"}),
    ("force_kill_teammate", {"team_name": TEAM, "agent_name": "bob"}),
    ("task_update", {"team_name": TEAM, "task_id": "BOBS", "status": "completed"}),
    ("task_update", {"team_name": TEAM, "task_id": "BOBS", "owner": "alice"}),
    ("heartbeat", {"agent_name": "bob"}),
]


def _filled(arguments: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    fill = {"PLAN": ids["plan"], "BOBS": ids["bobs_task"]}
    return {k: fill.get(v, v) if isinstance(v, str) else v for k, v in arguments.items()}


async def _read_resource(token: str, path: str) -> Any:
    """Reads `teamflow://teams/TEAM/{path}` as the token's member: its JSON, or `Refused`."""
    from mcp.shared.exceptions import MCPError

    async with in_process(token) as member:
        try:
            found = await member.read_resource(f"teamflow://teams/{TEAM}/{path}")
        except MCPError as exc:
            return Refused(str(exc), json.loads(str(exc)))
    return json.loads(found.contents[0].text)


def test_a_member_is_refused_what_only_others_may_do(team_with_a_plan: dict[str, str]) -> None:
    before = _counts()
    bob_unread = _unread("bob")

    async def member_tries() -> list[Refused]:
        async with in_process(team_with_a_plan["alice"]) as alice:
            return [
                await call(alice, tool, **_filled(arguments, team_with_a_plan))
                for tool, arguments in REFUSED
            ]

    answers = anyio.run(member_tries)
    answers.append(anyio.run(_read_resource, team_with_a_plan["alice"], "inboxes/bob"))
    for (tool, _), answer in zip([*REFUSED, ("resource", None)], answers, strict=True):
        assert isinstance(answer, Refused), f"{tool} was not refused: {answer}"
        assert answer.kind == "Forbidden", answer.text
        assert answer.envelope["status"] == "error" and "\n" not in answer.text
        assert answer.envelope["message"].startswith(f"member alice of team {TEAM} may not")
    assert _counts() == before
    assert _unread("bob") == bob_unread
    assert approval.get_request(team_with_a_plan["plan"]).status == "pending"
    assert task.get_task(team_with_a_plan["bobs_task"]).status == "pending"


def test_a_member_never_decides_its_own_plan_and_an_approver_may(
    team_with_a_plan: dict[str, str],
) -> None:
    team.update_settings(TEAM, {"approvers": ["carol", "alice"]})
    decide = {
        "team_name": TEAM,
        "type": "plan_approval_response",
        "recipient": "alice",
        "request_id": team_with_a_plan["plan"],
        "approve": True,
    }

    async def both() -> tuple[Any, Any]:
        async with in_process(team_with_a_plan["alice"]) as alice:
            own = await call(alice, "send_message", **decide)
        async with in_process(team_with_a_plan["carol"]) as carol:
            decided = await call(carol, "send_message", **decide)
        return own, decided

    own, decided = anyio.run(both)
    assert isinstance(own, Refused) and "its own plan" in own.envelope["message"]
    assert decided["status"] == "approved" and decided["decided_by"] == "carol"
    row = approval.get_request(team_with_a_plan["plan"])
    assert (row.status, row.decided_by) == ("approved", "carol")


def test_a_revoked_or_unknown_token_is_refused(team_with_a_plan: dict[str, str]) -> None:
    identity.revoke_tokens(TEAM, "alice")

    async def tries() -> list[Any]:
        async with stdio(team_with_a_plan["alice"]) as revoked:
            first = await call(revoked, "read_inbox", team_name=TEAM, agent_name="alice")
        async with stdio("tft_not-a-token") as unknown:
            second = await call(unknown, "read_config", team_name=TEAM)
        return [first, second]

    for answer in anyio.run(tries):
        assert isinstance(answer, Refused) and answer.kind == "Unauthorized"


# --- over HTTP: the Bearer token is the member ---------------------------------------------------


def test_over_http_a_bearer_token_is_its_member(http_server: str) -> None:
    async def scenario() -> None:
        async with http(http_server) as lead:
            await call(lead, "team_create", team_name=TEAM, description="over HTTP")
            await call(lead, "spawn_teammate", team_name=TEAM, name="alice", prompt="p")
            await call(lead, "spawn_teammate", team_name=TEAM, name="bob", prompt="p")
            await call(
                lead,
                "send_message",
                team_name=TEAM,
                type="message",
                recipient="alice",
                content="hello alice",
                summary="hi",
            )
        token = identity.issue_token(TEAM, "alice")
        async with http(http_server, token) as alice:
            mine = await call(alice, "read_inbox", team_name=TEAM, agent_name="alice")
            assert [m["text"] for m in mine if m.get("type") == "agent_message"] == ["hello alice"]
            before = _counts()
            theirs = await call(alice, "read_inbox", team_name=TEAM, agent_name="bob")
            assert isinstance(theirs, Refused) and theirs.kind == "Forbidden"
            posing = await call(
                alice,
                "send_message",
                team_name=TEAM,
                type="message",
                recipient="bob",
                content="x",
                summary="x",
                sender="team-lead",
            )
            assert isinstance(posing, Refused) and posing.kind == "Forbidden"
            creating = await call(alice, "team_create", team_name="alice-team", description="x")
            assert isinstance(creating, Refused) and creating.kind == "Forbidden"
            assert _counts() == before
            sent = await call(
                alice,
                "send_message",
                team_name=TEAM,
                type="message",
                recipient="team-lead",
                content="hi lead",
                summary="hi",
            )
            assert sent["routing"]["sender"] == "alice"
        async with http(http_server, "tft_wrong") as stranger:
            refused = await call(stranger, "read_config", team_name=TEAM)
            assert isinstance(refused, Refused) and refused.kind == "Unauthorized"

    anyio.run(scenario)
    said = inbox.messages(TEAM, "team-lead", sender="alice")
    assert [m.text for m in said if m.type == "agent_message"] == ["hi lead"]
    # Its calls were its heartbeats: the lead heard once that it is there.
    assert presence.team_state(TEAM)["active_members"] == ["team-lead", "alice", "bob"]
    told = [m.text for m in inbox.messages(TEAM, "team-lead", sender="system")]
    assert told == ["alice is idle"]


def test_over_http_a_user_token_is_its_person(team_with_a_plan: dict[str, str]) -> None:
    """People's tokens (`teamflow user add`) work at the MCP door as at the REST API, under
    the same rules: a viewer reads and may not write; an approver user decides a plan as
    itself; a lead user sends as the team's lead."""
    from models import users

    _, viewer = users.add_user("vic", "viewer", team=TEAM)
    _, approver = users.add_user("carol-p", "approver", team=TEAM)
    _, lead = users.add_user("lee", "lead", team=TEAM)
    team.update_settings(TEAM, {"approvers": ["carol", "carol-p"]})

    async def scenario(url: str) -> list[Any]:
        async with http(url, viewer) as vic:
            seen = await call(vic, "read_config", team_name=TEAM)
            before = _counts()
            writing = await call(
                vic, "send_message", team_name=TEAM, type="message", recipient="bob",
                content="x", summary="x",
            )  # fmt: skip
            assert _counts() == before
        async with http(url, approver) as carol:
            decided = await call(
                carol, "send_message", team_name=TEAM, type="plan_approval_response",
                request_id=team_with_a_plan["plan"], approve=True, content="go",
            )  # fmt: skip
        async with http(url, lead) as lee:
            sent = await call(
                lee, "send_message", team_name=TEAM, type="message", recipient="bob",
                content="from the lead", summary="hi",
            )  # fmt: skip
        return [seen, writing, decided, sent]

    with serving() as url:
        seen, writing, decided, sent = anyio.run(scenario, url)
    assert seen["name"] == TEAM
    assert isinstance(writing, Refused) and writing.kind == "Forbidden"
    assert "viewer" in writing.envelope["message"]
    assert (decided["status"], decided["decided_by"]) == ("approved", "carol-p")
    row = approval.get_request(team_with_a_plan["plan"])
    assert (row.decided_via, row.decided_identity) == ("mcp", "user:carol-p")
    assert sent["routing"]["sender"] == "team-lead"
    assert [m.text for m in inbox.messages(TEAM, "bob", sender="team-lead")][-1] == "from the lead"


# --- bad input: one line each -------------------------------------------------------------------


BAD = [
    ("read_config", {"team_name": "no-such-team"}, "TeamError"),
    (
        "send_message",
        {"team_name": TEAM, "type": "telegram", "recipient": "alice"},
        "ValidationError",
    ),
    (
        "task_update",
        {"team_name": TEAM, "task_id": "TASK", "status": "finished"},
        "ValidationError",
    ),
    ("read_inbox", {"team_name": TEAM}, "ValidationError"),
    ("task_get", {"team_name": TEAM, "task_id": "not-a-uuid"}, "TaskError"),
    (
        "send_message",
        {
            "team_name": TEAM,
            "type": "message",
            "recipient": "alice",
            "content": "x" * (10 * 1024 * 1024),
            "summary": "big",
        },
        "InboxError",
    ),
    ("no_such_tool", {}, "UnknownTool"),
]


@pytest.mark.parametrize("door", ["stdio", "http"])
def test_bad_input_is_a_one_line_error(door: str, db_url: str, home, request) -> None:
    membership.create_team(TEAM, description="bad input")
    membership.add_member(TEAM, "alice", model="sonnet", prompt="p")
    task_id = str(task.create_task(TEAM, title="t").id)
    url = request.getfixturevalue("http_server") if door == "http" else None
    before = _counts()

    async def tries() -> list[Any]:
        async with stdio() if url is None else http(url) as lead:
            return [
                await call(
                    lead, tool, **{k: task_id if v == "TASK" else v for k, v in arguments.items()}
                )
                for tool, arguments, _ in BAD
            ]

    for (tool, _, kind), answer in zip(BAD, anyio.run(tries), strict=True):
        assert isinstance(answer, Refused), f"{tool}: {answer}"
        assert answer.kind == kind, answer.text
        assert "\n" not in answer.text and len(answer.text) < 1000
    assert _counts() == before


# --- the example outside agent ------------------------------------------------------------------

AGENT = Path(__file__).parent.parent / "examples" / "mcp_agent.py"


def agent_teamflow() -> str:
    """The example agent's `--teamflow`: how it starts `teamflow` (through the fork server)."""
    return shlex.join(forkserver.command(forkserver.TEAMFLOW, "flows.cli", []))


@pytest.mark.system  # processes on both sides, end to end
@pytest.mark.parametrize("door", ["stdio", "http"])
def test_the_example_agent_does_its_tasks_and_answers_a_shutdown(
    door: str, db_url: str, home, tmp_path: Path, request
) -> None:
    url = request.getfixturevalue("http_server") if door == "http" else None
    membership.create_team(TEAM, description="outside agents")
    membership.add_member(TEAM, "alice", model="sonnet", prompt="You count words.")
    given = task.create_task(
        TEAM, title="Count these words", description="one two three", assignees=["alice"]
    )
    free = task.create_task(TEAM, title="Count more words")
    token = identity.issue_token(TEAM, "alice")
    work = tmp_path / "work"
    args = [
        sys.executable,
        str(AGENT),
        "--team",
        TEAM,
        "--name",
        "alice",
        "--work-dir",
        str(work),
        "--poll",
        "0.2",
        "--max-seconds",
        "240",
    ]
    args += ["--url", url] if url else ["--teamflow", agent_teamflow()]
    agent = subprocess.Popen(
        args,
        env={**os.environ, "TEAMFLOW_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: all(task.get_task(t.id).status == "completed" for t in (given, free)),
            240,
            "the agent to complete both tasks",
            interval=0.2,
        )
        asked = shutdown.request_shutdown(TEAM, "alice", reason="the work is done")
        assert agent.wait(timeout=120) == 0, agent.stdout.read()
    finally:
        if agent.poll() is None:
            agent.kill()
    assert shutdown.take_answers(asked.request_id).status == "approved"
    assert (work / f"{given.id}.txt").read_text() == "Count these words: 6 words\n"
    assert task.get_task(free.id).assignees[0].assignee_id == "alice"
    done = [
        m.text
        for m in inbox.messages(TEAM, "team-lead", sender="alice")
        if m.type == "agent_message"
    ]
    assert sorted(done) == sorted(
        [f"Done: Count these words ({given.id}.txt)", f"Done: Count more words ({free.id}.txt)"]
    )
    state = presence.team_state(TEAM)
    assert state["active_members"] == ["team-lead", "alice"]


# --- spawning in tmux ---------------------------------------------------------------------------


@pytest.fixture
def tmux_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tmux server of the test's own (a socket path), killed after."""
    import shutil
    import tempfile

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    folder = tempfile.mkdtemp(prefix="tf-tmux-", dir="/tmp")
    socket_path = f"{folder}/s"
    monkeypatch.setenv("TEAMFLOW_TMUX_SOCKET", socket_path)
    try:
        yield socket_path
    finally:
        subprocess.run(["tmux", "-S", socket_path, "kill-server"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.system  # processes on both sides, end to end
def test_a_member_spawned_in_tmux_works_and_is_killed_in_its_pane(
    db_url: str, home, tmp_path: Path, tmux_socket: str
) -> None:
    membership.create_team(TEAM, description="tmux members")
    membership.add_member(TEAM, "alice", model="sonnet", prompt="You count words.")
    membership.add_member(TEAM, "bob", model="sonnet", prompt="You are slow.")
    work = tmp_path / "work"
    program = (
        f"{sys.executable} {AGENT} --team {{team}} --name {{name}} --work-dir {work} "
        f"--poll 0.2 --max-seconds 300 --teamflow {shlex.quote(agent_teamflow())}"
    )
    spawned = cli("member", "spawn", TEAM, "alice", "--command", program, "--json")
    assert spawned.returncode == 0, spawned.stderr
    pane = json.loads(spawned.stdout)["tmux_pane_id"]
    alice = next(m for m in team.list_members(TEAM) if m.name == "alice")
    assert (alice.tmux_pane_id, alice.backend_type) == (pane, "tmux")
    config = json.loads(Path(json.loads(spawned.stdout)["mcp_config"]).read_text())
    assert config["mcpServers"]["teamflow"]["args"] == ["-m", "flows.cli", "mcp"]
    done = task.create_task(TEAM, title="Count these words", assignees=["alice"])
    wait_until(lambda: task.get_task(done.id).status == "completed", 240, "alice's task")
    # A task alice cannot start yet (blocked by bob's), left open when she is killed.
    gate = task.create_task(TEAM, title="Bob's part", assignees=["bob"])
    with session_scope() as s:  # blocked from the start: alice, polling, must not take it
        left = task.create_task(TEAM, title="After bob's part", assignees=["alice"], session=s)
        add_blockers(left, [gate.id], session=s)

    async def lead_checks_and_kills() -> tuple[dict, dict, dict]:
        async with stdio() as lead:
            seen = await call(
                lead, "check_teammate", team_name=TEAM, agent_name="alice", include_output=True
            )
            killed = await call(lead, "force_kill_teammate", team_name=TEAM, agent_name="alice")
            after = await call(lead, "check_teammate", team_name=TEAM, agent_name="alice")
            return seen, killed, after

    seen, killed, after = anyio.run(lead_checks_and_kills)
    assert seen["pane_alive"] is True and seen["tmux_pane_id"] == pane
    assert any("alice: completed Count these words" in line for line in seen["output"])
    assert seen["last_heartbeat"] is not None
    assert killed["pane_closed"] == pane
    assert killed["freed_tasks"] == [str(left.id)]
    assert after["alive"] is False and after["pane_alive"] is False
    freed = task.get_task(left.id)
    assert (freed.status, freed.assignees, freed.reason) == ("pending", [], "freed: alice stopped")
    assert shutdown.list_shutdowns(TEAM)[-1].status == "forced"
