"""The memory store (models/memory.py): what agents remember, who may see it, and search, on
SQLite and PostgreSQL; vectors from a fake OpenAI-compatible embeddings server."""

from __future__ import annotations

import math
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from factories import TEAM, research_team
from fakes.embeddings_server import FakeEmbeddings
from sqlmodel import Session, select

from models import db, membership, memory_search
from models import memory as store
from models.base import JSONValue, utcnow
from models.embeddings import OpenAIEmbedder, configured_embedder
from models.memory import MAX_CONTENT, MemoryRow, MemoryStoreError


@pytest.fixture
def team(db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("TEAMFLOW_EMBEDDINGS_URL", raising=False)
    return research_team()


def _count() -> int:
    with Session(db.engine()) as s:
        return s.exec(select(sa.func.count()).select_from(MemoryRow)).one()


def _ids(found: list[memory_search.Found]) -> list[uuid.UUID]:
    return [f.memory.memory_id for f in found]


def test_a_memory_comes_back_as_stored_and_each_read_is_counted(team: str) -> None:
    made = store.add(
        team, "analyst-1", memory_type="user_preference", content="User prefers dark mode",
        scope="shared", importance=0.8, confidence=0.9, tags=["preference", "ui"],
    )  # fmt: skip
    assert made.agent_id == f"analyst-1@{TEAM}"
    assert made.source == f"analyst-1@{TEAM}"
    assert made.access_count == 0 and made.last_accessed is None

    first = store.get(team, made.memory_id, agent="analyst-1")
    second = store.get(team, str(made.memory_id), agent="analyst-2")
    assert first.content == "User prefers dark mode"
    assert (first.importance, first.confidence, first.tags) == (0.8, 0.9, ["preference", "ui"])
    assert (first.access_count, second.access_count) == (1, 2)
    assert second.last_accessed is not None and second.last_accessed >= first.last_accessed
    # the wire leaves out what the memory does not have (no embedding here)
    assert "embedding" not in second.to_wire()


def test_an_individual_memory_is_seen_by_its_own_agent_only(team: str) -> None:
    private = store.add(
        team, "analyst-1", memory_type="agent_procedure", scope="individual",
        content="Check the quarterly revenue table before the forecast",
    )  # fmt: skip
    shared = store.add(
        team, "analyst-1", memory_type="knowledge", scope="shared",
        content="The quarterly revenue table lives in the finance schema",
    )  # fmt: skip
    assert store.get(team, private.memory_id, agent="analyst-1").memory_id == private.memory_id
    for refused in (
        lambda: store.get(team, private.memory_id, agent="analyst-2"),
        lambda: store.update(team, private.memory_id, agent="analyst-2", importance=1.0),
        lambda: store.forget(team, private.memory_id, agent="analyst-2"),
    ):
        with pytest.raises(MemoryStoreError, match="has no memory"):
            refused()

    def seen_by(agent: str) -> set[uuid.UUID]:
        return set(_ids(memory_search.search(team, "quarterly revenue table", agent=agent)))

    assert seen_by("analyst-1") == {private.memory_id, shared.memory_id}
    assert seen_by("analyst-2") == {shared.memory_id}
    assert seen_by("coordinator") == {shared.memory_id}
    # the refused calls did not read it: analyst-1's get and search, and this get
    assert store.get(team, private.memory_id).access_count == 3


def test_no_memory_is_seen_from_another_team(team: str) -> None:
    membership.create_team("other-team", description="x", lead="boss")
    mine = store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
                     content="Revenue grew nine percent")  # fmt: skip
    with pytest.raises(MemoryStoreError, match="'other-team' has no memory"):
        store.get("other-team", mine.memory_id, agent="boss")
    assert memory_search.search("other-team", "revenue", agent="boss") == []


