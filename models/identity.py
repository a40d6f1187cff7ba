"""Who is calling, and the one rule table of who may do what.

Every way into teamflow names its caller as a `Principal`: the local user (the CLI, or an MCP
session over stdio without a token) or a member (an MCP session carrying the member's token;
later the REST API's users with a role). Before a door acts, it asks `authorize(principal,
action, team, target)`; a refusal is a `Forbidden` error with one line for the caller, raised
before anything is written.

`RULES` is the whole policy: one row per (kind of caller, action). An action without a row
is refused, so a new action is closed until someone writes its row. A later door (the REST
API: users with the roles lead, approver, viewer) adds its kinds of caller as new rows of the
same table, and every door keeps calling the same `authorize`.

Member tokens: `issue_token` makes a random secret, returns it once and keeps only its
SHA-256; `revoke_tokens` ends every token of a member; `principal_of_token` turns a token
back into its member (refusing an unknown, revoked or shut-down one).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from models.base import utc_column, utcnow
from models.db import session_scope
from models.team import get_member, get_team
from models.team_settings import ApprovalSettings

TOKEN_PREFIX = "tft_"
"""Every member token starts with this, so a leaked one is easy to recognise (and grep)."""


class Forbidden(ValueError):
    """A caller may not do this; the message is one line saying who, what and why.

    `kind` is the error's name in the `001` error envelope; `details` says which rule.
    """

    kind = "Forbidden"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class Unauthorized(Forbidden):
    """The caller's token is unknown, revoked, or belongs to a member who is shut down."""

    kind = "Unauthorized"


class PrincipalKind(StrEnum):
    """What kind of caller a principal is: a row group of `RULES`."""

    LOCAL = "local"
    MEMBER = "member"


class Door(StrEnum):
    """The way a call came in (recorded with decisions; not part of the rules)."""

    CLI = "cli"
    MCP = "mcp"
    MCP_HTTP = "mcp-http"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the local user, or one member of one team."""

    kind: PrincipalKind
    door: Door = Door.CLI
    team: str | None = None
    name: str | None = None

    @classmethod
    def local(cls, door: Door = Door.CLI) -> Principal:
        """The local user: whoever may run the CLI on this machine."""
        return cls(PrincipalKind.LOCAL, door)

    @classmethod
    def member(cls, team: str, name: str, door: Door = Door.MCP) -> Principal:
        """Member `name` of `team`, as its token says."""
        return cls(PrincipalKind.MEMBER, door, team, name)

    @property
    def is_local(self) -> bool:
        return self.kind is PrincipalKind.LOCAL

    def describe(self) -> str:
        """`the local user` or `member alice of team research`."""
        if self.is_local:
            return "the local user"
        return f"member {self.name} of team {self.team}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "door": self.door.value,
            "team": self.team,
            "name": self.name,
        }


class Action(StrEnum):
    """What a caller asks to do (one `RULES` row per kind of caller and action)."""

    TEAM_CREATE = "team.create"
    TEAM_DELETE = "team.delete"
    TEAM_READ = "team.read"
    MEMBER_SPAWN = "member.spawn"
    MEMBER_KILL = "member.kill"
    MEMBER_TOKEN = "member.token"
    INBOX_READ = "inbox.read"
    MESSAGE_SEND = "message.send"
    SHUTDOWN_REQUEST = "shutdown.request"
    SHUTDOWN_ANSWER = "shutdown.answer"
    PLAN_REQUEST = "plan.request"
    PLAN_DECIDE = "plan.decide"
    PLAN_READ = "plan.read"
    TASK_CREATE = "task.create"
    TASK_UPDATE = "task.update"
    TASK_READ = "task.read"
    HEARTBEAT = "member.heartbeat"
    MEMORY_WRITE = "memory.write"
    MEMORY_READ = "memory.read"
    ALERT_SET = "alert.set"


@dataclass(frozen=True)
class TaskTarget:
    """The target of `TASK_UPDATE`: who the task is assigned to now, and the owner the call
    would give it (None: the call does not change the owner)."""

    assignees: tuple[str, ...]
    new_owner: str | None = None


@dataclass(frozen=True)
class Request:
    """One question to the rule table: may `principal` do `action` on `target` in `team`?"""

    principal: Principal
    action: Action
    team: str | None
    target: Any
    session: Session = field(repr=False)


Rule = Callable[[Request], str | None]
"""A rule answers None (allowed) or the reason it refuses (completing `... may not ...`)."""


def anyone(_: Request) -> str | None:
    """Allowed."""
    return None


def nobody(reason: str) -> Rule:
    """Refused, always, for `reason`."""

    def rule(_: Request) -> str | None:
        return reason

    return rule


def in_own_team(req: Request) -> str | None:
    """Allowed on the member's own team only."""
    if req.team != req.principal.team:
        return f"it belongs to team {req.principal.team}, not {req.team}"
    return None


