"""`teamflow team`: teams, their settings, import/export and backups."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, count_check, emit, fail, seconds_check

team_app = typer.Typer(
    help="Teams: create, list, show, delete, import, export, backup.", no_args_is_help=True
)


@team_app.command("create")
def team_create(
    name: Annotated[str, typer.Argument(help="Team name: kebab-case, 3-64 characters.")],
    description: Annotated[str, typer.Option("--description", help="Team purpose (1-500).")],
    lead: Annotated[str, typer.Option("--lead", help="The lead's member name.")] = "team-lead",
    as_json: JsonFlag = False,
) -> None:
    """Creates a team with its lead, and writes its config.json."""
    from models import membership

    row = membership.create_team(name, description=description, lead=lead)
    if as_json:
        emit({"team": row.name, "lead": row.lead})
    else:
        typer.echo(f"created team {row.name} (lead {row.lead})")


@team_app.command("list")
def team_list(as_json: JsonFlag = False) -> None:
    """Lists the teams."""
    from models import team

    rows = team.list_teams()
    if as_json:
        emit([{"name": t.name, "description": t.description, "lead": t.lead} for t in rows])
        return
    for t in rows:
        typer.echo(f"{t.name}\t{t.description}")


@team_app.command("show")
def team_show(name: str, as_json: JsonFlag = False) -> None:
    """Shows a team's config.json (the 004 format)."""
    from models import team
    from models.db import session_scope

    with session_scope() as s:
        config = team.config_of(team.get_team(name, session=s), session=s).to_wire()
    if as_json:
        emit(config)
        return
    typer.echo(f"{config['name']}: {config['description']}")
    for m in config["members"]:
        state = "active" if m["isActive"] else "shut down"
        typer.echo(f"  {m['name']:<20} {m['model']:<8} {m['color']:<8} {state}")


