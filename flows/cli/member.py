"""`teamflow member`: team members: add, list, heartbeat, shutdown."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail, seconds_check, start_run

member_app = typer.Typer(help="Team members: add, list, heartbeat.", no_args_is_help=True)


def _member_json(m) -> dict:
    return m.to_wire().to_wire()


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


@member_app.command("shutdown")
def member_shutdown(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept on record).")] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            help="Seconds to wait for approval, then force.",
            callback=seconds_check(),
        ),
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
    run = start_run(
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