def as_itself(req: Request) -> str | None:
    """Allowed in its own team, acting as (or on) itself only: `target` is its own name."""
    return in_own_team(req) or (
        None if req.target == req.principal.name else f"it acts only as itself, not as {req.target}"
    )


def a_decider(req: Request) -> str | None:
    """Allowed when the member is a decider of its team (the lead or a listed approver,
    `teamflow team settings TEAM --approvers`) and decides as itself."""
    refused = as_itself(req)
    if refused:
        return refused
    assert req.team is not None, "as_itself allowed it: the member acts in its own team"
    config = ApprovalSettings.of(get_team(req.team, session=req.session))
    if req.principal.name not in config.deciders:
        return "it is not an approver of the team (teamflow team settings TEAM --approvers)"
    return None


def own_or_unclaimed_task(req: Request) -> str | None:
    """Allowed on a task of its team that is assigned to it, or on an unassigned one it
    claims (owner = itself); it never gives a task to another member."""
    refused = in_own_team(req)
    if refused:
        return refused
    target: TaskTarget = req.target
    me = req.principal.name
    if target.new_owner is not None and target.new_owner != me:
        return f"it may take a task for itself only, not give it to {target.new_owner}"
    if me in target.assignees:
        return None
    if not target.assignees and target.new_owner == me:
        return None
    owners = ", ".join(target.assignees) or "nobody (claim it with owner set to yourself)"
    return f"the task is assigned to {owners}"


RULES: dict[tuple[PrincipalKind, Action], Rule] = {
    # The local user may do what the CLI may: everything.
    **{(PrincipalKind.LOCAL, action): anyone for action in Action},
    # A member acts on its own team, as itself.
    (PrincipalKind.MEMBER, Action.TEAM_CREATE): nobody("only the local user creates teams"),
    (PrincipalKind.MEMBER, Action.TEAM_DELETE): nobody("only the local user deletes teams"),
    (PrincipalKind.MEMBER, Action.TEAM_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.MEMBER_SPAWN): nobody("members do not spawn members"),
    (PrincipalKind.MEMBER, Action.MEMBER_KILL): nobody("members do not stop members"),
    (PrincipalKind.MEMBER, Action.MEMBER_TOKEN): nobody("only the local user issues tokens"),
    (PrincipalKind.MEMBER, Action.INBOX_READ): as_itself,
    (PrincipalKind.MEMBER, Action.MESSAGE_SEND): as_itself,
    (PrincipalKind.MEMBER, Action.SHUTDOWN_REQUEST): nobody("only the lead asks for shutdowns"),
    (PrincipalKind.MEMBER, Action.SHUTDOWN_ANSWER): as_itself,
    (PrincipalKind.MEMBER, Action.PLAN_REQUEST): as_itself,
    (PrincipalKind.MEMBER, Action.PLAN_DECIDE): a_decider,
    (PrincipalKind.MEMBER, Action.PLAN_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.TASK_CREATE): in_own_team,
    (PrincipalKind.MEMBER, Action.TASK_UPDATE): own_or_unclaimed_task,
    (PrincipalKind.MEMBER, Action.TASK_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.HEARTBEAT): as_itself,
    (PrincipalKind.MEMBER, Action.MEMORY_WRITE): as_itself,
    (PrincipalKind.MEMBER, Action.MEMORY_READ): as_itself,
    (PrincipalKind.MEMBER, Action.ALERT_SET): as_itself,
}
"""Who may do what: (kind of caller, action) -> rule. No row: refused."""


