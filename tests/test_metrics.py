"""models/metrics.py and `teamflow metrics`, on a database filled through teamflow's stores
(SQLite and PostgreSQL); every figure is checked against what was stored."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas  # imported before freezegun freezes time: its first import crashes under it
import pytest
import sqlalchemy as sa
from cli_runner import teamflow as run_teamflow
from freezegun import freeze_time

from models import (
    alert,
    approval,
    db,
    inbox,
    membership,
    metric_frames,
    plan_timeout,
    presence,
    watchdog,
)
from models import approval_metrics as am
from models import metrics as m
from models import team as teams
from models.agent import AgentStateHistoryRow
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


@pytest.mark.parametrize("count", [1, 2, 5, 41])
def test_duration_percentiles_match_statistics(db_url: str, home: Path, count: int) -> None:
    membership.create_team("p-team", description="p", lead="lead")
    rng = random.Random(count)
    durations = [round(rng.lognormvariate(2, 1), 3) for _ in range(count)]
    for i, seconds in enumerate(durations):
        start = T0 + timedelta(minutes=i)
        record_metrics(
            TaskMetricsRow(team="p-team", member="lead", task_id=str(i), started_at=start,
                           ended_at=start, duration_s=seconds, ok=True)
        )  # fmt: skip
    for since, values in ((None, durations), (T0 + timedelta(minutes=count // 2), None)):
        values = values or durations[count // 2 :]
        row = m.member_work("p-team", since).iloc[0]
        assert row.p50_duration_s == pytest.approx(statistics.median(values))
        assert row.max_duration_s == max(values)
        if len(values) > 1:
            p95 = statistics.quantiles(values, n=20, method="inclusive")[-1]
            assert row.p95_duration_s == pytest.approx(p95)
        else:
            assert row.p95_duration_s == values[0]


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
    with pytest.raises(metric_frames.MetricsError):
        m.throughput(TEAM, freq="minute")


def test_approval_metrics(filled: str) -> None:
    plans = am.approvals(TEAM)
    assert len(plans) == 4
    waits = am.approval_waits(TEAM).set_index("member")
    assert (waits.loc["analyst-2"].requests, waits.loc["analyst-2"].p50_wait_s) == (1, 90.0)
    one = waits.loc["analyst-1"]
    assert (one.requests, one.decided, one.pending) == (3, 2, 1)
    assert one.max_wait_s == 120.0 and one.oldest_pending_s > 0
    outcomes = {r.status: r.requests for r in am.approval_outcomes(TEAM).itertuples()}
    assert outcomes == {"approved": 1, "denied": 2, "pending": 1}
    deciders = {
        (r.decided_by, r.status): r.requests for r in am.approval_deciders(TEAM).itertuples()
    }
    assert deciders == {("coordinator", "approved"): 1, ("coordinator", "denied"): 1,
                        ("system", "denied"): 1}  # fmt: skip
    revisions = {
        (r.revision, r.status): r.requests for r in am.approval_revisions(TEAM).itertuples()
    }
    assert revisions[(2, "pending")] == 1
    timeouts = {r.timeout_policy: r for r in am.approval_timeouts(TEAM).itertuples()}
    assert (timeouts["deny"].requests, timeouts["deny"].timed_out) == (3, 1)  # the revision too
    assert timeouts["deny"].denied_by_timeout == 1
    assert (timeouts["approve"].requests, timeouts["approve"].timed_out) == (1, 0)


def test_team_glance_has_the_sums_and_counts_of_the_frames(filled: str) -> None:
    # What every team task publishes to the Prefect UI (flows.team_view): plain values, the
    # same as member_work, approval_waits, member_status and tasks_by_status give.
    from models.task import create_task
    from models.task_status import ExecutionStatus, set_member_status

    create_task(TEAM, title="one", assignees=["analyst-1"])
    create_task(TEAM, title="two", assignees=["analyst-2"])
    set_member_status(TEAM, "analyst-1", status=ExecutionStatus.RUNNING, tokens=40)
    set_member_status(TEAM, "analyst-2", status=ExecutionStatus.COMPLETE, completed=True)
    glance = m.team_glance(TEAM)
    one = glance["members"]["analyst-1"]
    assert (one["tokens"], one["steps"], one["tool_calls"], one["approval_wait_s"]) == (
        250, 6, 8, 15.0,
    )  # fmt: skip
    assert (one["requests"], one["pending"]) == (3, 1)
    assert (one["status"], one["tokens_used"]) == ("running", 40)
    assert glance["members"]["analyst-2"]["tasks_completed"] == 1
    assert "helper" not in glance["members"]  # another team's

    work = m.member_work(TEAM).set_index("member")
    waits = am.approval_waits(TEAM).set_index("member")
    status = m.member_status(TEAM).set_index("member")
    for member in work.index:
        for key in ("tokens", "steps", "tool_calls", "approval_wait_s"):
            assert glance["members"][member][key] == work.loc[member, key], (member, key)
    for member in waits.index:
        got = glance["members"][member]
        assert (got["requests"], got["pending"]) == tuple(
            waits.loc[member, ["requests", "pending"]]
        )
    for member in status.index:
        assert glance["members"][member]["status"] == status.loc[member, "status"]
    assert glance["tasks"] == {r.status: r.tasks for r in m.tasks_by_status(TEAM).itertuples()}
    assert sum(glance["tasks"].values()) == 2


def test_unread_backlog_lists_every_member(filled: str) -> None:
    backlog = {r.member: r.unread for r in m.unread_backlog(TEAM).itertuples()}
    for name in ("coordinator", "analyst-1", "analyst-2", "analyst-3"):
        assert backlog[name] == inbox.unread_count(TEAM, name)
    assert backlog["analyst-3"] == 0 and backlog["analyst-2"] >= 2


def test_everything_is_empty_on_an_empty_database(db_url: str, home: Path) -> None:
    for query in (m.member_work, m.work_over_time, m.throughput, am.approvals, am.approval_waits,
                  am.approval_outcomes, am.approval_deciders, am.approval_revisions,
                  am.approval_timeouts, m.executions, m.tasks_by_status, m.alert_lateness,
                  m.liveness):  # fmt: skip
        assert query("nobody").empty, query.__name__
    assert m.unread_backlog("nobody").empty and inbox.unread_count("nobody", "x") == 0


# --- alerts and liveness ---------------------------------------------------------------------

T1 = T0 + timedelta(days=1)


def fire(team: str, kind: str, due: datetime | None, late_s: float, **kwargs) -> None:
    alert.record_firing(
        team, kind, "standup", "Standup!", recipients=["analyst-1"], message_ids=[],
        flow_run_id=None, due_at=due,
        fired_at=(due or T0) + timedelta(seconds=late_s), **kwargs,
    )  # fmt: skip


@pytest.fixture
def alerted(filled: str) -> str:
    """`filled`, plus alert firings: a timer 2 s late; a scheduled event fired 1, 3 and 10 s
    after its due times (the last one missed); an ALARM (no due time); another team's."""
    timer = alert.create_alert(TEAM, "TIMER", "tea", "Tea", fire_at=T0)
    fire(TEAM, "TIMER", T0, 2.0, alert_id=timer.id)
    event = alert.create_alert(TEAM, "SCHEDULED_EVENT", "standup", "Standup!",
                               schedule={"cron": "0 9 * * *"})  # fmt: skip
    for day, late in ((0, 1.0), (1, 3.0), (2, 10.0)):
        fire(TEAM, "SCHEDULED_EVENT", T0 + timedelta(days=day), late, alert_id=event.id,
             outcome="missed" if day == 2 else "delivered")  # fmt: skip
    fire(TEAM, "ALARM", None, 0.0, alert_id=None)
    fire("other-team", "SCHEDULED_EVENT", T0, 500.0, alert_id=None)
    return filled


