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

    from models.formats import FORMATS, detect
    from models.wire_support import error_lines

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
        config = team.config_of(s, team.get_team(s, name)).to_wire()
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
        float | None, typer.Option("--plan-timeout", help="Seconds a plan waits for a decision.")
    ] = None,
    plan_policy: Annotated[
        str | None,
        typer.Option("--plan-policy", help="When nobody decided in time: deny, approve, escalate."),
    ] = None,
    escalation: Annotated[
        float | None,
        typer.Option("--escalation", help="escalate: seconds after the alarm until a denial."),
    ] = None,
    max_revisions: Annotated[
        int | None, typer.Option("--max-revisions", help="Times a member may ask for one plan.")
    ] = None,
    shutdown_timeout: Annotated[
        float | None,
        typer.Option("--shutdown-timeout", help="Seconds a shutdown waits, then forces."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", help="Assignees of one task working at once."),
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
            stored = dict(team.get_team(s, name).settings or {})
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
    from models import membership

    member = membership.add_member(
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
    from models import presence

    state = presence.heartbeat(team_name, name, status=status)
    if as_json:
        emit(
            {
                "agent_id": state.agent_id,
                "status": state.status,
                "last_heartbeat": state.last_heartbeat.isoformat(),
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


# --- tools ---------------------------------------------------------------------------------

tool_app = typer.Typer(help="Tools agents may use (000 Tool Definitions).", no_args_is_help=True)
app.add_typer(tool_app, name="tool")


@tool_app.command("add")
def tool_add(
    file: Annotated[Path, typer.Argument(help="A 000 Tool Definition JSON file.")],
    as_json: JsonFlag = False,
) -> None:
    """Adds a tool from its definition file, replacing a tool with the same tool_id.

    `{here}` in its command is the file's folder; `{python}` is teamflow's Python; missing
    `created_at` / `updated_at` default to now.
    """
    from pydantic import ValidationError

    from flows.tools import load_tool_file
    from models.tool import add_tool
    from models.wire_support import error_lines

    try:
        definition = load_tool_file(file)
    except FileNotFoundError:
        fail(f"{file}: no such file")
    except ValidationError as exc:
        fail(f"{file}: not a valid Tool Definition: {'; '.join(error_lines(exc))}")
    added = add_tool(definition)
    if as_json:
        emit(added.to_wire())
    else:
        typer.echo(f"added tool {added.tool_id} ({added.type.value})")


@tool_app.command("list")
def tool_list(as_json: JsonFlag = False) -> None:
    """Lists the stored tools."""
    from models.tool import list_tools

    tools = list_tools()
    if as_json:
        emit([t.to_wire() for t in tools])
        return
    for t in tools:
        typer.echo(f"{t.tool_id:<30} {t.type.value:<6} {t.description}")
    if not tools:
        typer.echo("no tools (add one with `teamflow tool add FILE.json`)")


# --- plan approvals and shutdowns ------------------------------------------------------------

plan_app = typer.Typer(help="Plan approvals: request, list, approve, deny.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


def _start_run(deployment: str, parameters: dict, *, tags: list[str], name: str):
    """Starts a run of one of teamflow's deployments; one clear line when it cannot."""
    from flows import runner

    try:
        return runner.start(deployment, parameters, tags=tags, flow_run_name=name)
    except runner.RunnerError as exc:
        fail(f"cannot start the {deployment.split('/')[0]} run: {exc}")


@plan_app.command("request")
def plan_request(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    member: Annotated[str, typer.Option("--from", help="The member whose plan it is.")],
    plan: Annotated[str, typer.Option("--plan", help="The plan (Markdown).")],
    summary: Annotated[str, typer.Option("--summary", help="One line for the lead.")],
    revises: Annotated[
        str | None, typer.Option("--revises", help="The denied request this plan revises.")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Seconds to wait (default: the team's setting).", min=1),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="At the timeout: deny, approve or escalate."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Asks the lead to approve a plan: starts a plan-approval run (needs `teamflow up`)."""
    from models import approval
    from models.team_settings import ApprovalError

    try:
        revision = approval.check_request(
            team_name, member, previous_request_id=revises, policy=policy
        )
    except ApprovalError as exc:
        fail(str(exc))
    request_id = approval.new_plan_id()
    run = _start_run(
        "plan-approval/plan-approval",
        {
            "team": team_name, "member": member, "plan": plan, "summary": summary,
            "request_id": request_id, "previous_request_id": revises, "timeout_s": timeout,
            "policy": policy,
        },
        tags=[f"team:{team_name}", f"member:{member}"],
        name=f"plan of {member}@{team_name}",
    )  # fmt: skip
    if as_json:
        emit({"requestId": request_id, "revision": revision, "flowRunId": str(run.id),
              "url": run.url})  # fmt: skip
    else:
        typer.echo(f"plan {request_id} of {member} waits for a decision: {run.url}")


@plan_app.command("list")
def plan_list(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    pending: Annotated[bool, typer.Option("--pending", help="Only undecided plans.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Lists a team's plan approval requests, oldest first."""
    from models import approval

    rows = approval.list_requests(team_name, pending=pending)
    if as_json:
        emit([r.to_json() for r in rows])
        return
    for r in rows:
        state = r.status + (f" by {r.decided_by}" if r.decided_by else "")
        typer.echo(f"{r.request_id}  {r.member:<16} {state:<24} rev {r.revision}  {r.summary}")
    if not rows:
        typer.echo("no pending plans" if pending else "no plans")


def _decide(request_id: str, approve: bool, feedback: str | None, decider: str | None) -> None:
    from models import approval
    from models import team as teams
    from models.team_settings import ApprovalError

    try:
        request = approval.get_request(request_id)
        if request.flow_run_id and request.is_open:
            # Imported before deciding, so the resume follows the decision at once.
            import prefect.flow_runs  # noqa: F401
        decider = decider or teams.settings_of(request.team).lead
        row = approval.decide(request_id, approve=approve, decider=decider, feedback=feedback)
    except ApprovalError as exc:
        fail(str(exc))
    typer.echo(f"plan {row.request_id} of {row.member} {row.status} by {decider}")
    if row.flow_run_id:
        from flows.plan_approval import resume_with_decision

        note = resume_with_decision(row.flow_run_id, approve, feedback, decider)
        if note:
            typer.echo(f"teamflow: note: {note}", err=True)


@plan_app.command("approve")
def plan_approve(
    request_id: Annotated[str, typer.Argument(metavar="ID")],
    feedback: Annotated[str | None, typer.Option("--feedback", help="Remarks.")] = None,
    decider: Annotated[
        str | None, typer.Option("--as", help="Who decides (default: the team's lead).")
    ] = None,
) -> None:
    """Approves a plan (once: a second decision is refused) and resumes its run."""
    _decide(request_id, True, feedback, decider)


@plan_app.command("deny")
def plan_deny(
    request_id: Annotated[str, typer.Argument(metavar="ID")],
    feedback: Annotated[str, typer.Option("--feedback", help="What to change.")],
    decider: Annotated[
        str | None, typer.Option("--as", help="Who decides (default: the team's lead).")
    ] = None,
) -> None:
    """Denies a plan with feedback (the member may revise it) and resumes its run."""
    _decide(request_id, False, feedback, decider)


@member_app.command("shutdown")
def member_shutdown(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept on record).")] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", help="Seconds to wait for approval, then force.", min=1),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Shuts a member down through the handshake: starts a shutdown-member run."""
    from models import shutdown

    try:
        shutdown.check_shutdown(team_name, name)
    except shutdown.ShutdownError as exc:
        fail(str(exc))
    request_id = shutdown.new_shutdown_id()
    run = _start_run(
        "shutdown-member/shutdown-member",
        {"team": team_name, "member": name, "reason": reason, "timeout_s": timeout,
         "request_id": request_id},
        tags=[f"team:{team_name}", f"member:{name}"],
        name=f"shutdown {name}@{team_name}",
    )  # fmt: skip
    if as_json:
        emit({"requestId": request_id, "flowRunId": str(run.id), "url": run.url})
    else:
        typer.echo(f"shutdown {request_id} of {name} requested: {run.url}")


# --- tasks and logs --------------------------------------------------------------------------

task_app = typer.Typer(help="Team tasks: create, list, show, run.", no_args_is_help=True)
app.add_typer(task_app, name="task")


def _task_json(row) -> dict:
    return {
        **row.to_wire().to_wire(),
        "team": row.team,
        "priority": row.priority,
        "deadline": row.deadline.isoformat() if row.deadline else None,
        "params": row.params,
    }


@task_app.command("create")
def task_create(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    title: Annotated[str, typer.Option("--title", help="What is to be done (1-500).")],
    description: Annotated[str | None, typer.Option("--description", help="Details.")] = None,
    assignees: Annotated[
        list[str] | None, typer.Option("--assignee", help="A member to work on it (repeat).")
    ] = None,
    priority: Annotated[
        str | None, typer.Option("--priority", help="low, normal, high or critical.")
    ] = None,
    deadline: Annotated[
        str | None, typer.Option("--deadline", help="ISO 8601 with a timezone.")
    ] = None,
    params: Annotated[
        str | None, typer.Option("--params", help="JSON object handed to the agents.")
    ] = None,
    creator: Annotated[str | None, typer.Option("--from", help="Who asks (a member).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Creates a pending team task; `task run ID` starts it."""
    from models.base import parse_timestamp
    from models.task import create_task

    when = None
    if deadline is not None:
        try:
            when = parse_timestamp(deadline)
        except ValueError as exc:
            fail(f"--deadline: {exc}")
    extra = None
    if params is not None:
        try:
            extra = json.loads(params)
        except json.JSONDecodeError as exc:
            fail(f"--params is not valid JSON: {exc.msg} at column {exc.colno}")
        if not isinstance(extra, dict):
            fail("--params must be a JSON object")
    row = create_task(
        team_name, title=title, description=description, assignees=assignees or [],
        creator=creator, priority=priority, deadline=when, params=extra,
    )  # fmt: skip
    if as_json:
        emit(_task_json(row))
    else:
        typer.echo(str(row.id))


@task_app.command("list")
def task_list(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    status_: Annotated[
        str | None,
        typer.Option("--status", help="pending, in_progress, completed or archived."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Lists a team's tasks, oldest first."""
    from models.task import list_tasks

    rows = list_tasks(team_name, status=status_)
    if as_json:
        emit([_task_json(r) for r in rows])
        return
    for r in rows:
        who = ", ".join(a.assignee_id for a in r.assignees) or "-"
        typer.echo(f"{r.id}  {r.status:<11} {r.title}  [{who}]")
    if not rows:
        typer.echo("no tasks")


@task_app.command("show")
def task_show(
    task_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonFlag = False
) -> None:
    """Shows one task (the 001 Task, with teamflow's fields)."""
    from models.task import get_task

    data = _task_json(get_task(task_id))
    if as_json:
        emit(data)
        return
    for key in ("id", "team", "title", "status", "assignee_ids", "priority", "deadline"):
        typer.echo(f"{key:<13} {data.get(key)}")


@task_app.command("run")
def task_run(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    local: Annotated[
        bool,
        typer.Option("--local", help="Run the flow in this process instead of on a worker."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Starts the task's `team-task` flow run (on the `teamflow` work pool; `--local`: here)."""
    from models.task import get_task

    row = get_task(task_id)
    if local:
        import asyncio

        from flows.team_task import team_task

        result = asyncio.run(team_task(str(row.id), team=row.team))
        if as_json:
            emit(result)
        else:
            typer.echo(f"task {row.id}: {result['status']}")
        return
    from flows.runner import start

    run = start(
        "team-task/team-task",
        {"task_id": str(row.id), "team": row.team},
        idempotency_key=f"team-task-{row.id}",
        tags=[f"team:{row.team}"],
    )
    if as_json:
        emit({"task_id": str(row.id), "flow_run_id": str(run.id), "url": run.url})
    else:
        typer.echo(f"started {run.name}: {run.url}")


@app.command("log")
def log(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    task_id: Annotated[str | None, typer.Option("--task", help="Only this task's steps.")] = None,
    color: Annotated[str, typer.Option("--color", help="auto, always or never.")] = "auto",
    as_json: JsonFlag = False,
) -> None:
    """A member's conversation in the console format of seed 003."""
    from flows.render import render
    from models.agent import conversations_of
    from models.db import session_scope
    from models.team import get_member

    if color not in ("auto", "always", "never"):
        fail(f"--color {color!r} is not one of auto, always, never")
    with session_scope() as s:
        member = get_member(s, team_name, name)
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


@app.command()
def status(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")], as_json: JsonFlag = False
) -> None:
    """The team's state (004 Export Team State) with unread counts per member."""
    from models import presence

    state = presence.team_state(team_name)
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


# --- running teamflow: up, worker ------------------------------------------------------------


@app.command()
def up(
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Address a started server listens on (default: PREFECT_API_URL's host, "
            "127.0.0.1). 0.0.0.0 opens it to the network: set an auth string.",
        ),
    ] = None,
) -> None:
    """Starts (or reuses) a Prefect server, registers teamflow's deployments, starts a worker.

    The server listens at PREFECT_API_URL (default http://127.0.0.1:4200/api) with its
    database under $TEAMFLOW_HOME; Ctrl-C or SIGTERM stops what this command started.
    """
    from flows import runner
    from flows import up as bring

    try:
        bring.up(host=host, echo=typer.echo)
    except (bring.UpError, runner.RunnerError) as exc:
        fail(str(exc))


@app.command()
def worker(
    pool: Annotated[str, typer.Option("--pool", help="The work pool to pull from.")] = "teamflow",
    limit: Annotated[int, typer.Option("--limit", help="Runs at a time.", min=1)] = 8,
    name: Annotated[str | None, typer.Option("--name", help="The worker's name.")] = None,
) -> None:
    """Pulls runs from the teamflow work pool and runs teamflow's flows in this process.

    Runs on any machine that reaches the Prefect server (PREFECT_API_URL). The first Ctrl-C
    or SIGTERM stops taking runs and waits for running ones; a second one quits at once.
    """
    import os

    from flows import runner

    # Read by Prefect when it is imported: heartbeats for crash detection, a short poll.
    for setting, value in (
        ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "30"),
        ("PREFECT_WORKER_QUERY_SECONDS", "2"),
    ):
        if not runner.user_setting(setting):
            os.environ[setting] = value
    from flows import worker as workers

    with runner.connected() as api:
        runner.check_server(api)
        workers.run_until_signalled(pool, name=name, limit=limit)


# --- demo ------------------------------------------------------------------------------------


@app.command()
def demo(
    interactive: Annotated[
        bool,
        typer.Option("--interactive", help="A person decides the plan (Prefect UI or CLI)."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Runs a whole team scenario end to end (research-team, Q4 sales analysis).

    Creates research-team with analyst-1 (haiku) and analyst-2 (sonnet), writes sample Q4
    sales and satisfaction data under $TEAMFLOW_HOME/demo/data, runs their task as Prefect
    flows with one plan approval and one ASYNC action, shuts them down through the
    handshake, and prints where to look. Replaces the research-team of an earlier demo.
    """
    from flows import demo as scenario

    summary = scenario.run(
        interactive=interactive, echo=(lambda _: None) if as_json else typer.echo
    )
    if as_json:
        emit(summary)


def main() -> None:
    """Console entry point: refusals from the stores become one line and exit code 1.

    A command line that does not parse (a missing option, an unknown command) is one line
    too, with exit code 2.
    """
    # typer 0.29 vendors click; its usage errors are these.
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        sys.exit(exc.exit_code)  # the help is printed already
    except ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        typer.echo(f"teamflow: error: {' '.join(exc.format_message().split())}{hint}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("teamflow: error: aborted", err=True)
        sys.exit(1)
    except (ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        typer.echo(f"teamflow: error: {message}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    sys.exit(main())
