"""The memory store: what a team's agents remember (`001` Memory), and search over it.

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

Search (`search`) ranks what the agent may see by

    score = 0.6 * relevance + 0.25 * importance + 0.15 * recency

- `relevance` (0..1): full-text relevance divided by the best full-text relevance among the
  candidates (SQLite FTS5 `bm25`, PostgreSQL `ts_rank_cd`); with an embedder, the larger of
  that and the cosine similarity of the query's and the memory's embeddings (clipped at 0).
- `importance`: the memory's importance, 0.5 when it has none.
- `recency` = 0.5 ** (age / 7 days), age since the memory was last read (`last_accessed`),
  else last written: memories in use stay near the top (as in Park et al., Generative Agents).

The query is plain words: a memory matching any of them is a candidate, one matching more
and rarer words is more relevant (not an exact phrase). Candidates are the best
`CANDIDATES` by full text plus, with an embedder, the best `CANDIDATES` by vector similarity.

Vector search is exact: the team's embeddings (their float32 bytes, `MemoryRow.vector`) as
one normalised float32 numpy matrix, cached per process and team and reloaded when the team's
memories change: every write of a memory gives the team's memories a new version
(`memories_changed`, in the write's transaction), and a search first reads that version (one
row). pgvector is not used: `pgvector_installed` detects it, but this store searches exactly
on both databases (the PostgreSQL here has no pgvector).
"""

from __future__ import annotations

import math
import re
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session, select

from models.base import utcnow
from models.db import session_scope
from models.embeddings import Embedder, EmbeddingError, check_vector, configured_embedder
from models.knowledge import (
    Memory,
    MemoryRow,
    MemoryScope,
    MemoryType,
    MemoryVersionRow,
    memories_changed,
)
from models.team import TeamError, agent_id, get_member, get_team
from models.wire_support import error_lines

__all__ = [
    "CANDIDATES",
    "MAX_CONTENT",
    "Found",
    "MemoryStoreError",
    "add",
    "forget",
    "get",
    "pgvector_installed",
    "search",
    "update",
]

MAX_CONTENT = 8000
"""The longest memory content, in characters."""
MAX_TAGS = 32
MAX_TAG = 64
MAX_RELATED = 64
MAX_SOURCE = 256
MAX_QUERY = 1000
MAX_QUERY_WORDS = 32
MAX_LIMIT = 100
CANDIDATES = 200
"""How many candidates each route (full text, vectors) hands to the ranking."""

RELEVANCE_WEIGHT = 0.6
IMPORTANCE_WEIGHT = 0.25
RECENCY_WEIGHT = 0.15
DEFAULT_IMPORTANCE = 0.5
RECENCY_HALF_LIFE = timedelta(days=7)

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


@dataclass(frozen=True)
class Found:
    """One search result: the memory (as read, access counted) and how it scored."""

    memory: Memory
    score: float
    relevance: float
    importance: float
    recency: float

    def to_json(self) -> dict[str, Any]:
        return {
            "score": round(self.score, 6),
            "relevance": round(self.relevance, 6),
            "importance": self.importance,
            "recency": round(self.recency, 6),
            "memory": self.memory.to_wire(),
        }


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


def _pick(embedder: Embedder | Literal["env"] | None) -> Embedder | None:
    return configured_embedder() if embedder == FROM_ENV else embedder  # type: ignore[return-value]


def _team_and_agent(s: Session, team: str, agent: str | None) -> str | None:
    """Checks the team (and agent, a member of it); the agent's `agent_id`, or None."""
    try:
        get_team(s, team)
        if agent is None:
            return None
        get_member(s, team, agent)
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
        MemoryRow.vector.is_not(None),  # type: ignore[union-attr]
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
    related_memories: list[uuid.UUID | str] | None = None,
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
        me = _team_and_agent(s, team, agent)
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
        vector = _embedding_for(s, team, memory, _pick(embedder))
        if vector is not None:
            memory = memory.model_copy(update={"embedding": vector})
        row = MemoryRow.from_wire(memory)
        row.team = team
        s.add(row)
        s.flush()
        memories_changed(s, team)
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
        me = _team_and_agent(s, team, agent)
        row = _row(s, team, memory_id, me)
        return _read(s, [row.memory_id])[row.memory_id].to_wire()


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
        me = _team_and_agent(s, team, agent)
        row = _row(s, team, memory_id, me)
        merged = {**row.to_wire().model_dump(exclude_unset=True), **changes}
        merged["updated_at"] = utcnow()
        if "content" in changes and "embedding" not in changes:
            merged.pop("embedding", None)  # it embedded the old content
        memory = _validated(merged)
        _check_related(s, team, memory, me)
        if "content" in changes or "embedding" in changes:
            vector = _embedding_for(s, team, memory, _pick(embedder))
            if vector is not None:
                memory = memory.model_copy(update={"embedding": vector})
        for name, value in MemoryRow.from_wire(memory).model_dump().items():
            if name != "team":
                setattr(row, name, value)
        s.flush()
        if changes.keys() & SEARCHED_BY_VECTOR:
            memories_changed(s, team)
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
        me = _team_and_agent(s, team, agent)
        row = _row(s, team, memory_id, me)
        gone = row.to_wire()
        key = str(row.memory_id)
        s.delete(row)
        # JSON text contains the UUID in its canonical form on both databases.
        pointing = s.exec(
            select(MemoryRow).where(
                sa.cast(MemoryRow.related_memories, sa.Text).like(f"%{key}%")  # type: ignore[arg-type]
            )
        )
        for other in pointing:
            other.related_memories = [r for r in other.related_memories or [] if r != key]
        s.flush()
        memories_changed(s, team)
        return gone


