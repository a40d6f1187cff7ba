"""The `system-alert` flow, run with Prefect's test harness against a real teamflow database."""

from __future__ import annotations

import asyncio
from pathlib import Path

from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from sqlmodel import Session

from flows.system_alert import system_alert
from models import alert as alert_store
from models import db, inbox, inbox_table
from models import team as teams
from models.alert import Alert
from models.notification import SystemAlertNotification


def alert(**parameters):
    """Runs the flow; returns its final state."""
    return asyncio.run(system_alert(**parameters, return_state=True))


def alerts_of(member: str) -> list[inbox_table.InboxMessageRow]:
    """The system alerts in a member's inbox (its initial system message left out)."""
    return [row for row in inbox.messages(TEAM, member) if row.type == "system_alert"]


def run_tags(state) -> list[str]:
    async def read() -> list[str]:
        async with get_client() as client:
            return (await client.read_flow_run(state.state_details.flow_run_id)).tags

    return asyncio.run(read())


def test_an_alert_without_member_reaches_every_active_member(
    prefect_api: str, db_url: str, home: Path
) -> None:
    research_team(analysts=3)
    teams.set_member(TEAM, "analyst-3", is_active=False)

    state = alert(
        team=TEAM, alert_type="SCHEDULED_EVENT", alert_name="daily_sync",
        message="Time for daily sync",
    )  # fmt: skip

    assert state.is_completed()
    ids = state.result()
    alerted = {}
    for member in ("coordinator", "analyst-1", "analyst-2"):
        [row] = alerts_of(member)
        alerted[row.message_id] = member
        notification = row.to_notification()
        assert isinstance(notification, SystemAlertNotification)
        assert notification.source == "system"
        assert notification.recipient_agent_id == f"{member}@{TEAM}"
        assert notification.payload.model_dump(mode="json") == {
            "alert_type": "SCHEDULED_EVENT",
            "alert_name": "daily_sync",
            "message": "Time for daily sync",
        }
        assert row.entry_dict()["from"] == "system"
        assert row.entry_dict()["text"] == "Time for daily sync"
    assert sorted(ids) == sorted(alerted)
    assert alerts_of("analyst-3") == []
    assert {"team:research-team", "SCHEDULED_EVENT"} <= set(run_tags(state))


def test_an_alert_for_one_member_records_when_it_fired(
    prefect_api: str, db_url: str, home: Path
) -> None:
    research_team()
    with Session(db.engine(db_url), expire_on_commit=False) as session:
        row = Alert(team=TEAM, name="standup", alert_type="TIMER", message="Standup now")
        session.add(row)
        session.commit()
    assert row.last_fired_at is None

    state = alert(
        team=TEAM, alert_type="TIMER", alert_name="standup", message="Standup now",
        member="analyst-2", alert_id=row.id,
    )  # fmt: skip

    assert state.is_completed()
    [message_id] = state.result()
    [received] = alerts_of("analyst-2")
    assert received.message_id == message_id
    assert received.payload["alert_type"] == "TIMER"
    assert alerts_of("analyst-1") == []
    with Session(db.engine(db_url)) as session:
        assert session.get(Alert, row.id).last_fired_at is not None
    # The firing says when, to whom, which run, which messages.
    [firing] = alert_store.firings(TEAM, alert_id=row.id)
    assert firing.recipients == ["analyst-2"]
    assert firing.message_ids == [message_id]
    assert firing.flow_run_id == str(state.state_details.flow_run_id)
    assert firing.outcome == "delivered"


def test_an_alert_for_an_unknown_member_fails_and_delivers_nothing(
    prefect_api: str, db_url: str, home: Path
) -> None:
    research_team()

    state = alert(team=TEAM, alert_type="ALARM", alert_name="stale", message="x", member="nobody")

    assert state.is_failed()
    assert "nobody" in str(state.message) + repr(state.result(raise_on_failure=False))
    for member in ("coordinator", "analyst-1", "analyst-2"):
        assert alerts_of(member) == []


def test_an_unknown_alert_type_is_refused(prefect_api: str, db_url: str, home: Path) -> None:
    research_team()

    state = alert(team=TEAM, alert_type="REMINDER", alert_name="x", message="x")

    assert not state.is_completed()
    assert alerts_of("analyst-1") == []
