"""`teamflow task`: team tasks: create, list, show, run."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

task_app = typer.Typer(help="Team tasks: create, list, show, run.", no_args_is_help=True)


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
