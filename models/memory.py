"""The memory store: what a team's agents remember (`001` Memory): its wire schema, its table
and the functions that add, get, update and forget memories. Search over them is
`models.memory_search`.

Every memory belongs to a team (the `memories.team` column) and to the agent that made it
(`agent_id`, `{name}@{team}` as in `004`). Visibility is enforced here, in every function:

- an `individual` memory is seen (got, searched, updated, forgotten) by its own agent only;
- a `shared` memory by every member of its team;
- no memory is seen from another team.

Functions that take `agent=None` act for the team's operator (the person at the CLI, who owns
the database anyway) and see every memory of the team; agents always pass their name.

Reading a memory (`get`, and each result of `search`) adds one to its `access_count` and sets
`last_accessed`. Forgetting a memory removes its id from every other memory's
`related_memories`, so no memory points at one that is gone.

The `001` Memory object is a Weaviate object: only its id, type, content and scope are
required; other keys may be left out, and one the wire writes as `null` stays `null` (the
`memories` table records such keys in `explicit_nulls`), so a row gives back exactly the JSON
it was built from.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

import sqlalchemy as sa
from pydantic import Field, StrictFloat, StrictInt, ValidationError
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from models.base import SnakeWireModel, Timestamp, json_column, utc_column, utcnow
from models.db import session_scope
from models.embeddings import Embedder, EmbeddingError, check_vector, configured_embedder
from models.team import TeamError, get_member, get_team
from models.team_config import agent_id
from models.wire_support import error_lines, row_values, wire_from_row

__all__ = [
    "MAX_CONTENT",
    "Memory",
    "MemoryRow",
    "MemoryScope",
    "MemoryStoreError",
    "MemoryType",
    "add",
    "forget",
    "get",
    "update",
]

Score = Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)]
"""A JSON number from 0.0 to 1.0."""

MAX_CONTENT = 8000
"""The longest memory content, in characters."""
MAX_TAGS = 32
MAX_TAG = 64
MAX_RELATED = 64
MAX_SOURCE = 256

UPDATABLE = frozenset(
    {"memory_type", "content", "scope", "source", "importance", "confidence", "tags",
     "related_memories", "embedding"}
)  # fmt: skip
SEARCHED_BY_VECTOR = frozenset({"memory_type", "content", "scope", "embedding"})
"""The fields whose change changes a team's vector matrix (content: its embedding)."""

FROM_ENV: Literal["env"] = "env"
"""`embedder=FROM_ENV` (the default): the embedder `configured_embedder()` names, if any."""


class MemoryStoreError(TeamError):
    """A refused memory operation; the message is one line for the user."""


# --- 001 Memory ----------------------------------------------------------------------------


class MemoryType(StrEnum):
    """`001` Memory Types."""

    USER_PREFERENCE = "user_preference"
    """User settings and preferences."""
    USER_FACT = "user_fact"
    """Facts about the user."""
    CONVERSATION_CONTEXT = "conversation_context"
    """Context from conversations."""
    AGENT_PROCEDURE = "agent_procedure"
    """Learned procedures for agents."""
    KNOWLEDGE = "knowledge"
    """General knowledge and facts."""
    EVENT_PATTERN = "event_pattern"
    """Recognized event patterns."""
    ERROR_HANDLING = "error_handling"
    """Error handling strategies."""
    PROACTIVE_ACTION = "proactive_action"
    """Proactive behavior patterns."""


class MemoryScope(StrEnum):
    """`001` Memory `scope`: one agent's memory, or shared by all."""

    INDIVIDUAL = "individual"
    SHARED = "shared"


class Memory(SnakeWireModel):
    """`001` Memory Object: something an agent remembers, with its embedding and weights."""

    memory_id: uuid.UUID
    memory_type: MemoryType
    content: str
    embedding: list[Annotated[StrictFloat, Field(allow_inf_nan=False)]] | None = Field(
        default=None,
        description="The content's embedding vector (768 numbers with nomic-embed-text)",
    )
    scope: MemoryScope
    source: str | None = Field(default=None, description="Who or what the memory came from")
    agent_id: str | None = Field(default=None, description="The agent the memory belongs to")
    importance: Score | None = None
    confidence: Score | None = None
    tags: list[str] | None = None
    related_memories: list[uuid.UUID] | None = Field(
        default=None, description="memory_id of related memories"
    )
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    last_accessed: Timestamp | None = None
    access_count: StrictInt | None = Field(default=None, ge=0, le=2**63 - 1)


