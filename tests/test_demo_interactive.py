"""`teamflow demo --interactive` (issue 33): a person decides each plan, and is told where."""

from __future__ import annotations

import threading
from pathlib import Path

from factories import TEAM, research_team

from flows import demo
from models.approval import list_requests, request_plan


def test_interactive_demo_prints_the_waiting_runs_url(db_url: str, home: Path) -> None:
    """`teamflow demo --interactive` leaves each plan to a person and tells them where: the
    waiting run's page in the Prefect UI (and the CLI command that decides instead). The
    lead's loop alone, on a plan whose run waits: no demo run or server is needed for this."""
    research_team()
    run_id = "0b7e2f9c-3d4a-4c5b-9e8f-1a2b3c4d5e6f"
    request = request_plan(TEAM, "analyst-1", "1. Load\n2. Sum", "Q4 plan", flow_run_id=run_id)
    said: list[str] = []
    told = threading.Event()

    def echo(line: str) -> None:
        said.append(line)
        if "approve it at" in line:
            told.set()

    lead = demo.Lead(True, echo)
    lead.ui = "http://127.0.0.1:4200"
    lead.start()
    try:
        assert told.wait(30), said
    finally:
        lead.done.set()
        lead.join()
    assert said[-1] == (
        f"    approve it at http://127.0.0.1:4200/runs/flow-run/{run_id}, or: teamflow plan "
        f"approve {request.request_id} --feedback '...'"
    )
    assert [r.status for r in list_requests(TEAM)] == ["pending"]  # a person decides