def test_forgetting_a_memory_removes_it_from_every_related_list(team: str) -> None:
    a = store.add(team, "analyst-1", memory_type="knowledge", scope="shared", content="alpha")
    b = store.add(team, "analyst-1", memory_type="knowledge", scope="shared", content="beta")
    c = store.add(
        team, "analyst-2", memory_type="knowledge", scope="shared", content="gamma",
        related_memories=[a.memory_id, b.memory_id],
    )  # fmt: skip
    d = store.add(team, "analyst-2", memory_type="knowledge", scope="shared", content="delta",
                  related_memories=[str(a.memory_id)])  # fmt: skip

    gone = store.forget(team, a.memory_id, agent="analyst-1")
    assert gone.content == "alpha"
    assert store.get(team, c.memory_id).related_memories == [b.memory_id]
    assert store.get(team, d.memory_id).related_memories == []
    with pytest.raises(MemoryStoreError, match="has no memory"):
        store.get(team, a.memory_id)
    assert memory_search.search(team, "alpha", agent="analyst-1") == []


def test_a_memory_cannot_relate_to_one_its_agent_cannot_see(team: str) -> None:
    private = store.add(team, "analyst-1", memory_type="knowledge", content="secret plan")
    with pytest.raises(MemoryStoreError, match=r"related_memories: .*has no memory"):
        store.add(team, "analyst-2", memory_type="knowledge", content="x",
                  related_memories=[private.memory_id])  # fmt: skip
    assert _count() == 1


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"memory_type": "opinion"}, "memory_type"),
        ({"scope": "team"}, "scope"),
        ({"importance": 1.5}, "importance"),
        ({"confidence": -0.1}, "confidence"),
        ({"importance": math.nan}, "importance"),
        ({"confidence": math.inf}, "confidence"),
        ({"content": "x" * (MAX_CONTENT + 1)}, "content"),
        ({"content": "   "}, "content"),
        ({"tags": ["ok", ""]}, "tags"),
        ({"tags": [f"t{i}" for i in range(40)]}, "tags"),
        ({"embedding": [0.1, math.nan]}, "embedding"),
        ({"related_memories": ["not-a-uuid"]}, "related_memories"),
    ],
)
def test_bad_fields_are_refused_by_name_and_nothing_is_written(
    team: str, change: dict, names: str
) -> None:
    fields = {"memory_type": "knowledge", "content": "fine", "scope": "shared", **change}
    with pytest.raises(MemoryStoreError, match=rf"^{names}"):
        store.add(team, "analyst-1", **fields)
    assert _count() == 0


def test_unknown_team_or_member_is_refused(team: str) -> None:
    with pytest.raises(MemoryStoreError, match="no team named 'nope-team'"):
        store.add("nope-team", "analyst-1", memory_type="knowledge", content="x")
    with pytest.raises(MemoryStoreError, match="no member named 'ghost'"):
        store.add(team, "ghost", memory_type="knowledge", content="x")
    with pytest.raises(MemoryStoreError, match="no member named 'ghost'"):
        memory_search.search(team, "x", agent="ghost")
    assert _count() == 0


def test_an_update_is_checked_and_keeps_full_text_in_step(team: str) -> None:
    m = store.add(team, "analyst-1", memory_type="knowledge", content="The database is MySQL")
    with pytest.raises(MemoryStoreError, match=r"^importance"):
        store.update(team, m.memory_id, agent="analyst-1", importance=2.0)
    with pytest.raises(MemoryStoreError, match="agent_id: not a field"):
        store.update(team, m.memory_id, agent="analyst-1", agent_id="analyst-2@x")
    changed = store.update(
        team, m.memory_id, agent="analyst-1", content="The database is PostgreSQL", importance=0.7
    )
    assert (changed.content, changed.importance) == ("The database is PostgreSQL", 0.7)
    assert changed.updated_at > m.updated_at
    assert memory_search.search(team, "mysql", agent="analyst-1") == []
    assert _ids(memory_search.search(team, "postgresql", agent="analyst-1")) == [m.memory_id]


