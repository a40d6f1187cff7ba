"""The database: where it lives, how SQLite is set up, UTC on both databases, migrations."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from models import db
from models.alert import Alert
from models.settings import get_settings
from models.tables import metadata
from models.team import Team


def test_default_database_is_sqlite_under_teamflow_home(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEAMFLOW_DATABASE_URL", raising=False)
    assert get_settings().database_url == f"sqlite:///{home / 'teamflow.db'}"


def test_home_defaults_to_dot_teamflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEAMFLOW_HOME", raising=False)
    monkeypatch.delenv("TEAMFLOW_DATABASE_URL", raising=False)
    assert get_settings().home == (Path.home() / ".teamflow").resolve()


def test_database_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", "postgresql+psycopg://u@h/d")
    assert get_settings().database_url == "postgresql+psycopg://u@h/d"


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == db.SQLITE_BUSY_TIMEOUT_MS
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


@pytest.fixture
def open_umask() -> object:
    """A umask that leaves new files readable by others (0644), as many shells have."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("open_umask")
def test_the_sqlite_database_and_its_wal_and_shm_files_are_private(tmp_path: Path) -> None:
    file = tmp_path / "teamflow.db"
    engine = db.make_engine(f"sqlite:///{file}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        with engine.connect() as conn:  # the WAL and SHM files exist while it is open
            assert conn.exec_driver_sql("SELECT x FROM t").scalar() == 1
            found = {p.name: _mode(p) for p in tmp_path.iterdir()}
    finally:
        engine.dispose()
    assert found == {"teamflow.db": 0o600, "teamflow.db-wal": 0o600, "teamflow.db-shm": 0o600}


@pytest.mark.usefixtures("open_umask")
def test_a_database_file_readable_by_others_is_made_private(tmp_path: Path) -> None:
    file = tmp_path / "old.db"
    file.touch(mode=0o644)
    file.chmod(0o644)
    db.make_engine(f"sqlite:///{file}").dispose()
    assert _mode(file) == 0o600


def test_migrations_build_every_table(db_url: str) -> None:
    tables = set(sa.inspect(db.engine(db_url)).get_table_names())
    assert set(metadata.tables) <= tables
    assert {"tasks", "task_assignees", "messages", "agent_state"} <= tables
    assert db.current_revision(db_url) is not None


def test_seed_indexes_keep_their_names(db_url: str) -> None:
    names = {ix["name"] for ix in sa.inspect(db.engine(db_url)).get_indexes("messages")}
    assert {"idx_messages_agent_id", "idx_messages_conversation_id", "idx_messages_timestamp"} <= (
        names
    )


def test_upgrade_twice_changes_nothing(db_url: str) -> None:
    before = db.current_revision(db_url)
    db.upgrade(db_url)
    assert db.current_revision(db_url) == before


def test_timestamps_come_back_aware_utc(session: Session) -> None:
    plus_two = timezone(timedelta(hours=2))
    created = datetime(2026, 2, 16, 12, 30, 0, 123000, tzinfo=plus_two)
    session.add(Team(name="research-team", description="Q4", created_at=created))
    session.commit()
    session.expire_all()
    loaded = session.exec(select(Team)).one().created_at
    assert loaded.tzinfo is not None
    assert loaded.utcoffset() == timedelta(0)
    assert loaded == datetime(2026, 2, 16, 10, 30, 0, 123000, tzinfo=UTC)


def test_naive_timestamps_are_refused(session: Session) -> None:
    session.add(
        Alert(team="t-1", name="x", alert_type="TIMER", message="m", fire_at=datetime(2026, 1, 1))
    )
    with pytest.raises(sa.exc.StatementError, match="naive"):
        session.commit()
    session.rollback()


def test_unreachable_database_is_one_clear_error() -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"
    with pytest.raises(db.DatabaseError, match="cannot reach the database"):
        db.upgrade(url)


@pytest.mark.skipif(not os.environ.get("TEAMFLOW_TEST_POSTGRES_URL"), reason="needs PostgreSQL")
def test_postgres_stores_timestamptz(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only")
    columns = {c["name"]: c for c in sa.inspect(db.engine(db_url)).get_columns("teams")}
    assert columns["created_at"]["type"].timezone is True


def test_migrations_match_the_models(db_url: str) -> None:
    """A table changed without a migration fails here (alembic check)."""
    from alembic import command

    config = db.alembic_config(db_url)
    with db.engine(db_url).connect() as connection:
        config.attributes["connection"] = connection
        command.check(config)
