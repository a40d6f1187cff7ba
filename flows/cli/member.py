"""`teamflow member`: team members: add, set, show, list, heartbeat, shutdown, token, spawn."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail, seconds_check
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
from models.settings import get_settings

member_app = typer.Typer(
    help="Team members: add, set, show, list, heartbeat, shutdown, token, spawn.",
    no_args_is_help=True,
)

RT = "Runtime (how the member's agent runs)"

RuntimeKind = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="command, openai, scripted, or mcp (its own agent works through teamflow mcp).",
        rich_help_panel=RT,
    ),
]
CommandOpt = Annotated[
    str | None,
    typer.Option(
        "--command",
        help='command: the agent program and its arguments, e.g. "python3 my_agent.py" '
        "(a step request JSON on stdin, a 002 Chimera response on stdout).",
        rich_help_panel=RT,
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout", help="command, openai: seconds a step may take (default 60).",
        rich_help_panel=RT,
    ),
]  # fmt: skip
EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        help="command: NAME=VALUE for the program's environment (repeat; no secrets: the "
        "program inherits the worker's environment).",
        rich_help_panel=RT,
    ),
]
CwdOpt = Annotated[
    Path | None,
    typer.Option(
        "--cwd",
        help="command: the folder it runs in (default: where --command was given).",
        rich_help_panel=RT,
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url", help="openai: the endpoint, e.g. https://api.openai.com/v1.",
        rich_help_panel=RT,
    ),
]  # fmt: skip
LlmModelOpt = Annotated[
    str | None,
    typer.Option(
        "--llm-model", help="openai: the endpoint's model name (--model stays haiku/sonnet/opus).",
        rich_help_panel=RT,
    ),
]  # fmt: skip
KeyEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-env", help="openai: the environment variable holding the API key (its name).",
        rich_help_panel=RT,
    ),
]  # fmt: skip
KeySecretOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-secret", help="openai: the Prefect Secret block holding the API key.",
        rich_help_panel=RT,
    ),
]  # fmt: skip
PlaybookOpt = Annotated[
    Path | None,
    typer.Option(
        "--playbook", help="scripted: a playbook JSON file (read, checked and stored).",
        rich_help_panel=RT,
    ),
]  # fmt: skip
ToolOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tool", help="A tool the member may use (repeat; default: every tool).",
        rich_help_panel=RT,
    ),
]  # fmt: skip
ResourceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--resource", metavar="ID:read|write",
        help="A resource (teamflow resource add) the member may use, and how (repeat; "
        "member set: replaces the ones given before).",
        rich_help_panel=RT,
    ),
]  # fmt: skip


TemplateOpt = Annotated[
    str | None,
    typer.Option(
        "--template", metavar="ID", help="The prompt is this template, filled in with --var."
    ),
]
TemplateVersionOpt = Annotated[
    int | None,
    typer.Option("--version", metavar="N", help="--template: this version (default: latest)."),
]
TemplateVarsOpt = Annotated[
    list[str] | None,
    typer.Option("--var", metavar="NAME=VALUE", help="--template: a variable (repeat)."),
]


def _prompt(
    prompt: str | None, template: str | None, version: int | None, variables: list[str] | None
) -> tuple[str | None, dict | None]:
    """The prompt the options give and the template it was made from (None: given as text):
    `--prompt`, or `--template` filled in with `--var` (`models.prompt_template.render`
    refuses a missing or unknown variable by name). (None, None) when neither is given."""
    if template is None:
        if variables or version is not None:
            fail("--var and --version go with --template")
        return prompt, None
    if prompt is not None:
        fail("give --prompt or --template, not both")
    from flows.cli.template import parse_vars
    from models.prompt_template import render

    rendered = render(template, parse_vars(variables), version=version)
    return rendered.text, rendered.origin()


def _member_json(m) -> dict:
    return m.to_wire().to_wire()


def _runtime(current, resources: list[str] | None = None, **given):
    """The runtime config the options make (see `flows.cli.runtime_options`), or a refusal.
    `resources`: `ID:read|write` specs, each a stored resource (`teamflow resource add`)."""
    from flows.cli.runtime_options import RuntimeOptionError, RuntimeOptions, build_runtime

    grants = None
    if resources is not None:
        from models.knowledge import resource_grants

        grants = resource_grants(resources)
    try:
        return build_runtime(current, RuntimeOptions(**given, resources=grants))
    except RuntimeOptionError as exc:
        fail(str(exc))


@member_app.command("add")
def member_add(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    model: Annotated[
        str, typer.Option("--model", help="haiku, sonnet, opus, or one the team allows.")
    ],
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", help="The member's system prompt (or give --template)."),
    ] = None,
    template: TemplateOpt = None,
    template_version: TemplateVersionOpt = None,
    template_vars: TemplateVarsOpt = None,
    agent_type: Annotated[
        str, typer.Option("--type", help="general-purpose or specialized.")
    ] = "general-purpose",
    backend: Annotated[
        str, typer.Option("--backend", help="in-process, tmux, docker or k8s.")
    ] = "in-process",
    color: Annotated[
        str | None, typer.Option("--color", help="Default: by --role, else blue or green.")
    ] = None,
    role: Annotated[
        str | None,
        typer.Option("--role", help="coordinator, specialized, reviewer or error: its colour."),
    ] = None,
    pane: Annotated[
        str | None, typer.Option("--pane", help="tmux pane id, e.g. %88 (tmux backend).")
    ] = None,
    plan_mode: Annotated[
        bool, typer.Option("--plan-mode-required", help="Its plans need the lead's approval.")
    ] = False,
    runtime: RuntimeKind = None,
    command: CommandOpt = None,
    timeout: TimeoutOpt = None,
    env: EnvOpt = None,
    cwd: CwdOpt = None,
    base_url: BaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    api_key_env: KeyEnvOpt = None,
    api_key_secret: KeySecretOpt = None,
    playbook: PlaybookOpt = None,
    tools: ToolOpt = None,
    resources: ResourceOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Adds a member to a team (agentId name@team, active, with an initial system message).

    The prompt is `--prompt TEXT`, or `--template ID [--version N] --var NAME=VALUE ...`: a
    template (`teamflow template add`) filled in, recorded with its values in the member's
    metadata.promptTemplate. A member runs tasks only with a runtime: `--runtime command
    --command "..."`, `--runtime openai --base-url URL --llm-model NAME` or `--runtime
    scripted --playbook FILE` (or later, `teamflow member set`).
    """
    from models import membership

    prompt, origin = _prompt(prompt, template, template_version, template_vars)
    if prompt is None:
        fail("give the member's prompt: --prompt TEXT or --template ID --var NAME=VALUE")
    config = _runtime(
        None, kind=runtime, command=command, timeout=timeout, env=env, cwd=cwd,
        base_url=base_url, llm_model=llm_model, api_key_env=api_key_env,
        api_key_secret=api_key_secret, playbook=playbook, tools=tools, resources=resources,
    )  # fmt: skip
    member = membership.add_member(
        team_name, name, model=model, prompt=prompt, agent_type=agent_type, backend=backend,
        color=color, tmux_pane_id=pane, plan_mode_required=plan_mode or None, runtime=config,
        prompt_template=origin, role=role,
    )  # fmt: skip
    if as_json:
        emit(_member_json(member))
    else:
        typer.echo(f"added {member.agent_id} ({member.model}, {member.color})")


