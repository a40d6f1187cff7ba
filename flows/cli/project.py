"""`teamflow project`: projects (`000` Project Definitions) and their milestones.

Tasks join a project with `teamflow task create TEAM ... --project ID [--milestone M]`;
`project show` lists them per milestone. Every check is the store's (`models.project`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit

project_app = typer.Typer(
    help="Projects (000) and their milestones: create, show, list.", no_args_is_help=True
)


def _task_line(task) -> str:
    return f"    {task.id}  {task.status:<11} {task.title}  [{task.team}]"


@project_app.command("create")
def project_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The project's name.")],
    description: Annotated[str, typer.Option("--description", metavar="D", help="What for.")],
    milestones: Annotated[
        list[str] | None,
        typer.Option("--milestone", metavar="M", help="A milestone id, in order (repeatable)."),
    ] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    project_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Its id (default: NAME as a slug).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Creates a project (status ready) with its milestones."""
    from models.project import create_project

    made = create_project(
        name, description=description, milestones=milestones or [], tags=tags or [],
        project_id=project_id,
    )  # fmt: skip
    if as_json:
        emit(made.to_wire())
        return
    steps = ", ".join(made.milestones) or "none"
    typer.echo(f"created project {made.project_id} (milestones: {steps})")


@project_app.command("show")
def project_show(
    project_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonFlag = False
) -> None:
    """Shows a project and its tasks, grouped by milestone."""
    from models.project import project_view

    view = project_view(project_id)
    if as_json:
        emit(view.to_json())
        return
    p = view.project
    tags = f" [{', '.join(p.tags)}]" if p.tags else ""
    typer.echo(f"{p.project_id}  {p.name}  ({p.status.value}){tags}")
    typer.echo(f"    {p.description}")
    groups = [(f"milestone {m}", tasks) for m, tasks in view.milestones.items()]
    if view.without_milestone:
        groups.append(("without milestone", view.without_milestone))
    for label, tasks in groups:
        typer.echo(label)
        for task in tasks:
            typer.echo(_task_line(task))
        if not tasks:
            typer.echo("    no tasks")


@project_app.command("list")
def project_list(as_json: JsonFlag = False) -> None:
    """Lists the projects."""
    from models.project import list_projects

    found = list_projects()
    if as_json:
        emit([p.to_wire() for p in found])
        return
    for p in found:
        typer.echo(f"{p.project_id:<24} {p.status.value:<9} {p.name}")
    if not found:
        typer.echo("no projects")