def test_alert_lateness_per_type(alerted: str) -> None:
    frame = m.alert_lateness(TEAM).set_index("alert_type")
    assert list(frame.index) == ["ALARM", "SCHEDULED_EVENT", "TIMER"]
    event = frame.loc["SCHEDULED_EVENT"]
    assert (event.firings, event.delivered, event.missed, event.with_due) == (3, 2, 1, 3)
    assert math.isclose(event.p50_lateness_s, 3.0, abs_tol=1e-3)
    expected_p95 = statistics.quantiles([1.0, 3.0, 10.0], n=20, method="inclusive")[-1]
    assert math.isclose(event.p95_lateness_s, expected_p95, abs_tol=1e-3)
    assert math.isclose(event.max_lateness_s, 10.0, abs_tol=1e-3)
    timer = frame.loc["TIMER"]
    assert (timer.firings, timer.delivered, timer.missed) == (1, 1, 0)
    assert math.isclose(timer.max_lateness_s, 2.0, abs_tol=1e-3)
    alarm = frame.loc["ALARM"]
    assert (alarm.firings, alarm.with_due) == (1, 0) and math.isnan(alarm.p50_lateness_s)
    # The window (by fired time): the last two days' event firings only.
    recent = m.alert_lateness(TEAM, T0 + timedelta(hours=12)).set_index("alert_type")
    assert list(recent.index) == ["SCHEDULED_EVENT"]
    assert (recent.loc["SCHEDULED_EVENT"].firings, recent.loc["SCHEDULED_EVENT"].missed) == (2, 1)
    # Every team: the other team's late firing is there, and only there.
    both = m.alert_lateness(None).set_index(["team", "alert_type"])
    assert both.loc[("other-team", "SCHEDULED_EVENT")].max_lateness_s == pytest.approx(500.0)