def authorize(
    principal: Principal,
    action: Action | str,
    team: str | None = None,
    target: Any = None,
    *,
    session: Session | None = None,
) -> None:
    """Raises `Forbidden` unless `principal` may do `action` in `team` on `target`.

    Args:
        principal: Who calls.
        action: What it asks to do.
        team: The team it acts in (None for acts outside any team).
        target: What it acts on, as the action's rule reads it: a member name (the inbox
            read, the sender, the decider, ...) or a `TaskTarget` (`TASK_UPDATE`).
        session: A session to read team settings in (default: a new one).
    """
    action = Action(action)
    rule = RULES.get((principal.kind, action))
    with session_scope(session) as s:
        reason = (
            "no rule allows it"
            if rule is None
            else rule(Request(principal, action, team, target, s))
        )
    if reason is not None:
        shown = target
        if isinstance(target, TaskTarget):
            shown = {"assignees": list(target.assignees), "new_owner": target.new_owner}
        raise Forbidden(
            f"{principal.describe()} may not {action.value}"
            + (f" in team {team}" if team else "")
            + f": {reason}",
            details={
                "action": action.value,
                "principal": principal.to_json(),
                "team": team,
                "target": shown,
            },
        )


# --- member tokens ---------------------------------------------------------------------------


class MemberToken(SQLModel, table=True):
    """A member's token, by its SHA-256 (the token itself is shown once and never stored)."""

    __tablename__ = "member_tokens"

    token_hash: str = SQLField(sa_column=sa.Column(sa.String(64), primary_key=True))
    team: str = SQLField(sa_column=sa.Column(sa.String(64), nullable=False, index=True))
    member: str = SQLField(sa_column=sa.Column(sa.String(64), nullable=False))
    created_at: datetime | None = SQLField(default_factory=utcnow, sa_column=utc_column())
    revoked_at: datetime | None = SQLField(default=None, sa_column=utc_column())


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_token(team: str, member: str, *, session: Session | None = None) -> str:
    """A new token for `member` of `team` (active): returned once, kept only as its hash.

    A member may hold several tokens (one per session it runs); `revoke_tokens` ends them all.
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with session_scope(session) as s:
        get_member(team, member, active=True, session=s)
        s.add(MemberToken(token_hash=_digest(token), team=team, member=member))
        s.flush()
    return token


def revoke_tokens(team: str, member: str, *, session: Session | None = None) -> int:
    """Revokes every live token of `member`; returns how many there were."""
    with session_scope(session) as s:
        get_member(team, member, session=s)
        rows = list(
            s.exec(
                select(MemberToken).where(
                    MemberToken.team == team,
                    MemberToken.member == member,
                    col(MemberToken.revoked_at).is_(None),
                )
            )
        )
        now = utcnow()
        for row in rows:
            row.revoked_at = now
            s.add(row)
        return len(rows)


def principal_of_token(
    token: str, door: Door = Door.MCP, *, session: Session | None = None
) -> Principal:
    """The member a token belongs to; `Unauthorized` if it is unknown, revoked, or its member
    is shut down (the message never repeats the token)."""
    token = (token or "").strip()
    with session_scope(session) as s:
        row = s.get(MemberToken, _digest(token)) if token else None
        if row is None:
            raise Unauthorized("the token is not a teamflow member token (or was mistyped)")
        if row.revoked_at is not None:
            raise Unauthorized(
                f"the token of member {row.member} of team {row.team} was revoked; "
                f"ask for a new one: teamflow member token {row.team} {row.member}"
            )
        member = get_member(row.team, row.member, session=s)
        if not member.is_active:
            raise Unauthorized(f"member {row.member} of team {row.team} is shut down")
        return Principal.member(row.team, row.member, door)


def live_tokens(team: str, member: str, *, session: Session | None = None) -> int:
    """How many unrevoked tokens `member` holds."""
    with session_scope(session) as s:
        return len(
            list(
                s.exec(
                    select(MemberToken.token_hash).where(
                        MemberToken.team == team,
                        MemberToken.member == member,
                        col(MemberToken.revoked_at).is_(None),
                    )
                )
            )
        )


def every_action_has_a_rule(kinds: Iterable[PrincipalKind] = tuple(PrincipalKind)) -> list[str]:
    """The (kind, action) pairs without a row (refused by default): a test keeps it empty."""
    return [f"{k.value}:{a.value}" for k in kinds for a in Action if (k, a) not in RULES]
