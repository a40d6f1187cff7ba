"""`teamflow resource`: the files, links and data sets agents work on (000 Resource Definitions)."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit

resource_app = typer.Typer(
    help="Files, links and data sets agents work on (000 Resource Definitions).",
    no_args_is_help=True,
)


@resource_app.command("add")
def resource_add(
    resource_id: Annotated[str, typer.Argument(metavar="ID")],
    name: Annotated[str, typer.Option("--name", help="What it is called.")],
    kind: Annotated[str, typer.Option("--type", help="file, link or data.")],
    path: Annotated[str, typer.Option("--path", help="The file path or URL.")],
    access: Annotated[str, typer.Option("--access", help="read or write.")] = "read",
    description: Annotated[str, typer.Option("--description", help="What it holds.")] = "",
    tags: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Adds a resource, replacing one with the same id."""
    from pydantic import ValidationError

    from models.base import utcnow
    from models.knowledge import ResourceDefinition, add_resource
    from models.wire_support import error_lines

    now = utcnow()
    try:
        definition = ResourceDefinition.model_validate(
            {
                "resource_id": resource_id, "name": name, "type": kind, "description": description,
                "path": path, "access": access, "created_at": now, "updated_at": now,
                "tags": tags or [],
            }
        )  # fmt: skip
    except ValidationError as exc:
        raise ValueError("; ".join(error_lines(exc))) from None
    added = add_resource(definition)
    if as_json:
        emit(added.model_dump(mode="json"))
    else:
        typer.echo(f"added resource {added.resource_id} ({added.type.value}, {added.access.value})")


@resource_app.command("list")
def resource_list(as_json: JsonFlag = False) -> None:
    """Lists the stored resources."""
    from models.knowledge import list_resources

    found = list_resources()
    if as_json:
        emit([r.model_dump(mode="json") for r in found])
        return
    for r in found:
        typer.echo(f"{r.resource_id:<24} {r.type.value:<5} {r.access.value:<6} {r.path}")
    if not found:
        typer.echo("no resources (add one with `teamflow resource add`)")


@resource_app.command("show")
def resource_show(
    resource_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonFlag = False
) -> None:
    """Shows one resource (its 000 Resource Definition)."""
    from models.knowledge import get_resource

    emit(get_resource(resource_id).model_dump(mode="json"))
