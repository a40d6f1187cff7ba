"""`teamflow task`: team tasks: create, list, show, run, resume; ASYNC actions by task_id."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

task_app = typer.Typer(
    help="Team tasks: create, list, show, run, resume, action.", no_args_is_help=True
)


def _task_json(row, blocked_by: list[str] | None = None) -> dict:
    return {
        **row.to_wire().to_wire(),
        "team": row.team,
        "priority": row.priority,
        "deadline": row.deadline.isoformat() if row.deadline else None,
        "params": row.params,
        "blocked_by": blocked_by or [],
        "reason": row.reason,
    }


def _blockers(rows) -> dict:
    from models.db import session_scope
    from models.dependencies import blockers_of

    with session_scope() as s:
        return blockers_of([r.id for r in rows], session=s)


def _refuse_unrunnable(team: str, names: list[str]) -> None:
    """One line and exit 1 when an assignee has no runtime it can run with (before any run
    starts, so a task never fails at its first step for want of one)."""
    from flows.cli.runtime_options import SET_HINT
    from flows.runtimes.kinds import runtime_problem
    from models import team as teams

    members = {m.name: m for m in teams.list_members(team)}
    for name in names:
        member = members.get(name)
        if member is None:
            continue  # the store names the unknown member
        problem = runtime_problem(member.runtime)
        if problem is not None:
            hint = SET_HINT.format(team=team, name=name)
            fail(f"member {name} of {team} cannot run tasks: {problem}; set one with {hint}")


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
    blocked_by: Annotated[
        list[str] | None,
        typer.Option(
            "--blocked-by",
            metavar="ID",
            help="A task of the team that must complete first (repeat). The task starts by "
            "itself when the last one completes, and fails if one fails.",
        ),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option("--project", metavar="ID", help="The project the task belongs to."),
    ] = None,
    milestone: Annotated[
        str | None,
        typer.Option("--milestone", metavar="M", help="The project's milestone it belongs to."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Creates a pending team task; `task run ID` starts it (a blocked one starts by itself).

    Without `--assignee`, the task goes to an idle active member when it starts. With
    `--project` (and `--milestone`), `teamflow project show` lists it under the milestone.
    """
    from models.base import parse_timestamp
    from models.db import session_scope
    from models.dependencies import add_blockers
    from models.task import create_task

    when = None
    if deadline is not None:
        try:
            when = parse_timestamp(deadline)
        except ValueError as exc:
            fail(f"--deadline: {exc}")
    extra = None
    if params is not None:
        from models.limits import MAX_JSON_BYTES, LimitError, loads_json

        try:
            if len(params) > MAX_JSON_BYTES:
                raise LimitError(f"--params: larger than teamflow's limit of {MAX_JSON_BYTES}")
            extra = loads_json(params, what="--params")
        except json.JSONDecodeError as exc:
            fail(f"--params is not valid JSON: {exc.msg} at column {exc.colno}")
        except LimitError as exc:
            fail(str(exc))
        if not isinstance(extra, dict):
            fail("--params must be a JSON object")
    if milestone is not None and project is None:
        fail("--milestone needs --project: the project the milestone is in")
    _refuse_unrunnable(team_name, assignees or [])
    # One transaction: a refused blocker, project or milestone leaves nothing written.
    with session_scope() as s:
        row = create_task(
            team_name, title=title, description=description, assignees=assignees or [],
            creator=creator, priority=priority, deadline=when, params=extra, session=s,
        )  # fmt: skip
        add_blockers(row, blocked_by or [], session=s)
        data = _task_json(row, [str(b) for b in blocked_by or []])
        if project is not None:
            from models.project import place_task

            place_task(row, project, milestone, session=s)
            data.update(project_id=project, milestone_id=milestone)
    if as_json:
        emit(data)
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
    blockers = _blockers(rows)
    if as_json:
        emit([_task_json(r, blockers.get(r.id)) for r in rows])
        return
    for r in rows:
        who = ", ".join(a.assignee_id for a in r.assignees) or "-"
        line = f"{r.id}  {r.status:<11} {r.title}  [{who}]"
        if r.id in blockers:
            line += f"  blocked by {', '.join(b[:8] for b in blockers[r.id])}"
        if r.reason:
            line += f"  ({r.reason})"
        typer.echo(line)
    if not rows:
        typer.echo("no tasks")


