"""Teams and members: their tables and the store; the `004` `config.json` they are written
to is `models.team_config`.

This module holds the rows only: what else a new member needs (its inbox, its first
message) is `models.membership`; a team's state export is `models.presence`; its
approval and shutdown settings are read by `settings_of` (`models.team_settings`).
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from pydantic import (
    ValidationError,
)
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from models import db, mirror
from models.base import (
    check_member_name,
    check_team_name,
    json_column,
    utc_column,
    utcnow,
)
from models.db import session_scope
from models.mirror import mark
from models.team_config import (
    DEFAULT_MODELS,
    SCHEMA_VERSION,
    AgentType,
    BackendType,
    Color,
    TeamConfig,
    TeamMember,
    agent_id,
)
from models.team_settings import ApprovalSettings, check_setting
from models.tool_policy import TOOL_SETTINGS, check_tool_setting
from models.wire_support import error_lines

# --- tables --------------------------------------------------------------------------------


class Team(SQLModel, table=True):
    """A team: the top of `config.json` plus teamflow's team settings."""

    __tablename__ = "teams"

    name: str = SQLField(primary_key=True, max_length=64)
    description: str = SQLField(max_length=500)
    created_at: Any = SQLField(sa_column=utc_column(nullable=False))
    schema_version: str | None = SQLField(default=None, max_length=32)
    meta: dict | None = SQLField(default=None, sa_column=json_column("metadata"))
    allowed_models: list | None = SQLField(default=None, sa_column=json_column())
    lead: str = SQLField(default="team-lead", max_length=64)
    settings: dict = SQLField(default_factory=dict, sa_column=json_column(nullable=False))
    extra: dict = SQLField(
        default_factory=dict,
        sa_column=json_column(nullable=False),
        description="Fields of config.json teamflow does not know, written back unchanged",
    )
    updated_at: Any = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))

    @classmethod
    def from_wire(cls, config: TeamConfig, *, lead: str | None = None) -> Team:
        return cls(
            name=config.name,
            description=config.description,
            created_at=config.created_at,
            schema_version=config.schema_version,
            meta=config.metadata,
            allowed_models=config.allowed_models,
            lead=lead or "team-lead",
            extra=dict(config.model_extra or {}),
        )

    def to_wire(self, members: list[Member]) -> TeamConfig:
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "members": [m.to_wire().to_wire() for m in members],
            "createdAt": self.created_at,
        }
        if self.schema_version is not None:
            data["schemaVersion"] = self.schema_version
        if self.meta is not None:
            data["metadata"] = self.meta
        if self.allowed_models is not None:
            data["allowedModels"] = self.allowed_models
        data.update(self.extra or {})
        return TeamConfig.model_validate(data)


