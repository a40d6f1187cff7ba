"""teamflow's clock delivers TIMER alerts at their due time, once, on both databases.

The clock (`flows.system_alert.fire_due_timers`, called by every worker's clock) and the
timer's own `system-alert` run race for each timer; one conditional update decides, so the
alert reaches the inbox once whoever comes first. Time is frozen (freezegun).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from factories import TEAM, research_team
from freezegun import freeze_time

from flows import timers
from flows.system_alert import _deliver, fire_due_timers
from models import alert as store
from models import approval, db, inbox, inbox_table
from models.alert import AlertError, AlertStatus
from models.notification import SystemAlertPayload
from models.team import get_member

DUE = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def timer(name: str = "standup", *, due: datetime = DUE, run: str | None = "run-1") -> int:
    alert = store.create_alert(
        TEAM, "TIMER", name, f"{name} now", recipient="analyst-1", fire_at=due
    )
    if run is not None:  # the timer's Prefect run exists: its creation finished
        store.set_prefect_ids(alert.id, flow_run_id=run)
    return alert.id


def alerts_of(member: str) -> list[inbox_table.InboxMessageRow]:
    return [m for m in inbox.messages(TEAM, member) if m.type == "system_alert"]


def run_delivers(alert_id: int) -> list[str]:
    """What the timer's `system-alert` run does when it starts."""
    alert = store.get_alert(alert_id)
    payload = SystemAlertPayload(alert_type="TIMER", alert_name=alert.name, message=alert.message)
    return _deliver(TEAM, "analyst-1", payload, alert_id, alert.flow_run_id, alert.fire_at)


def test_a_timer_goes_off_at_its_time_not_before_and_once(db_url: str, home: Path) -> None:
    research_team()
    standup = timer()
    with freeze_time(DUE - timedelta(seconds=1)):
        assert fire_due_timers() == []  # never early
        assert store.next_timer_due() == DUE
    with freeze_time(DUE):
        assert fire_due_timers() == [standup]
        assert fire_due_timers() == []  # once
    [message] = alerts_of("analyst-1")
    assert (message.payload["alert_name"], message.text) == ("standup", "standup now")
    firing = store.last_firing(standup)
    assert (firing.due_at, firing.fired_at, firing.flow_run_id) == (DUE, DUE, "run-1")
    assert firing.message_ids == [message.message_id]
    assert store.get_alert(standup).status == AlertStatus.DONE
    assert store.next_timer_due() is None

    # The timer's run, started late by a slow Prefect server, delivers nothing more.
    with freeze_time(DUE + timedelta(seconds=70)):
        assert run_delivers(standup) == [message.message_id]
    assert len(alerts_of("analyst-1")) == 1
    assert len(store.firings(TEAM, alert_id=standup)) == 1


def test_a_run_that_came_first_leaves_the_clock_nothing_to_do(db_url: str, home: Path) -> None:
    research_team()
    standup = timer()
    with freeze_time(DUE):
        [message_id] = run_delivers(standup)
        assert fire_due_timers() == []
    assert [m.message_id for m in alerts_of("analyst-1")] == [message_id]


def test_the_clock_leaves_timers_being_created_cancelled_or_not_due_alone(
    db_url: str, home: Path
) -> None:
    research_team()
    creating = timer("creating", run=None)  # its Prefect run is not there yet
    cancelled = timer("cancelled", run="run-2")
    store.set_status(cancelled, AlertStatus.CANCELLED)
    later = timer("later", due=DUE + timedelta(hours=1), run="run-3")
    with freeze_time(DUE + timedelta(minutes=5)):
        assert fire_due_timers() == []
        assert store.next_timer_due() == DUE + timedelta(hours=1)
    assert alerts_of("analyst-1") == []
    assert store.get_alert(later).status == AlertStatus.ACTIVE
    assert store.get_alert(creating).status == AlertStatus.ACTIVE
    # A cancelled timer's run (it was started before the cancel reached Prefect) delivers
    # nothing either.
    assert run_delivers(cancelled) == []
    assert alerts_of("analyst-1") == []


def test_a_timer_that_went_off_cannot_be_cancelled_afterwards(db_url: str, home: Path) -> None:
    research_team()
    standup = timer()
    with freeze_time(DUE):
        fire_due_timers()
    only_from = (AlertStatus.ACTIVE, AlertStatus.PAUSED)
    with pytest.raises(AlertError, match=r"alert \d+ \(standup\) is done"):
        store.set_status(standup, AlertStatus.CANCELLED, only_from=only_from)
    assert store.get_alert(standup).status == AlertStatus.DONE


def test_a_timer_the_clock_cannot_deliver_is_left_to_its_run_and_the_others_go_off(
    db_url: str, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    research_team()
    broken = store.create_alert(
        TEAM, "TIMER", "broken", "for analyst-2", recipient="analyst-2", fire_at=DUE
    ).id
    store.set_prefect_ids(broken, flow_run_id="run-2")
    fine = timer("fine")
    with db.session_scope() as s:  # analyst-2 left the team after its timer was set
        s.delete(get_member(TEAM, "analyst-2", session=s))
    with freeze_time(DUE), caplog.at_level(logging.WARNING, "teamflow.alerts"):
        assert fire_due_timers() == [fine]
        assert fire_due_timers() == []  # the broken one is not tried again at every tick
    # Its own logger's records only: a Prefect client of an earlier test in this process
    # may still log (its events worker), and caplog hears every logger.
    [warning] = [r for r in caplog.records if r.name == "teamflow.alerts"]
    assert f"timer {broken} (broken)" in warning.getMessage()
    assert "analyst-2" in warning.getMessage()
    assert store.get_alert(broken).status == AlertStatus.ACTIVE  # its run still tries
    assert [m.payload["alert_name"] for m in alerts_of("analyst-1")] == ["fine"]


def test_the_clock_sleeps_until_the_next_timer_or_plan_deadline(db_url: str, home: Path) -> None:
    research_team()
    with freeze_time(DUE - timedelta(minutes=10)):
        approval.request_plan(TEAM, "analyst-1", "## Plan\n1. Go", "plan", timeout=300)
        timer(due=DUE - timedelta(seconds=30))
        # The timer, due in 9.5 min, comes after the plan's deadline (5 min); both are past
        # the longest sleep.
        assert asyncio.run(timers._until_next(poll_s=400)) == (300, True)
        assert asyncio.run(timers._until_next(poll_s=1)) == (1, False)
    with freeze_time(DUE - timedelta(seconds=32)):  # the plan was decided meanwhile: the timer
        [plan] = approval.list_requests(TEAM)
        approval.decide(plan.request_id, approve=True, decider="coordinator")
        assert asyncio.run(timers._until_next(poll_s=60)) == (2, True)
