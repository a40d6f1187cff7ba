"""The watchdog's decisions (models/watchdog.py), on the real databases, with a frozen clock."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_runner import subprocess_teamflow
from factories import TEAM, research_team
from freezegun import freeze_time

from models import inbox, membership, presence, watchdog
from models import team as teams
from models.agent import AgentStateRow
from models.approval import get_request, request_plan
from models.db import session_scope
from models.shutdown import get_shutdown, request_shutdown
from models.task import TaskState, create_task, get_task, move_task
from models.team_settings import ApprovalError, parse_duration
from models.watchdog import DeadRun

START = "2026-02-16T10:00:00Z"


def scan(**kwargs) -> list[str]:
    """One watchdog pass; the keys of the alarms it hands over, each delivered."""
    due = watchdog.scan(**kwargs)
    for alarm in due:
        assert watchdog.claim_delivery(alarm.key, alarm.raised_at)
    return [alarm.key for alarm in due]


def state_of(member: str) -> str:
    with session_scope() as s:
        agent_id = teams.get_member(TEAM, member, session=s).agent_id
        return s.get(AgentStateRow, agent_id).status


def status_updates(member: str = "coordinator") -> list[dict]:
    return [r.payload for r in inbox.messages(TEAM, member) if r.type == "status_update"]


def test_durations_are_read_or_refused_in_one_line() -> None:
    assert [parse_duration(t) for t in ("90s", "5m", "1h", "300", "1.5m")] == [
        90, 300, 3600, 300, 90
    ]  # fmt: skip
    for text in ("0s", "abc", "nan", "inf", "-5s", "", "1e400", "9999h", "5 minutes"):
        with pytest.raises(ApprovalError) as caught:
            parse_duration(text, what="--offline-after")
        assert "\n" not in str(caught.value) and "--offline-after" in str(caught.value)


def test_a_stale_member_goes_offline_and_alarms_once_until_it_comes_back(
    db_url: str, home: Path
) -> None:
    research_team()
    teams.update_settings(TEAM, {"offline_after_seconds": 90})
    with freeze_time(START) as clock:
        presence.heartbeat(TEAM, "analyst-1", status="thinking")
        presence.heartbeat(TEAM, "analyst-2")
        assert [u["status"] for u in status_updates()] == ["busy", "idle"]  # first heartbeats
        assert scan() == []
        clock.tick(timedelta(seconds=60))
        presence.heartbeat(TEAM, "analyst-2")
        clock.tick(timedelta(seconds=31))  # analyst-1: 91 s without a heartbeat
        assert scan() == [f"offline:{TEAM}:analyst-1"]
        assert state_of("analyst-1") == "offline"
        assert state_of("analyst-2") == "idle"
        [update] = status_updates()[2:]
        assert update["status"] == "offline"
        assert update["agent_id"] == f"analyst-1@{TEAM}"
        for _ in range(3):  # still offline: no new alarm, no new status_update
            clock.tick(timedelta(seconds=30))
            presence.heartbeat(TEAM, "analyst-2")
            assert scan() == []
        assert len(status_updates()) == 3

        presence.heartbeat(TEAM, "analyst-1")  # back
        assert state_of("analyst-1") == "idle"
        back = status_updates()[-1]
        assert back["status"] == "idle" and "back" in back["message"]
        assert scan() == []
        [alarm] = watchdog.alarms(TEAM)
        assert alarm.cleared_at is not None

        presence.heartbeat(TEAM, "analyst-1", status="thinking")  # both at work, then silent
        presence.heartbeat(TEAM, "analyst-2", status="executing_tools")
        clock.tick(timedelta(seconds=120))  # stale again (analyst-2 too, now)
        assert sorted(scan()) == [f"offline:{TEAM}:analyst-1", f"offline:{TEAM}:analyst-2"]
        times = {a.subject: a.times for a in watchdog.alarms(TEAM)}
        assert times == {"analyst-1": 2, "analyst-2": 1}
        assert scan() == []


def test_default_offline_after_is_five_minutes_and_shut_down_members_are_left_alone(
    db_url: str, home: Path
) -> None:
    research_team()
    with freeze_time(START) as clock:
        presence.heartbeat(TEAM, "analyst-1", status="thinking")
        presence.heartbeat(TEAM, "analyst-2", status="thinking")
        teams.set_member(TEAM, "analyst-2", is_active=False)
        clock.tick(timedelta(seconds=299))
        assert scan() == []
        clock.tick(timedelta(seconds=2))
        assert scan() == [f"offline:{TEAM}:analyst-1"]


def test_members_idle_after_their_work_or_waiting_on_a_plan_are_not_offline(
    db_url: str, home: Path
) -> None:
    research_team()
    with freeze_time(START) as clock:
        presence.heartbeat(TEAM, "analyst-1", status="thinking")
        presence.heartbeat(TEAM, "analyst-1", status="idle")  # its work is done
        presence.heartbeat(TEAM, "analyst-2", status="thinking")
        request_plan(TEAM, "analyst-2", plan="1. Load 2. Sum", summary="Sum Q4")
        clock.tick(timedelta(hours=2))  # a plan may wait for hours; nobody beats meanwhile
        assert scan() == []
        assert (state_of("analyst-1"), state_of("analyst-2")) == ("idle", "thinking")
        assert [u["status"] for u in status_updates()] == ["busy", "idle", "busy"]
        assert watchdog.alarms(TEAM) == []


def test_a_dead_member_alarms_once_and_an_outside_member_that_left_does_not(
    db_url: str, home: Path
) -> None:
    research_team()
    membership.add_member(
        TEAM, "claude", model="sonnet", prompt="An outside agent.", runtime={"kind": "mcp"}
    )
    membership.add_member(
        TEAM, "codex", model="sonnet", prompt="An outside agent.", runtime={"kind": "mcp"}
    )
    with freeze_time(START) as clock:
        presence.heartbeat(TEAM, "analyst-1", status="executing_tools")  # then its run died
        presence.heartbeat(TEAM, "claude")  # connected, idle, then gone without a word
        presence.heartbeat(TEAM, "codex")
        presence.heartbeat(TEAM, "codex", status="offline")  # said goodbye
        clock.tick(timedelta(seconds=301))
        assert sorted(scan()) == [f"offline:{TEAM}:analyst-1", f"offline:{TEAM}:claude"]
        for _ in range(5):
            clock.tick(timedelta(seconds=30))
            assert scan() == []
        assert sorted(a.subject for a in watchdog.alarms(TEAM)) == ["analyst-1", "claude"]
        assert [u["status"] for u in status_updates() if "analyst-1" in u["agent_id"]] == [
            "busy",
            "offline",
        ]


def test_a_task_past_its_deadline_alarms_once_and_again_if_it_returns(
    db_url: str, home: Path
) -> None:
    research_team()
    with freeze_time(START) as clock:
        due = datetime(2026, 2, 16, 11, 0, tzinfo=UTC)
        row = create_task(TEAM, title="Q4 report", assignees=["analyst-1"], deadline=due)
        assert scan() == []
        clock.tick(timedelta(hours=1, seconds=1))
        assert scan() == [f"deadline:{row.id}"]
        assert scan() == []
        move_task(row.id, to=TaskState.COMPLETED)
        assert scan() == []
        move_task(row.id, to=TaskState.IN_PROGRESS)  # reopened, still late
        assert scan() == [f"deadline:{row.id}"]
        [alarm] = watchdog.alarms(TEAM)
        assert alarm.times == 2 and "past its deadline" in alarm.message


def test_a_dead_task_run_closes_the_task_as_failed_once_and_it_can_start_again(
    db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMFLOW_RESUME_ATTEMPTS", "0")  # no resume: closed at once
    research_team()
    row = create_task(TEAM, title="Q4 report", assignees=["analyst-1"])
    move_task(row.id, to=TaskState.IN_PROGRESS)
    run = DeadRun(
        id=str(uuid.uuid4()), flow="team-task", state="Crashed",
        message="Flow run marked as crashed: its heartbeats stopped.", task_id=str(row.id),
        idempotency_key=watchdog.task_run_key(row.id, 0),
    )  # fmt: skip
    assert scan(dead_runs=[run]) == [f"crashed:{run.id}"]
    task = get_task(row.id)
    assert task.status == "archived"
    assert run.id in task.reason and "heartbeats stopped" in task.reason
    assert scan(dead_runs=[run]) == []

    reopened = watchdog.reopen_task(row.id)
    assert (reopened.status, reopened.attempt, reopened.reason) == ("pending", 1, None)
    assert watchdog.task_run_key(row.id, 1) != watchdog.task_run_key(row.id, 0)
    move_task(row.id, to=TaskState.IN_PROGRESS)
    # The old dead run is seen again: it is of an earlier attempt, the task stays as it is.
    assert scan(dead_runs=[run]) == []
    assert get_task(row.id).status == "in_progress"
    [alarm] = watchdog.alarms(TEAM)
    assert alarm.cleared_at is None  # a dead run stays dead


def test_a_dead_shutdown_run_forces_the_shutdown_and_a_dead_plan_run_alarms(
    db_url: str, home: Path
) -> None:
    research_team()
    shutdown_run, plan_run = str(uuid.uuid4()), str(uuid.uuid4())
    request = request_shutdown(TEAM, "analyst-1", reason="done", flow_run_id=shutdown_run)
    plan = request_plan(TEAM, "analyst-2", "1. read 2. write", "the plan", flow_run_id=plan_run)
    assert watchdog.watched_runs() == sorted([shutdown_run, plan_run])
    dead = [
        DeadRun(id=shutdown_run, flow="shutdown-member", state="Crashed"),
        DeadRun(id=plan_run, flow="plan-approval", state="Crashed"),
    ]
    assert sorted(scan(dead_runs=dead)) == sorted(
        [f"crashed:{shutdown_run}", f"crashed:{plan_run}"]
    )
    forced = get_shutdown(request.request_id)
    assert forced.status == "forced" and forced.completed_at is not None
    with session_scope() as s:
        assert not teams.get_member(TEAM, "analyst-1", session=s).is_active
    assert get_request(plan.request_id).status == "pending"  # the team's timeout decides it
    assert watchdog.watched_runs() == [plan_run]
    assert scan(dead_runs=dead) == []


def test_an_undelivered_alarm_is_handed_over_again_until_delivered(db_url: str, home: Path) -> None:
    research_team()
    with freeze_time(START) as clock:
        presence.heartbeat(TEAM, "analyst-1", status="thinking")
        clock.tick(timedelta(minutes=6))
        [alarm] = watchdog.scan()
        assert watchdog.claim_delivery(alarm.key, alarm.raised_at)
        watchdog.release_delivery(alarm.key)  # the delivery failed
        [again] = watchdog.scan()
        assert again.key == alarm.key
        assert watchdog.claim_delivery(again.key, again.raised_at)
        assert not watchdog.claim_delivery(again.key, again.raised_at)
        assert watchdog.scan() == []


def test_team_settings_offline_after_is_set_or_refused_in_one_line(db_url: str, home: Path) -> None:
    import json
    import os
    import subprocess

    research_team()
    env = {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}

    def teamflow(*args: str) -> subprocess.CompletedProcess:
        return subprocess_teamflow(["team", "settings", TEAM, *args], env, timeout=120)

    for bad in ("0s", "abc", "nan", "-1m", "8d"):
        result = teamflow("--offline-after", bad)
        assert result.returncode == 1 and result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith("teamflow: error: --offline-after") and repr(bad) in line
    assert json.loads(teamflow("--json").stdout) == {}  # nothing written
    ok = teamflow("--offline-after", "90s", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"offline_after_seconds": 90.0}
    assert teams.settings_of(TEAM).offline_after_s == 90
    assert "offline_after_seconds = 90.0" in teamflow().stdout


@pytest.mark.postgres
def test_two_first_heartbeats_at_once_make_one_row_and_both_count(
    _postgres_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's first heartbeat makes its `agent_state` row. When a second process's
    first heartbeat comes while the first is still uncommitted, it waits for it and then
    updates the row (it used to fail on the row's key, and the call with it)."""
    import threading

    import sqlalchemy as sa
    from conftest import _empty_tables
    from prefect_server import wait_until

    _empty_tables(_postgres_url)
    monkeypatch.setenv("TEAMFLOW_DATABASE_URL", _postgres_url)
    research_team()
    outcome: list[object] = []

    def second() -> None:
        try:
            outcome.append(presence.heartbeat(TEAM, "analyst-1", status="executing_tools"))
        except Exception as exc:  # the assertion below names it
            outcome.append(exc)

    with session_scope() as first:
        presence.heartbeat(TEAM, "analyst-1", status="thinking", session=first)
        thread = threading.Thread(target=second)
        thread.start()

        def second_waits() -> bool:  # on the first one's uncommitted row
            with session_scope() as s:
                return bool(s.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                )).scalar())  # fmt: skip

        wait_until(second_waits, 30, "the second heartbeat waiting for the first")
    thread.join(30)
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    assert state_of("analyst-1") == "executing_tools"