class Member(SQLModel, table=True):
    """A team member: one `config.json` member plus what teamflow runs it with."""

    __tablename__ = "members"
    __table_args__ = (sa.UniqueConstraint("agent_id", name="uq_members_agent_id"),)

    team: str = SQLField(
        sa_column=sa.Column(
            sa.String(64), sa.ForeignKey("teams.name", ondelete="CASCADE"), primary_key=True
        )
    )
    name: str = SQLField(primary_key=True, max_length=64)
    agent_id: str = SQLField(max_length=255)
    position: int = SQLField(default=0, description="Order in config.json members")
    agent_type: str = SQLField(default=AgentType.GENERAL_PURPOSE.value, max_length=32)
    model: str = SQLField(max_length=64)
    prompt: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    color: str = SQLField(max_length=16)
    tmux_pane_id: str | None = SQLField(default=None, max_length=32)
    backend_type: str = SQLField(default=BackendType.IN_PROCESS.value, max_length=32)
    is_active: bool = SQLField(default=True)
    spawned_at: Any = SQLField(default=None, sa_column=utc_column())
    shutdown_at: Any = SQLField(default=None, sa_column=utc_column())
    meta: dict | None = SQLField(default=None, sa_column=json_column("metadata"))
    plan_mode_required: bool | None = SQLField(default=None)
    runtime: dict = SQLField(
        default_factory=dict,
        sa_column=json_column(nullable=False),
        description="How teamflow runs this member's agent (runtime kind and its options)",
    )
    extra: dict = SQLField(default_factory=dict, sa_column=json_column(nullable=False))

    @classmethod
    def from_wire(cls, team: str, member: TeamMember, *, position: int = 0) -> Member:
        return cls(
            team=team,
            name=member.name,
            agent_id=member.agent_id,
            position=position,
            agent_type=member.agent_type.value,
            model=member.model,
            prompt=member.prompt,
            color=member.color.value,
            tmux_pane_id=member.tmux_pane_id,
            backend_type=member.backend_type.value,
            is_active=member.is_active,
            spawned_at=member.spawned_at,
            shutdown_at=member.shutdown_at,
            meta=_meta_without_runtime(member.metadata),
            plan_mode_required=member.plan_mode_required,
            runtime=_runtime_in(member.metadata),
            extra=dict(member.model_extra or {}),
        )

    def to_wire(self) -> TeamMember:
        data: dict[str, Any] = {
            "agentId": self.agent_id,
            "name": self.name,
            "agentType": self.agent_type,
            "model": self.model,
            "prompt": self.prompt,
            "color": self.color,
        }
        if self.tmux_pane_id is not None:
            data["tmuxPaneId"] = self.tmux_pane_id
        data["backendType"] = self.backend_type
        data["isActive"] = self.is_active
        for key, value in (
            ("spawnedAt", self.spawned_at),
            ("shutdownAt", self.shutdown_at),
            ("metadata", _meta_with_runtime(self.meta, self.runtime)),
            ("planModeRequired", self.plan_mode_required),
        ):
            if value is not None:
                data[key] = value
        data.update(self.extra or {})
        # The row was validated against its team's allowed models when it was written.
        return TeamMember.model_validate(data, context={"allowed_models": (self.model,)})


RUNTIME_KEY = "runtime"
"""Where a member's runtime travels in `config.json`: its `metadata.runtime`, so `004`
readers, which do not know it, keep reading the member as before."""


def _runtime_in(metadata: dict[str, Any] | None) -> dict:
    runtime = (metadata or {}).get(RUNTIME_KEY)
    return dict(runtime) if isinstance(runtime, dict) else {}


