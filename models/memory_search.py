"""Search over a team's memories (`models.memory`): full text and exact vectors, ranked.

`search` ranks what the agent may see by

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
Each result's access is counted, as a `memory.get` counts it.

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
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlmodel import Session, col

from models.base import table_of, utcnow
from models.db import session_scope
from models.embeddings import Embedder, EmbeddingError
from models.memory import (
    FROM_ENV,
    Memory,
    MemoryRow,
    MemoryScope,
    MemoryStoreError,
    MemoryType,
    MemoryVersionRow,
    among,
    check_team_and_agent,
    pick_embedder,
    read_counted,
)

__all__ = ["CANDIDATES", "MAX_LIMIT", "Found", "pgvector_installed", "search"]

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


# --- search --------------------------------------------------------------------------------


def _words(query: str) -> list[str]:
    if len(query) > MAX_QUERY:
        raise MemoryStoreError(f"the query is {len(query)} characters; at most {MAX_QUERY}")
    found = re.findall(r"\w+", query.lower())
    words = [w for w in found if w != "or"] or found  # "or" alone is a word to look for
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
    t = table_of(MemoryRow)
    query = sa.select(*(t.c[name] for name in SCORED)).where(among(s, t.c.memory_id, ids))
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
    t = table_of(MemoryRow)
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
    chosen = pick_embedder(embedder)
    with session_scope(session) as s:
        me = check_team_and_agent(s, team, agent)
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
        rows = read_counted(s, [c[4] for c in top])
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


def pgvector_installed(*, session: Session | None = None) -> bool:
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

        table = table_of(MemoryRow)
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
            sa.select(col(MemoryVersionRow.version)).where(col(MemoryVersionRow.team) == team)
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
