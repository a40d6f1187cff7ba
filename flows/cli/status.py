"""`teamflow log`, `status` and `sync`: a member's conversation, a team's state, its
inbox files taken in.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from flows.cli.output import JsonFlag, emit, fail


def log(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    task_id: Annotated[str | None, typer.Option("--task", help="Only this task's steps.")] = None,
    color: Annotated[str, typer.Option("--color", help="auto, always or never.")] = "auto",
    as_json: JsonFlag = False,
) -> None:
    """A member's conversation in the console format of seed 003."""
    from flows.render import render
    from models.conversation import conversations_of
    from models.db import session_scope
    from models.team import get_member

    if color not in ("auto", "always", "never"):
        fail(f"--color {color!r} is not one of auto, always, never")
    with session_scope() as s:
        member = get_member(team_name, name, session=s)
        agent, member_color = member.agent_id, member.color
        found = conversations_of(session=s, agent_id=agent)
    if task_id is not None:
        found = {k: v for k, v in found.items() if k == f"task-{task_id}"}
    if as_json:
        emit({k: [m.to_wire() for m in v] for k, v in found.items()})
        return
    use = color == "always" or (color == "auto" and sys.stdout.isatty())
    for conversation, messages in found.items():
        typer.echo(f"── {conversation} ──\n")
        typer.echo(render(messages, color=member_color if use else None))
    if not found:
        typer.echo(f"{agent} has no conversation yet")


# --- status and sync -------------------------------------------------------------------------


def status(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")], as_json: JsonFlag = False
) -> None:
    """The team's state (004 Export Team State) with unread counts per member, and the link
    to the team's runs in the Prefect UI (its run list filtered by the team's tag)."""
    from flows.runner import team_runs_url
    from models import presence

    state = presence.team_state(team_name)
    if as_json:
        emit(state)
        return
    typer.echo(f"{state['team']} (created {state['created']})")
    typer.echo(f"active members: {len(state['active_members'])} of {state['total_members']}")
    for name, count in state["unread"].items():
        typer.echo(f"  {name:<20} {count} unread")
    typer.echo(f"runs: {team_runs_url(state['team'])}")


def sync(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")], as_json: JsonFlag = False
) -> None:
    """Takes in messages and read flags that others wrote into the team's inbox files, and
    members added or marked inactive in its config.json (004 "Updating Config").

    An entry that a send would refuse (invalid, over the size limit) or a file that is not
    JSON is refused with one line each on stderr, the rest taken in, the file kept as
    `{member}.json.bad-{time}`; the exit code is then 1. Only on the mirror host
    (`TEAMFLOW_MIRROR`, see docs/beyond-one-machine.md).
    """
    from models import config_intake, inbox_files
    from models.settings import get_settings

    if not get_settings().mirror:
        fail(
            "this host does not mirror the team files (TEAMFLOW_MIRROR is off): run "
            "`teamflow sync` on the mirror host"
        )
    config = config_intake.take_in(team_name)  # first: a member added there gets its inbox
    refused: dict[str, list[str]] = {}
    report = inbox_files.sync(team_name, refused)
    if as_json:
        taken: dict[str, Any] = {
            m: {"added": a, "marked_read": r} | ({"refused": refused[m]} if refused[m] else {})
            for m, (a, r) in report.items()
        }
        if config.joined or config.inactive or config.refused:
            taken["config.json"] = {"joined": config.joined, "inactive": config.inactive} | (
                {"refused": config.refused} if config.refused else {}
            )
        emit(taken)
    else:
        for line in config.lines():
            typer.echo(line)
        added = sum(a for a, _ in report.values())
        marked = sum(r for _, r in report.values())
        typer.echo(f"took in {added} new messages and {marked} read flags")
    lines = [line for member in report for line in refused[member]]
    if config.refused:
        lines.insert(0, config.refused)
    for line in lines:
        typer.echo(f"teamflow: refused: {line}", err=True)
    if lines:
        raise typer.Exit(1)
