"""Who may do what through the REST API: each kind of caller against each kind of route, as
one table (`models.identity.RULES`, judged through the API's door), on SQLite and
PostgreSQL. A refusal is a 403 `Forbidden` envelope and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from api_world import TEAM, build, client, is_envelope

from models.db import engine

ROLES = ("viewer", "approver", "lead", "member", "other-lead")
TOKEN_OF = {"viewer": "vic", "approver": "ada", "lead": "lena", "member": "alice",
            "other-lead": "otto"}  # fmt: skip

ROUTES = {
    "read-team": ("GET", f"/api/v1/teams/{TEAM}", None),
    "read-inbox": ("GET", f"/api/v1/teams/{TEAM}/members/bob/inbox", None),
    "mark-inbox": ("POST", f"/api/v1/teams/{TEAM}/members/bob/inbox/read", None),
    "send": ("POST", f"/api/v1/teams/{TEAM}/messages", {"to": "bob", "text": "hi"}),
    "create-task": ("POST", f"/api/v1/teams/{TEAM}/tasks", {"title": "a new task"}),
    "run-task": ("POST", "/api/v1/tasks/BOBS/run", None),
    "decide-plan": ("POST", "/api/v1/plans/PLAN/decision", {"approve": True}),
    "set-timer": ("POST", f"/api/v1/teams/{TEAM}/alerts/timers",
                  {"name": "t", "message": "m", "after": "10m"}),
    "search-memory": ("GET", f"/api/v1/teams/{TEAM}/memory/search?q=x&agent=alice", None),
}  # fmt: skip

ALLOWED = {
    "read-team": {"viewer", "approver", "lead", "member"},
    "read-inbox": {"viewer", "approver", "lead"},  # a member reads only its own inbox
    "mark-inbox": {"lead"},
    "send": {"lead", "member"},
    "create-task": {"lead", "member"},
    "run-task": {"lead"},  # bob's task: alice may not
    "decide-plan": {"approver", "lead"},  # alice's own plan: never alice
    "set-timer": {"lead", "member"},
    "search-memory": {"viewer", "approver", "lead", "member"},
}
"""The role table as the API shows it: which callers may use each kind of route."""


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


def _counts() -> dict[str, int]:
    with engine().connect() as conn:
        return {
            name: conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
            for name in ("inbox_messages", "tasks", "alerts", "memories")
        } | {
            "read": conn.execute(
                sa.text("SELECT count(*) FROM inbox_messages WHERE read = :t"), {"t": True}
            ).scalar_one(),
            "decided": conn.execute(
                sa.text("SELECT count(*) FROM plan_approvals WHERE status <> 'pending'")
            ).scalar_one(),
        }


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("role", ROLES)
def test_each_role_may_use_each_kind_of_route_as_the_table_says(
    role: str, route: str, db_url: str, home: Path
) -> None:
    world = build()
    from models import inbox

    inbox.send(TEAM, to="bob", sender="team-lead", text="unread for bob")
    method, path, body = ROUTES[route]
    path = path.replace("PLAN", world.plan).replace("BOBS", world.bobs_task)
    before = _counts()
    with client() as api:
        response = api.request(method, path, json=body, headers=world.headers(TOKEN_OF[role]))
    answer = response.json()
    assert is_envelope(answer), answer
    if role in ALLOWED[route]:
        # Allowed: done, or (a run to start) no Prefect server here.
        assert response.status_code in (200, 201, 503), answer
        if response.status_code == 503:
            assert answer["error"] == "Unavailable"
    else:
        assert (response.status_code, answer["error"]) == (403, "Forbidden"), answer
        assert _counts() == before


# --- agents cannot act as the lead --------------------------------------------------------------

AGENT = """\
import json, os, subprocess, sys