@task_app.command("show")
def task_show(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    feedback: Annotated[
        bool, typer.Option("--feedback", help="Print its executions' 000 Feedback (JSON).")
    ] = False,
    experience: Annotated[
        bool, typer.Option("--experience", help="Print its 000 Experience Logs (JSON).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Shows one task (the 001 Task, with teamflow's fields); `--experience` its members'
    `000` Experience Logs, `--feedback` the `000` Feedback of their tool runs."""
    from models.task import get_task

    row = get_task(task_id)
    if feedback or experience:
        from models import agent

        read = agent.task_feedback if feedback else agent.task_experience
        emit([item.model_dump(mode="json") for item in read(str(row.id))])
        return
    data = _task_json(row, _blockers([row]).get(row.id))
    # Where its runs stand: resumes after a crash (each its own run), the run holding it.
    data |= {"attempt": row.attempt, "resumes": row.resumes, "lease": row.lease,
             "run_id": row.run_id, "worker": row.worker}  # fmt: skip
    if as_json:
        emit(data)
        return
    for key in ("id", "team", "title", "status", "assignee_ids", "priority", "deadline"):
        typer.echo(f"{key:<13} {data.get(key)}")
    for key in ("blocked_by", "reason", "attempt", "resumes", "run_id", "worker"):
        if data[key]:
            typer.echo(f"{key:<13} {data[key]}")


@task_app.command("run")
def task_run(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    local: Annotated[
        bool,
        typer.Option("--local", help="Run the flow in this process instead of on a worker."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Starts the task's `team-task` flow run (on the `teamflow` work pool; `--local`: here).

    Refused while the task's blockers have not all completed (it starts by itself when they
    have), and for a task without assignees when no member is idle to take it. A task the
    watchdog closed as failed (its run died) starts again as a new run.
    """
    from models.task import get_task

    row = get_task(task_id)
    assert row.team is not None, "a task with assignees belongs to a team"
    _refuse_unrunnable(row.team, [a.assignee_id for a in row.assignees])
    _check_startable(row)
    if local:
        import asyncio

        from flows.team_task import run_team_task
        from models.watchdog import reopen_task

        reopen_task(row.id)
        result = asyncio.run(run_team_task(str(row.id), team=row.team))
        if as_json:
            emit(result)
        else:
            typer.echo(f"task {row.id}: {result['status']}")
        return
    from flows.runner import start_task

    run = start_task(str(row.id))
    if as_json:
        emit({"task_id": str(row.id), "flow_run_id": str(run.id), "url": run.url})
    else:
        typer.echo(f"started {run.name}: {run.url}")


@task_app.command("resume")
def task_resume(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
) -> None:
    """Resumes a task in progress or one that failed (its run died): a new `team-task` run
    goes on from each member's last completed step. Completed tool calls are not run again
    (their recorded results are given back), a decided plan is not asked again. A run that
    still holds the task stops at its next step. (`task run` starts a failed task afresh.)
    """
    from flows.runner import start_resume
    from models.task_lease import due_resumes, resume_started, resume_task

    row = resume_task(task_id)
    due = next(d for d in due_resumes() if d.task_id == str(row.id))
    run = start_resume(due)
    resume_started(due.task_id, due.lease)
    if as_json:
        emit({"task_id": str(row.id), "flow_run_id": str(run.id), "url": run.url,
              "lease": row.lease, "resumes": row.resumes})  # fmt: skip
    else:
        typer.echo(f"resumed {run.name}: {run.url}")


def _check_startable(row) -> None:
    """Fails with one line when the task cannot start now: open blockers, or no assignee
    and no idle member to take it."""
    from flows.dependencies import runtime_usable
    from models.db import session_scope
    from models.dependencies import idle_members, open_blockers, short

    with session_scope() as s:
        blockers = open_blockers(row.id, session=s)
        if blockers:
            named = ", ".join(f"{b} ({status})" for b, status in blockers)
            fail(
                f"task {short(row.id)} is blocked by {named}; "
                "it starts by itself when they complete"
            )
        idle = (
            row.assignees
            or row.status != "pending"
            or idle_members(row.team, runtime_usable, session=s)
        )
        if not idle:
            fail(
                f"task {short(row.id)} has no assignee and team {row.team!r} has no idle "
                "active member with a usable runtime to take it; give it one with "
                "--assignee on a new task, or wait for a member to finish"
            )


@task_app.command("action")
def task_action(
    task_id: Annotated[str, typer.Argument(metavar="TASK_ID", help="The action's 002 task_id.")],
    as_json: JsonFlag = False,
) -> None:
    """Shows an ASYNC action (seed 002) by the `task_id` its step got back with
    `TASK_STARTED`: its member, tool and params, `running` or `finished`, and its `001`
    ToolResult once it has arrived."""
    from models.async_actions import find_action

    found = find_action(task_id)
    if as_json:
        emit(found.to_json())
        return
    data = found.to_json()
    result = found.result
    state = found.state if result is None else f"finished ({result.get('status')})"
    lines = [
        ("task_id", found.task_id), ("agent_id", found.agent_id), ("action", found.action),
        ("params", json.dumps(found.params, ensure_ascii=False)), ("state", state),
        ("started_at", data["started_at"]),
    ]  # fmt: skip
    if result is not None:
        lines += [("finished_at", data["finished_at"])]
        if result.get("error_message"):
            lines += [("error", result["error_message"])]
        else:
            lines += [("result", json.dumps(result.get("result"), ensure_ascii=False))]
    for key, value in lines:
        typer.echo(f"{key:<12} {value}")