def test_search_takes_plain_words_in_any_order_and_their_forms(team: str) -> None:
    m = store.add(team, "analyst-1", memory_type="event_pattern", scope="shared",
                  content="Deployments on Friday evenings often fail")  # fmt: skip
    store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
              content="Lunch is at noon")  # fmt: skip
    for query in ("failing friday deployment", "evening", 'friday "deploy', "FRIDAY: fail?"):
        assert _ids(memory_search.search(team, query, agent="analyst-2")) == [m.memory_id], query
    assert memory_search.search(team, "tuesday", agent="analyst-2") == []
    with pytest.raises(MemoryStoreError, match="no words"):
        memory_search.search(team, "?! --", agent="analyst-2")


def test_more_matching_words_more_importance_and_recent_use_rank_higher(team: str) -> None:
    def add(content: str, importance: float) -> uuid.UUID:
        return store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
                         content=content, importance=importance).memory_id  # fmt: skip

    both = add("cache invalidation is hard", 0.5)
    one = add("cache sizes grow", 0.5)
    assert _ids(memory_search.search(team, "cache invalidation", agent="analyst-1"))[0] == both

    low = add("retry the flaky upload", 0.1)
    high = add("retry the flaky upload", 0.9)
    assert _ids(memory_search.search(team, "flaky upload", agent="analyst-1"))[:2] == [high, low]

    old = add("rotate the api keys", 0.5)
    new = add("rotate the api keys", 0.5)
    with Session(db.engine()) as s:  # `old` was last used a month ago
        row = s.get(MemoryRow, old)
        row.last_accessed = row.updated_at = utcnow() - timedelta(days=30)
        s.commit()
    found = memory_search.search(team, "rotate keys", agent="analyst-1")
    assert _ids(found) == [new, old]
    assert found[0].recency > found[1].recency
    assert found[0].score == pytest.approx(0.6 * 1.0 + 0.25 * 0.5 + 0.15 * found[0].recency)
    assert one not in _ids(found)


def test_search_filters_by_type_and_limit(team: str) -> None:
    for i in range(5):
        store.add(team, "analyst-1", memory_type="knowledge", content=f"budget note {i}")
    store.add(team, "analyst-1", memory_type="error_handling", content="budget overrun: stop")
    found = memory_search.search(team, "budget", agent="analyst-1", memory_types=["error_handling"])
    assert [f.memory.content for f in found] == ["budget overrun: stop"]
    assert len(memory_search.search(team, "budget", agent="analyst-1", limit=3)) == 3
    with pytest.raises(MemoryStoreError, match="'opinion' is not a memory type"):
        memory_search.search(team, "budget", agent="analyst-1", memory_types=["opinion"])
    with pytest.raises(MemoryStoreError, match="limit"):
        memory_search.search(team, "budget", agent="analyst-1", limit=0)


def test_full_text_finds_what_the_agent_may_see_behind_better_matches_it_may_not(
    team: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_search, "CANDIDATES", 2)  # SQLite looks up the best 4 matches first
    hidden = {
        store.add(team, "analyst-1", memory_type="knowledge", content="budget budget budget")
        .memory_id for _ in range(5)
    }  # fmt: skip
    seen = {
        store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
                  content=f"the budget of project {i} is on the shared drive").memory_id
        for i in range(3)
    }  # fmt: skip
    for agent, expected in (("analyst-1", hidden), ("analyst-2", seen)):
        found = _ids(memory_search.search(team, "budget", agent=agent, limit=2))
        assert len(found) == 2 and set(found) <= expected, agent


# --- vectors -------------------------------------------------------------------------------


@pytest.fixture
def embeddings(monkeypatch: pytest.MonkeyPatch):
    with FakeEmbeddings() as server:
        monkeypatch.setenv("TEAMFLOW_EMBEDDINGS_URL", server.base_url)
        monkeypatch.setenv("TEAMFLOW_EMBEDDINGS_MODEL", "nomic-embed-text")
        yield server


