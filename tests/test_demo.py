"""`teamflow demo`, end to end, its answers checked against the CSV files computed here."""

from __future__ import annotations

import csv
import itertools
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from cli_runner import subprocess_teamflow
from prefect_server import harness

from flows import demo
from models import inbox
from models import team as teams
from models.task import list_tasks

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("demo-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("TEAMFLOW_HOME", str(home))
    patch.setenv("TEAMFLOW_DATABASE_URL", f"sqlite:///{home / 'teamflow.db'}")
    patch.setenv("PREFECT_API_URL", "")  # never a server left running elsewhere
    lines: list[str] = []
    try:
        with harness(tmp_path_factory.mktemp("prefect")):
            summary = demo.run(echo=lines.append)
        yield {"summary": summary, "home": home, "lines": lines}
    finally:
        patch.undo()


def _monthly(sales: Path) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    with sales.open() as f:
        for row in csv.DictReader(f):
            totals[row["product"]][row["date"][:7]] += float(row["revenue"])
    return totals


def _top3(sales: Path) -> list[tuple[str, float]]:
    growth = {}
    for product, months in _monthly(sales).items():
        values = [months[m] for m in sorted(months)]
        changes = [(b - a) / a * 100 for a, b in itertools.pairwise(values)]
        growth[product] = sum(changes) / len(changes)
    return sorted(growth.items(), key=lambda item: abs(item[1]), reverse=True)[:3]


def test_the_demo_completes_and_says_where_to_look(ran: dict) -> None:
    summary = ran["summary"]
    assert summary["task"]["status"] == "completed"
    assert all(m["ok"] for m in summary["task"]["members"].values())
    assert [s["status"] for s in summary["shutdowns"]] == ["approved", "approved"]
    text = "\n".join(ran["lines"])
    for expected in ("1/4", "4/4", "report.md", "analysis.csv", "teamflow log research-team"):
        assert expected in text


def test_top_three_trends_match_the_csv(ran: dict) -> None:
    home = ran["home"]
    sales = home / "demo" / "data" / "q4-sales.csv"
    report = (
        home / "tasks" / "research-team" / "analyst-1" / "artifacts" / "report.md"
    ).read_text()
    expected = _top3(sales)
    trends = report.split("## Top 3 revenue trends")[1].split("##")[0].strip().splitlines()
    assert [line.split(" revenue")[0] for line in trends] == [p for p, _ in expected]
    for line, (_, growth) in zip(trends, expected, strict=True):
        shown = float(re.search(r"([+-]\d+\.\d)%", line).group(1))
        assert shown == pytest.approx(growth, abs=0.1)  # the tool rounds each month first


def test_regional_variation_table_matches_the_csv(ran: dict) -> None:
    home = ran["home"]
    by_region: dict[str, float] = defaultdict(float)
    with (home / "demo" / "data" / "q4-sales.csv").open() as f:
        for row in csv.DictReader(f):
            by_region[row["region"]] += float(row["revenue"])
    total = sum(by_region.values())
    table = home / "tasks" / "research-team" / "analyst-1" / "artifacts" / "analysis.csv"
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert {r["region"] for r in rows} == set(by_region)
    for row in rows:
        assert float(row["revenue"]) == pytest.approx(by_region[row["region"]], abs=0.01)
        assert float(row["share_pct"]) == pytest.approx(
            by_region[row["region"]] / total * 100, abs=0.05
        )


def test_satisfaction_cross_reference_matches_the_csv(ran: dict) -> None:
    home = ran["home"]
    revenue: dict[tuple[str, str], float] = defaultdict(float)
    with (home / "demo" / "data" / "q4-sales.csv").open() as f:
        for row in csv.DictReader(f):
            revenue[(row["region"], row["segment"])] += float(row["revenue"])
    with (home / "demo" / "data" / "satisfaction.csv").open() as f:
        scores = {(r["region"], r["segment"]): float(r["score"]) for r in csv.DictReader(f)}
    keys = sorted(scores)
    r = statistics.correlation([revenue[k] for k in keys], [scores[k] for k in keys])
    answer = ran["summary"]["task"]["members"]["analyst-2"]["response"]
    assert answer.endswith(f"{r:.3f}")
    table = home / "tasks" / "research-team" / "analyst-2" / "artifacts" / "analysis.csv"
    with table.open() as f:
        pairs = {(row["region"], row["segment"]): row for row in csv.DictReader(f)}
    assert set(pairs) == set(keys)
    for key in keys:
        assert float(pairs[key]["revenue"]) == pytest.approx(revenue[key], abs=0.01)
        assert float(pairs[key]["score"]) == pytest.approx(scores[key])


def test_the_team_went_through_approval_and_the_handshake(ran: dict) -> None:
    from models.approval import list_requests

    home = ran["home"]
    plans = list_requests("research-team")
    assert [(p.member, p.status, p.decided_by) for p in plans] == [
        ("analyst-1", "approved", "coordinator")
    ]
    config = json.loads((home / "teams" / "research-team" / "config.json").read_text())
    analysts = [m for m in config["members"] if m["name"].startswith("analyst")]
    assert all(not m["isActive"] and m["shutdownAt"] for m in analysts)
    assert all(m["metadata"]["shutdown_reason"] == "tasks_complete" for m in analysts)
    assert [t.status for t in list_tasks("research-team")] == ["completed", "completed"]
    lead = [r.type for r in inbox.messages("research-team", "coordinator")]
    idle = [
        (r.sender, json.loads(r.text)["idleReason"])
        for r in inbox.messages("research-team", "coordinator")
        if r.type == "idle_notification"
    ]
    # analyst-1 waits on its plan's approval, then both finish; analyst-2 again (brief).
    assert sorted(idle) == [
        ("analyst-1", "task_complete"), ("analyst-1", "waiting_response"),
        ("analyst-2", "task_complete"), ("analyst-2", "task_complete"),
    ], idle  # fmt: skip
    assert "plan_approval_request" in lead
    assert [m.name for m in teams.list_members("research-team", active=True)] == ["coordinator"]


def test_analyst_2_recalls_in_a_later_task_what_analyst_1_remembered(ran: dict) -> None:
    import os

    from sqlmodel import select

    from models.db import session_scope
    from models.memory import MemoryRow

    home = ran["home"]
    with session_scope() as s:
        [memory] = s.exec(select(MemoryRow)).all()
    assert (memory.team, memory.agent_id, memory.scope) == (
        "research-team", "analyst-1@research-team", "shared",
    )  # fmt: skip
    [(product, _), *_] = _top3(home / "demo" / "data" / "q4-sales.csv")
    assert memory.content.startswith("Q4 top revenue trend: ") and product in memory.content
    assert memory.access_count == 1  # analyst-2's recall read it

    follow_up = ran["summary"]["follow_up"]
    assert follow_up["status"] == "completed", follow_up
    assert follow_up["members"]["analyst-2"]["response"] == memory.content
    brief = home / "tasks" / "research-team" / "analyst-2" / "artifacts" / "brief.md"
    assert memory.content in brief.read_text()
    assert f"  analyst-2 recalled: {memory.content}" in ran["lines"]

    env = {**os.environ, "TEAMFLOW_HOME": str(home),
           "TEAMFLOW_DATABASE_URL": f"sqlite:///{home / 'teamflow.db'}"}  # fmt: skip
    for member, action in (("analyst-1", "remember"), ("analyst-2", "recall")):
        shown = subprocess_teamflow(
            ["log", "research-team", member, "--color", "never"], env, stdin_devnull=False
        )
        assert shown.returncode == 0, shown.stderr
        assert f"🔧 {action} (" in shown.stdout and f"👤 User tool:{action}" in shown.stdout
        assert memory.content in shown.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


def test_without_a_server_the_demo_uses_a_temporary_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("PREFECT_API_URL", "")  # the user chose no server
    monkeypatch.setenv("PREFECT_PROFILES_PATH", "/nonexistent/profiles.toml")
    with temporary_settings(updates={PREFECT_API_URL: f"http://127.0.0.1:{_free_port()}/api"}):
        assert demo._server() is None


def test_a_chosen_server_that_does_not_answer_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.runner import NoServer

    url = f"http://127.0.0.1:{_free_port()}/api"
    monkeypatch.setenv("PREFECT_API_URL", url)
    with (
        temporary_settings(updates={PREFECT_API_URL: url}),
        pytest.raises(NoServer, match=r"no Prefect server answers at .*PREFECT_API_URL"),
    ):
        demo._server()


def test_the_temporary_server_is_awaited_with_progress_and_stopped_at_the_end(
    tmp_path: Path,
) -> None:
    """What `make demo` does on a fresh machine: a Prefect server of its own, its start
    awaited with progress and a stated patience, stopped when the demo ends."""
    from flows import runner

    said: list[str] = []
    with demo._temporary_server(tmp_path, said.append) as api:
        assert runner.probe(api, timeout=5) == "prefect"
    assert any("up to 120 s" in line for line in said), said
    assert any("healthy after" in line for line in said), said
    assert runner.probe(api, timeout=2) == "none"


def test_a_temporary_server_that_does_not_start_in_time_is_one_line_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows import up_processes
    from flows.runner import NoServer

    monkeypatch.setattr(up_processes, "SERVER_START_TIMEOUT", 0.0)
    with pytest.raises(NoServer) as refused, demo._temporary_server(tmp_path, lambda _: None):
        pass
    line = str(refused.value)
    assert "\n" not in line and "did not become healthy" in line
    assert "start `teamflow up`" in line and "PREFECT_API_URL" in line
