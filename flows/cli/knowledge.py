"""`teamflow knowledge`: what agents can look up (`000` Knowledge Entries): add, list, show.

Every check is the store's (`models.knowledge.create_knowledge`): the type, content that fits
it (a JSON object for `json`, a URL for `link`), the id. A refused command writes nothing.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit

knowledge_app = typer.Typer(
    help="Knowledge entries agents can look up (000): add, list, show.", no_args_is_help=True
)


def _line(entry) -> str:
    tags = f" [{', '.join(entry.tags)}]" if entry.tags else ""
    return f"{entry.knowledge_id}  {entry.type.value:<4}  {entry.summary}{tags}"


@knowledge_app.command("add")
def knowledge_add(
    kind: Annotated[str, typer.Option("--type", metavar="TYPE", help="text, json or link.")],
    content: Annotated[
        str,
        typer.Option(
            "--content", metavar="C", help="The text, a JSON object (json) or a URL (link)."
        ),
    ],
    summary: Annotated[str, typer.Option("--summary", metavar="S", help="One line about it.")],
    tags: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    source: Annotated[
        str | None, typer.Option("--source", metavar="S", help="Where it came from (cli).")
    ] = None,
    knowledge_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Its id (default: a new UUID).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Stores a new knowledge entry."""
    from models.knowledge import create_knowledge

    entry = create_knowledge(
        type=kind, content=content, summary=summary, tags=tags or [], source=source,
        knowledge_id=knowledge_id,
    )  # fmt: skip
    if as_json:
        emit(entry.to_wire())
    else:
        typer.echo(f"added knowledge {entry.knowledge_id} ({entry.type.value})")


@knowledge_app.command("list")
def knowledge_list(
    tag: Annotated[str | None, typer.Option("--tag", help="Only entries with this tag.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Lists the knowledge entries, oldest first."""
    from models.knowledge import list_knowledge

    entries = list_knowledge(tag=tag)
    if as_json:
        emit([e.to_wire() for e in entries])
        return
    for entry in entries:
        typer.echo(_line(entry))
    if not entries:
        typer.echo("no knowledge entries")


@knowledge_app.command("show")
def knowledge_show(
    knowledge_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonFlag = False
) -> None:
    """Shows one knowledge entry (with --json: the 000 Knowledge Entry)."""
    from models.knowledge import get_knowledge

    entry = get_knowledge(knowledge_id)
    if as_json:
        emit(entry.to_wire())
        return
    typer.echo(_line(entry))
    typer.echo(f"    source {entry.source}, created {entry.created_at:%Y-%m-%d %H:%M:%S}Z")
    if isinstance(entry.content, dict):
        typer.echo(json.dumps(entry.content, indent=2, ensure_ascii=False))
    else:
        typer.echo(entry.content)
