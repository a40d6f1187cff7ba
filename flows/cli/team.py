"""`teamflow team`: teams, their settings, import/export and backups."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, count_check, emit, fail, seconds_check
from flows.cli.policy_opts import (
    ApproveConfidenceOpt,
    ApproveLevelOpt,
    ApproveToolsOpt,
    ApproveWarningsOpt,
    ApproveWritesOpt,
    BudgetOpt,
    SecondsBudgetOpt,
    ToolPolicyOpt,
    ToolTimeoutOpt,
    policy_changes,
)

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
        own = _policy_line(m.get("metadata"))
        typer.echo(f"  {m['name']:<20} {m['model']:<8} {m['color']:<8} {state}{own}")
    with session_scope() as s:
        stored = team.get_team(name, session=s).settings or {}
    line = _policy_line({"tool_policy": stored, "budget_tokens": stored.get("budget_tokens")})
    typer.echo(f"tool approvals and budget:{line or ' none (every call runs without asking)'}")


def _policy_line(meta: dict | None) -> str:
    """`approve_tools=a,b budget_tokens=5000`: the tool policy keys set in `meta`."""
    from models.tool_policy import BUDGET_KEY, POLICY_KEY, TOOL_SETTINGS

    meta = meta or {}
    own = {k: v for k, v in (meta.get(POLICY_KEY) or {}).items() if k in TOOL_SETTINGS}
    if meta.get(BUDGET_KEY) is not None:
        own[BUDGET_KEY] = meta[BUDGET_KEY]
    parts = [f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in own.items()]
    return "  " + " ".join(parts) if parts else ""


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
    ui_decisions: Annotated[
        str | None,
        typer.Option(
            "--ui-decisions",
            help="allow or deny: may the Prefect UI's form decide plans (it cannot prove who "
            "submits it; default allow).",
        ),
    ] = None,
    notify_webhook: Annotated[
        str | None,
        typer.Option(
            "--notify-webhook",
            metavar="URL",
            help="POST a JSON notice with each decider's approval link here when a plan waits.",
        ),
    ] = None,
    notify_block: Annotated[
        str | None,
        typer.Option(
            "--notify-block",
            metavar="TYPE/NAME",
            help="Send the approval links as text through this Prefect notification block "
            "(e.g. slack-webhook/ops) when a plan waits.",
        ),
    ] = None,
    reset: Annotated[
        list[str] | None,
        typer.Option("--reset", help="Restore a setting's default (e.g. plan_timeout_seconds)."),
    ] = None,
    approve_tools: ApproveToolsOpt = None,
    approve_writes: ApproveWritesOpt = None,
    approve_below_confidence: ApproveConfidenceOpt = None,
    approve_warnings: ApproveWarningsOpt = None,
    approve_security_level: ApproveLevelOpt = None,
    tool_timeout: ToolTimeoutOpt = None,
    tool_policy: ToolPolicyOpt = None,
    budget_tokens: BudgetOpt = None,
    budget_seconds: SecondsBudgetOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Shows a team's settings, or changes them (approvers, plan timeouts and policy, which
    tool calls need a person, the members' token budget, ...).

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
        "ui_decisions": ui_decisions,
        "notify_webhook": notify_webhook,
        "notify_block": notify_block,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    tool_changes, tool_resets = policy_changes(
        approve_tools, approve_writes, approve_below_confidence, approve_warnings,
        approve_security_level, tool_timeout, tool_policy, budget_tokens,
        budget_seconds,
    )  # fmt: skip
    changes.update(tool_changes)
    reset = [*(reset or []), *tool_resets]
    for key in reset:
        if key in changes:
            fail(f"setting {key} is both changed and reset")
        changes[key] = None
    if changes:
        try:
            stored = team.update_settings(name, changes)
        except ValueError as exc:
            fail(str(exc))
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


TrustRuntimes = Annotated[
    bool,
    typer.Option(
        "--trust-runtimes",
        help="Keep the members' runtimes that run a program or call an endpoint (they run "
        "when the member works a task). Without it they are listed and left out.",
    ),
]


@team_app.command("import")
def team_import(
    folder: Annotated[Path, typer.Argument(help="A 004 team folder: config.json and inboxes/.")],
    trust_runtimes: TrustRuntimes = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="The team exists (e.g. its folder was restored with tar -xzf): its members "
            "and inboxes become the folder's; its tasks, plans, alerts and settings stay.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Imports an existing team folder; a malformed file aborts it and nothing is written.

    A member whose runtime runs a program (`command`) or calls an endpoint (`openai` with a
    base URL) that this database does not already hold for it is imported without it, each
    named, unless --trust-runtimes. A team of that name is refused unless --replace.
    """
    from models import team_folder

    left_out: list[str] = []
    row = team_folder.import_team(
        folder, trust_runtimes=trust_runtimes, left_out=left_out, replace=replace
    )
    if as_json:
        emit({"team": row.name, **({"runtimes_left_out": left_out} if left_out else {})})
    else:
        typer.echo(f"{'replaced' if replace else 'imported'} team {row.name}")
    _warn_untrusted(row.name, left_out)
    _warn_unrunnable(row.name)


def _warn_untrusted(team_name: str, left_out: list[str]) -> None:
    """One warning line per runtime left out, and one saying how to keep or set one."""
    from models.runtime_trust import TRUST_HINT

    for line in left_out:
        typer.echo(f"teamflow: warning: {line}", err=True)
    if left_out:
        typer.echo(f"teamflow: warning: {TRUST_HINT.format(team=team_name)}", err=True)


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
    from models import team_folder

    typer.echo(f"exported team {name} to {team_folder.export_team(name, folder)}")


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
    trust_runtimes: TrustRuntimes = False,
) -> None:
    """Restores a team from a backup (refuses to overwrite one without --force).

    Its tasks go back in their projects; a project this database does not have is restored
    from the backup, one it has is kept as it is (each added project, and each task that
    could not go back in its milestone, gets a line). A member's runtime that runs a program
    or calls an endpoint this database does not hold for it is left out, each named, unless
    --trust-runtimes. Every row of the backup is checked first, as its store checks it (types,
    sizes, statuses, formats): a row it would refuse is named (table, row, field) and nothing
    is written.
    """
    from models import backup

    restored = backup.restore(archive, force=force, trust_runtimes=trust_runtimes)
    typer.echo(f"restored team {restored.team}")
    for project in restored.projects_added:
        typer.echo(f"restored project {project} (this database did not have it)")
    for note in restored.notes:
        typer.echo(f"teamflow: warning: {note}", err=True)
    _warn_untrusted(restored.team, restored.untrusted)