def _among(s: Session, column: Any, ids: Iterable[uuid.UUID]) -> sa.ColumnElement[bool]:
    """`column` is one of `ids`. On PostgreSQL one bound array, `= ANY(:ids)`: the statement
    is the same text for any number of ids, so the server parses and plans it once (psycopg
    prepares a statement it runs again), where `IN (...)` has a parameter per id and a new
    text per count. Measured with 150-200 ids among 100,000 memories: 1.3 ms p50 against
    1.7 ms (20,000 memories: 1.6 ms against 2.4 ms)."""
    ids = list(ids)
    if s.get_bind().dialect.name == "postgresql":
        return column == sa.any_(sa.bindparam("ids", ids, type_=sa.ARRAY(sa.Uuid), unique=True))
    return column.in_(ids)


def _read(s: Session, ids: list[uuid.UUID]) -> dict[uuid.UUID, MemoryRow]:
    """The memories `ids`, each access counted (one UPDATE: the count goes up in the database,
    so concurrent reads all count)."""
    if not ids:
        return {}
    s.execute(
        sa.update(MemoryRow)
        .where(_among(s, MemoryRow.memory_id, ids))
        .values(access_count=sa.func.coalesce(MemoryRow.access_count, 0) + 1,
                last_accessed=utcnow())
        .execution_options(synchronize_session=False)
    )  # fmt: skip
    read = select(MemoryRow).where(_among(s, MemoryRow.memory_id, ids))
    return {r.memory_id: r for r in s.exec(read.execution_options(populate_existing=True))}


# --- search --------------------------------------------------------------------------------


def _words(query: str) -> list[str]:
    if len(query) > MAX_QUERY:
        raise MemoryStoreError(f"the query is {len(query)} characters; at most {MAX_QUERY}")
    words = [w for w in re.findall(r"\w+", query.lower()) if w != "or"]
    if not words:
        raise MemoryStoreError("the query has no words to search for")
    return list(dict.fromkeys(words))[:MAX_QUERY_WORDS]


def _types(memory_types: list[MemoryType | str] | None) -> list[str] | None:
    if not memory_types:
        return None
    try:
        return [MemoryType(t).value for t in memory_types]
    except ValueError:
        bad = next(t for t in memory_types if t not in set(MemoryType))
        allowed = ", ".join(t.value for t in MemoryType)
        raise MemoryStoreError(f"{bad!r} is not a memory type: one of {allowed}") from None


SCORED = ("memory_id", "importance", "last_accessed", "updated_at", "created_at")
"""What the score needs of a candidate's row (not its embedding: kilobytes of JSON)."""


def _scored(s: Session, ids: set[uuid.UUID]) -> list[Any]:
    """The `SCORED` columns of the memories `ids`."""
    if not ids:
        return []
    t = MemoryRow.__table__  # type: ignore[attr-defined]
    query = sa.select(*(t.c[name] for name in SCORED)).where(_among(s, t.c.memory_id, ids))
    return list(s.execute(query).tuples())