def history(member: str) -> list[tuple[str, datetime, datetime | None]]:
    H = AgentStateHistoryRow
    with db.engine().connect() as conn:
        rows = conn.execute(
            sa.select(H.status, H.changed_at, H.ended_at)
            .where(H.team == TEAM, H.member == member)
            .order_by(H.changed_at)
        )
        return [tuple(r) for r in rows]


@pytest.fixture
def lively(filled: str) -> str:
    """`filled`, plus heartbeats from T1: analyst-1 idle 120 s (a repeated heartbeat in
    between), thinking 30 s, executing tools 50 s, idle until the watchdog marks it offline
    at T1+400; analyst-2 thinking until marked offline at T1+400."""
    teams.update_settings(TEAM, {"offline_after_seconds": 90})
    # An outside member (MCP) should keep beating while idle: its silence marks it offline.
    teams.set_member(TEAM, "analyst-1", runtime={"kind": "mcp"})
    with freeze_time(T1) as clock:
        presence.heartbeat(TEAM, "analyst-1", status="idle")
        presence.heartbeat(TEAM, "analyst-2", status="thinking")
        for status, seconds in (("idle", 60), ("thinking", 60), ("executing_tools", 30),
                                ("idle", 50)):  # fmt: skip
            clock.tick(seconds)
            presence.heartbeat(TEAM, "analyst-1", status=status)
        presence.heartbeat(TEAM, "analyst-2", status="thinking")  # T1+200, same status
        clock.tick(200)
        assert sorted(a.subject for a in watchdog.scan()) == ["analyst-1", "analyst-2"]
        watchdog.scan()  # still offline: nothing changes
    return filled