class MemoryRow(SQLModel, table=True):
    """A stored `001` Memory (the embedding is a JSON array).

    `team` is teamflow's own column (the wire has none): the team whose members may see the
    memory (see `models.memory`). `vector` is the embedding again, as float32 little-endian
    bytes (`vector_bytes`): what vector search loads (no JSON to parse); every write of
    `embedding` writes it (`from_wire` does). On SQLite an FTS5 table
    (`memories_fts`) and on PostgreSQL a generated `content_tsv` column index `content` for
    full-text search; both are made by migration 0009 and kept out of this metadata (see
    `models/migrations/env.py`).
    """

    __tablename__ = "memories"
    __table_args__ = (
        sa.Index("ix_memories_agent_type", "agent_id", "memory_type"),
        sa.Index("ix_memories_team_updated", "team", "updated_at"),
    )

    memory_id: uuid.UUID = SQLField(sa_column=sa.Column(sa.Uuid, primary_key=True))
    memory_type: str = SQLField(sa_column=sa.Column(sa.String(32), nullable=False, index=True))
    content: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    embedding: list | None = SQLField(default=None, sa_column=json_column())
    scope: str = SQLField(sa_column=sa.Column(sa.String(16), nullable=False, index=True))
    source: str | None = SQLField(default=None, sa_column=sa.Column(sa.String))
    agent_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String))
    importance: float | None = SQLField(default=None, sa_column=sa.Column(sa.Float))
    confidence: float | None = SQLField(default=None, sa_column=sa.Column(sa.Float))
    tags: list | None = SQLField(default=None, sa_column=json_column())
    related_memories: list | None = SQLField(default=None, sa_column=json_column())
    created_at: datetime | None = SQLField(default=None, sa_column=utc_column())
    updated_at: datetime | None = SQLField(default=None, sa_column=utc_column())
    last_accessed: datetime | None = SQLField(default=None, sa_column=utc_column())
    access_count: int | None = SQLField(default=None, sa_column=sa.Column(sa.BigInteger))
    explicit_nulls: list | None = SQLField(default=None, sa_column=json_column())
    team: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(64)))
    vector: bytes | None = SQLField(default=None, sa_column=sa.Column(sa.LargeBinary))

    @classmethod
    def from_wire(cls, wire: Memory) -> Self:
        """A row holding `wire` (and its embedding's `vector`)."""
        return cls(**row_values(wire), vector=vector_bytes(wire.embedding))

    def to_wire(self) -> Memory:
        """The row as the `001` Memory it was built from."""
        return wire_from_row(Memory, self)


def vector_bytes(embedding: list[float] | None) -> bytes | None:
    """`embedding` as float32 little-endian bytes (`MemoryRow.vector`); None without one."""
    if embedding is None:
        return None
    import numpy as np  # here: importing numpy costs a command line's start

    return np.asarray(embedding, dtype="<f4").tobytes()


class MemoryVersionRow(SQLModel, table=True):
    """The version of a team's memories: a new random token at every write of one of them,
    in the write's transaction (`memories_changed`). A process's cached vectors of the team
    (`models.memory_search`) are good while the token they were loaded at is the stored one."""

    __tablename__ = "memory_versions"

    team: str = SQLField(sa_column=sa.Column(sa.String(64), primary_key=True))
    version: str = SQLField(sa_column=sa.Column(sa.String(32), nullable=False))


def memories_changed(team: str, *, session: Session) -> None:
    """Gives `team`'s memories a new version; call it in every transaction that adds, changes
    or deletes memories of `team` (their vectors, owner, scope or type)."""
    session.execute(
        sa.text(
            "INSERT INTO memory_versions (team, version) VALUES (:team, :version) "
            "ON CONFLICT (team) DO UPDATE SET version = excluded.version"
        ),
        {"team": team, "version": uuid.uuid4().hex},
    )


# --- checks --------------------------------------------------------------------------------


def _validated(data: dict[str, Any]) -> Memory:
    try:
        memory = Memory.model_validate(data)
    except ValidationError as exc:
        raise MemoryStoreError(error_lines(exc)[0]) from None
    if not memory.content.strip():
        raise MemoryStoreError("content: a memory's content is empty")
    if len(memory.content) > MAX_CONTENT:
        raise MemoryStoreError(
            f"content: {len(memory.content)} characters; a memory holds at most {MAX_CONTENT}"
        )
    tags = memory.tags or []
    if len(tags) > MAX_TAGS:
        raise MemoryStoreError(f"tags: {len(tags)} tags; at most {MAX_TAGS}")
    for tag in tags:
        if not tag.strip() or len(tag) > MAX_TAG:
            raise MemoryStoreError(f"tags: {tag!r} is not a tag: 1-{MAX_TAG} characters")
    if len(memory.related_memories or []) > MAX_RELATED:
        raise MemoryStoreError(f"related_memories: at most {MAX_RELATED}")
    if memory.source is not None and len(memory.source) > MAX_SOURCE:
        raise MemoryStoreError(f"source: at most {MAX_SOURCE} characters")
    return memory


