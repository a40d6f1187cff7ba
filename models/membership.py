"""Joining and leaving teams: what a new team or member needs besides its row.

A member joins with its row (`models.team.insert_member`), its inbox and, unless it leads
the team, the system message that starts it (`models.inbox`) and a `capability_broadcast`
of its tools to the lead (`models.notify`), sent again whenever its tools change. Its `000`
Agent Configuration (`agent_configs`) is written when it joins and kept current when it
changes (`agent_config`). A deleted team leaves no row in any table
(`models.tables.clear_rows`) and no files.
"""

from __future__ import annotations

from sqlmodel import Session

from models import config_intake  # noqa: F401  (takes in config.json edits before writes)
from models.agent import AgentConfiguration, AgentConfigurationRow
from models.base import check_member_name, check_team_name, utcnow
from models.db import session_scope
from models.inbox import create_inbox, send_system_init
from models.mirror import mark
from models.notify import broadcast_capabilities
from models.tables import clear_rows
from models.team import (
    LEAD_COLOR,
    Member,
    Team,
    get_member,
    get_team,
    insert_member,
    insert_team,
)
from models.team import update_member as _update_member
from models.team_config import AgentType, BackendType


def create_team(
    name: str,
    *,
    description: str,
    lead: str = "team-lead",
    lead_model: str = "opus",
    lead_prompt: str | None = None,
    session: Session | None = None,
) -> Team:
    """Creates a team and its lead (a member too, in the coordinators' yellow)."""
    check_team_name(name)
    check_member_name(lead)
    with session_scope(session) as s:
        team = insert_team(name, description=description, lead=lead, session=s)
        add_member(
            name,
            lead,
            model=lead_model,
            prompt=lead_prompt or f"You lead the team {name}: {description}",
            color=LEAD_COLOR.value,
            session=s,
        )
        mark("config", (name,), session=s)
        return team


def add_member(
    team: str,
    name: str,
    *,
    model: str,
    prompt: str,
    agent_type: str = AgentType.GENERAL_PURPOSE.value,
    backend: str = BackendType.IN_PROCESS.value,
    color: str | None = None,
    tmux_pane_id: str | None = None,
    plan_mode_required: bool | None = None,
    runtime: dict | None = None,
    prompt_template: dict | None = None,
    role: str | None = None,
    session: Session | None = None,
) -> Member:
    """Adds a member (see `models.team.insert_member`) with its inbox; a member other than
    the lead also gets its system init message (its prompt)."""
    with session_scope(session) as s:
        member = insert_member(
            team,
            name,
            model=model,
            prompt=prompt,
            agent_type=agent_type,
            backend=backend,
            color=color,
            tmux_pane_id=tmux_pane_id,
            plan_mode_required=plan_mode_required,
            runtime=runtime,
            prompt_template=prompt_template,
            role=role,
            session=s,
        )
        create_inbox(team, name, session=s)
        if name != get_team(team, session=s).lead:
            send_system_init(team, name, prompt, session=s)
            broadcast_capabilities(team, name, session=s)
        write_agent_config(s, member)
        return member


def update_member(
    team: str,
    name: str,
    *,
    model: str | None = None,
    prompt: str | None = None,
    plan_mode_required: bool | None = None,
    runtime: dict | None = None,
    prompt_template: dict | None = None,
    session: Session | None = None,
) -> Member:
    """Changes a member (see `models.team.update_member`); when its tools change, the lead
    gets its new `capability_broadcast`."""
    with session_scope(session) as s:
        before = (get_member(team, name, session=s).runtime or {}).get("tools", "all")
        member = _update_member(
            team, name, model=model, prompt=prompt, plan_mode_required=plan_mode_required,
            runtime=runtime, prompt_template=prompt_template, session=s,
        )  # fmt: skip
        if (member.runtime or {}).get("tools", "all") != before:
            broadcast_capabilities(team, name, session=s)
        write_agent_config(s, member)
        return member


def write_agent_config(session: Session, member: Member) -> AgentConfigurationRow:
    """Writes (or brings up to date) the member's `000` Agent Configuration: its prompt's
    first line as description, its runtime kind and model as image, its resources and
    tools; `ready` while active, `finished` once shut down."""
    from models.notify import capabilities

    now = utcnow()
    row = session.get(AgentConfigurationRow, member.agent_id)
    runtime = member.runtime or {}
    wire = AgentConfiguration(
        agent_id=member.agent_id,
        name=member.name,
        description=(member.prompt.strip().splitlines() or [""])[0][:500],
        image=f"teamflow/{runtime.get('kind', 'scripted')}:{member.model}",
        resources=[str(r.get("id", r.get("resource_id", r))) if isinstance(r, dict) else str(r)
                   for r in runtime.get("resources") or []],
        tools=capabilities(member, session=session),
        created_at=row.created_at if row is not None else now,
        updated_at=now,
        status="ready" if member.is_active else "finished",
        current_task=row.current_task if row is not None else None,
    )  # fmt: skip
    if row is None:
        row = AgentConfigurationRow.from_wire(wire)
    else:
        for key, value in AgentConfigurationRow.from_wire(wire).model_dump().items():
            setattr(row, key, value)
    session.add(row)
    return row


def agent_config(team: str, name: str, *, session: Session | None = None) -> AgentConfiguration:
    """A member's `000` Agent Configuration (written now if it has none yet)."""
    with session_scope(session) as s:
        member = get_member(team, name, session=s)
        row = s.get(AgentConfigurationRow, member.agent_id) or write_agent_config(s, member)
        return row.to_wire()


def delete_team(name: str, *, session: Session | None = None) -> None:
    """Deletes a team: its rows in every table and its files."""
    with session_scope(session) as s:
        get_team(name, session=s)
        clear_rows(name, session=s)
        mark("deleted", (name,), session=s)