def test_history_rows_are_written_only_when_the_status_changes(lively: str) -> None:
    s = timedelta(seconds=1)
    assert history("analyst-1") == [
        ("idle", T1, T1 + 120 * s), ("thinking", T1 + 120 * s, T1 + 150 * s),
        ("executing_tools", T1 + 150 * s, T1 + 200 * s), ("idle", T1 + 200 * s, T1 + 400 * s),
        ("offline", T1 + 400 * s, None),
    ]  # fmt: skip
    assert history("analyst-2") == [("thinking", T1, T1 + 400 * s), ("offline", T1 + 400 * s, None)]
    with freeze_time(T1 + 500 * s):
        presence.heartbeat(TEAM, "analyst-2", status="idle")  # back
    assert history("analyst-2")[-2:] == [
        ("offline", T1 + 400 * s, T1 + 500 * s), ("idle", T1 + 500 * s, None),
    ]  # fmt: skip


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path):
    """An empty database (no migration applied yet)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    base = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")
    if not base:
        pytest.skip("TEAMFLOW_TEST_POSTGRES_URL is not set: PostgreSQL tests skipped")
    schema = f"tf_fresh_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield (
            sa.make_url(base)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        db.dispose_engines()
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def test_migration_0008_starts_the_history_with_each_members_status(fresh_url: str) -> None:
    db.upgrade(fresh_url, "0007")
    with db.engine(fresh_url).begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO agent_state (agent_id, status, team) VALUES"
                " ('analyst-1@q4-team', 'thinking', 'q4-team'), ('solo', 'idle', NULL)"
            )
        )
    before = datetime.now(UTC)
    db.upgrade(fresh_url)
    H = AgentStateHistoryRow
    with db.engine(fresh_url).connect() as conn:
        rows = conn.execute(sa.select(H.team, H.member, H.status, H.changed_at, H.ended_at))
        ((team, member, status, changed_at, ended_at),) = rows.all()
    assert (team, member, status, ended_at) == ("q4-team", "analyst-1", "thinking", None)
    assert before - timedelta(seconds=1) <= changed_at <= datetime.now(UTC)
    with freeze_time(changed_at + timedelta(seconds=30)):
        assert seconds_of(m.liveness("q4-team", url=fresh_url), "analyst-1")["busy_s"] == 30.0


def seconds_of(frame, member: str) -> dict[str, float]:
    row = frame.set_index("member").loc[member]
    keys = ("idle_s", "thinking_s", "executing_tools_s", "offline_s", "busy_s", "known_s")
    return {k: round(float(row[k]), 3) for k in keys}


def test_liveness_counts_seconds_per_status(lively: str) -> None:
    with freeze_time(T1 + timedelta(seconds=500)):
        everything = m.liveness(TEAM)
        assert list(everything["member"]) == ["analyst-1", "analyst-2"]
        assert seconds_of(everything, "analyst-1") == {
            "idle_s": 320.0, "thinking_s": 30.0, "executing_tools_s": 50.0, "offline_s": 100.0,
            "busy_s": 80.0, "known_s": 500.0,
        }  # fmt: skip
        assert seconds_of(everything, "analyst-2") == {
            "idle_s": 0.0, "thinking_s": 400.0, "executing_tools_s": 0.0, "offline_s": 100.0,
            "busy_s": 400.0, "known_s": 500.0,
        }  # fmt: skip
        assert everything.set_index("member").loc["analyst-2"].busy_share == pytest.approx(0.8)
        # From T1+140: the thinking that began at T1+120 counts from the window start.
        window = m.liveness(TEAM, T1 + timedelta(seconds=140))
        assert seconds_of(window, "analyst-1") == {
            "idle_s": 200.0, "thinking_s": 10.0, "executing_tools_s": 50.0, "offline_s": 100.0,
            "busy_s": 60.0, "known_s": 360.0,
        }  # fmt: skip
        assert seconds_of(window, "analyst-2")["thinking_s"] == 260.0
        # The last 50 s (a timedelta): both offline throughout.
        last = m.liveness(TEAM, timedelta(seconds=50))
        assert seconds_of(last, "analyst-1")["offline_s"] == 50.0
        assert seconds_of(last, "analyst-1")["known_s"] == 50.0
    # Later, the current status (offline) has gone on counting.
    with freeze_time(T1 + timedelta(seconds=900)):
        assert seconds_of(m.liveness(TEAM), "analyst-2")["offline_s"] == 500.0
    assert m.liveness("other-team").empty


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", timedelta(seconds=90)), ("30m", timedelta(minutes=30)), ("7d", timedelta(days=7)),
     ("1.5h", timedelta(minutes=90)), ("2w", timedelta(weeks=2))],
)  # fmt: skip
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert m.parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "d", "-1d", "0h", "7days", "1y"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(metric_frames.MetricsError, match="bad duration"):
        m.parse_duration(text)


# --- the CLI ---------------------------------------------------------------------------------


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return run_teamflow(args, stdin_devnull=False)


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


def test_cli_metrics_shows_alerts_and_liveness(alerted: str, lively: str) -> None:
    data = json.loads(teamflow("metrics", TEAM, "--json").stdout)
    members = {r["member"]: r for r in data["members"]}
    one = members["analyst-1"]
    assert (one["busy_s"], one["idle_s"]) == (80.0, 320.0)
    assert one["offline_s"] > 100.0  # offline since T1+400, until now
    assert members["analyst-3"]["busy_s"] is None  # no status recorded
    alerts = {a["alert_type"]: a for a in data["alerts"]}
    assert set(alerts) == {"ALARM", "SCHEDULED_EVENT", "TIMER"}
    event = alerts["SCHEDULED_EVENT"]
    assert (event["firings"], event["delivered"], event["missed"]) == (3, 2, 1)
    assert event["max_lateness_s"] == pytest.approx(10.0, abs=1e-3)

    table = teamflow("metrics", TEAM).stdout
    assert "busy" in table and "offline" in table and "80.0s" in table and "5.3m" in table
    assert "alert type" in table and "SCHEDULED_EVENT" in table and "9.3s" in table  # p95
    assert "d │" in table  # offline for days, in days
    recent = teamflow("metrics", TEAM, "--since", "1h")
    assert "no alerts fired" in recent.stdout
    assert json.loads(teamflow("metrics", TEAM, "--since", "1h", "--json").stdout)["alerts"] == []


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


def _headline_from_the_metrics(team: str, since: timedelta | None) -> list[dict]:
    """The headline as the metrics it sums up give it, merged by pandas (issue 35: it is one
    statement now, and must say what they say)."""
    work = m.member_work(team, since)[
        ["team", "member", "tasks", "failed", "p50_duration_s", "tokens", "tool_calls",
         "tool_failures"]
    ]  # fmt: skip
    waits = am.approval_waits(team, since)[["team", "member", "requests", "p50_wait_s"]]
    waits = waits.rename(columns={"requests": "plans", "p50_wait_s": "p50_plan_wait_s"})
    frame = m.unread_backlog(team)[["team", "member", "unread"]]
    alive = m.liveness(team, since)[["team", "member", "busy_s", "idle_s", "offline_s"]]
    for other in (work, waits, alive):
        frame = frame.merge(other, on=["team", "member"], how="outer")
    for column in ("tasks", "failed", "tokens", "tool_calls", "tool_failures", "plans", "unread"):
        frame[column] = frame[column].fillna(0).astype(int)
    return m.records(frame.sort_values("member", ignore_index=True))


@pytest.mark.parametrize("since", [None, timedelta(days=3650)])
def test_headline_says_what_the_metrics_it_sums_up_say(
    filled: str, lively: str, since: timedelta | None
) -> None:
    got = m.records(m.headline(TEAM, since))
    expected = _headline_from_the_metrics(TEAM, since)
    assert [r["member"] for r in got] == [r["member"] for r in expected]
    for row, want in zip(got, expected, strict=True):
        assert set(row) == set(want)
        for key, value in want.items():
            if isinstance(value, float):
                # offline_s runs until now, which moves between the two reads
                assert row[key] == pytest.approx(value, abs=60 if key == "offline_s" else 1e-3)
            else:
                assert row[key] == value, (row["member"], key)


def test_cli_metrics_plot_spans_the_days_of_the_data_and_says_when_there_is_none(
    filled: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flows.cli.metrics import plot_figure

    days = m.work_over_time(TEAM, None, freq="day")["bucket"]
    figure = plot_figure(TEAM, None)
    tokens_ax, tasks_ax = figure.axes
    low, high = tasks_ax.get_xlim()
    spanned = (days.max() - days.min()).total_seconds() / 86400
    assert high - low <= spanned + 1  # a day of padding, not years around the data
    assert tokens_ax.lines
    plt.close(figure)

    empty = plot_figure("no-team-here", None)
    assert [t.get_text() for ax in empty.axes for t in ax.texts] == [
        "no task metrics yet",
        "no finished tasks yet",
    ]
    plt.close(empty)


def test_timestamps_come_back_to_the_microsecond_in_utc(db_url: str, home: Path) -> None:
    """The per-row queries read timestamps raw (SQLite's text, PostgreSQL's microseconds
    since the epoch) and convert them at once: each equals what was stored, to the
    microsecond, in UTC, and a missing one is NaT."""
    membership.create_team(TEAM, description="times", lead="coordinator")
    membership.add_member(TEAM, "analyst-1", model="haiku", prompt="p")
    membership.add_member(TEAM, "analyst-2", model="haiku", prompt="p")
    inbox.mark_read(TEAM, "analyst-2")
    start = datetime(2026, 11, 2, 9, 0, 1, 123457, tzinfo=UTC)
    record_metrics(
        TaskMetricsRow(team=TEAM, member="analyst-1", task_id="t", started_at=start,
                       ended_at=start + timedelta(microseconds=999_999), duration_s=1.0)
    )  # fmt: skip
    with freeze_time(start):
        request = approval.request_plan(TEAM, "analyst-1", "Plan it", "Plan")
        inbox.send(TEAM, to="analyst-1", sender="coordinator", text="hello")
    ran = m.executions(TEAM).iloc[0]
    assert (ran["started_at"], ran["ended_at"]) == (
        pandas.Timestamp(start),
        pandas.Timestamp(start + timedelta(microseconds=999_999)),
    )
    asked = am.approvals(TEAM).set_index("request_id").loc[request.request_id]
    assert asked["requested_at"] == pandas.Timestamp(start) and pandas.isna(asked["decided_at"])
    backlog = m.unread_backlog(TEAM).set_index("member")
    first = inbox.messages(TEAM, "analyst-1", unread=True)[0].timestamp  # by inbox order
    assert backlog.loc["analyst-1", "oldest_unread_at"] == pandas.Timestamp(first)
    assert pandas.isna(backlog.loc["analyst-2", "oldest_unread_at"])  # read all
    assert str(ran["started_at"].tz) == "UTC"
