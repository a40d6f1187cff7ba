"""The team files are written after a commit has given its connection back.

A writer reads the database with a connection of its own. Written from inside the commit,
every thread held one connection and waited for a second: 25 team-task runs in one worker
emptied SQLAlchemy's pool and failed with QueuePool timeouts. A pool of one connection
shows it in one thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from models import mirror


@pytest.fixture
def one_connection(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(
        f"sqlite:///{tmp_path / 'one.db'}", pool_size=1, max_overflow=0, pool_timeout=2
    )
    yield engine
    engine.dispose()


@pytest.fixture
def written(one_connection: sa.Engine) -> Iterator[list[tuple]]:
    """Keys the `probe` writer was called with; it reads with a session of its own."""
    calls: list[tuple] = []

    def probe(*key: str) -> None:
        with Session(one_connection) as s:
            s.execute(sa.text("SELECT 1"))
        calls.append(key)

    mirror.register("probe", probe)
    yield calls
    mirror._writers.pop("probe")


def test_a_writer_gets_the_connection_its_commit_used(
    one_connection: sa.Engine, written: list[tuple]
) -> None:
    with Session(one_connection) as s:
        s.execute(sa.text("SELECT 1"))
        mirror.mark("probe", ("a",), session=s)
        s.commit()
        assert written == [("a",)]  # written by the commit, not later
        mirror.mark("probe", ("b",), session=s)
        s.commit()
    assert written == [("a",), ("b",)]


def test_a_savepoint_waits_for_its_transaction_and_a_rollback_writes_nothing(
    one_connection: sa.Engine, written: list[tuple]
) -> None:
    with Session(one_connection) as s:
        s.execute(sa.text("SELECT 1"))
        with s.begin_nested():
            mirror.mark("probe", ("saved",), session=s)
        assert written == []
        s.commit()
    assert written == [("saved",)]

    with Session(one_connection) as s:
        s.execute(sa.text("SELECT 1"))
        mirror.mark("probe", ("undone",), session=s)
        s.rollback()
        s.execute(sa.text("SELECT 1"))
        s.commit()
    assert written == [("saved",)]
