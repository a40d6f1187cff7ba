"""The `system-alert` flow: a timer, alarm or scheduled event reaches a team's inboxes.

One run delivers one `001` `system_alert` notification (`alert_type`, `alert_name`,
`message`) from `system` to one member or, without a member, to every active member of
the team. TIMER alerts are one-shot runs scheduled for a time, SCHEDULED_EVENT alerts are
runs of a deployment schedule, ALARMs are raised by the watchdog; all three are this flow.

Every run records its firing (`models.alert.record_firing`: recipients, due and fired
times, this run's id, the delivered message ids) in the transaction that delivers it.
Late runs follow `models.schedule`: a late TIMER fires once and says how late; a
SCHEDULED_EVENT run more than `MISSED_GRACE` late is recorded as missed and delivers nothing.

A TIMER does not wait for Prefect: teamflow's clock in every worker (`flows.timers`)
delivers it at its due time (`fire_due_timers`), even while Prefect's server is slow to
start the run (on SQLite it can stall for a minute under load). The timer's run still runs
and completes, and says the clock delivered it; it delivers it itself only if no clock
did. One conditional update (`models.alert.claim_timer`) decides which of them delivers, in
the delivering transaction, so a timer goes off exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from prefect import flow, get_client, get_run_logger, task
from prefect.runtime import flow_run

from flows.alerts import run_tags
from models import alert as store
from models import schedule
from models.alert import record_firing
from models.base import utcnow
from models.db import session_scope
from models.inbox import send
from models.inbox_message import MessageType
from models.notification import AlertType, SystemAlertPayload
from models.team import list_members


def _deliver(
    team: str,
    member: str | None,
    payload: SystemAlertPayload,
    alert_id: int | None,
    run_id: str | None = None,
    due_at: datetime | None = None,
) -> list[str]:
    # One transaction: every recipient gets the alert and the firing is recorded, or
    # nothing is written and a retry delivers it once.
    fired_at = utcnow()
    with session_scope() as session:
        if (
            payload.alert_type == AlertType.TIMER
            and alert_id is not None
            and not store.claim_timer(alert_id, session=session)
        ):
            return _gone_off(alert_id, session)
        if member is None:
            recipients = [m.name for m in list_members(team, active=True, session=session)]
        else:
            recipients = [member]
        firing: dict[str, Any] = {
            "alert_id": alert_id, "recipients": recipients, "flow_run_id": run_id,
            "due_at": due_at, "fired_at": fired_at, "session": session,
        }  # fmt: skip
        if schedule.missed(payload.alert_type.value, due_at, fired_at):
            record_firing(
                team, payload.alert_type, payload.alert_name, payload.message or "",
                message_ids=[], outcome="missed", **firing,
            )  # fmt: skip
            return []
        if payload.alert_type == AlertType.TIMER:
            note = schedule.late_note(due_at, fired_at)
            if note:
                payload = payload.model_copy(update={"message": f"{payload.message} {note}"})
        rows = [
            send(
                team,
                to=name,
                sender="system",
                text=payload.message or payload.alert_name,
                summary=f"{payload.alert_type.value.lower()}: {payload.alert_name}",
                type=MessageType.SYSTEM_ALERT.value,
                payload=payload.model_dump(mode="json"),
                session=session,
            )
            for name in recipients
        ]
        ids = [row.message_id for row in rows]
        record_firing(
            team, payload.alert_type, payload.alert_name, payload.message or "",
            message_ids=ids, **firing,
        )  # fmt: skip
        return ids


def _gone_off(alert_id: int, session: Any) -> list[str]:
    """The message ids of a timer that went off already (none if it was cancelled)."""
    firing = store.last_firing(alert_id, session=session)
    status = store.get_alert(alert_id, session=session).status
    _say(
        f"timer {alert_id} went off at {firing.fired_at:%H:%M:%S.%f} UTC (teamflow's clock); "
        "nothing more to deliver"
        if firing is not None
        else f"timer {alert_id} is {status}: nothing to deliver"
    )
    return list(firing.message_ids) if firing is not None else []


def _say(line: str) -> None:
    try:
        get_run_logger().info(line)
    except Exception:  # not in a run: teamflow's clock
        logger.info(line)


logger = logging.getLogger("teamflow.alerts")
RETRY_FAILED_S = 60.0
"""How long teamflow's clock leaves a timer it could not deliver (its team was deleted, the
database refused) before it tries again; the timer's own run tries meanwhile."""
_failed: dict[int, float] = {}


