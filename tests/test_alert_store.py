"""The alerts store (models/alert.py): alerts, their status, and every firing, on both DBs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from factories import TEAM, research_team
from sqlmodel import Session

from models import alert as store
from models.alert import MAX_MESSAGE, AlertError, AlertStatus
from models.team import TeamError


def test_an_alert_and_its_firing_answer_did_it_go_out_when_to_whom(db_url: str, home: Path) -> None:
    research_team()
    due = datetime(2026, 11, 23, 9, tzinfo=UTC)
    timer = store.create_alert(
        TEAM, "TIMER", "standup", "Standup now", recipient="analyst-1", fire_at=due
    )
    store.set_prefect_ids(timer.id, flow_run_id="run-1")
    assert store.last_firing(timer.id) is None

    store.record_firing(
        TEAM, "TIMER", "standup", "Standup now", alert_id=timer.id, recipients=["analyst-1"],
        message_ids=["m-1"], flow_run_id="run-1", due_at=due,
        fired_at=due + timedelta(seconds=3),
    )  # fmt: skip

    firing = store.last_firing(timer.id)
    assert firing is not None
    assert firing.to_json() == {
        "alertId": timer.id, "team": TEAM, "type": "TIMER", "name": "standup",
        "message": "Standup now", "recipients": ["analyst-1"], "dueAt": due.isoformat(),
        "firedAt": (due + timedelta(seconds=3)).isoformat(), "flowRunId": "run-1",
        "messageIds": ["m-1"], "outcome": "delivered",
    }  # fmt: skip
    again = store.get_alert(timer.id, team=TEAM)
    assert again.status == AlertStatus.DONE  # a timer fires once
    assert again.last_fired_at == due + timedelta(seconds=3)
    assert again.flow_run_id == "run-1"


def test_a_schedule_fires_many_times_newest_first_and_pauses(db_url: str, home: Path) -> None:
    research_team()
    spec = {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
    sync = store.create_alert(TEAM, "SCHEDULED_EVENT", "daily_sync", "Sync", schedule=spec)
    store.set_prefect_ids(sync.id, schedule_id="s-1", deployment_id="d-1")
    start = datetime(2026, 11, 23, 8, tzinfo=UTC)
    for day in range(3):
        store.record_firing(
            TEAM, "SCHEDULED_EVENT", "daily_sync", "Sync", alert_id=sync.id,
            recipients=["coordinator", "analyst-1"], message_ids=[f"a{day}", f"b{day}"],
            flow_run_id=f"r{day}", due_at=start + timedelta(days=day),
            fired_at=start + timedelta(days=day, seconds=1),
        )  # fmt: skip
    assert [f.flow_run_id for f in store.firings(TEAM, alert_id=sync.id)] == ["r2", "r1", "r0"]
    assert store.get_alert(sync.id).status == AlertStatus.ACTIVE  # schedules stay active

    paused = store.set_status(sync.id, AlertStatus.PAUSED)
    assert (paused.status, paused.active) == ("paused", False)
    assert paused.status_changed_at is not None
    [listed] = store.list_alerts(TEAM)
    assert listed.schedule == spec and listed.schedule_id == "s-1"
    store.set_status(sync.id, AlertStatus.CANCELLED)
    assert store.list_alerts(TEAM, include_ended=False) == []


def test_an_alarm_without_an_alert_row_is_recorded_too(db_url: str, home: Path) -> None:
    research_team()
    store.record_firing(
        TEAM, "ALARM", "stale", "No heartbeat", alert_id=None, recipients=["coordinator"],
        message_ids=["m"], flow_run_id=None,
    )  # fmt: skip
    [firing] = store.firings(TEAM)
    assert (firing.alert_type, firing.alert_id, firing.recipients) == (
        "ALARM",
        None,
        ["coordinator"],
    )


def test_a_firing_in_the_callers_transaction_rolls_back_with_it(
    db_url: str, session: Session, home: Path
) -> None:
    research_team()
    store.record_firing(
        TEAM, "ALARM", "x", "y", alert_id=None, recipients=[], message_ids=[],
        flow_run_id=None, session=session,
    )  # fmt: skip
    session.rollback()
    assert store.firings(TEAM) == []


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ((TEAM, "../x", "hi"), "not an alert name"),
        ((TEAM, "", "hi"), "not an alert name"),
        ((TEAM, "ok", "   "), "message is empty"),
        ((TEAM, "ok", "x" * (MAX_MESSAGE + 1)), f"at most {MAX_MESSAGE}"),
        (("no-such-team", "ok", "hi"), "no team named"),
        ((TEAM, "ok", "hi", "ghost"), "no member named 'ghost'"),
    ],
)
def test_bad_alerts_are_refused_and_nothing_is_written(
    db_url: str, home: Path, args: tuple, problem: str
) -> None:
    research_team()
    with pytest.raises(TeamError, match=problem):
        store.create_alert(args[0], "TIMER", args[1], args[2], recipient=(args[3:] or [None])[0])
    assert store.list_alerts(TEAM) == []


def test_unknown_alerts_and_statuses_are_refused(db_url: str, home: Path) -> None:
    research_team()
    with pytest.raises(AlertError, match="no alert with id 42"):
        store.get_alert(42)
    a = store.create_alert(TEAM, "TIMER", "t", "m")
    with pytest.raises(AlertError, match="has no alert"):
        store.get_alert(a.id, team="other-team")
    with pytest.raises(AlertError, match="unknown alert status"):
        store.set_status(a.id, "snoozed")
    with pytest.raises(AlertError, match="no alert with id 99"):
        store.record_firing(
            TEAM, "TIMER", "t", "m", alert_id=99, recipients=[], message_ids=[], flow_run_id=None
        )
