"""Transient errors are tried again for a bounded time, then one line says what was tried;
other errors are raised at once. Real sockets (the fault proxy), real SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import threading

import httpx
import pytest
import sqlalchemy as sa
from fault_proxy import fault_proxy

from flows import runner
from models import db
from models.retry import GaveUp, is_transient, retrying, retrying_async, transient_text


def _get(url: str) -> str:
    response = httpx.get(url, timeout=5)
    response.raise_for_status()
    return response.text


def test_a_busy_server_is_asked_again_until_it_answers() -> None:
    with fault_proxy(every=2) as proxy:  # the 2nd, 4th, ... request is answered 503
        lines: list[str] = []
        assert (
            retrying("reading", lambda: _get(proxy.url), seconds=30, on_retry=lines.append) == "ok"
        )
        assert (
            retrying("reading", lambda: _get(proxy.url), seconds=30, on_retry=lines.append) == "ok"
        )
    assert proxy.requests == 3
    assert lines == ["reading: HTTP 503 Service Unavailable; trying again (1)"]


def test_a_dropped_connection_is_tried_again() -> None:
    with fault_proxy(every=1, fault="drop") as proxy:
        calls = 0

        def call() -> str:
            nonlocal calls
            calls += 1
            if calls == 3:
                proxy.every = 0  # the network is back
            return _get(proxy.url)

        assert retrying("reading", call, seconds=30) == "ok"
    assert proxy.faults == 2


def test_gives_up_after_the_bounded_time_with_one_line_saying_what_was_tried() -> None:
    with fault_proxy(every=1) as proxy, pytest.raises(GaveUp) as raised:
        retrying("creating the work pool", lambda: _get(proxy.url), seconds=0.5)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"creating the work pool: gave up after {proxy.requests} tries in ")
    assert message.endswith("last: HTTP 503 Service Unavailable")
    assert "TEAMFLOW_RETRY_SECONDS" in message


def test_the_bounded_time_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMFLOW_RETRY_SECONDS", "0.3")
    with fault_proxy(every=1) as proxy, pytest.raises(GaveUp):
        retrying("reading", lambda: _get(proxy.url))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_a_refusal_is_not_tried_again(status: int) -> None:
    with fault_proxy(status=status) as proxy, pytest.raises(httpx.HTTPStatusError):
        retrying("reading", lambda: _get(proxy.url), seconds=30)
    assert proxy.requests == 1


def test_a_bug_is_not_tried_again() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise KeyError("x")

    with pytest.raises(KeyError):
        retrying("x", call, seconds=30)
    assert calls == [1]


def test_the_async_helper_tries_again_too() -> None:
    async def twice(url: str) -> list[str]:
        async with httpx.AsyncClient() as client:

            async def call() -> str:
                response = await client.get(url)
                response.raise_for_status()
                return response.text

            return [await retrying_async("reading", call, seconds=30) for _ in range(2)]

    with fault_proxy(every=2) as proxy:
        assert asyncio.run(twice(proxy.url)) == ["ok", "ok"]
    assert proxy.requests == 3


def test_a_connection_refused_is_transient() -> None:
    with fault_proxy() as proxy:
        url = proxy.url
    with pytest.raises(httpx.ConnectError) as raised:
        _get(url)
    assert is_transient(raised.value)


def test_a_locked_sqlite_database_is_tried_again(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    holder = sa.create_engine(url)
    with holder.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    impatient = sa.create_engine(url, connect_args={"timeout": 0})
    lock = holder.connect()
    lock.exec_driver_sql("BEGIN IMMEDIATE")
    lock.exec_driver_sql("INSERT INTO t VALUES (1)")

    def write() -> None:
        with impatient.begin() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (2)")

    def release(_line: str) -> None:  # the other writer commits while we back off
        if lock.in_transaction():
            threading.Thread(target=lock.commit).start()

    with pytest.raises(sa.exc.OperationalError) as raised:
        write()
    assert is_transient(raised.value)
    retrying("writing", write, seconds=30, on_retry=release)
    with holder.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == 2
    lock.close()


def test_a_transaction_is_made_again_whole(db_url: str) -> None:
    """A transient error in a transaction (here, a PostgreSQL serialization failure raised
    by the server; on SQLite, "database is locked") rolls it back; `in_transaction` makes it
    again from the start, so its first half is not written twice."""
    tries: list[int] = []

    def work(session) -> int:
        tries.append(1)
        session.exec(sa.text("CREATE TABLE IF NOT EXISTS retry_probe (x INTEGER)"))  # type: ignore[call-overload]
        session.exec(sa.text("INSERT INTO retry_probe VALUES (1)"))  # type: ignore[call-overload]
        if len(tries) == 1:
            if db_url.startswith("postgresql"):
                session.exec(
                    sa.text(  # type: ignore[call-overload]
                        "DO $$ BEGIN RAISE EXCEPTION 'could not serialize' "
                        "USING ERRCODE = 'serialization_failure'; END $$"
                    )
                )
            else:
                raise sa.exc.OperationalError("INSERT", {}, Exception("database is locked"))
        return session.exec(sa.text("SELECT count(*) FROM retry_probe")).one()[0]  # type: ignore[call-overload]

    try:
        assert db.in_transaction("writing the probe", work) == 1
        assert len(tries) == 2
    finally:
        with db.engine(db_url).begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS retry_probe")


@pytest.mark.skipif(not os.environ.get("TEAMFLOW_TEST_POSTGRES_URL"), reason="no PostgreSQL")
def test_a_lost_postgresql_connection_is_transient() -> None:
    url = os.environ["TEAMFLOW_TEST_POSTGRES_URL"]
    engine = sa.create_engine(url)
    with engine.connect() as victim, engine.connect() as killer:
        pid = victim.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        killer.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
        with pytest.raises(sa.exc.DBAPIError) as raised:
            victim.exec_driver_sql("SELECT 1")
    assert is_transient(raised.value)
    engine.dispose()


def test_a_programs_error_line_is_read_for_transient_errors() -> None:
    assert transient_text("Server error '503 Service Unavailable' for url 'http://x/api/'")
    assert transient_text("httpx.ReadTimeout")
    assert transient_text("sqlite3.OperationalError: database is locked")
    assert not transient_text("Client error '404 Not Found' for url 'http://x/api/'")
    assert not transient_text("ValueError: no such deployment 503abc")


def test_the_cli_asks_a_busy_server_again_before_it_says_there_is_none() -> None:
    """`runner.check_server` (every CLI command that starts a run): a health check answered
    503 is asked again; nothing listening is said at once, in one line."""
    busy = ("GET /api/health", b"")
    with fault_proxy(body="true", burst=busy, burst_left=2) as proxy:
        runner.check_server(f"{proxy.url}/api")
    assert (proxy.requests, proxy.faults) == (3, 2)


def test_a_server_busy_throughout_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMFLOW_RETRY_SECONDS", "0.5")
    with fault_proxy(every=1) as proxy, pytest.raises(runner.NoServer) as raised:
        runner.check_server(f"{proxy.url}/api")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"asking the Prefect server at {proxy.url}/api: gave up after {proxy.requests} tries"
    )