def fire_due_timers(*, now: datetime | None = None) -> list[int]:
    """teamflow's clock: delivers every due TIMER that has not gone off; returns their ids."""
    fired = []
    for alert in store.due_timers(now=now):
        assert alert.id is not None, "a stored alert has its id"
        if time.monotonic() - _failed.get(alert.id, -RETRY_FAILED_S) < RETRY_FAILED_S:
            continue
        payload = SystemAlertPayload(
            alert_type=AlertType.TIMER, alert_name=alert.name, message=alert.message
        )
        try:
            if _deliver(
                alert.team, alert.recipient, payload, alert.id, alert.flow_run_id, alert.fire_at
            ):
                fired.append(alert.id)
        except Exception as exc:
            _failed[alert.id] = time.monotonic()
            logger.warning("teamflow clock: timer %s (%s): %s", alert.id, alert.name, exc)
    return fired


def _database_hiccup(_task: Any, _task_run: Any, state: Any) -> bool:
    """Retry a delivery only when the database failed, never when the store refused it."""
    # Prefect hands the condition a Failed state whose data is the exception raised.
    return isinstance(state.data, sa.exc.OperationalError)


@task(
    name="deliver-system-alert",
    task_run_name="deliver-{payload.alert_name}",
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=_database_hiccup,
)
async def deliver_alert(
    team: str,
    member: str | None,
    payload: SystemAlertPayload,
    alert_id: int | None,
    run_id: str | None = None,
    due_at: datetime | None = None,
) -> list[str]:
    """Writes the notification into the recipients' inboxes and records the firing;
    returns the message ids."""
    return await asyncio.to_thread(_deliver, team, member, payload, alert_id, run_id, due_at)


async def _tag_this_run(tags: list[str]) -> None:
    # Scheduled runs get only the deployment's tags; the UI should still show which team
    # and which kind of alert a run is about.
    run_id = flow_run.get_id()
    if run_id is None or set(tags) <= set(flow_run.get_tags()):
        return
    async with get_client() as client:
        await client.update_flow_run(
            UUID(run_id), tags=sorted(set(flow_run.get_tags()) | set(tags))
        )


@flow(
    name="system-alert",
    flow_run_name="{alert_type}-{alert_name}",
    description="Delivers a system alert (timer, alarm or scheduled event) to a team.",
    retries=0,
)
async def system_alert(
    team: str,
    alert_type: AlertType,
    alert_name: str,
    message: str,
    member: str | None = None,
    alert_id: int | None = None,
) -> list[str]:
    """Delivers a `001` `system_alert` notification from `system`.

    Args:
        team: The team whose inboxes receive the alert.
        alert_type: TIMER, ALARM or SCHEDULED_EVENT.
        alert_name: The alert's name, e.g. `daily_sync`.
        message: What the recipients read.
        member: The one member to alert; without it, every active member of the team.
        alert_id: The `alerts` row this run fires, if any; its firing is recorded either way.

    Returns:
        The ids of the delivered messages, one per recipient.
    """
    payload = SystemAlertPayload(alert_type=alert_type, alert_name=alert_name, message=message)
    await _tag_this_run(run_tags(team, payload.alert_type))
    run_id = flow_run.get_id()
    due_at = _due_at() if run_id else None
    delivered = await deliver_alert(team, member, payload, alert_id, run_id, due_at)
    if run_id is not None:
        await _publish_team_view(team, f"{payload.alert_type.value.lower()} alert {alert_name!r}")
    return delivered


async def _publish_team_view(team: str, by: str) -> None:
    """The team's artifact and members' table, after the alert is delivered (so they add
    nothing to its lateness); a failure here is logged, never the alert's."""
    from flows import team_view

    try:
        await team_view.publish(team, by=by)
    except Exception as exc:
        get_run_logger().warning("Team %s artifact not updated: %s", team, exc)


def _due_at() -> datetime | None:
    # The time the run was scheduled for: a timer's due time, a schedule's slot.
    value = flow_run.get_scheduled_start_time()
    if value is None:
        return None
    return datetime.fromisoformat(value.isoformat()).astimezone(UTC)