def test_the_embedder_speaks_the_openai_embeddings_protocol(embeddings: FakeEmbeddings) -> None:
    embedder = configured_embedder()
    assert isinstance(embedder, OpenAIEmbedder)
    vectors = embedder.embed(["dark mode", "ship it"])
    assert [len(v) for v in vectors] == [768, 768]
    assert embedder.dimension == 768
    assert embeddings.requests[0]["path"] == "/v1/embeddings"
    assert embeddings.requests[0]["body"] == {
        "model": "nomic-embed-text",
        "input": ["dark mode", "ship it"],
    }


def test_with_an_embedder_search_finds_meaning_without_shared_words(
    team: str, embeddings: FakeEmbeddings
) -> None:
    dark = store.add(team, "analyst-1", memory_type="user_preference", scope="shared",
                     content="User prefers dark mode")  # fmt: skip
    store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
              content="Lunch is at noon")  # fmt: skip
    assert len(store.get(team, dark.memory_id).embedding or []) == 768
    found = memory_search.search(team, "night theme", agent="analyst-2", limit=1)
    assert _ids(found) == [dark.memory_id]
    assert found[0].relevance == pytest.approx(2 / math.sqrt(4 * 2))  # cosine, no word shared

    # the cached matrix sees a memory added after a search
    ship = store.add(team, "analyst-2", memory_type="event_pattern", scope="individual",
                     content="Never release on weekends")  # fmt: skip
    assert _ids(memory_search.search(team, "friday deploy", agent="analyst-2", limit=1)) == [
        ship.memory_id
    ]
    # vectors obey visibility too: analyst-1 may not see analyst-2's individual memory
    assert ship.memory_id not in _ids(
        memory_search.search(team, "friday deploy", agent="analyst-1")
    )


def test_the_dimension_comes_from_the_embedder_and_is_checked_on_write(
    team: str, embeddings: FakeEmbeddings
) -> None:
    with pytest.raises(MemoryStoreError, match=r"embedding: 3 numbers; .* have 768"):
        store.add(team, "analyst-1", memory_type="knowledge", content="x",
                  embedding=[0.1, 0.2, 0.3])  # fmt: skip
    assert _count() == 0


def test_an_embedder_that_fails_refuses_the_write(team: str, embeddings: FakeEmbeddings) -> None:
    embeddings.fail_with = 503
    with pytest.raises(MemoryStoreError, match=r"embeddings endpoint .* answered 503"):
        store.add(team, "analyst-1", memory_type="knowledge", content="x")
    assert _count() == 0


def test_without_an_embedder_stored_vectors_must_agree_with_the_team(team: str) -> None:
    store.add(team, "analyst-1", memory_type="knowledge", content="a", embedding=[1.0, 0.0])
    with pytest.raises(MemoryStoreError, match=r"embedding: 3 numbers; .* have 2"):
        store.add(team, "analyst-1", memory_type="knowledge", content="b",
                  embedding=[1.0, 0.0, 0.0])  # fmt: skip
    assert _count() == 1


def test_full_text_tables_are_in_place(db_url: str) -> None:
    engine = db.engine(db_url)
    if engine.dialect.name == "sqlite":
        assert "memories_fts" in sa.inspect(engine).get_table_names()
    else:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("memories")}
        assert "content_tsv" in columns
        with Session(engine) as s:
            assert memory_search.pgvector_installed(session=s) in (True, False)


# --- vectors as float32 bytes, and the cached matrix ---------------------------------------


class Constant:
    """An embedder that gives every text the same vector (the query's, in these tests)."""

    name = "constant"

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector
        self.dimension = len(vector)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vector for _ in texts]


NORTH = Constant([1.0, 0.0, 0.0])


def _vector(memory_id: uuid.UUID) -> bytes | None:
    with Session(db.engine()) as s:
        return s.get(MemoryRow, memory_id).vector