def _text_candidates(
    s: Session, team: str, me: str, words: list[str], types: list[str] | None, k: int
) -> list[Any]:
    """The best `k` visible matches: their `SCORED` columns (read here: the row is read
    anyway) and last their full-text relevance (higher is better)."""
    params: dict[str, Any] = {"team": team, "me": me, "shared": MemoryScope.SHARED.value, "k": k}
    type_filter = ""
    if types:
        names = [f"t{i}" for i in range(len(types))]
        params.update(zip(names, types, strict=True))
        type_filter = f" AND m.memory_type IN ({', '.join(':' + n for n in names)})"
    visible = f"m.team = :team AND (m.scope = :shared OR m.agent_id = :me){type_filter}"
    selected = ", ".join(f"m.{name}" for name in SCORED)
    t = MemoryRow.__table__  # type: ignore[attr-defined]
    columns = [t.c[name] for name in SCORED] + [sa.column("rel", sa.Float)]

    def run(sql: str, **more: Any) -> list[Any]:
        return list(s.execute(sa.text(sql).columns(*columns), {**params, **more}).tuples())

    if s.get_bind().dialect.name == "postgresql":
        params["query"] = " or ".join(words)
        return run(
            f"SELECT {selected}, ts_rank_cd(m.content_tsv, q) AS rel "
            "FROM memories m, websearch_to_tsquery('english', :query) q "
            f"WHERE m.content_tsv @@ q AND {visible} ORDER BY rel DESC LIMIT :k"
        )
    # Only the best `n` matches by relevance are looked up in `memories`, whose rows are long
    # (reading `scope` or `team` reads past the embedding). When they hold k the agent may
    # see, those are the k best it may see; else all matches are looked up (LIMIT -1).
    params["query"] = " OR ".join(f'"{w}"' for w in words)
    sql = (
        f"SELECT {selected}, -hits.rank AS rel FROM (SELECT rowid, bm25(memories_fts) AS rank "
        "FROM memories_fts WHERE memories_fts MATCH :query ORDER BY rank LIMIT :n) hits "
        f"JOIN memories m ON m.rowid = hits.rowid WHERE {visible} ORDER BY hits.rank LIMIT :k"
    )
    found = run(sql, n=2 * k)
    return found if len(found) == k else run(sql, n=-1)


def search(
    team: str,
    query: str,
    *,
    agent: str,
    memory_types: list[MemoryType | str] | None = None,
    limit: int = 10,
    embedder: Embedder | Literal["env"] | None = FROM_ENV,
    session: Session | None = None,
) -> list[Found]:
    """What `agent` may see of `team`'s memories that matches `query`, best first (see the
    module docstring for the score). Each result's access is counted."""
    if not (isinstance(limit, int) and 1 <= limit <= MAX_LIMIT):
        raise MemoryStoreError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {limit}")
    words = _words(query)
    types = _types(memory_types)
    chosen = _pick(embedder)
    with session_scope(session) as s:
        me = _team_and_agent(s, team, agent)
        assert me is not None
        k = max(CANDIDATES, limit)
        found = _text_candidates(s, team, me, words, types, k)
        text = {row[0]: max(float(row[-1]), 0.0) for row in found}
        vector: dict[uuid.UUID, float] = {}
        if chosen is not None:
            try:
                q = chosen.embed([query])[0]
            except EmbeddingError as exc:
                raise MemoryStoreError(str(exc)) from None
            vector = _vectors.nearest(s, team, me, q, types, k)
        weights = [row[:-1] for row in found] + _scored(s, set(vector) - set(text))
        if not weights:
            return []
        best_text = max(text.values(), default=0.0) or 1.0
        now = utcnow()
        scored = []
        for mid, stored_importance, *times in weights:
            relevance = max(text.get(mid, 0.0) / best_text, vector.get(mid, 0.0))
            importance = DEFAULT_IMPORTANCE if stored_importance is None else stored_importance
            recency = _recency(times, now)
            score = (
                RELEVANCE_WEIGHT * relevance
                + IMPORTANCE_WEIGHT * importance
                + RECENCY_WEIGHT * recency
            )
            scored.append((score, relevance, importance, recency, mid))
        scored.sort(key=lambda c: (-c[0], str(c[4])))
        top = scored[:limit]
        rows = _read(s, [c[4] for c in top])
        # A memory forgotten by another process since it was scored is not found.
        return [
            Found(rows[mid].to_wire(), score, rel, imp, rec)
            for score, rel, imp, rec, mid in top
            if mid in rows
        ]


def _recency(times: list[datetime | None], now: datetime) -> float:
    """From the memory's `last_accessed`, `updated_at` and `created_at`: the first set."""
    when = next((t for t in times if t is not None), None)
    if when is None:
        return 0.0
    age = max((now - when).total_seconds(), 0.0)
    return 0.5 ** (age / RECENCY_HALF_LIFE.total_seconds())


