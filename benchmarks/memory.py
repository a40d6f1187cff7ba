"""Memory search latency: full text and vectors over 100,000 memories of one team.

    .venv/bin/python benchmarks/memory.py [--memories 100000] [--dim 768] [--runs 200]
                                         [--postgres URL] [--json]

Generates `--memories` memories in one team of 5 members (the worst case: search looks at
one team), 70% shared and 30% individual, each a sentence of 8-20 words drawn from a
vocabulary of 5,000 words with Zipf-like frequencies, a random importance and a random
`--dim`-d embedding (the JSON array and its float32 bytes, `memories.vector`). Rows are
bulk-inserted (executemany on SQLite, COPY on PostgreSQL); the FTS5 triggers (SQLite) and
the generated `tsvector` column (PostgreSQL) index them, and the team's memories get a new
version, as the store's writes would. Then it times `models.memory_search.search` as a random
member:

- full text: `--runs` queries of 2-3 words of middling frequency, no embedder;
- vectors: `--runs` queries with an in-process embedder that returns a random vector (so
  the figure is the search, not an embeddings endpoint), after one warm-up search that loads
  the team's matrix (timed apart).

Each search also counts its results' accesses (one write), as every search does. Prints
p50 and p95 in milliseconds against the 50 ms p95 target. Without `--postgres` it uses a
temporary SQLite database; with it, a schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_P95_MS = 50.0
TEAM = "memory-bench"
MEMBERS = ["lead", "analyst-1", "analyst-2", "analyst-3", "analyst-4"]
TYPES = ["user_preference", "user_fact", "conversation_context", "agent_procedure",
         "knowledge", "event_pattern", "error_handling", "proactive_action"]  # fmt: skip
VOCABULARY = 5000
CHUNK = 1000


@contextlib.contextmanager
def environment(url: str | None) -> Iterator[str]:
    """`benchmarks/metrics.py`'s temporary database, with no embeddings endpoint set."""
    from benchmarks.metrics import environment as database

    os.environ.pop("TEAMFLOW_EMBEDDINGS_URL", None)
    with database(url) as label:
        yield label


def words() -> list[str]:
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    found: dict[str, None] = {}
    while len(found) < VOCABULARY:
        found["".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))] = None
    return list(found)


def generate(count: int, dim: int) -> None:
    import numpy as np

    from models import db, membership
    from models.memory import memories_changed

    membership.create_team(TEAM, description="memory benchmark", lead=MEMBERS[0])
    for name in MEMBERS[1:]:
        membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.")
    vocab = words()
    weights = [1 / (rank + 1) for rank in range(len(vocab))]  # Zipf
    rng = random.Random(7)
    nrng = np.random.default_rng(7)
    engine = db.engine()
    postgres = engine.dialect.name == "postgresql"
    now = datetime.now(UTC)
    columns = ["memory_id", "memory_type", "content", "embedding", "scope", "source", "agent_id",
               "importance", "tags", "related_memories", "created_at", "updated_at",
               "access_count", "team", "vector"]  # fmt: skip
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        marks = ", ".join("?" * len(columns))
        sql = f"INSERT INTO memories ({', '.join(columns)}) VALUES ({marks})"
        copy = (
            cursor.copy(f"COPY memories ({', '.join(columns)}) FROM STDIN")
            if postgres
            else contextlib.nullcontext()
        )
        with copy as pg:
            for start in range(0, count, CHUNK):
                vectors = np.round(nrng.standard_normal((min(CHUNK, count - start), dim)), 5)
                chunk = []
                for vector in vectors:
                    agent = f"{rng.choice(MEMBERS)}@{TEAM}"
                    when = now - timedelta(seconds=rng.uniform(0, 90 * 86400))
                    stamp = when if postgres else when.strftime("%Y-%m-%d %H:%M:%S.%f")
                    mid = uuid.uuid4()
                    chunk.append((
                        mid if postgres else mid.hex, rng.choice(TYPES),
                        " ".join(rng.choices(vocab, weights, k=rng.randint(8, 20))),
                        json.dumps(vector.tolist()),
                        "shared" if rng.random() < 0.7 else "individual", agent, agent,
                        round(rng.random(), 3), "[]", "[]", stamp, stamp, 0, TEAM,
                        vector.astype("<f4").tobytes(),
                    ))  # fmt: skip
                if postgres:
                    for row in chunk:
                        pg.write_row(row)
                else:
                    cursor.executemany(sql, chunk)
        raw.commit()
    finally:
        raw.close()
    with db.session_scope() as s:
        memories_changed(TEAM, session=s)
    if postgres:
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE memories"))


class RandomEmbedder:
    """An in-process embedder of random vectors: the benchmark times search, not HTTP."""

    name = "random"

    def __init__(self, dim: int) -> None:
        import numpy as np

        self.dimension = dim
        self._rng = np.random.default_rng(11)

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._rng.standard_normal(self.dimension).tolist() for _ in texts]


def percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49] * 1000, 2), "p95_ms": round(cuts[94] * 1000, 2)}


def measure(runs: int, dim: int) -> dict[str, dict]:
    from models import memory_search

    vocab = words()
    rng = random.Random(5)
    middling = vocab[50:1500]  # neither the commonest words nor ones almost never used
    results: dict[str, dict] = {}

    def timed(embedder) -> tuple[list[float], list[int]]:
        times, hits = [], []
        for _ in range(runs):
            query = " ".join(rng.sample(middling, rng.randint(2, 3)))
            agent = rng.choice(MEMBERS)
            started = time.perf_counter()
            found = memory_search.search(TEAM, query, agent=agent, limit=10, embedder=embedder)
            times.append(time.perf_counter() - started)
            hits.append(len(found))
        return times, hits

    times, hits = timed(None)
    results["full text"] = {**percentiles(times), "mean_hits": statistics.mean(hits)}
    embedder = RandomEmbedder(dim)
    started = time.perf_counter()
    memory_search.search(TEAM, "warm up", agent=MEMBERS[1], embedder=embedder)
    warm = time.perf_counter() - started
    times, hits = timed(embedder)
    results["full text + vectors"] = {**percentiles(times), "mean_hits": statistics.mean(hits),
                                      "matrix_load_s": round(warm, 2)}  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--postgres", metavar="URL", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with environment(args.postgres) as label:
        from models import memory_search

        print("generating...", file=sys.stderr)
        started = time.perf_counter()
        generate(args.memories, args.dim)
        generated_s = time.perf_counter() - started
        results = measure(args.runs, args.dim)
        pgvector = memory_search.pgvector_installed()
    report = {
        "database": label,
        "memories": args.memories,
        "dim": args.dim,
        "runs": args.runs,
        "generate_s": round(generated_s, 1),
        "pgvector": pgvector,
        "load": os.getloadavg(),
        "results": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{label}: {args.memories} memories ({args.dim}-d), one team, "
          f"generated in {generated_s:.1f} s; pgvector: {'yes' if pgvector else 'no'}"
          " (search is exact either way)")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} searches each, limit 10")
    for name, r in results.items():
        ok = "ok" if r["p95_ms"] <= TARGET_P95_MS else "OVER TARGET"
        extra = f", matrix load {r['matrix_load_s']} s" if "matrix_load_s" in r else ""
        target = f"target p95 < {TARGET_P95_MS:.0f} ms: {ok}"
        print(f"  {name:<22} p50 {r['p50_ms']:8.2f} ms  p95 {r['p95_ms']:8.2f} ms  "
              f"({target}; {r['mean_hits']:.1f} hits{extra})")  # fmt: skip


if __name__ == "__main__":
    main()
