"""The `teamflow` command line.

Commands are thin: they parse, call one store or flow function, and print. Commands that
only touch data never import Prefect, so they start fast; a test checks `sys.modules`.
Every command that prints data takes `--json`; bad input exits non-zero with one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

app = typer.Typer(
    name="teamflow",
    help="Teams of AI agents on Prefect: inboxes, plan approvals, shutdowns and alerts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The teamflow database: migrations.", no_args_is_help=True)
team_app = typer.Typer(
    help="Teams: create, list, show, delete, import, export, backup.", no_args_is_help=True
)
member_app = typer.Typer(help="Team members: add, list, heartbeat.", no_args_is_help=True)
msg_app = typer.Typer(help="Inboxes: send, broadcast, read.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(team_app, name="team")
app.add_typer(member_app, name="member")
app.add_typer(msg_app, name="msg")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class UserError(Exception):
    """Bad input or a refused request: one line for the user, exit code 1."""


def fail(message: str, code: int = 1) -> NoReturn:
    """Prints `teamflow: error: message` (one line) on stderr and exits with `code`."""
    typer.echo(f"teamflow: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def emit(data: object) -> None:
    """Prints `data` as JSON on stdout."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# --- db --------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Migration to go to.")] = "head",
    as_json: JsonFlag = False,
) -> None:
    """Applies teamflow's database migrations (creates every table on a new database)."""
    from models import db

    settings = db.settings()
    try:
        db.upgrade(settings.database_url, revision)
        current = db.current_revision(settings.database_url)
    except db.DatabaseError as exc:
        fail(str(exc))
    url = db.redact(settings.database_url)
    if as_json:
        emit({"database": url, "revision": current})
    else:
        typer.echo(f"database {url} is at migration {current}")


# --- validate --------------------------------------------------------------------------------