json.load(sys.stdin)
done = subprocess.run(
    [sys.executable, "-m", "flows.cli", "plan", "approve", PLAN, "--as", "team-lead"],
    capture_output=True, text=True,
)
seen = sorted(k for k in ("TEAMFLOW_TOKEN", "PREFECT_API_AUTH_STRING") if k in os.environ)
print(json.dumps({"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True,
                  "response": json.dumps({"exit": done.returncode, "stderr": done.stderr,
                                          "seen": seen})}))
"""


def test_a_command_agent_cannot_approve_its_own_plan_by_naming_the_lead(
    db_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker that runs alice's agent holds the lead's token and Prefect's auth string;
    alice's program inherits neither, and `teamflow plan approve --as team-lead` from it
    is refused because the team has users. With the lead's token, the lead decides."""
    import json
    import sys

    from flows.runtimes import StepRequest
    from flows.runtimes.command import CommandRuntime
    from models import approval

    world = build()
    monkeypatch.setenv("TEAMFLOW_TOKEN", world.tokens["lena"])
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", "admin:secret")
    program = tmp_path / "sneaky_agent.py"
    program.write_text(AGENT.replace("PLAN", repr(world.plan)))
    runtime = CommandRuntime.from_config({"kind": "command", "argv": [sys.executable, str(program)],
                                          "timeout": 120})  # fmt: skip
    step = runtime.step(
        StepRequest(team=TEAM, member="alice", agent_id=f"alice@{TEAM}", model="haiku",
                    prompt="p", task={"id": "t", "title": "t"})
    )  # fmt: skip
    outcome = json.loads(step.response.response or "{}")
    assert outcome["seen"] == []
    assert outcome["exit"] == 1
    assert "the team has users" in outcome["stderr"]
    assert approval.get_request(world.plan).status == "pending"

    # The lead, with its own token (TEAMFLOW_TOKEN in its own shell), decides from the CLI.
    from cli_runner import teamflow

    decided = teamflow(["plan", "approve", world.plan, "--as", "team-lead"])
    assert decided.returncode == 0, decided.stderr
    row = approval.get_request(world.plan)
    assert (row.status, row.decided_via, row.decided_identity) == ("approved", "cli", "user:lena")


def test_a_person_logs_in_with_a_file_only_it_may_read(
    db_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`teamflow user login` keeps the lead's token in a 0600 file; the CLI then decides as
    the lead without TEAMFLOW_TOKEN. A file others may read is refused, one line, nothing
    decided; a token that is no one's is not kept; `logout` removes the file."""
    import os
    import re
    import stat
    import subprocess
    import sys

    from models import approval

    world = build()
    keep = tmp_path / "config" / "token"
    monkeypatch.delenv("TEAMFLOW_TOKEN", raising=False)
    monkeypatch.setenv("TEAMFLOW_TOKEN_FILE", str(keep))

    def teamflow(*args: str, given: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flows.cli", *args], input=given,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    wrong = teamflow("user", "login", given="tfu_not-anyones\n")
    assert wrong.returncode == 1 and "not a teamflow user token" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1 and not keep.exists()

    login = teamflow("user", "login", given=world.tokens["lena"] + "\n")
    assert login.returncode == 0, login.stderr
    assert "lead lena" in login.stdout
    assert stat.S_IMODE(keep.stat().st_mode) == 0o600
    assert keep.read_text().strip() == world.tokens["lena"]

    os.chmod(keep, 0o644)
    refused = teamflow("plan", "approve", world.plan)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"teamflow: error: {keep} may be read by others (mode 644); "
        f"make it yours alone: chmod 600 {keep}"
    )
    assert approval.get_request(world.plan).status == "pending"

    keep.unlink()
    # The docs' example, as shown: a new lead user logs in and decides.
    page = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    block = re.search(r"<!-- test: login -->\n```bash\n(.*?)```", page, re.S)
    assert block, "docs/api.md lost its tested login block"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "TEAM": TEAM, "PLAN": world.plan}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    row = approval.get_request(world.plan)
    assert (row.status, row.decided_via, row.decided_identity) == ("approved", "cli", "user:lee")
    assert not keep.exists()