def _float32(embedding: list[float]) -> bytes:
    return np.asarray(embedding, dtype="<f4").tobytes()


def test_a_memorys_vector_is_the_float32_of_its_embedding(team: str) -> None:
    embedding = [0.1, -2.5, 1 / 3]
    m = store.add(team, "analyst-1", memory_type="knowledge", content="a", embedding=embedding)
    assert _vector(m.memory_id) == _float32(embedding)
    assert store.get(team, m.memory_id).embedding == embedding  # the wire keeps the JSON
    store.update(team, m.memory_id, embedding=[0.5, 0.5, 0.5])
    assert _vector(m.memory_id) == _float32([0.5, 0.5, 0.5])
    store.update(team, m.memory_id, content="b")  # no embedder: the stale vector goes too
    assert _vector(m.memory_id) is None
    assert store.get(team, m.memory_id).embedding is None


def test_a_memory_stored_before_vectors_is_found_by_them_after_the_migration(
    team: str, db_url: str
) -> None:
    from alembic import command

    memories = sa.table(
        "memories", sa.column("memory_id", sa.Uuid), sa.column("memory_type"),
        sa.column("content"), sa.column("scope"), sa.column("agent_id"), sa.column("team"),
        sa.column("embedding", JSONValue()),
    )  # fmt: skip
    old = uuid.uuid4()
    config = db.alembic_config(db_url)
    try:
        with db.engine(db_url).begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0009")
            connection.execute(memories.insert().values(
                memory_id=old, memory_type="knowledge", content="lunch is at noon",
                scope="shared", agent_id=f"analyst-1@{TEAM}", team=team,
                embedding=[0.8, 0.6, 0.0],
            ))  # fmt: skip
    finally:
        db.upgrade(db_url)
    assert _vector(old) == _float32([0.8, 0.6, 0.0])
    found = memory_search.search(team, "northern route", agent="analyst-2", embedder=NORTH)
    assert _ids(found) == [old]
    assert found[0].relevance == pytest.approx(0.8)


def _in_another_process(code: str) -> str:
    """Runs `code` (`store` is `models.memory`) in a new Python process; its output."""
    done = subprocess.run(
        [sys.executable, "-c", f"from models import memory as store\n{code}"],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_cached_vectors_see_what_another_process_adds_and_forgets(team: str) -> None:
    def found() -> list[uuid.UUID]:
        return _ids(memory_search.search(team, "northern route", agent="analyst-2", embedder=NORTH))

    first = store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
                      content="lunch is at noon", embedding=[1.0, 0.0, 0.0]).memory_id  # fmt: skip
    assert found() == [first]  # the team's matrix is cached now
    second = uuid.UUID(_in_another_process(
        f"print(store.add({team!r}, 'analyst-1', memory_type='knowledge', scope='shared', "
        "content='the printer jams', embedding=[0.6, 0.8, 0.0]).memory_id)"
    ))  # fmt: skip
    assert found() == [first, second]
    _in_another_process(f"store.forget({team!r}, {str(first)!r})")
    assert found() == [second]


def test_a_restored_memory_gets_its_vector_back(team: str, tmp_path: Path) -> None:
    from models import backup

    m = store.add(team, "analyst-1", memory_type="knowledge", scope="shared",
                  content="lunch is at noon", embedding=[1.0, 0.0, 0.0])  # fmt: skip
    assert _ids(
        memory_search.search(team, "northern route", agent="analyst-2", embedder=NORTH)
    ) == [m.memory_id]
    archive = backup.backup(team, tmp_path / "team.tar.gz")  # the dump leaves the bytes out
    backup.restore(archive, force=True)
    assert _vector(m.memory_id) == _float32([1.0, 0.0, 0.0])
    assert _ids(
        memory_search.search(team, "northern route", agent="analyst-2", embedder=NORTH)
    ) == [m.memory_id]