def _meta_without_runtime(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    if not metadata or not _runtime_in(metadata):
        return metadata  # an empty `runtime` stays where it was, so it is written back
    rest = {k: v for k, v in metadata.items() if k != RUNTIME_KEY}
    return rest or None


def _meta_with_runtime(meta: dict[str, Any] | None, runtime: dict | None) -> dict | None:
    if not runtime:
        return meta
    return {**(meta or {}), RUNTIME_KEY: runtime}


PROMPT_TEMPLATE_KEY = "promptTemplate"
"""Where a member records the template its prompt was made from: `metadata.promptTemplate`
(`{"templateId", "version", "vars"}`), so it travels in `config.json` with the prompt."""


def _meta_with_prompt_template(
    meta: dict[str, Any] | None, origin: dict[str, Any] | None
) -> dict[str, Any] | None:
    rest = {k: v for k, v in (meta or {}).items() if k != PROMPT_TEMPLATE_KEY}
    if origin is not None:
        return {**rest, PROMPT_TEMPLATE_KEY: origin}
    if meta is None or PROMPT_TEMPLATE_KEY not in meta:
        return meta  # unchanged, an empty `metadata` included (it is written back)
    return rest or None


# --- the store -----------------------------------------------------------------------------


class TeamError(ValueError):
    """A refused team or member operation; the message is one line for the user."""


LEAD_COLOR = Color.YELLOW  # 004: yellow is the coordinators' colour
MEMBER_COLORS = [Color.BLUE, Color.GREEN]
"""`004` colours of general teammates, in turn: the first blue, the second green."""

ROLE_COLORS = {
    "coordinator": Color.YELLOW,
    "specialized": Color.MAGENTA,
    "reviewer": Color.CYAN,
    "error": Color.RED,
}
"""`004` Terminal Color Mapping: the colour of each role (a `specialized` agentType is
magenta too); other members take `MEMBER_COLORS` in turn."""


def role_color(role: str | None, agent_type: str, teammates: int) -> str:
    """A new member's colour by the `004` table: its role's, magenta for a specialized
    agent, else blue or green in turn (`teammates`: how many general ones came before)."""
    if role is not None:
        if role not in ROLE_COLORS:
            raise TeamError(f"role {role!r} is not one of {', '.join(ROLE_COLORS)}")
        return ROLE_COLORS[role].value
    if agent_type == AgentType.SPECIALIZED.value:
        return Color.MAGENTA.value
    return MEMBER_COLORS[teammates % len(MEMBER_COLORS)].value


def get_team(name: str, *, session: Session) -> Team:
    """The team called `name`; `TeamError` if there is none (or the name is malformed)."""
    check_team_name(name)
    team = session.get(Team, name)
    if team is None:
        raise TeamError(f"no team named {name!r}")
    return team


def get_member(team: str, name: str, *, session: Session, active: bool = False) -> Member:
    """A member of `team`; `TeamError` if unknown (or, with `active`, shut down)."""
    check_member_name(name)
    member = session.get(Member, (team, name))
    if member is None:
        raise TeamError(f"team {team!r} has no member named {name!r}")
    if active and not member.is_active:
        raise TeamError(f"member {name!r} of team {team!r} is shut down")
    return member


def list_teams(*, session: Session | None = None) -> list[Team]:
    with session_scope(session) as s:
        return list(s.exec(select(Team).order_by(Team.name)))


def list_members(
    team: str, *, active: bool = False, session: Session | None = None
) -> list[Member]:
    with session_scope(session) as s:
        get_team(team, session=s)
        query = select(Member).where(Member.team == team)
        if active:
            query = query.where(Member.is_active == sa.true())
        return list(s.exec(query.order_by(col(Member.position))))


def config_of(team: Team, *, session: Session) -> TeamConfig:
    """The team's `config.json`, from the database."""
    members = session.exec(
        select(Member).where(col(Member.team) == team.name).order_by(col(Member.position))
    )
    return team.to_wire(list(members))


def insert_team(name: str, *, session: Session, description: str, lead: str) -> Team:
    """The row of a new team, without members (`models.membership.create_team` adds its lead)."""
    check_team_name(name)
    check_member_name(lead)
    if session.get(Team, name) is not None:
        raise TeamError(f"team {name!r} exists already")
    config = _validated_config(
        {"name": name, "description": description, "members": [], "createdAt": utcnow()}
    )
    team = Team.from_wire(config, lead=lead)
    team.schema_version = SCHEMA_VERSION
    session.add(team)
    session.flush()
    return team


def insert_member(
    team: str,
    name: str,
    *,
    session: Session,
    model: str,
    prompt: str,
    agent_type: str = AgentType.GENERAL_PURPOSE.value,
    backend: str = BackendType.IN_PROCESS.value,
    color: str | None = None,
    tmux_pane_id: str | None = None,
    plan_mode_required: bool | None = None,
    runtime: dict | None = None,
    prompt_template: dict[str, Any] | None = None,
    role: str | None = None,
) -> Member:
    """The row of a new member: `agentId` derived, colour by its role (`role_color`) unless given,
    active. A prompt made from a template records where it came from, `prompt_template`, in
    the member's `metadata.promptTemplate` (as `update_member` does). Its inbox is
    `models.membership.add_member`'s business."""
    team_row = get_team(team, session=session)
    check_member_name(name)
    check_not_reserved(name, lead=team_row.lead)
    if session.get(Member, (team, name)) is not None:
        raise TeamError(f"team {team!r} has a member named {name!r} already")
    members = list(session.exec(select(Member).where(Member.team == team)))
    if color is None:
        general = {c.value for c in MEMBER_COLORS}
        others = [m for m in members if m.name != team_row.lead and m.color in general]
        color = role_color(role, agent_type, len(others))
    data: dict[str, Any] = {
        "agentId": agent_id(name, team),
        "name": name,
        "agentType": agent_type,
        "model": model,
        "prompt": prompt,
        "color": color,
        "backendType": backend,
        "isActive": True,
        "spawnedAt": utcnow(),
    }
    if tmux_pane_id is not None:
        data["tmuxPaneId"] = tmux_pane_id
    if plan_mode_required is not None:
        data["planModeRequired"] = plan_mode_required
    wire = _validated_member(data, team_row)
    if (runtime or {}).get("tools"):
        from models.tool import check_tools_exist  # jsonschema: only when tools are given

        check_tools_exist(runtime["tools"], session=session)  # type: ignore[index]
    position = max((m.position for m in members), default=-1) + 1
    member = Member.from_wire(team, wire, position=position)
    member.runtime = runtime or {}
    member.meta = _meta_with_prompt_template(member.meta, prompt_template)
    session.add(member)
    session.flush()
    team_row.updated_at = utcnow()
    mark("config", (team,), session=session)
    return member


RESERVED_NAMES = frozenset({"system", "*"})
"""Names a member may not take: `system` sends the system messages, `*` is everyone."""


def check_not_reserved(name: str, *, lead: str) -> None:
    """Refuses (`TeamError`) a member named `system` or `*`, or `team-lead` in a team whose
    lead is someone else: messages from them would pass for the system's or the lead's."""
    if name.lower() in RESERVED_NAMES:
        raise TeamError(f"{name!r} is a reserved name: it cannot be a member")
    if name == "team-lead" and lead != name:
        raise TeamError(f"'team-lead' is reserved for a team's lead; {lead!r} leads this team")


def set_member(team: str, name: str, *, session: Session | None = None, **changes: Any) -> Member:
    """Changes fields of a member (e.g. `is_active`, `shutdown_at`, `meta`)."""
    with session_scope(session) as s:
        member = get_member(team, name, session=s)
        for key, value in changes.items():
            setattr(member, key, value)
        s.add(member)
        mark("config", (team,), session=s)
        return member


def update_member(
    team: str,
    name: str,
    *,
    model: str | None = None,
    prompt: str | None = None,
    plan_mode_required: bool | None = None,
    runtime: dict | None = None,
    prompt_template: dict[str, Any] | None = None,
    session: Session | None = None,
) -> Member:
    """Changes a member's model, prompt, plan mode or runtime (None: unchanged).

    A new prompt made from a template records where it came from, `prompt_template`, in
    the member's `metadata.promptTemplate`; a new prompt given without one drops that record.
    The member is validated as a whole (the model against the team's allowed models) before
    anything is written; `TeamError` says what is wrong.
    """
    with session_scope(session) as s:
        team_row = get_team(team, session=s)
        member = get_member(team, name, session=s)
        data = member.to_wire().to_wire()
        if model is not None:
            data["model"] = model
        if prompt is not None:
            data["prompt"] = prompt
        if plan_mode_required is not None:
            data["planModeRequired"] = plan_mode_required
        _validated_member(data, team_row)
        if runtime is not None and runtime.get("tools"):
            from models.tool import check_tools_exist  # jsonschema: only when tools are given

            check_tools_exist(runtime["tools"], session=s)
        if model is not None:
            member.model = model
        if prompt is not None:
            member.prompt = prompt
            member.meta = _meta_with_prompt_template(member.meta, prompt_template)
        if plan_mode_required is not None:
            member.plan_mode_required = plan_mode_required
        if runtime is not None:
            member.runtime = runtime
        s.add(member)
        team_row.updated_at = utcnow()
        mark("config", (team,), session=s)
        return member


TEAM_SETTINGS = {
    "concurrency": "how many assignees of one team task work at once (default 4)",
    "approvers": "who may decide plans besides the lead (names)",
    "plan_timeout_seconds": "how long a plan waits for a decision (default 3600)",
    "plan_timeout_policy": "deny, approve or escalate when nobody decided (default deny)",
    "plan_escalation_seconds": "after an escalation, how long until a denial",
    "plan_max_revisions": "how many times a member may ask, first plan included (default 3)",
    "shutdown_timeout_seconds": "how long a shutdown waits for the member (default 300)",
    "offline_after_seconds": "how old a heartbeat gets before the member is offline (default 300)",
    "ui_decisions": "allow or deny: may the Prefect UI's form decide plans (default allow)",
    "notify_webhook": "a URL that gets a JSON notice with approval links when a plan waits",
    "notify_block": "a Prefect notification block (TYPE/NAME) that sends the links as text",
    **TOOL_SETTINGS,
}
"""teamflow's team settings (`Team.settings`), kept in the database, not in config.json."""


def update_settings(team: str, changes: dict[str, Any], *, session: Session | None = None) -> dict:
    """Changes a team's settings; a None value restores the default.

    Every value is checked before anything is written: an unknown key, a malformed
    approver name, a value out of range is refused with one line that names it.

    Returns the team's settings as stored.
    """
    unknown = sorted(set(changes) - set(TEAM_SETTINGS))
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r} (known: {', '.join(TEAM_SETTINGS)})")
    for name in changes.get("approvers") or []:
        try:
            check_member_name(name)
        except ValueError as exc:
            raise ValueError(f"setting approvers: {exc}") from None
    hook = changes.get("notify_webhook")
    if hook is not None and not (
        isinstance(hook, str) and hook.startswith(("http://", "https://"))
    ):
        raise ValueError(f"setting notify_webhook must be an http(s) URL, not {hook!r}")
    slug = changes.get("notify_block")
    if slug is not None and not (
        isinstance(slug, str) and re.fullmatch(r"[a-z0-9-]+/[A-Za-z0-9_-]+", slug)
    ):
        raise ValueError(
            f"setting notify_block must be a block's TYPE/NAME (e.g. slack-webhook/ops), "
            f"not {slug!r}"
        )
    for key, value in changes.items():
        check_setting(key, value)  # finite and in range: NaN, inf, 1e300 never stored
        check_tool_setting(key, value)
    with session_scope(session) as s:
        row = get_team(team, session=s)
        merged = {**(row.settings or {}), **changes}
        merged = {k: v for k, v in merged.items() if v is not None}
        ApprovalSettings.of(SimpleNamespace(name=row.name, lead=row.lead, settings=merged))
        row.settings = merged
        s.add(row)
        return dict(merged)


def settings_of(team: str, *, session: Session | None = None) -> ApprovalSettings:
    """The approval and shutdown settings of `team` (see `models.team_settings`)."""
    with session_scope(session) as s:
        return ApprovalSettings.of(get_team(team, session=s))


def _validated_config(data: dict[str, Any]) -> TeamConfig:
    try:
        return TeamConfig.model_validate(data)
    except ValidationError as exc:
        raise TeamError(_one_line(exc)) from None


def _validated_member(data: dict[str, Any], team: Team) -> TeamMember:
    allowed = tuple(DEFAULT_MODELS) + tuple(team.allowed_models or ())
    try:
        return TeamMember.model_validate(data, context={"allowed_models": allowed})
    except ValidationError as exc:
        raise TeamError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    return "; ".join(error_lines(exc))


def _write_config(team: str) -> None:
    with Session(db.engine()) as s:
        row = s.get(Team, team)
        if row is not None:
            mirror.write_config(team, config_of(row, session=s).to_wire())


def _remove_files(team: str) -> None:
    mirror.remove_team_files(team)


mirror.register("config", _write_config)
mirror.register("deleted", _remove_files)