def pick_embedder(embedder: Embedder | Literal["env"] | None) -> Embedder | None:
    return configured_embedder() if embedder == FROM_ENV else embedder


def check_team_and_agent(s: Session, team: str, agent: str | None) -> str | None:
    """Checks the team (and agent, a member of it); the agent's `agent_id`, or None."""
    try:
        get_team(team, session=s)
        if agent is None:
            return None
        get_member(team, agent, session=s)
    except ValueError as exc:
        raise MemoryStoreError(str(exc)) from None
    return agent_id(agent, team)


def _may_see(row: MemoryRow, me: str | None) -> bool:
    return me is None or row.scope == MemoryScope.SHARED or row.agent_id == me


def _row(s: Session, team: str, memory_id: uuid.UUID | str, me: str | None) -> MemoryRow:
    """The memory `memory_id` of `team` if `me` may see it; else the same error as a missing
    one (an agent learns nothing of another agent's individual memories)."""
    try:
        key = memory_id if isinstance(memory_id, uuid.UUID) else uuid.UUID(str(memory_id))
    except ValueError:
        raise MemoryStoreError(f"{memory_id!r} is not a memory id (a UUID)") from None
    row = s.get(MemoryRow, key)
    if row is None or row.team != team or not _may_see(row, me):
        raise MemoryStoreError(f"team {team!r} has no memory {str(key)!r}")
    return row


def _check_related(s: Session, team: str, memory: Memory, me: str | None) -> None:
    for related in memory.related_memories or []:
        if related == memory.memory_id:
            raise MemoryStoreError("related_memories: a memory cannot be related to itself")
        try:
            _row(s, team, related, me)
        except MemoryStoreError as exc:
            raise MemoryStoreError(f"related_memories: {exc}") from None


def _team_dimension(s: Session, team: str, other_than: uuid.UUID | None = None) -> int | None:
    query = select(sa.func.length(MemoryRow.vector)).where(
        MemoryRow.team == team,
        col(MemoryRow.vector).is_not(None),
    )
    if other_than is not None:
        query = query.where(MemoryRow.memory_id != other_than)
    stored = s.exec(query.limit(1)).first()
    return stored // 4 if stored else None  # float32: 4 bytes a number


def _embedding_for(
    s: Session, team: str, memory: Memory, embedder: Embedder | None
) -> list[float] | None:
    """The vector to store: the memory's own (checked against the embedder's dimension, or the
    team's when there is no embedder), else the embedder's for its content, else None."""
    if memory.embedding is not None:
        try:
            vector = check_vector(memory.embedding)
            want = embedder.dimension if embedder else _team_dimension(s, team, memory.memory_id)
        except EmbeddingError as exc:
            raise MemoryStoreError(f"embedding: {exc}") from None
        if want is not None and len(vector) != want:
            raise MemoryStoreError(
                f"embedding: {len(vector)} numbers; this team's embeddings have {want}"
            )
        return vector
    if embedder is None:
        return None
    try:
        return embedder.embed([memory.content])[0]
    except EmbeddingError as exc:
        raise MemoryStoreError(str(exc)) from None


# --- the store -----------------------------------------------------------------------------


def add(
    team: str,
    agent: str,
    *,
    memory_type: MemoryType | str,
    content: str,
    scope: MemoryScope | str = MemoryScope.INDIVIDUAL,
    importance: float | None = None,
    confidence: float | None = None,
    tags: list[str] | None = None,
    related_memories: Sequence[uuid.UUID | str] | None = None,
    source: str | None = None,
    embedding: list[float] | None = None,
    embedder: Embedder | Literal["env"] | None = FROM_ENV,
    session: Session | None = None,
) -> Memory:
    """Stores a new memory of `agent` (a member of `team`); everything is checked first.

    `related_memories` must be memories the agent may see. With an embedder the content is
    embedded (unless `embedding` is given, which must then have the embedder's dimension).
    """
    now = utcnow()
    with session_scope(session) as s:
        me = check_team_and_agent(s, team, agent)
        fields = {
            "memory_id": uuid.uuid4(), "memory_type": memory_type, "content": content,
            "scope": scope, "source": source if source is not None else me,
            "agent_id": me, "importance": importance, "confidence": confidence,
            "tags": tags if tags is not None else [],
            "related_memories": related_memories if related_memories is not None else [],
            "embedding": embedding, "created_at": now, "updated_at": now, "access_count": 0,
        }  # fmt: skip
        # Left out, not null: the wire of a memory leaves out what it does not have.
        memory = _validated({k: v for k, v in fields.items() if v is not None})
        _check_related(s, team, memory, me)
        vector = _embedding_for(s, team, memory, pick_embedder(embedder))
        if vector is not None:
            memory = memory.model_copy(update={"embedding": vector})
        row = MemoryRow.from_wire(memory)
        row.team = team
        s.add(row)
        s.flush()
        memories_changed(team, session=s)
        return memory


