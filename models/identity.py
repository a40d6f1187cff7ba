"""Who is calling, and the one rule table of who may do what.

Every way into teamflow names its caller as a `Principal`: the local user (the CLI, or an MCP
session over stdio without a token) or a member (an MCP session carrying the member's token;
later the REST API's users with a role). Before a door acts, it asks `authorize(principal,
action, team, target)`; a refusal is a `Forbidden` error with one line for the caller, raised
before anything is written.

`RULES` is the whole policy: one row per (kind of caller, action). An action without a row
is refused, so a new action is closed until someone writes its row. The REST API's users
(lead, approver, viewer) are kinds of caller of the same table; every door asks `authorize`.

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

from models.base import format_timestamp, utc_column, utcnow
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
    """What kind of caller a principal is: a row group of `RULES`.

    `viewer`, `approver` and `lead` are people with a user token (`teamflow user add NAME
    --role ROLE [--team T]`); a user without `--team` has its role in every team."""

    LOCAL = "local"
    MEMBER = "member"
    VIEWER = "viewer"
    APPROVER = "approver"
    LEAD = "lead"
    LINK = "link"  # the holder of a signed approval link: one decider, one plan

    @classmethod
    def users(cls) -> frozenset[PrincipalKind]:
        """The kinds that are people with a user token."""
        return frozenset({cls.VIEWER, cls.APPROVER, cls.LEAD})


class Door(StrEnum):
    """The way a call came in (recorded with decisions; not part of the rules)."""

    CLI = "cli"
    MCP = "mcp"
    MCP_HTTP = "mcp-http"
    API = "api"
    LINK = "link"
    UI = "ui"

    @property
    def via(self) -> str:
        """How a decision came in, as recorded with it: cli, mcp, api, link or ui."""
        return "mcp" if self is Door.MCP_HTTP else self.value


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

    @classmethod
    def user(
        cls, role: PrincipalKind | str, name: str, team: str | None, door: Door = Door.API
    ) -> Principal:
        """The person `name` with `role` (viewer, approver, lead), in `team` (None: every
        team), as its user token says."""
        kind = PrincipalKind(role)
        if kind not in PrincipalKind.users():
            raise ValueError(f"{role!r} is not a user role (viewer, approver, lead)")
        return cls(kind, door, team, name)

    @property
    def is_local(self) -> bool:
        return self.kind is PrincipalKind.LOCAL

    @property
    def is_user(self) -> bool:
        return self.kind in PrincipalKind.users()

    @classmethod
    def link(cls, team: str, decider: str) -> Principal:
        """The holder of a signed approval link made for `decider` of `team`."""
        return cls(PrincipalKind.LINK, Door.LINK, team, decider)

    @property
    def identity(self) -> str:
        """Who, verified, as recorded with a decision: `local`, `member:alice`, `user:bob`,
        `link:carol` (the holder of carol's signed link)."""
        if self.is_local:
            return "local"
        if self.kind is PrincipalKind.LINK:
            return f"link:{self.name}"
        return f"{'user' if self.is_user else 'member'}:{self.name}"

    def describe(self) -> str:
        """`the local user`, `member alice of team research` or `approver bob`."""
        if self.is_local:
            return "the local user"
        if self.is_user:
            scope = f" of team {self.team}" if self.team else ""
            return f"{self.kind.value} {self.name}{scope}"
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
    INBOX_MARK_READ = "inbox.mark_read"
    MESSAGE_SEND = "message.send"
    SHUTDOWN_REQUEST = "shutdown.request"
    SHUTDOWN_ANSWER = "shutdown.answer"
    PLAN_REQUEST = "plan.request"
    PLAN_DECIDE = "plan.decide"
    PLAN_READ = "plan.read"
    TOOL_DECIDE = "tool.decide"
    TOOL_READ = "tool.read"
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


def in_scope(req: Request) -> str | None:
    """Allowed for a user in the team its token is for (a user without a team: any)."""
    if req.principal.team is not None and req.team != req.principal.team:
        return f"its role is for team {req.principal.team}, not {req.team}"
    return None


def as_the_lead(req: Request) -> str | None:
    """A lead user, in scope, acting as the team's lead (or on a member of the team)."""
    refused = in_scope(req)
    if refused or req.team is None or req.target is None or isinstance(req.target, TaskTarget):
        return refused
    return None


def decides_as_lead(req: Request) -> str | None:
    """A lead user decides in its team's lead's name, and only there."""
    refused = in_scope(req)
    if refused:
        return refused
    assert req.team is not None, "a plan belongs to a team"
    lead = get_team(req.team, session=req.session).lead
    return None if req.target == lead else f"it decides as the lead {lead}, not as {req.target}"


def an_approver_user(req: Request) -> str | None:
    """An approver user decides, as itself, the plans of a team that lists it as an approver
    (`teamflow team settings TEAM --approvers NAME`)."""
    refused = in_scope(req)
    if refused:
        return refused
    if req.target != req.principal.name:
        return f"it decides only as itself, not as {req.target}"
    assert req.team is not None, "a plan belongs to a team"
    config = ApprovalSettings.of(get_team(req.team, session=req.session))
    if req.principal.name not in config.deciders:
        return "it is not an approver of the team (teamflow team settings TEAM --approvers)"
    return None


def as_a_listed_decider(req: Request) -> str | None:
    """A link decides as the decider it was made for, while that one is still the lead or a
    listed approver of the team."""
    refused = in_scope(req)
    if refused:
        return refused
    if req.target != req.principal.name:
        return f"it decides only as {req.principal.name}, not as {req.target}"
    assert req.team is not None, "a plan belongs to a team"
    if (
        req.principal.name
        not in ApprovalSettings.of(get_team(req.team, session=req.session)).deciders
    ):
        return f"{req.principal.name} is no longer a decider of the team"
    return None


READS = frozenset({Action.TEAM_READ, Action.INBOX_READ, Action.PLAN_READ, Action.TOOL_READ,
                   Action.TASK_READ, Action.MEMORY_READ})  # fmt: skip
"""What a viewer may do: read."""

LEAD_NEVER = {
    Action.TEAM_CREATE: "only the local user creates teams",
    Action.TEAM_DELETE: "only the local user deletes teams",
    Action.MEMBER_TOKEN: "only the local user issues tokens",
    Action.HEARTBEAT: "a person has no heartbeat; members send theirs",
    Action.SHUTDOWN_ANSWER: "only the member asked answers a shutdown request",
}
"""What even a lead user may not do (the local user's acts, and members' own)."""
DECISIONS = (Action.PLAN_DECIDE, Action.TOOL_DECIDE)  # a lead user's as the lead; an approver's


def _user_rows(kind: PrincipalKind) -> dict[tuple[PrincipalKind, Action], Rule]:
    rows: dict[tuple[PrincipalKind, Action], Rule] = {}
    for action in Action:
        if action in READS:
            rule: Rule = in_scope
        elif kind is PrincipalKind.LEAD:
            rule = (
                nobody(LEAD_NEVER[action]) if action in LEAD_NEVER
                else decides_as_lead if action in DECISIONS
                else as_the_lead
            )  # fmt: skip
        elif kind is PrincipalKind.APPROVER and action in DECISIONS:
            rule = an_approver_user
        else:
            rule = nobody(f"a {kind.value} only reads" + (
                " and decides" if kind is PrincipalKind.APPROVER else ""))  # fmt: skip
        rows[(kind, action)] = rule
    return rows


def unless_the_team_has_users(req: Request) -> str | None:
    """The local user decides a team's plans only while the team has no users: once people
    have tokens, a decision needs the decider's (TEAMFLOW_TOKEN), so a program that can run
    the CLI (an agent) cannot decide by naming the lead."""
    if req.team is not None and team_has_users(req.team, session=req.session):
        return (
            "the team has users, so a decision needs the decider's token: set "
            "TEAMFLOW_TOKEN to it (teamflow user add NAME --role lead|approver)"
        )
    return None


RULES: dict[tuple[PrincipalKind, Action], Rule] = {
    # The local user may do what the CLI may: everything, but decide the plans and tool
    # calls of a team with users (people with tokens).
    **{(PrincipalKind.LOCAL, action): anyone for action in Action},
    (PrincipalKind.LOCAL, Action.PLAN_DECIDE): unless_the_team_has_users,
    (PrincipalKind.LOCAL, Action.TOOL_DECIDE): unless_the_team_has_users,
    # A member acts on its own team, as itself.
    (PrincipalKind.MEMBER, Action.TEAM_CREATE): nobody("only the local user creates teams"),
    (PrincipalKind.MEMBER, Action.TEAM_DELETE): nobody("only the local user deletes teams"),
    (PrincipalKind.MEMBER, Action.TEAM_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.MEMBER_SPAWN): nobody("members do not spawn members"),
    (PrincipalKind.MEMBER, Action.MEMBER_KILL): nobody("members do not stop members"),
    (PrincipalKind.MEMBER, Action.MEMBER_TOKEN): nobody("only the local user issues tokens"),
    (PrincipalKind.MEMBER, Action.INBOX_READ): as_itself,
    (PrincipalKind.MEMBER, Action.INBOX_MARK_READ): as_itself,
    (PrincipalKind.MEMBER, Action.MESSAGE_SEND): as_itself,
    (PrincipalKind.MEMBER, Action.SHUTDOWN_REQUEST): nobody("only the lead asks for shutdowns"),
    (PrincipalKind.MEMBER, Action.SHUTDOWN_ANSWER): as_itself,
    (PrincipalKind.MEMBER, Action.PLAN_REQUEST): as_itself,
    (PrincipalKind.MEMBER, Action.PLAN_DECIDE): a_decider,
    (PrincipalKind.MEMBER, Action.PLAN_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.TOOL_DECIDE): a_decider,
    (PrincipalKind.MEMBER, Action.TOOL_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.TASK_CREATE): in_own_team,
    (PrincipalKind.MEMBER, Action.TASK_UPDATE): own_or_unclaimed_task,
    (PrincipalKind.MEMBER, Action.TASK_READ): in_own_team,
    (PrincipalKind.MEMBER, Action.HEARTBEAT): as_itself,
    (PrincipalKind.MEMBER, Action.MEMORY_WRITE): as_itself,
    (PrincipalKind.MEMBER, Action.MEMORY_READ): as_itself,
    (PrincipalKind.MEMBER, Action.ALERT_SET): as_itself,
    # People with a user token: a viewer reads, an approver reads and decides the plans of
    # the teams that list it, a lead does what the team's lead does (in its team).
    **_user_rows(PrincipalKind.VIEWER),
    **_user_rows(PrincipalKind.APPROVER),
    **_user_rows(PrincipalKind.LEAD),
    # A signed approval link decides its one plan, as the decider it was made for.
    **{(PrincipalKind.LINK, a): nobody("an approval link only decides its plan") for a in Action},
    (PrincipalKind.LINK, Action.PLAN_READ): in_scope,
    (PrincipalKind.LINK, Action.PLAN_DECIDE): as_a_listed_decider,
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


# --- people: users with a role (their store is models.users) ---------------------------------


class User(SQLModel, table=True):
    """A person with a role (in one team, or in every team) and one token, by its hash."""

    __tablename__ = "users"

    name: str = SQLField(sa_column=sa.Column(sa.String(64), primary_key=True))
    role: str = SQLField(sa_column=sa.Column(sa.String(16), nullable=False))
    team: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(64), nullable=True))
    token_hash: str = SQLField(
        sa_column=sa.Column(sa.String(64), nullable=False, unique=True, index=True)
    )
    created_at: datetime | None = SQLField(default_factory=utcnow, sa_column=utc_column())
    revoked_at: datetime | None = SQLField(default=None, sa_column=utc_column())

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def to_json(self) -> dict[str, Any]:
        """The user as `teamflow user list --json` prints it (never its token)."""
        return {
            "name": self.name,
            "role": self.role,
            "team": self.team,
            "createdAt": format_timestamp(self.created_at) if self.created_at else None,
            "revokedAt": format_timestamp(self.revoked_at) if self.revoked_at else None,
        }


def team_has_users(team: str, *, session: Session | None = None) -> bool:
    """Whether any live user holds a role in `team` (its own, or every team's)."""
    with session_scope(session) as s:
        query = select(User.name).where(
            col(User.revoked_at).is_(None),
            sa.or_(col(User.team).is_(None), col(User.team) == team),
        )
        return s.exec(query.limit(1)).first() is not None
