"""Joining and leaving teams: what a new team or member needs besides its row.

A member joins with its row (`models.team.insert_member`), its inbox and, unless it leads
the team, the system message that starts it (`models.inbox`). A deleted team leaves no row
in any table (`models.tables.clear_rows`) and no files.
"""

from __future__ import annotations

from sqlmodel import Session

from models.base import check_member_name, check_team_name
from models.db import session_scope
from models.inbox import create_inbox, send_system_init
from models.mirror import mark
from models.tables import clear_rows
from models.team import LEAD_COLOR, Member, Team, get_team, insert_member, insert_team
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
            session=s,
        )
        create_inbox(team, name, session=s)
        if name != get_team(team, session=s).lead:
            send_system_init(team, name, prompt, session=s)
        return member


def delete_team(name: str, *, session: Session | None = None) -> None:
    """Deletes a team: its rows in every table and its files."""
    with session_scope(session) as s:
        get_team(name, session=s)
        clear_rows(name, session=s)
        mark("deleted", (name,), session=s)
