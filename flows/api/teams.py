"""`/api/v1/teams`: teams, their members and state, messages and inboxes.

Each route names its caller (`Caller`), and calls the function `teamflow team|status|msg`
and the MCP tools (`read_config`, `send_message`, `read_inbox`) call, which asks
`models.identity.authorize`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from flows.api.auth import Caller
from flows.api.envelopes import SUCCESS_SCHEMA, ok
from flows.api.paths import MemberPath, TeamPath
from models.identity import Action, Forbidden, Principal, PrincipalKind, authorize

router = APIRouter(prefix="/teams", tags=["teams"])

BROADCAST = "*"
"""`to` of a message to every active member but the sender."""


class Body(BaseModel):
    """A request body: snake_case as seed `001`, unknown fields refused."""

    model_config = ConfigDict(extra="forbid")


class MessageIn(Body):
    """A message to a member, or (`to: "*"`) to every active member but the sender."""

    to: str = Field(min_length=1, max_length=64, description='A member\'s name, or "*"')
    text: str = Field(min_length=1, description="The message")
    summary: str | None = Field(default=None, max_length=500, description="One line")
    type: Literal["message", "broadcast"] | None = Field(
        default=None, description='"broadcast" is the same as to: "*"'
    )


class MarkRead(Body):
    """Which messages to mark read (none given: all)."""

    message_ids: list[str] | None = Field(default=None, max_length=1000)


def sender_of(who: Principal, team: str) -> str:
    """Who a message of `who` is from: a member itself, a lead user the team's lead."""
    from models import team as teams

    if who.kind is PrincipalKind.MEMBER:
        assert who.name is not None, "a member's principal names it"
        return who.name
    return teams.settings_of(team).lead


def _summary(row: Any) -> dict[str, Any]:
    return {
        "name": row.name,
        "description": row.description,
        "lead": row.lead,
        "lead_agent_id": f"{row.lead}@{row.name}",
    }


@router.get("", response_model=SUCCESS_SCHEMA, summary="The teams the caller may read")
def list_teams(who: Caller) -> JSONResponse:
    from models import team as teams
    from models.db import session_scope

    readable = []
    with session_scope() as s:
        for row in teams.list_teams(session=s):
            try:
                authorize(who, Action.TEAM_READ, row.name, session=s)
            except Forbidden:
                continue
            readable.append(_summary(row))
    return ok(readable, f"{len(readable)} team(s)")


@router.get("/{team}", response_model=SUCCESS_SCHEMA, summary="A team's config (004)")
def get_team(team: TeamPath, who: Caller) -> JSONResponse:
    from flows.mcp.server import config_json
    from models.db import session_scope

    with session_scope() as s:
        authorize(who, Action.TEAM_READ, team, session=s)
        return ok(config_json(s, team))


@router.get("/{team}/members", response_model=SUCCESS_SCHEMA, summary="A team's members")
def list_members(team: TeamPath, who: Caller) -> JSONResponse:
    from flows.mcp.server import config_json
    from models.db import session_scope

    with session_scope() as s:
        authorize(who, Action.TEAM_READ, team, session=s)
        return ok(config_json(s, team).get("members", []))


@router.get("/{team}/status", response_model=SUCCESS_SCHEMA, summary="A team's state")
def team_status(team: TeamPath, who: Caller) -> JSONResponse:
    """The team's state (`teamflow status TEAM --json`): active members, unread counts."""
    from models import presence

    authorize(who, Action.TEAM_READ, team)
    return ok(presence.team_state(team))


@router.post(
    "/{team}/messages", response_model=SUCCESS_SCHEMA, status_code=201, summary="Send a message"
)
def send_message(team: TeamPath, body: MessageIn, who: Caller) -> JSONResponse:
    """A `001` agent_message to `to` (as `teamflow msg send`), or with `to: "*"` a broadcast.
    A member sends as itself; a lead user as the team's lead."""
    from models import inbox, notify

    authorize(who, Action.TEAM_READ, team)
    sender = sender_of(who, team)
    if body.to == BROADCAST or body.type == "broadcast":
        rows = inbox.broadcast(team, sender=sender, text=body.text, summary=body.summary, who=who)
        data = {"sender": sender, "recipients": [r.recipient for r in rows],
                "message_ids": [r.message_id for r in rows]}  # fmt: skip
        return ok(data, f"broadcast sent to {len(rows)} member(s)", 201)
    row = notify.agent_message(
        team, to=body.to, sender=sender, text=body.text, summary=body.summary, who=who
    )
    data = {"message_id": row.message_id, "sender": sender, "recipient": body.to}
    return ok(data, f"message sent to {body.to}", 201)


@router.get(
    "/{team}/members/{member}/inbox", response_model=SUCCESS_SCHEMA, summary="A member's inbox"
)
def read_inbox(
    team: TeamPath,
    member: MemberPath,
    who: Caller,
    unread: bool = Query(default=False, description="Only unread messages"),
) -> JSONResponse:
    """A member's messages, oldest first (`004` entries, with `payload` for typed ones); a
    member reads only its own. Reading marks nothing read (POST `.../inbox/read` does)."""
    from models import inbox

    rows = inbox.messages(team, member, unread=unread, who=who)
    entries = []
    for row in rows:
        entry = row.entry_dict()
        if row.payload is not None:
            entry["payload"] = row.payload
        entries.append(entry)
    return ok(entries, f"{len(entries)} message(s)")


@router.post(
    "/{team}/members/{member}/inbox/read",
    response_model=SUCCESS_SCHEMA,
    summary="Mark messages read",
)
def mark_read(
    team: TeamPath, member: MemberPath, who: Caller, body: MarkRead | None = None
) -> JSONResponse:
    """Marks the given messages (default: all) of the inbox read (`teamflow msg read`)."""
    from models import inbox
    from models.db import session_scope

    with session_scope() as s:
        authorize(who, Action.INBOX_MARK_READ, team, member, session=s)
        ids = body.message_ids if body is not None else None
        changed = inbox.mark_read(team, member, ids, session=s)
    return ok({"marked": changed}, f"{changed} message(s) marked read")
