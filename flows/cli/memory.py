"""`teamflow memory`: what a team's agents remember (`001` Memory): add, search, show, forget.

Every check is the store's (`models.memory`): the team, the member, the enums, numbers from
0 to 1, the content's size. A refused command writes nothing. `search` sees what the agent
may see: its own individual memories and the team's shared ones. `show` and `forget` act for
the operator (every memory of the team) unless `--agent` names the member to act as.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, number_check

memory_app = typer.Typer(
    help="Memories of a team's agents (001): add, search, show, forget.", no_args_is_help=True
)

Team = Annotated[str, typer.Argument(metavar="TEAM")]
MemoryId = Annotated[str, typer.Argument(metavar="ID", help="The memory_id (a UUID).")]
_score = number_check(lambda v: 0 <= v <= 1, "a number from 0 to 1")
TYPES = "user_preference, user_fact, conversation_context, agent_procedure, knowledge, "
TYPES += "event_pattern, error_handling, proactive_action"


def _line(memory) -> str:
    tags = f" [{', '.join(memory.tags)}]" if memory.tags else ""
    weights = " ".join(
        f"{name} {value:g}"
        for name, value in (("importance", memory.importance), ("confidence", memory.confidence))
        if value is not None
    )
    return (
        f"{memory.memory_id}  {memory.memory_type.value:<20} {memory.scope.value:<10} "
        f"{memory.agent_id}  {weights}{tags}\n    {memory.content}"
    )


@memory_app.command("add")
def memory_add(
    team: Team,
    agent: Annotated[str, typer.Option("--agent", metavar="NAME", help="The member remembering.")],
    memory_type: Annotated[str, typer.Option("--type", metavar="TYPE", help=f"One of: {TYPES}.")],
    scope: Annotated[
        str,
        typer.Option("--scope", help="individual (the agent only) or shared (the whole team)."),
    ],
    content: Annotated[str, typer.Option("--content", metavar="TEXT", help="What to remember.")],
    importance: Annotated[
        float | None, typer.Option("--importance", callback=_score, help="0 to 1.")
    ] = None,
    confidence: Annotated[
        float | None, typer.Option("--confidence", callback=_score, help="0 to 1.")
    ] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    related: Annotated[
        list[str] | None,
        typer.Option("--related", metavar="ID", help="A related memory's id (repeatable)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Stores a memory of a member (embedded too when TEAMFLOW_EMBEDDINGS_URL is set)."""
    from models import memory as store

    made = store.add(
        team, agent, memory_type=memory_type, scope=scope, content=content,
        importance=importance, confidence=confidence, tags=tags or [],
        related_memories=related or [],
    )  # fmt: skip
    if as_json:
        emit(made.to_wire())
    else:
        typer.echo(f"remembered {made.memory_id} ({made.memory_type.value}, {made.scope.value})")


@memory_app.command("search")
def memory_search(
    team: Team,
    query: Annotated[str, typer.Argument(metavar="QUERY", help="Plain words, in any order.")],
    agent: Annotated[str, typer.Option("--agent", metavar="NAME", help="Search as this member.")],
    memory_types: Annotated[
        list[str] | None,
        typer.Option("--type", metavar="TYPE", help="Only this type (repeatable)."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=100, help="At most this many (1-100).")
    ] = 10,
    as_json: JsonFlag = False,
) -> None:
    """What a member may see that matches QUERY, best first (relevance, importance, recency)."""
    from models import memory_search as store

    found = store.search(team, query, agent=agent, memory_types=memory_types, limit=limit)
    if as_json:
        emit([f.to_json() for f in found])
        return
    for f in found:
        typer.echo(f"{f.score:.3f}  {_line(f.memory)}")
    if not found:
        typer.echo("no memories match")


@memory_app.command("show")
def memory_show(
    team: Team,
    memory_id: MemoryId,
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="NAME", help="Read as this member.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Shows one memory (the read is counted: access_count, last_accessed)."""
    from models import memory as store

    memory = store.get(team, memory_id, agent=agent)
    if as_json:
        emit(memory.to_wire())
        return
    typer.echo(_line(memory))
    related = ", ".join(str(r) for r in memory.related_memories or []) or "-"
    typer.echo(
        f"    created {memory.created_at:%Y-%m-%d %H:%M:%S}Z, read {memory.access_count} times,"
        f" related: {related}, embedding: "
        f"{len(memory.embedding) if memory.embedding else 'none'}"
    )


@memory_app.command("forget")
def memory_forget(
    team: Team,
    memory_id: MemoryId,
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="NAME", help="Forget as this member.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Deletes a memory and removes it from every other memory's related_memories."""
    from models import memory as store

    gone = store.forget(team, memory_id, agent=agent)
    if as_json:
        emit(gone.to_wire())
    else:
        typer.echo(f"forgot {gone.memory_id}")