def _format_names() -> str:
    from models.formats import FORMATS

    return ", ".join(FORMATS)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="A JSON file in one of the seed formats.")],
    as_format: Annotated[
        str | None,
        typer.Option("--as", help="The format to check against (default: recognised)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Checks a JSON file against its seed format: prints `ok`, or one line per error.

    The format is recognised from the document's keys, or given with `--as`, e.g.
    `004/config`, `003/conversation`, `001/notification` (an unknown `--as` lists them
    all). Exits 1 when the file has errors, 2 when the format cannot be told.
    """
    from pydantic import ValidationError

    from models.formats import FORMATS, detect, error_lines

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(f"{file}: no such file")
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        fail(f"{file}: cannot read: {exc}")
    except json.JSONDecodeError as exc:
        fail(f"{file}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")

    if as_format is not None:
        fmt = FORMATS.get(as_format)
        if fmt is None:
            fail(f"unknown format {as_format!r}; formats: {_format_names()}", code=2)
    else:
        fmt = detect(data)
        if fmt is None:
            fail(f"{file}: cannot tell which seed format this is; give one with --as", code=2)

    try:
        fmt.validate(data)
        errors: list[str] = []
    except ValidationError as exc:
        errors = error_lines(exc)
    if as_json:
        emit({"file": str(file), "format": fmt.name, "ok": not errors, "errors": errors})
    elif errors:
        for line in errors:
            typer.echo(line)
    else:
        typer.echo(f"ok ({fmt.name})")
    if errors:
        raise typer.Exit(1)


# --- teams -----------------------------------------------------------------------------------


def _member_json(m) -> dict:
    return m.to_wire().to_wire()


@team_app.command("create")
def team_create(
    name: Annotated[str, typer.Argument(help="Team name: kebab-case, 3-64 characters.")],
    description: Annotated[str, typer.Option("--description", help="Team purpose (1-500).")],
    lead: Annotated[str, typer.Option("--lead", help="The lead's member name.")] = "team-lead",
    as_json: JsonFlag = False,
) -> None:
    """Creates a team with its lead, and writes its config.json."""
    from models import team

    row = team.create_team(name, description=description, lead=lead)
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
        config = team.config_of(s, team.get_team(s, name)).to_wire()
    if as_json:
        emit(config)
        return
    typer.echo(f"{config['name']}: {config['description']}")
    for m in config["members"]:
        state = "active" if m["isActive"] else "shut down"
        typer.echo(f"  {m['name']:<20} {m['model']:<8} {m['color']:<8} {state}")


@team_app.command("delete")
def team_delete(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Deletes a team: its rows and its files."""
    from models import team

    if not yes and sys.stdin.isatty():
        typer.confirm(f"delete team {name} and all its messages?", abort=True)
    team.delete_team(name)
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
    """Restores a team from a backup (refuses to overwrite one without --force)."""
    from models import backup

    typer.echo(f"restored team {backup.restore(archive, force=force)}")


# --- members ---------------------------------------------------------------------------------


@member_app.command("add")
def member_add(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    model: Annotated[
        str, typer.Option("--model", help="haiku, sonnet, opus, or one the team allows.")
    ],
    prompt: Annotated[str, typer.Option("--prompt", help="The member's system prompt.")],
    agent_type: Annotated[
        str, typer.Option("--type", help="general-purpose or specialized.")
    ] = "general-purpose",
    backend: Annotated[
        str, typer.Option("--backend", help="in-process, tmux, docker or k8s.")
    ] = "in-process",
    color: Annotated[
        str | None, typer.Option("--color", help="Default: the next in the seed's order.")
    ] = None,
    pane: Annotated[
        str | None, typer.Option("--pane", help="tmux pane id, e.g. %88 (tmux backend).")
    ] = None,
    plan_mode: Annotated[
        bool, typer.Option("--plan-mode-required", help="Its plans need the lead's approval.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Adds a member to a team (agentId name@team, active, with an initial system message)."""
    from models import team

    member = team.add_member(
        team_name, name, model=model, prompt=prompt, agent_type=agent_type, backend=backend,
        color=color, tmux_pane_id=pane, plan_mode_required=plan_mode or None,
    )  # fmt: skip
    if as_json:
        emit(_member_json(member))
    else:
        typer.echo(f"added {member.agent_id} ({member.model}, {member.color})")


@member_app.command("list")
def member_list(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    active: Annotated[bool, typer.Option("--active", help="Only active members.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Lists a team's members."""
    from models import team

    members = team.list_members(team_name, active=active)
    if as_json:
        emit([_member_json(m) for m in members])
        return
    for m in members:
        state = "active" if m.is_active else "shut down"
        typer.echo(f"{m.name:<20} {m.model:<8} {m.color:<8} {state}")


@member_app.command("heartbeat")
def member_heartbeat(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    status: Annotated[
        str, typer.Option("--status", help="idle, thinking, executing_tools or offline.")
    ] = "idle",
    as_json: JsonFlag = False,
) -> None:
    """Records that a member is alive (agent_state.last_heartbeat)."""
    from models import team

    state = team.heartbeat(team_name, name, status=status)
    if as_json:
        emit(
            {
                "agent_id": state.agent_id,
                "status": state.status,
                "last_heartbeat": state.last_heartbeat,
            }
        )
    else:
        typer.echo(f"{state.agent_id} {state.status} at {state.last_heartbeat.isoformat()}")


# --- messages --------------------------------------------------------------------------------


@msg_app.command("send")
def msg_send(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    to: Annotated[str, typer.Option("--to", help="Recipient member.")],
    sender: Annotated[str, typer.Option("--from", help="Sending member, or system.")],
    text: Annotated[str, typer.Option("--text", help="The message.")],
    summary: Annotated[str | None, typer.Option("--summary", help="Short summary.")] = None,
    kind: Annotated[
        str | None, typer.Option("--type", help="Message type, e.g. shutdown_approved.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sends a message to one member's inbox.

    A typed message (`--type shutdown_approved`, `plan_approval_response`, ...) carries its
    JSON as `--text`; it is checked against its format.
    """
    from models import inbox

    if kind in inbox.PAYLOAD_TYPES:
        payload = inbox.parse_payload(kind, text)
        row = inbox.send_payload(team_name, to=to, sender=sender, payload=payload, summary=summary)
    else:
        row = inbox.send(team_name, to=to, sender=sender, text=text, summary=summary, type=kind)
    if as_json:
        emit(row.entry_dict())
    else:
        typer.echo(row.message_id)


@msg_app.command("broadcast")
def msg_broadcast(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    sender: Annotated[str, typer.Option("--from", help="Sending member, or system.")],
    text: Annotated[str, typer.Option("--text", help="The message.")],
    summary: Annotated[str | None, typer.Option("--summary", help="Short summary.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sends a message to every active member but the sender."""
    from models import inbox

    rows = inbox.broadcast(team_name, sender=sender, text=text, summary=summary)
    if as_json:
        emit([{"to": r.recipient, **r.entry_dict()} for r in rows])
    else:
        typer.echo(f"sent to {len(rows)} members: {', '.join(r.recipient for r in rows)}")


@msg_app.command("inbox")
def msg_inbox(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    unread: Annotated[bool, typer.Option("--unread", help="Only unread messages.")] = False,
    sender: Annotated[str | None, typer.Option("--from", help="Only from this sender.")] = None,
    mark_read: Annotated[
        bool, typer.Option("--mark-read", help="Mark the shown messages read.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Shows a member's inbox, oldest first."""
    from models import inbox

    rows = inbox.messages(team_name, name, unread=unread, sender=sender, mark_read=mark_read)
    if as_json:
        emit([r.entry_dict() for r in rows])
        return
    for r in rows:
        flag = " " if r.read else "*"
        kind = f" [{r.type}]" if r.type else ""
        stamp = r.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        typer.echo(f"{flag} {stamp} {r.sender}{kind}: {r.summary}")
    if not rows:
        typer.echo("no messages")


# --- status and sync -------------------------------------------------------------------------


@app.command()
def status(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")], as_json: JsonFlag = False
) -> None:
    """The team's state (004 Export Team State) with unread counts per member."""
    from models import team

    state = team.team_state(team_name)
    if as_json:
        emit(state)
        return
    typer.echo(f"{state['team']} (created {state['created']})")
    typer.echo(f"active members: {len(state['active_members'])} of {state['total_members']}")
    for name, count in state["unread"].items():
        typer.echo(f"  {name:<20} {count} unread")


@app.command()
def sync(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")], as_json: JsonFlag = False
) -> None:
    """Takes in messages and read flags that others wrote into the team's inbox files."""
    from models import inbox

    report = inbox.sync(team_name)
    if as_json:
        emit({m: {"added": a, "marked_read": r} for m, (a, r) in report.items()})
        return
    added = sum(a for a, _ in report.values())
    marked = sum(r for _, r in report.values())
    typer.echo(f"took in {added} new messages and {marked} read flags")


# --- demo ------------------------------------------------------------------------------------


@app.command()
def demo() -> None:
    """Runs a whole team scenario end to end (research-team, Q4 sales analysis)."""
    typer.echo(
        "teamflow demo: not built yet. It will create research-team with analyst-1 (haiku)\n"
        "and analyst-2 (sonnet), hand them the Q4 sales analysis of seed 004, run their\n"
        "tasks as Prefect flows with one plan approval, shut them down through the\n"
        "handshake, and print where to look (files, database, Prefect UI)."
    )


def main() -> None:
    """Console entry point: refusals from the stores become one line and exit code 1."""
    try:
        app()
    except (UserError, ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        typer.echo(f"teamflow: error: {message}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
