"""How a test process ends quickly. The tests' Prefect server (`prefect_server.harness`):
when it stops, the Prefect clients of the test process have sent what they held (log lines,
events) and stopped, so none is left trying a stopped server at the process's exit (about
10 s per test process, with backoff). And what collecting the suite made is out of the
garbage collector's sight (`conftest.pytest_collection_finish`), so pytest's last full
collection does not walk it again."""

from __future__ import annotations

import gc
import sqlite3
from pathlib import Path

from prefect_server import harness


def test_a_stopped_test_server_has_every_log_line_and_leaves_no_client_trying_it(
    tmp_path: Path,
) -> None:
    from prefect import flow, get_run_logger
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    @flow(name="speaks", persist_result=False)
    def speaks() -> None:
        get_run_logger().info("a line for the server")

    with harness(tmp_path):
        speaks()
        assert APILogWorker._instances and EventsWorker._instances  # both were used
    assert not APILogWorker._instances and not EventsWorker._instances
    with sqlite3.connect(tmp_path / "prefect.db") as db:
        said = [m for (m,) in db.execute("SELECT message FROM log")]
    assert "a line for the server" in said


def test_what_importing_and_collecting_made_is_out_of_the_collectors_sight() -> None:
    assert gc.get_freeze_count() > 50_000  # the imports of teamflow and pytest at least