@member_app.command("set")
def member_set(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    model: Annotated[
        str | None, typer.Option("--model", help="haiku, sonnet, opus, or one the team allows.")
    ] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="The member's system prompt.")
    ] = None,
    template: TemplateOpt = None,
    template_version: TemplateVersionOpt = None,
    template_vars: TemplateVarsOpt = None,
    plan_mode: Annotated[
        bool | None,
        typer.Option(
            "--plan-mode-required/--no-plan-mode-required",
            help="Whether its plans need the lead's approval.",
            show_default=False,
        ),
    ] = None,
    runtime: RuntimeKind = None,
    command: CommandOpt = None,
    timeout: TimeoutOpt = None,
    env: EnvOpt = None,
    cwd: CwdOpt = None,
    base_url: BaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    api_key_env: KeyEnvOpt = None,
    api_key_secret: KeySecretOpt = None,
    playbook: PlaybookOpt = None,
    tools: ToolOpt = None,
    all_tools: Annotated[
        bool,
        typer.Option("--all-tools", help="The member may use every tool.", rich_help_panel=RT),
    ] = False,
    approve_tools: ApproveToolsOpt = None,
    approve_writes: ApproveWritesOpt = None,
    approve_below_confidence: ApproveConfidenceOpt = None,
    approve_warnings: ApproveWarningsOpt = None,
    approve_security_level: ApproveLevelOpt = None,
    tool_timeout: ToolTimeoutOpt = None,
    tool_policy: ToolPolicyOpt = None,
    budget_tokens: BudgetOpt = None,
    budget_seconds: SecondsBudgetOpt = None,
    resources: ResourceOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Changes a member: its model, prompt, plan mode, tools, resources or runtime, which of
    its tool calls need a person and its token budget (these override the team's settings).

    Only what is given changes. `--runtime` of another kind starts that kind's settings
    afresh; without it the options change the member's current runtime. `--env` replaces
    the whole environment given before. `--template ID --var NAME=VALUE ...` makes the
    prompt from a template (`teamflow template add`) and records which, with its values, in
    the member's metadata.promptTemplate; a later `--prompt` drops that record.
    """
    from models import team as teams

    current = teams.list_members(team_name)  # the team must exist
    row = next((m for m in current if m.name == name), None)
    if row is None:
        fail(f"team {team_name!r} has no member named {name!r}")
    prompt, origin = _prompt(prompt, template, template_version, template_vars)
    config = _runtime(
        row.runtime, kind=runtime, command=command, timeout=timeout, env=env, cwd=cwd,
        base_url=base_url, llm_model=llm_model, api_key_env=api_key_env,
        api_key_secret=api_key_secret, playbook=playbook, tools=tools, all_tools=all_tools,
        resources=resources,
    )  # fmt: skip
    from models import membership
    from models.member_policy import set_member_policy

    policy, resets = policy_changes(
        approve_tools, approve_writes, approve_below_confidence, approve_warnings,
        approve_security_level, tool_timeout, tool_policy, budget_tokens,
        budget_seconds,
    )  # fmt: skip
    if policy or resets:
        set_member_policy(team_name, name, {**policy, **dict.fromkeys(resets)})
    changed = membership.update_member(
        team_name, name, model=model, prompt=prompt, plan_mode_required=plan_mode,
        runtime=config if config != (row.runtime or {}) else None, prompt_template=origin,
    )  # fmt: skip
    if as_json:
        emit(_show_json(changed))
    else:
        typer.echo(f"updated {changed.agent_id}")


def _show_json(m) -> dict:
    from flows.runtimes.kinds import runtime_problem
    from models.team import PROMPT_TEMPLATE_KEY

    problem = runtime_problem(m.runtime)
    return {
        "agentId": m.agent_id,
        "team": m.team,
        "name": m.name,
        "model": m.model,
        "prompt": m.prompt,
        "promptTemplate": (m.meta or {}).get(PROMPT_TEMPLATE_KEY),
        "color": m.color,
        "isActive": m.is_active,
        "planModeRequired": bool(m.plan_mode_required),
        "tools": (m.runtime or {}).get("tools"),
        "resources": (m.runtime or {}).get("resources") or [],
        "runtime": m.runtime or {},
        "canRun": problem is None,
        "problem": problem,
    }


def _template_line(origin: dict | None) -> list[tuple[str, str]]:
    if not origin:
        return []
    values = ", ".join(f"{k}={v}" for k, v in (origin.get("vars") or {}).items())
    return [("template", f"{origin.get('templateId')} v{origin.get('version')} ({values})")]


def _resources_line(resources: list[dict]) -> str:
    if not resources:
        return "none"
    return ", ".join(f"{r.get('id')} ({r.get('access')})" for r in resources)


@member_app.command("show")
def member_show(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    as_config: Annotated[
        bool, typer.Option("--as-config", help="Print its 000 Agent Configuration (JSON).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Shows a member: model, prompt, plan mode, tools and runtime (never a secret: teamflow
    stores only the name of the variable or Secret block that holds an API key).
    `--as-config` prints the member's `000` Agent Configuration instead."""
    from flows.cli.runtime_options import SET_HINT, describe
    from models import team as teams

    if as_config:
        from models import membership

        emit(membership.agent_config(team_name, name).model_dump(mode="json"))
        return

    found = [m for m in teams.list_members(team_name) if m.name == name]
    if not found:
        fail(f"team {team_name!r} has no member named {name!r}")
    data = _show_json(found[0])
    if as_json:
        emit(data)
        return
    state = "active" if data["isActive"] else "shut down"
    tools = ", ".join(data["tools"]) if data["tools"] is not None else "all"
    lines = [
        ("member", f"{data['agentId']} ({state})"),
        ("model", data["model"]),
        ("prompt", data["prompt"]),
        *_template_line(data["promptTemplate"]),
        ("plan_mode", "required" if data["planModeRequired"] else "no"),
        ("tools", tools),
        ("resources", _resources_line(data["resources"])),
        *describe(data["runtime"]),
    ]
    if data["canRun"]:
        lines.append(("can_run", "yes"))
    else:
        hint = SET_HINT.format(team=team_name, name=name)
        lines.append(("can_run", f"no: {data['problem']}; set one with {hint}"))
    for label, value in lines:
        typer.echo(f"{label:<12} {value}")


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
    from flows.decisions import start_shutdown
    from flows.runner import RunnerError
    from models.identity import Principal
    from models.shutdown import ShutdownError

    try:
        started = start_shutdown(
            team_name, name, who=Principal.local(), reason=reason, timeout=timeout
        )
    except ShutdownError as exc:
        fail(str(exc))
    except RunnerError as exc:
        fail(f"cannot start the shutdown-member run: {exc}")
    if as_json:
        emit({"requestId": started.request_id, "flowRunId": str(started.run.id),
              "url": started.run.url})  # fmt: skip
    else:
        typer.echo(f"shutdown {started.request_id} of {name} requested: {started.run.url}")


@member_app.command("token")
def member_token(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    revoke: Annotated[
        bool, typer.Option("--revoke", help="Revoke every token of the member instead.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Prints a new token for a member's MCP session (shown once; teamflow keeps its hash).

    The member's MCP client passes it as TEAMFLOW_TOKEN (stdio) or `Authorization: Bearer`
    (HTTP); the session then acts as that member only. `--revoke` ends all its tokens.
    """
    from models import identity

    if revoke:
        count = identity.revoke_tokens(team_name, name)
        if as_json:
            emit({"team": team_name, "member": name, "revoked": count})
        else:
            typer.echo(f"revoked {count} token(s) of {name}@{team_name}")
        return
    token = identity.issue_token(team_name, name)
    if as_json:
        emit({"team": team_name, "member": name, "token": token})
    else:
        typer.echo(token)


@member_app.command("spawn")
def member_spawn(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            help='The agent program, e.g. "claude --mcp-config {mcp_config} -p {prompt}" '
            "(default: TEAMFLOW_AGENT_COMMAND); {prompt}, {mcp_config}, {team}, {name} are "
            "filled in.",
        ),
    ] = None,
    cwd: Annotated[Path | None, typer.Option("--cwd", help="The folder it works in.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Starts a member's own agent program in a new pane of the `teamflow` tmux session.

    The program gets a new token of the member (TEAMFLOW_TOKEN), an MCP config file that
    starts `teamflow mcp` as the member ({mcp_config}) and a first prompt telling it its
    team, its name and how to work ({prompt}). The pane is recorded as its tmuxPaneId.
    """

    from flows.spawn import SpawnError, describe, spawn_member

    try:
        spawned = spawn_member(
            team_name, name, command=command or get_settings().agent_command or "",
            cwd=str(cwd) if cwd else None,
        )  # fmt: skip
    except SpawnError as exc:
        fail(str(exc))
    if as_json:
        emit(describe(spawned))
    else:
        typer.echo(f"spawned {spawned.agent_id} in tmux pane {spawned.pane_id}")
