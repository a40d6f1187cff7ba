"""`teamflow plan`: plan approvals: request, list, approve, deny."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail, seconds_check, start_run

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
    from models import approval
    from models.team_settings import ApprovalError

    try:
        revision = approval.check_request(
            team_name, member, previous_request_id=revises, policy=policy
        )
    except ApprovalError as exc:
        fail(str(exc))
    request_id = approval.new_plan_id()
    run = start_run(
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
    if not feedback.strip():
        fail("a denial needs feedback: say what to change")
    _decide(request_id, False, feedback, decider)