def pgvector_installed(session: Session | None = None) -> bool:
    """Whether the database is PostgreSQL with the pgvector extension installed (reported by
    the benchmark; search is exact either way)."""
    with session_scope(session) as s:
        if s.get_bind().dialect.name != "postgresql":
            return False
        found = s.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'"))
        return found.first() is not None


# --- exact vector search: one cached matrix per team ---------------------------------------


@dataclass
class _Matrix:
    version: str | None
    ids: list[uuid.UUID]
    agents: dict[str, int]  # agent_id -> its code in `owners`
    owners: Any  # numpy int32 array: each memory's agent's code
    shared: Any  # numpy bool array
    types: Any  # numpy int8 array: each memory's type's position in `MemoryType`
    vectors: Any  # numpy float32 (n, d), rows of unit length


class _VectorCache:
    """The embeddings of each team as a normalised float32 matrix, per database and team.

    Good while the team's memories' version (`MemoryVersionRow`) is the one it was loaded at:
    every write of a memory, by any process, gives them a new one in its transaction. The
    version is read before the matrix, so a matrix is never older than its version.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._teams: dict[tuple[str, str], _Matrix] = {}

    @staticmethod
    def _key(s: Session, team: str) -> tuple[str, str]:
        return (str(s.get_bind().engine.url), team)

    def _load(self, s: Session, team: str, version: str | None) -> _Matrix:
        import numpy as np

        table = MemoryRow.__table__  # type: ignore[attr-defined]
        rows = s.execute(
            sa.select(table.c.memory_id, table.c.agent_id, table.c.scope, table.c.memory_type,
                      table.c.vector)
            .where(table.c.team == team, table.c.vector.is_not(None))
        ).all()  # fmt: skip
        sizes = {len(r.vector) for r in rows}
        if len(sizes) > 1:
            dims = sorted(size // 4 for size in sizes)
            raise MemoryStoreError(f"team {team!r} holds embeddings of {dims} dimensions")
        stored = np.frombuffer(b"".join(r.vector for r in rows), dtype="<f4")
        stored = stored.reshape(len(rows), sizes.pop() // 4 if rows else 0)
        norms = np.linalg.norm(stored, axis=1, keepdims=True)
        vectors = stored / np.where(norms == 0, 1, norms)  # float32, like `stored`
        agents: dict[str, int] = {}
        kinds = {t.value: i for i, t in enumerate(MemoryType)}
        return _Matrix(
            version=version,
            ids=[r.memory_id for r in rows],
            agents=agents,
            owners=np.asarray([agents.setdefault(r.agent_id, len(agents)) for r in rows],
                              dtype=np.int32),
            shared=np.asarray([r.scope == MemoryScope.SHARED for r in rows], dtype=bool),
            types=np.asarray([kinds.get(r.memory_type, -1) for r in rows], dtype=np.int8),
            vectors=vectors,
        )  # fmt: skip

    def matrix(self, s: Session, team: str) -> _Matrix:
        key = self._key(s, team)
        version = s.execute(
            sa.select(MemoryVersionRow.version).where(MemoryVersionRow.team == team)
        ).scalar()
        with self._lock:
            cached = self._teams.get(key)
        if cached is not None and cached.version == version:
            return cached
        loaded = self._load(s, team, version)
        with self._lock:
            self._teams[key] = loaded
        return loaded

    def nearest(
        self, s: Session, team: str, me: str, query: list[float], types: list[str] | None, k: int
    ) -> dict[uuid.UUID, float]:
        """memory_id -> cosine similarity (clipped at 0) of the best `k` visible memories."""
        import numpy as np

        m = self.matrix(s, team)
        if not m.ids:
            return {}
        q = np.asarray(query, dtype=np.float32)
        if q.shape[0] != m.vectors.shape[1]:
            raise MemoryStoreError(
                f"the embedder gives {q.shape[0]}-d vectors; team {team!r} holds "
                f"{m.vectors.shape[1]}-d ones"
            )
        norm = float(np.linalg.norm(q))
        if not math.isfinite(norm) or norm == 0:
            return {}
        sims = m.vectors @ (q / norm)
        visible = m.shared | (m.owners == m.agents.get(me, -1))
        if types:
            kinds = [i for i, t in enumerate(MemoryType) if t.value in types]
            visible &= np.isin(m.types, kinds)
        sims = np.where(visible, sims, -np.inf)
        k = min(k, len(sims))
        best = np.argpartition(-sims, k - 1)[:k]
        return {m.ids[i]: max(float(sims[i]), 0.0) for i in best if np.isfinite(sims[i])}


_vectors = _VectorCache()
