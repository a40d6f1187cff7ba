"""models/metrics.py and `teamflow metrics`, on a database filled through teamflow's stores
(SQLite and PostgreSQL); every figure is checked against what was stored."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from freezegun import freeze_time

from models import approval, inbox, membership, plan_timeout
from models import metrics as m
from models.task import TaskMetricsRow, record_metrics

TEAM = "q4-team"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
# member -> (hours after T0, seconds, tokens, tool calls, failed tool calls, ok)
RUNS = {
    "analyst-1": [
        (0, 4.0, 120, 2, 0, True), (1, 10.5, 80, 4, 1, True), (26, 30.0, 50, 2, 2, False),
    ],
    "analyst-2": [(0.5, 7.25, 300, 3, 0, True)],
}  # fmt: skip


@pytest.fixture
def filled(db_url: str, home: Path) -> str:
    membership.create_team(TEAM, description="Q4 sales analysis", lead="coordinator")
    for name in ("analyst-1", "analyst-2", "analyst-3"):
        membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.")
    membership.create_team("other-team", description="Other", lead="boss")
    membership.add_member("other-team", "helper", model="haiku", prompt="p")
    record_metrics(
        TaskMetricsRow(team="other-team", member="helper", task_id="x", started_at=T0,
                       ended_at=T0, duration_s=999.0, tokens=9999, ok=False)
    )  # fmt: skip
    for member, runs in RUNS.items():
        for hours, seconds, tokens, calls, failures, ok in runs:
            start = T0 + timedelta(hours=hours)
            record_metrics(
                TaskMetricsRow(
                    team=TEAM, member=member, task_id=str(uuid.uuid4()), started_at=start,
                    ended_at=start + timedelta(seconds=seconds), duration_s=seconds,
                    tokens=tokens, steps=2, tool_calls=calls, tool_failures=failures, ok=ok,
                    approval_wait_s=5.0,
                )
            )  # fmt: skip
    with freeze_time(T0) as clock:
        approved = approval.request_plan(TEAM, "analyst-2", "Join the CSVs", "Plan")
        denied = approval.request_plan(TEAM, "analyst-1", "Chart it", "Plan", policy="approve")
        timed = approval.request_plan(TEAM, "analyst-1", "Map it", "Plan", timeout=60)
        clock.tick(90)
        approval.decide(approved.request_id, approve=True, decider="coordinator")
        plan_timeout.apply_timeout(timed.request_id)
        clock.tick(30)
        approval.decide(denied.request_id, approve=False, decider="coordinator", feedback="no")
        approval.request_plan(
            TEAM, "analyst-1", "Chart it better", "Plan", previous_request_id=denied.request_id
        )  # open
    inbox.send(TEAM, to="analyst-2", sender="coordinator", text="Any news?")
    inbox.mark_read(TEAM, "analyst-3")
    return db_url


def test_member_work_counts_durations_tokens_and_tool_failures(filled: str) -> None:
    work = m.member_work(TEAM).set_index("member")
    assert list(work.index) == ["analyst-1", "analyst-2"]
    one = work.loc["analyst-1"]
    seconds = [r[1] for r in RUNS["analyst-1"]]
    assert (one.tasks, one.done, one.failed) == (3, 2, 1)
    assert one.p50_duration_s == statistics.median(seconds)
    assert one.max_duration_s == max(seconds)
    assert math.isclose(
        one.p95_duration_s, statistics.quantiles(seconds, n=20, method="inclusive")[-1]
    )
    assert (one.tokens, one.steps, one.tool_calls, one.tool_failures) == (250, 6, 8, 3)
    assert one.tool_failure_rate == 3 / 8
    assert one.approval_wait_s == 15.0
    # The window: only what started since then.
    late = m.member_work(TEAM, T0 + timedelta(hours=2)).set_index("member")
    assert list(late.index) == ["analyst-1"] and late.loc["analyst-1"].tokens == 50


def test_work_over_time_and_throughput_bucket_by_day_and_hour(filled: str) -> None:
    days = m.work_over_time(TEAM, freq="day")
    per_day = {(r.bucket.date().isoformat(), r.member): r.tokens for r in days.itertuples()}
    assert per_day == {
        ("2026-11-02", "analyst-1"): 200, ("2026-11-02", "analyst-2"): 300,
        ("2026-11-03", "analyst-1"): 50,
    }  # fmt: skip
    hours = m.throughput(TEAM, freq="hour")
    assert [(r.bucket.hour, r.tasks, r.failed) for r in hours.itertuples()] == [
        (9, 2, 0), (10, 1, 0), (11, 1, 1),
    ]  # fmt: skip
    assert str(hours.bucket.dt.tz) == "UTC"
    with pytest.raises(m.MetricsError):
        m.throughput(TEAM, freq="minute")


def test_approval_metrics(filled: str) -> None:
    plans = m.approvals(TEAM)
    assert len(plans) == 4
    waits = m.approval_waits(TEAM).set_index("member")
    assert (waits.loc["analyst-2"].requests, waits.loc["analyst-2"].p50_wait_s) == (1, 90.0)
    one = waits.loc["analyst-1"]
    assert (one.requests, one.decided, one.pending) == (3, 2, 1)
    assert one.max_wait_s == 120.0 and one.oldest_pending_s > 0
    outcomes = {r.status: r.requests for r in m.approval_outcomes(TEAM).itertuples()}
    assert outcomes == {"approved": 1, "denied": 2, "pending": 1}
    deciders = {
        (r.decided_by, r.status): r.requests for r in m.approval_deciders(TEAM).itertuples()
    }
    assert deciders == {("coordinator", "approved"): 1, ("coordinator", "denied"): 1,
                        ("system", "denied"): 1}  # fmt: skip
    revisions = {
        (r.revision, r.status): r.requests for r in m.approval_revisions(TEAM).itertuples()
    }
    assert revisions[(2, "pending")] == 1
    timeouts = {r.timeout_policy: r for r in m.approval_timeouts(TEAM).itertuples()}
    assert (timeouts["deny"].requests, timeouts["deny"].timed_out) == (3, 1)  # the revision too
    assert timeouts["deny"].denied_by_timeout == 1
    assert (timeouts["approve"].requests, timeouts["approve"].timed_out) == (1, 0)


def test_unread_backlog_lists_every_member(filled: str) -> None:
    backlog = {r.member: r.unread for r in m.unread_backlog(TEAM).itertuples()}
    for name in ("coordinator", "analyst-1", "analyst-2", "analyst-3"):
        assert backlog[name] == inbox.unread_count(TEAM, name) == m.unread_count(TEAM, name)
    assert backlog["analyst-3"] == 0 and backlog["analyst-2"] >= 2


def test_everything_is_empty_on_an_empty_database(db_url: str, home: Path) -> None:
    for query in (m.member_work, m.work_over_time, m.throughput, m.approvals, m.approval_waits,
                  m.approval_outcomes, m.approval_deciders, m.approval_revisions,
                  m.approval_timeouts, m.executions, m.tasks_by_status):  # fmt: skip
        assert query("nobody").empty, query.__name__
    assert m.unread_backlog("nobody").empty and m.unread_count("nobody", "x") == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", timedelta(seconds=90)), ("30m", timedelta(minutes=30)), ("7d", timedelta(days=7)),
     ("1.5h", timedelta(minutes=90)), ("2w", timedelta(weeks=2))],
)  # fmt: skip
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert m.parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "d", "-1d", "0h", "7days", "1y"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(m.MetricsError, match="bad duration"):
        m.parse_duration(text)


# --- the CLI ---------------------------------------------------------------------------------


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_metrics_json_and_table(filled: str) -> None:
    result = teamflow("metrics", TEAM, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["team"] == TEAM and data["since"] is None
    members = {r["member"]: r for r in data["members"]}
    assert set(members) == {"coordinator", "analyst-1", "analyst-2", "analyst-3"}
    one = members["analyst-1"]
    assert (one["tasks"], one["failed"], one["tokens"], one["plans"]) == (3, 1, 250, 3)
    assert one["p50_duration_s"] == 10.5 and one["p50_plan_wait_s"] == 105.0
    assert members["analyst-3"]["tasks"] == 0 and members["analyst-3"]["p50_duration_s"] is None
    assert members["analyst-2"]["unread"] == inbox.unread_count(TEAM, "analyst-2")

    table = teamflow("metrics", TEAM)
    assert table.returncode == 0, table.stderr
    assert (
        "analyst-1" in table.stdout and "10.5s" in table.stdout and "p50 plan wait" in table.stdout
    )

    recent = json.loads(teamflow("metrics", TEAM, "--since", "1h", "--json").stdout)
    assert recent["since"] is not None
    assert all(r["tasks"] == 0 for r in recent["members"])  # everything is from 2026-11-02


def test_cli_metrics_plot_writes_a_png(filled: str, tmp_path: Path) -> None:
    path = tmp_path / "team.png"
    result = teamflow("metrics", TEAM, "--plot", str(path))
    assert result.returncode == 0, result.stderr
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    assert f"plot written to {path}" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-team"], "no team named 'no-such-team'"),
        ([TEAM, "--since", "soon"], "--since: bad duration 'soon'"),
        ([TEAM, "--plot", "/no/such/dir/x.png"], "no directory"),
        ([TEAM, "--plot", "plot.jpg"], "must end in .png"),
    ],
)
def test_cli_metrics_bad_input_is_one_line(filled: str, args: list[str], message: str) -> None:
    result = teamflow("metrics", *args)
    assert result.returncode != 0 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("teamflow: error:") and message in lines[0]


def test_cli_metrics_does_not_import_prefect(filled: str) -> None:
    code = (
        "import sys\nfrom flows.cli import app\n"
        f"try:\n    app(['metrics', {TEAM!r}, '--json'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr
