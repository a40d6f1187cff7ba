"""`teamflow plan`: plan approvals: request, list, approve, deny."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail, seconds_check

plan_app = typer.Typer(help="Plan approvals: request, list, approve, deny.", no_args_is_help=True)


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
        typer.Option(
            "--timeout",
            help="Seconds to wait (default: the team's setting).",
            callback=seconds_check(),
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="At the timeout: deny, approve or escalate."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Asks the lead to approve a plan: starts a plan-approval run (needs `teamflow up`)."""
    from flows.decisions import start_plan_request
    from flows.runner import RunnerError
    from models.identity import Principal
    from models.team_settings import ApprovalError

    try:
        started = start_plan_request(
            team_name, member, plan, summary, who=Principal.local(), revises=revises,
            timeout=timeout, policy=policy,
        )  # fmt: skip
    except ApprovalError as exc:
        fail(str(exc))
    except RunnerError as exc:
        fail(f"cannot start the plan-approval run: {exc}")
    run = started.run
    if as_json:
        emit({"requestId": started.request_id, "revision": started.revision,
              "flowRunId": str(run.id), "url": run.url})  # fmt: skip
    else:
        typer.echo(f"plan {started.request_id} of {member} waits for a decision: {run.url}")


@plan_app.command("list")
def plan_list(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    pending: Annotated[bool, typer.Option("--pending", help="Only undecided plans.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Lists a team's plan approval requests, oldest first; a pending one with the address
    of its waiting run in the Prefect UI (where its decision form is)."""
    from flows.runner import run_url
    from models import approval
    from models.approval import ApprovalStatus

    rows = approval.list_requests(team_name, pending=pending)
    if as_json:
        emit([r.to_json() for r in rows])
        return
    for r in rows:
        state = r.status + (f" by {r.decided_by}" if r.decided_by else "")
        typer.echo(f"{r.request_id}  {r.member:<16} {state:<24} rev {r.revision}  {r.summary}")
        if r.status == ApprovalStatus.PENDING.value and r.flow_run_id:
            typer.echo(f"    waits at {run_url(r.flow_run_id)}")
    if not rows:
        typer.echo("no pending plans" if pending else "no plans")


def _decide(request_id: str, approve: bool, feedback: str | None, decider: str | None) -> None:
    """Decides as the person whose token is in `TEAMFLOW_TOKEN` or the token file (a user's
    or a member's), or without one as the local user (`--as` taken as declared), which a
    team with users refuses."""
    from flows.decisions import decide_plan
    from models.identity import Door, Forbidden, Principal
    from models.team_settings import ApprovalError
    from models.users import own_token, principal_of_bearer

    token = own_token()
    try:
        who = principal_of_bearer(token, Door.CLI) if token else Principal.local()
        decided = decide_plan(
            request_id, who=who, approve=approve, feedback=feedback, decider=decider
        )
    except (ApprovalError, Forbidden) as exc:
        fail(str(exc), kind=getattr(exc, "kind", "Error"))
    row = decided.request
    typer.echo(f"plan {row.request_id} of {row.member} {row.status} by {decided.decider}")
    if decided.note:
        typer.echo(f"teamflow: note: {decided.note}", err=True)


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
    if not feedback.strip():
        fail("a denial needs feedback: say what to change")
    _decide(request_id, False, feedback, decider)
