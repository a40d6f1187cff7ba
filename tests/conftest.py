"""Fixtures: a real database per test run (SQLite in a temp dir, PostgreSQL in its own schema).

Every test that takes `db_url` or `session` runs once on SQLite and, where
`TEAMFLOW_TEST_POSTGRES_URL` is set, once more on PostgreSQL. The schema is built by the real
migrations; each test gets empty tables.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# A person's token file on this machine must not decide for the tests (a test sets its own).
os.environ["TEAMFLOW_TOKEN_FILE"] = "/nonexistent/teamflow-tests/token"
# Servers, workers and `teamflow` commands forked from preloaded fork servers (`forkserver`);
# the benchmarks the tests run inherit it. `TEAMFLOW_TEST_FORKSERVER=0` starts them anew.
os.environ.setdefault("TEAMFLOW_TEST_FORKSERVER", "1")

from models import db
from models.tables import metadata

pytest_plugins = ["cpu_report"]

POSTGRES_URL = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")


def _postgres_schema_url(base_url: str, schema: str) -> str:
    url = sa.make_url(base_url)
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


@pytest.fixture(scope="session")
def _sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'teamflow.db'}"
    db.upgrade(url)
    yield url


@pytest.fixture(scope="session")
def _postgres_url() -> Iterator[str]:
    if not POSTGRES_URL:
        pytest.skip("TEAMFLOW_TEST_POSTGRES_URL is not set: PostgreSQL tests skipped")
    schema = f"tf_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = _postgres_schema_url(POSTGRES_URL, schema)
    try:
        db.upgrade(url)
        yield url
    finally:
        db.dispose_engines()
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database with empty tables, set as teamflow's database for the test."""
    url = request.getfixturevalue(f"_{request.param}_url")
    _empty_tables(url)
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", url)
    yield url


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    with Session(db.engine(db_url), expire_on_commit=False) as s:
        yield s


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TEAMFLOW_HOME for the test."""
    path = tmp_path / "home"
    monkeypatch.setenv("TEAMFLOW_HOME", str(path))
    return path


def _empty_tables(url: str) -> None:
    with db.engine(url).begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())


@pytest.fixture(scope="session", autouse=True)
def _prefect_db_template(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One migrated Prefect database for the run, which the servers tests start copy
    (`prefect_server.seed_prefect_db`): in the folder all xdist workers of the run share,
    and the benchmarks they run (`benchmarks/`, which start servers with `prefect_server`)."""
    import prefect_server

    base = tmp_path_factory.getbasetemp()
    prefect_server.TEMPLATE_DIR = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    os.environ[prefect_server.TEMPLATE_VARIABLE] = str(prefect_server.TEMPLATE_DIR)


@pytest.fixture(scope="session")
def _shared_prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Prefect server per test process (each xdist worker has its own), started on
    first use (it takes seconds of CPU) and shared by the modules that take `prefect_api`.
    Their runs stay apart by their own ids, names and tags; a module that reads the
    server's runs at large (all paused runs, say) takes `own_prefect_api` instead."""
    from prefect_server import harness_server

    with harness_server(tmp_path_factory.mktemp("prefect")) as server:
        yield server


@pytest.fixture(scope="module")
def prefect_api(_shared_prefect_server: Any) -> Iterator[str]:
    """The Prefect server for this module's flow runs, as this process's Prefect API for
    the module (the process's shared one); the module fails if the server logged an error
    while it ran."""
    from prefect_server import api_for_the_block, assert_clean_log

    server = _shared_prefect_server
    since = server.log.stat().st_size if server.log.exists() else 0
    with api_for_the_block(server.api) as api:
        yield api
    assert_clean_log(server.log, server.deleted_runs, since)


@pytest.fixture(scope="module")
def own_prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prefect server of this module's own (a module that reads all the server's runs);
    the module fails if the server logged an error."""
    from prefect_server import harness

    with harness(tmp_path_factory.mktemp("prefect")) as api:
        yield api


@pytest.fixture(scope="module")
def deployed_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Prefect server of this module's own with teamflow's work pool and deployments, for
    the module's tests, which start the `teamflow worker`s they need (`teamflow_workers`).
    A server start costs seconds of CPU; the tests tell their runs apart by id or by the
    time they were created. The module fails if the server logged an error."""
    from prefect_server import prefect_server
    from teamflow_workers import register_deployments

    tmp = tmp_path_factory.mktemp("deployed")
    with prefect_server(tmp) as server:
        register_deployments(server, tmp / "deploy.log")
        yield server


# The test modules that take longest (each several minutes of end-to-end runs, by the CI's
# --durations): handed out first. A module left off only starts a little later.
_LONGEST_FIRST = (
    "tests/test_benchmark_team_task.py",  # two benchmarks, about 5 minutes together
    "tests/test_ui_browser.py",
    "tests/test_scale_out.py",
    "tests/test_worker_timers.py",
    "tests/test_outages.py",
    "tests/test_durable_frozen.py",
    "tests/test_outages_up.py",
    "tests/test_durable_system.py",
    "tests/test_tool_suspend.py",
    "tests/test_team_task_workers.py",
    "tests/test_outages_worker.py",
    "tests/test_alert_cli.py",
    "tests/test_transient_faults.py",
)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (or the only test process), at the end of the run: the PostgreSQL
    template databases the run made are dropped (`prefect_server.postgres_template`)."""
    import prefect_server

    # The run's base temp folder, which xdist gives its workers (`popen-gwN` in it) and in
    # which they keep the templates (`_prefect_db_template`): pytest's, as xdist reads it.
    factory = getattr(session.config, "_tmp_path_factory", None)
    if not hasattr(session.config, "workeroutput") and factory is not None:
        prefect_server.drop_postgres_templates(factory.getbasetemp())


def pytest_collection_finish(session: pytest.Session) -> None:
    """What importing and collecting the suite made (about 510,000 objects per test
    process) lives to the end of the run: it is moved out of the garbage collector's sight,
    so that no full collection walks it again, the one pytest makes when a test process
    ends included (four processes ending at once spent 8-10 s in it)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Orders the suite for `make test`'s scheduler (`--dist loadfile
    --no-loadscope-reorder`: a module is one unit of work, on one worker, handed out in this
    order). The modules with end-to-end (`system`) tests go first, the longest of them
    first, and the quick modules fill in after them, largest first. By default xdist ordered
    modules by their number of tests, so the few-but-slow end-to-end modules started last and
    the run waited for them alone. (`--dist loadgroup`, which could spread one module's
    tests, does nothing with pytest 9: it renames `item._nodeid`, which pytest 9 no longer
    reads.)"""
    sizes: dict[str, int] = {}
    slow: set[str] = set()
    for item in items:
        module = item.nodeid.split("::")[0]
        sizes[module] = sizes.get(module, 0) + 1
        if item.get_closest_marker("system") is not None:
            slow.add(module)

    def rank(module: str) -> tuple[int, int]:
        if module in _LONGEST_FIRST:
            return (0, _LONGEST_FIRST.index(module))
        return (1, 0) if module in slow else (2, -sizes[module])

    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (*rank(m := item.nodeid.split("::")[0]), m, order[id(item)]))
