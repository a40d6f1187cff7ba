"""The `system-alert` flow: a timer, alarm or scheduled event reaches a team's inboxes.

One run delivers one `001` `system_alert` notification (`alert_type`, `alert_name`,
`message`) from `system` to one member or, without a member, to every active member of
the team. TIMER alerts are one-shot runs scheduled for a time, SCHEDULED_EVENT alerts are
runs of a deployment schedule, ALARMs are raised by the watchdog; all three are this flow.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from prefect import flow, get_client, task
from prefect.runtime import flow_run

from models.alert import Alert
from models.base import utcnow
from models.db import session_scope
from models.inbox import MessageType, send
from models.notification import AlertType, SystemAlertPayload
from models.team import TeamError, list_members

DEPLOYMENT = "system-alert/system-alert"
"""The deployment that runs this flow (`prefect.yaml`), as `flow/deployment`."""


def run_tags(team: str, alert_type: AlertType | str) -> list[str]:
    """The tags a run carries in the Prefect UI: the team and the kind of alert."""
    return [f"team:{team}", AlertType(alert_type).value]


def _deliver(
    team: str, member: str | None, payload: SystemAlertPayload, alert_id: int | None
) -> list[str]:
    # One transaction: every recipient gets the alert and the alert row records it, or
    # nothing is written and a retry delivers it once.
    with session_scope() as session:
        if member is None:
            recipients = [m.name for m in list_members(team, active=True, session=session)]
        else:
            recipients = [member]
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
        if alert_id is not None:
            alert = session.get(Alert, alert_id)
            if alert is None or alert.team != team:
                raise TeamError(f"team {team!r} has no alert with id {alert_id}")
            alert.last_fired_at = utcnow()
            session.add(alert)
        return [row.message_id for row in rows]


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
    team: str, member: str | None, payload: SystemAlertPayload, alert_id: int | None
) -> list[str]:
    """Writes the notification into the recipients' inboxes; returns the message ids."""
    return await asyncio.to_thread(_deliver, team, member, payload, alert_id)


async def _tag_this_run(tags: list[str]) -> None:
    # Scheduled runs get only the deployment's tags; the UI should still show which team
    # and which kind of alert a run is about.
    run_id = flow_run.get_id()
    if run_id is None or set(tags) <= set(flow_run.get_tags()):
        return
    async with get_client() as client:
        await client.update_flow_run(run_id, tags=sorted(set(flow_run.get_tags()) | set(tags)))


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
        alert_id: The `alerts` row this run fires, if any; its `last_fired_at` is set.

    Returns:
        The ids of the delivered messages, one per recipient.
    """
    payload = SystemAlertPayload(alert_type=alert_type, alert_name=alert_name, message=message)
    await _tag_this_run(run_tags(team, payload.alert_type))
    return await deliver_alert(team, member, payload, alert_id)