def get(
    team: str,
    memory_id: uuid.UUID | str,
    *,
    agent: str | None = None,
    session: Session | None = None,
) -> Memory:
    """The memory `memory_id`, read by `agent` (None: the operator); counts the access."""
    with session_scope(session) as s:
        me = check_team_and_agent(s, team, agent)
        row = _row(s, team, memory_id, me)
        return read_counted(s, [row.memory_id])[row.memory_id].to_wire()


def update(
    team: str,
    memory_id: uuid.UUID | str,
    *,
    agent: str | None = None,
    embedder: Embedder | Literal["env"] | None = FROM_ENV,
    session: Session | None = None,
    **changes: Any,
) -> Memory:
    """Changes fields of a memory `agent` may see (individual ones: only their own agent).

    Changing the content re-embeds it with an embedder, and drops a stale embedding without
    one. Only an individual memory's own agent (or the operator) may share it.
    """
    unknown = sorted(set(changes) - UPDATABLE)
    if unknown:
        raise MemoryStoreError(f"{unknown[0]}: not a field a memory update may change")
    with session_scope(session) as s:
        me = check_team_and_agent(s, team, agent)
        row = _row(s, team, memory_id, me)
        merged = {**row.to_wire().model_dump(exclude_unset=True), **changes}
        merged["updated_at"] = utcnow()
        if "content" in changes and "embedding" not in changes:
            merged.pop("embedding", None)  # it embedded the old content
        memory = _validated(merged)
        _check_related(s, team, memory, me)
        if "content" in changes or "embedding" in changes:
            vector = _embedding_for(s, team, memory, pick_embedder(embedder))
            if vector is not None:
                memory = memory.model_copy(update={"embedding": vector})
        for name, value in MemoryRow.from_wire(memory).model_dump().items():
            if name != "team":
                setattr(row, name, value)
        s.flush()
        if changes.keys() & SEARCHED_BY_VECTOR:
            memories_changed(team, session=s)
        return row.to_wire()


def forget(
    team: str,
    memory_id: uuid.UUID | str,
    *,
    agent: str | None = None,
    session: Session | None = None,
) -> Memory:
    """Deletes a memory `agent` may see, and removes it from every `related_memories` list.

    Returns the memory as it was.
    """
    with session_scope(session) as s:
        me = check_team_and_agent(s, team, agent)
        row = _row(s, team, memory_id, me)
        gone = row.to_wire()
        key = str(row.memory_id)
        s.delete(row)
        # JSON text contains the UUID in its canonical form on both databases.
        pointing = s.exec(
            select(MemoryRow).where(sa.cast(MemoryRow.related_memories, sa.Text).like(f"%{key}%"))
        )
        for other in pointing:
            other.related_memories = [r for r in other.related_memories or [] if r != key]
        s.flush()
        memories_changed(team, session=s)
        return gone


def among(s: Session, column: Any, ids: Iterable[uuid.UUID]) -> sa.ColumnElement[bool]:
    """`column` is one of `ids`. On PostgreSQL one bound array, `= ANY(:ids)`: the statement
    is the same text for any number of ids, so the server parses and plans it once (psycopg
    prepares a statement it runs again), where `IN (...)` has a parameter per id and a new
    text per count. Measured with 150-200 ids among 100,000 memories: 1.3 ms p50 against
    1.7 ms (20,000 memories: 1.6 ms against 2.4 ms)."""
    ids = list(ids)
    if s.get_bind().dialect.name == "postgresql":
        return column == sa.any_(sa.bindparam("ids", ids, type_=sa.ARRAY(sa.Uuid), unique=True))
    return column.in_(ids)


def read_counted(s: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, MemoryRow]:
    """The memories `ids`, each access counted (one UPDATE: the count goes up in the database,
    so concurrent reads all count)."""
    if not ids:
        return {}
    s.execute(
        sa.update(MemoryRow)
        .where(among(s, MemoryRow.memory_id, ids))
        .values(access_count=sa.func.coalesce(MemoryRow.access_count, 0) + 1,
                last_accessed=utcnow())
        .execution_options(synchronize_session=False)
    )  # fmt: skip
    read = select(MemoryRow).where(among(s, MemoryRow.memory_id, ids))
    return {r.memory_id: r for r in s.exec(read.execution_options(populate_existing=True))}
