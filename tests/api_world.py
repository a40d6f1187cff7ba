"""A team for the REST API tests, with a person of each role and a member token each.

`build()` makes team `api-team` (lead `team-lead`; members alice, bob, carol; carol and the
approver user `ada` listed as approvers), a second team `other-team`, a pending plan of
alice, a task of bob, and the tokens: the users `lena` (lead of api-team), `ada` (approver
of api-team), `vic` (viewer of every team), `otto` (lead of other-team), and the members
alice and bob."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

from models import approval, identity, inbox, membership, task, team, users

TEAM = "api-team"
OTHER = "other-team"


@dataclass
class World:
    tokens: dict[str, str]
    plan: str
    bobs_task: str

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


def build() -> World:
    membership.create_team(TEAM, description="the API team")
    membership.create_team(OTHER, description="another team")
    for name in ("alice", "bob", "carol"):
        membership.add_member(TEAM, name, model="sonnet", prompt=f"You are {name}.")
    team.update_settings(TEAM, {"approvers": ["carol", "ada"]})
    plan = approval.request_plan(TEAM, "alice", "1. read the logs\n2. fix it", "fix the build")
    bobs = task.create_task(TEAM, title="bob's task", assignees=["bob"])
    for name in ("alice", "bob", "carol"):
        inbox.mark_read(TEAM, name)  # their first prompts: read, so each test counts its own
    tokens = {
        "lena": users.add_user("lena", "lead", team=TEAM)[1],
        "ada": users.add_user("ada", "approver", team=TEAM)[1],
        "vic": users.add_user("vic", "viewer")[1],
        "otto": users.add_user("otto", "lead", team=OTHER)[1],
        "alice": identity.issue_token(TEAM, "alice"),
        "bob": identity.issue_token(TEAM, "bob"),
    }
    return World(tokens, plan.request_id, str(bobs.id))


def client() -> TestClient:
    """The API in process (FastAPI's test client); errors come back as responses."""
    from flows.api.app import build as build_app

    return TestClient(build_app(), raise_server_exceptions=False)


def is_envelope(body: Any) -> bool:
    """Whether `body` is a seed `001` envelope (either kind), exactly."""
    from models.api import ApiResponseAdapter

    if not isinstance(body, dict):
        return False
    if body.get("status") == "success":
        return set(body) == {"status", "data", "message"}
    if body.get("status") == "error":
        ApiResponseAdapter.validate_python(body)
        return set(body) == {"status", "error", "message", "details"}
    return False
