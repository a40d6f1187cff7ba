"""`teamflow action`: single tool calls that wait for a person: list, approve, edit, reject."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from flows.cli.output import JsonFlag, emit, fail

action_app = typer.Typer(
    help="Tool calls that wait for a person: list, approve, edit, reject.", no_args_is_help=True
)

DeciderOpt = Annotated[
    str | None, typer.Option("--as", help="Who decides (default: the team's lead).")
]


@action_app.command("list")
def action_list(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    pending: Annotated[bool, typer.Option("--pending", help="Only undecided calls.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Lists a team's tool calls that needed a person's decision, oldest first (budget
    requests of members over their budget among them, as tool `budget`)."""
    from models import tool_approval
    from models.identity import Action, Principal, authorize

    authorize(Principal.local(), Action.TOOL_READ, team_name)
    rows = tool_approval.list_calls(team_name, pending=pending)
    if as_json:
        emit([r.to_json() for r in rows])
        return
    for r in rows:
        state = r.status + (f" by {r.decided_by}" if r.decided_by else "")
        typer.echo(
            f"{r.call_id}  {r.member:<16} {r.tool_id:<20} {state:<24} {'; '.join(r.reasons)}"
        )
    if not rows:
        typer.echo("no pending tool calls" if pending else "no tool calls")


def _decide(call_id: str, decision: str, params: Any, feedback: str | None, decider: str | None):
    """Decides as the person whose token is in `TEAMFLOW_TOKEN` or the token file (a user's
    or a member's), or without one as the local user (`--as` taken as declared), which a
    team with users refuses, as for plans."""
    from flows.decisions import decide_action
    from models.identity import Door, Forbidden, Principal
    from models.team_settings import ApprovalError
    from models.users import own_token, principal_of_bearer

    token = own_token()
    try:
        who = principal_of_bearer(token, Door.CLI) if token else Principal.local()
        decided = decide_action(
            call_id, decision, who=who, params=params, feedback=feedback, decider=decider,
        )  # fmt: skip
    except (ApprovalError, Forbidden) as exc:
        fail(str(exc), kind=getattr(exc, "kind", "Error"))
    row = decided.call
    extra = f" ({', '.join(f'{k} {v}' for k, v in row.new_params.items())})" if (
        row.tool_id == "budget" and row.new_params) else ""  # fmt: skip
    typer.echo(
        f"call {row.call_id} ({row.tool_id}) of {row.member} {row.status} by {decided.decider}"
        + extra
    )
    if decided.note:
        typer.echo(f"teamflow: note: {decided.note}", err=True)


@action_app.command("approve")
def action_approve(
    call_id: Annotated[str, typer.Argument(metavar="ID")],
    decider: DeciderOpt = None,
    budget_tokens: Annotated[
        int | None,
        typer.Option("--budget-tokens", help="A budget request: the member's new token budget."),
    ] = None,
    budget_seconds: Annotated[
        int | None,
        typer.Option("--budget-seconds", help="A budget request: its new time budget (s)."),
    ] = None,
) -> None:
    """Approves a tool call (once: a second decision is refused): it runs as asked.

    A budget request (tool `budget`: the member spent its budget on the task and waits)
    is approved with the new budget, `--budget-tokens N` or `--budget-seconds N`, above what
    was spent; the member goes on. `teamflow action reject ID --feedback WHY` stops its part.
    """
    params: dict[str, int] = {}
    if budget_tokens is not None:
        params["budget_tokens"] = budget_tokens
    if budget_seconds is not None:
        params["budget_seconds"] = budget_seconds
    _decide(call_id, "approve", params or None, None, decider)


@action_app.command("edit")
def action_edit(
    call_id: Annotated[str, typer.Argument(metavar="ID")],
    params: Annotated[str, typer.Option("--params", help="The new params, a JSON object.")],
    decider: DeciderOpt = None,
) -> None:
    """Runs a tool call with new params (checked against the tool's input_schema first)."""
    import json

    try:
        value = json.loads(params)
    except json.JSONDecodeError as exc:
        fail(f"--params is not JSON: {exc.msg} at position {exc.pos}")
    _decide(call_id, "edit", value, None, decider)


@action_app.command("reject")
def action_reject(
    call_id: Annotated[str, typer.Argument(metavar="ID")],
    feedback: Annotated[str, typer.Option("--feedback", help="Why; the member reads it.")],
    decider: DeciderOpt = None,
) -> None:
    """Rejects a tool call: it does not run; the member gets a FAILURE result with the feedback."""
    if not feedback.strip():
        fail("a rejection needs feedback: say why, so the member can revise")
    _decide(call_id, "reject", None, feedback, decider)