@team_app.command("settings")
def team_settings(
    name: Annotated[str, typer.Argument(metavar="TEAM")],
    approvers: Annotated[
        str | None,
        typer.Option(
            "--approvers", help="Who may decide plans besides the lead: a,b ('' for none)."
        ),
    ] = None,
    plan_timeout: Annotated[
        float | None,
        typer.Option(
            "--plan-timeout",
            help="Seconds a plan waits for a decision.",
            callback=seconds_check("plan_timeout_seconds"),
        ),
    ] = None,
    plan_policy: Annotated[
        str | None,
        typer.Option("--plan-policy", help="When nobody decided in time: deny, approve, escalate."),
    ] = None,
    escalation: Annotated[
        float | None,
        typer.Option(
            "--escalation",
            help="escalate: seconds after the alarm until a denial.",
            callback=seconds_check("plan_escalation_seconds"),
        ),
    ] = None,
    max_revisions: Annotated[
        int | None,
        typer.Option(
            "--max-revisions",
            help="Times a member may ask for one plan.",
            callback=count_check("plan_max_revisions"),
        ),
    ] = None,
    shutdown_timeout: Annotated[
        float | None,
        typer.Option(
            "--shutdown-timeout",
            help="Seconds a shutdown waits, then forces.",
            callback=seconds_check("shutdown_timeout_seconds"),
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            help="Assignees of one task working at once.",
            callback=count_check("concurrency"),
        ),
    ] = None,
    offline_after: Annotated[
        str | None,
        typer.Option(
            "--offline-after",
            help="How old a member's heartbeat may get before the watchdog marks it offline "
            "and alarms the lead: 90s, 5m, 1h (default 5m).",
        ),
    ] = None,
    reset: Annotated[
        list[str] | None,
        typer.Option("--reset", help="Restore a setting's default (e.g. plan_timeout_seconds)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Shows a team's settings, or changes them (approvers, plan timeouts and policy, ...).

    Without options it prints the settings as stored (defaults are not shown).
    """
    from models import team
    from models.team_settings import parse_duration

    changes: dict[str, object] = {
        "approvers": [a.strip() for a in approvers.split(",") if a.strip()]
        if approvers is not None
        else None,
        "plan_timeout_seconds": plan_timeout,
        "plan_timeout_policy": plan_policy,
        "plan_escalation_seconds": escalation,
        "plan_max_revisions": max_revisions,
        "shutdown_timeout_seconds": shutdown_timeout,
        "concurrency": concurrency,
        "offline_after_seconds": parse_duration(offline_after, what="--offline-after")
        if offline_after is not None
        else None,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    for key in reset or []:
        if key in changes:
            fail(f"setting {key} is both changed and reset")
        changes[key] = None
    if changes:
        stored = team.update_settings(name, changes)
    else:
        from models.db import session_scope

        with session_scope() as s:
            stored = dict(team.get_team(name, session=s).settings or {})
    if as_json:
        emit(stored)
        return
    for key in team.TEAM_SETTINGS:
        if key in stored:
            value = stored[key]
            typer.echo(f"{key} = {', '.join(value) if isinstance(value, list) else value}")
    if not stored:
        typer.echo(f"team {name} uses the default settings")


@team_app.command("delete")
def team_delete(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Deletes a team: its rows and its files."""
    from models import membership

    if not yes:
        if not sys.stdin.isatty():
            fail(f"not deleting team {name} without --yes (there is no terminal to ask on)")
        typer.confirm(f"delete team {name} and all its messages?", abort=True)
    membership.delete_team(name)
    typer.echo(f"deleted team {name}")


@team_app.command("import")
def team_import(
    folder: Annotated[Path, typer.Argument(help="A 004 team folder: config.json and inboxes/.")],
    as_json: JsonFlag = False,
) -> None:
    """Imports an existing team folder; a malformed file aborts it and nothing is written."""
    from models import backup

    row = backup.import_team(folder)
    if as_json:
        emit({"team": row.name})
    else:
        typer.echo(f"imported team {row.name}")
    _warn_unrunnable(row.name)


def _warn_unrunnable(team_name: str) -> None:
    """One warning line naming the active members (not the lead) that have no runtime to run
    with: tasks cannot be assigned to them until `teamflow member set` gives them one."""
    from flows.runtimes.kinds import runtime_problem
    from models import team

    rows = team.list_teams()
    lead = next((t.lead for t in rows if t.name == team_name), None)
    names = [
        m.name
        for m in team.list_members(team_name)
        if m.name != lead and m.is_active and runtime_problem(m.runtime) is not None
    ]
    if names:
        typer.echo(
            f"teamflow: warning: {', '.join(names)} cannot run tasks yet (no usable runtime); "
            f"set one with teamflow member set {team_name} NAME --runtime ...",
            err=True,
        )


@team_app.command("export")
def team_export(
    name: str,
    folder: Annotated[Path, typer.Option("--dir", help="Where to write config.json and inboxes/.")],
) -> None:
    """Writes a team's config.json and inbox files into a folder."""
    from models import backup

    typer.echo(f"exported team {name} to {backup.export_team(name, folder)}")


@team_app.command("backup")
def team_backup(
    name: str,
    out: Annotated[Path, typer.Option("--out", help="The archive to write (.tar.gz).")],
) -> None:
    """Backs a team up: its folders and its database rows, in one .tar.gz."""
    from models import backup

    typer.echo(f"backed up team {name} to {backup.backup(name, out)}")


@team_app.command("restore")
def team_restore(
    archive: Annotated[Path, typer.Argument(help="An archive written by `team backup`.")],
    force: Annotated[bool, typer.Option("--force", help="Replace a team of that name.")] = False,
) -> None:
    """Restores a team from a backup (refuses to overwrite one without --force).

    Its tasks go back in their projects; a project this database does not have is restored
    from the backup, one it has is kept as it is (each added project, and each task that
    could not go back in its milestone, gets a line).
    """
    from models import backup

    restored = backup.restore(archive, force=force)
    typer.echo(f"restored team {restored.team}")
    for project in restored.projects_added:
        typer.echo(f"restored project {project} (this database did not have it)")
    for note in restored.notes:
        typer.echo(f"teamflow: warning: {note}", err=True)
