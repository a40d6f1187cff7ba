"""`teamflow project`: projects (`000` Project Definitions) and their milestones.

Tasks join a project with `teamflow task create TEAM ... --project ID [--milestone M]`;
`project show` lists them per milestone. `project update` changes a project's name,
description, status, milestones or tags; `project delete` removes it (its tasks stay in
their teams). Every check is the store's (`models.project`).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

project_app = typer.Typer(
    help="Projects (000) and their milestones: create, show, list, update, delete.",
    no_args_is_help=True,
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


@project_app.command("update")
def project_update(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    name: Annotated[str | None, typer.Option("--name", metavar="N", help="A new name.")] = None,
    description: Annotated[
        str | None, typer.Option("--description", metavar="D", help="A new description.")
    ] = None,
    status: Annotated[
        str | None,
        typer.Option("--status", metavar="S", help="ready, running, pending or finished (000)."),
    ] = None,
    milestones: Annotated[
        list[str] | None,
        typer.Option("--milestone", metavar="M", help="A milestone to add, after the others."),
    ] = None,
    drop: Annotated[
        list[str] | None,
        typer.Option("--drop-milestone", metavar="M", help="A milestone to drop (no tasks in it)."),
    ] = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tag", help="A tag (repeatable); the tags given replace the old ones."),
    ] = None,
    no_tags: Annotated[bool, typer.Option("--no-tags", help="Remove every tag.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Changes a project: only what is given (its updated_at becomes now; its id stays)."""
    from models.project import update_project

    if no_tags and tags:
        fail("give --tag or --no-tags, not both")
    project = update_project(
        project_id, name=name, description=description, status=status,
        add_milestones=milestones, drop_milestones=drop, tags=[] if no_tags else tags,
    )  # fmt: skip
    if as_json:
        emit(project.to_wire())
        return
    steps = ", ".join(project.milestones) or "none"
    typer.echo(
        f"updated project {project.project_id} ({project.status.value}; milestones: {steps})"
    )


@project_app.command("delete")
def project_delete(
    project_id: Annotated[str, typer.Argument(metavar="ID")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Deletes a project and its milestones; its tasks stay in their teams, in no project.
    With --json: the project as it was."""
    from models.project import delete_project, get_project, task_count

    if not yes:
        get_project(project_id)  # an unknown project is refused before anyone is asked
        if not sys.stdin.isatty():
            fail(
                f"not deleting project {project_id} without --yes (there is no terminal to ask on)"
            )
        tasks = task_count(project_id)
        typer.confirm(
            f"delete project {project_id}? its {tasks} task(s) stay in their teams", abort=True
        )
    project = delete_project(project_id)
    if as_json:
        emit(project.to_wire())
    else:
        typer.echo(f"deleted project {project.project_id}")
