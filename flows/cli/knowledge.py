"""`teamflow knowledge`: what agents can look up (`000` Knowledge Entries): add, list, show,
update, delete.

Every check is the store's (`models.knowledge`: `create_knowledge`, `update_knowledge`,
`delete_knowledge`): the type, content that fits it (a JSON object for `json`, a URL for
`link`), the id, an entry a member's playbook still names. A refused command writes nothing.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

knowledge_app = typer.Typer(
    help="Knowledge entries agents can look up (000): add, list, show, update, delete.",
    no_args_is_help=True,
)


def _line(entry) -> str:
    tags = f" [{', '.join(entry.tags)}]" if entry.tags else ""
    return f"{entry.knowledge_id}  {entry.type.value:<4}  {entry.summary}{tags}"


KnowledgeId = Annotated[str, typer.Argument(metavar="ID", help="The knowledge_id.")]
TypeHelp = "text, json or link."
ContentHelp = "The text, a JSON object (json) or a URL (link)."
SummaryHelp = "One line about it."
TagsOpt = Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")]


@knowledge_app.command("add")
def knowledge_add(
    kind: Annotated[str, typer.Option("--type", metavar="TYPE", help=TypeHelp)],
    content: Annotated[str, typer.Option("--content", metavar="C", help=ContentHelp)],
    summary: Annotated[str, typer.Option("--summary", metavar="S", help=SummaryHelp)],
    tags: TagsOpt = None,
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
def knowledge_show(knowledge_id: KnowledgeId, as_json: JsonFlag = False) -> None:
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


@knowledge_app.command("update")
def knowledge_update(
    knowledge_id: KnowledgeId,
    kind: Annotated[str | None, typer.Option("--type", metavar="TYPE", help=TypeHelp)] = None,
    content: Annotated[str | None, typer.Option("--content", metavar="C", help=ContentHelp)] = None,
    summary: Annotated[str | None, typer.Option("--summary", metavar="S", help=SummaryHelp)] = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tag", help="A tag (repeatable); the tags given replace the old ones."),
    ] = None,
    no_tags: Annotated[bool, typer.Option("--no-tags", help="Remove every tag.")] = False,
    source: Annotated[
        str | None, typer.Option("--source", metavar="S", help="Where it came from.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Changes a knowledge entry: only what is given (its updated_at becomes now).

    A new --type without --content re-reads the content as that type (an object as its JSON
    text, JSON text as an object).
    """
    from models.knowledge import update_knowledge

    if no_tags and tags:
        fail("give --tag or --no-tags, not both")
    entry = update_knowledge(
        knowledge_id, type=kind, content=content, summary=summary,
        tags=[] if no_tags else tags, source=source,
    )  # fmt: skip
    if as_json:
        emit(entry.to_wire())
    else:
        typer.echo(f"updated knowledge {entry.knowledge_id}")


@knowledge_app.command("delete")
def knowledge_delete(knowledge_id: KnowledgeId, as_json: JsonFlag = False) -> None:
    """Deletes a knowledge entry (refused while a member's playbook names it in a context
    block's knowledge_relics). With --json: the entry as it was."""
    from models.knowledge import delete_knowledge

    entry = delete_knowledge(knowledge_id)
    if as_json:
        emit(entry.to_wire())
    else:
        typer.echo(f"deleted knowledge {entry.knowledge_id}")
