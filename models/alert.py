"""System alerts: timers, alarms and scheduled events (`001` system_alert), and their firings.

`alerts` holds one row per alert a person set (a TIMER or a SCHEDULED_EVENT) with what it
says, to whom, when it is due or its schedule, and where it lives in Prefect (the timer's
flow run, the deployment schedule). `alert_firings` holds one row per time an alert went
off (or an ALARM was raised): the recipients, the due and fired times, the `system-alert`
flow run and the ids of the messages it delivered. So "did the standup reminder go out,
when, to whom" is `firings(team, alert_id)`.

Store functions take `*, session` (optional): given, they run in the caller's transaction
(the `system-alert` flow records a firing in the transaction that delivers it).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import json_column, rowcount, utc_column, utcnow
from models.db import session_scope
from models.notification import AlertType
from models.team import TeamError, get_member, get_team

__all__ = [
    "MAX_MESSAGE",
    "Alert",
    "AlertError",
    "AlertFiring",
    "AlertStatus",
    "AlertType",
    "check_alert",
    "claim_timer",
    "create_alert",
    "delete_alert",
    "due_timers",
    "firings",
    "get_alert",
    "last_firing",
    "list_alerts",
    "next_timer_due",
    "record_firing",
    "set_prefect_ids",
    "set_status",
]

MAX_MESSAGE = 4000
"""The longest alert message, in characters."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class AlertError(TeamError):
    """A refused alert operation; the message is one line for the user."""


class AlertStatus:
    """What an alert is doing: `active`, `paused`, `cancelled` or `done` (a fired timer)."""

    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    DONE = "done"


class Alert(SQLModel, table=True):
    """An alert teamflow raises: a one-shot timer, a watchdog alarm or a recurring event."""

    __tablename__ = "alerts"
    __table_args__ = (sa.Index("ix_alerts_team_name", "team", "name"),)

    id: int | None = Field(default=None, primary_key=True)
    team: str = Field(max_length=64)
    name: str = Field(max_length=128)
    alert_type: str = Field(max_length=16)
    message: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    recipient: str | None = Field(default=None, max_length=64, description="None: whole team")
    fire_at: Any = Field(default=None, sa_column=utc_column(index=True))
    schedule: dict | None = Field(
        default=None, sa_column=json_column(), description="cron, interval or rrule"
    )
    deployment_id: str | None = Field(default=None, max_length=64)
    flow_run_id: str | None = Field(default=None, max_length=64)
    created_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    last_fired_at: Any = Field(default=None, sa_column=utc_column())
    active: bool = Field(default=True)
    schedule_id: str | None = Field(
        default=None, max_length=64, description="the Prefect deployment schedule"
    )
    status: str = Field(
        default=AlertStatus.ACTIVE,
        max_length=16,
        sa_column_kwargs={"server_default": AlertStatus.ACTIVE},
    )
    status_changed_at: Any = Field(default=None, sa_column=utc_column())

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "team": self.team,
            "name": self.name,
            "type": self.alert_type,
            "message": self.message,
            "to": self.recipient,
            "status": self.status,
            "dueAt": _iso(self.fire_at),
            "schedule": self.schedule,
            "flowRunId": self.flow_run_id,
            "scheduleId": self.schedule_id,
            "createdAt": _iso(self.created_at),
            "lastFiredAt": _iso(self.last_fired_at),
        }


class AlertFiring(SQLModel, table=True):
    """One time an alert went off: who got it, when it was due and when it fired."""

    __tablename__ = "alert_firings"
    __table_args__ = (
        sa.Index("ix_alert_firings_team_alert", "team", "alert_id"),
        # `models.metrics.alert_lateness`: a team's firings in a window, from the index alone.
        sa.Index("ix_alert_firings_metrics", "team", "fired_at", "alert_type", "outcome", "due_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    alert_id: int | None = Field(default=None, description="None: an ad-hoc run or an ALARM")
    team: str = Field(max_length=64)
    alert_type: str = Field(max_length=16)
    name: str = Field(max_length=128)
    message: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    recipients: list = Field(default_factory=list, sa_column=json_column(nullable=False))
    due_at: Any = Field(default=None, sa_column=utc_column())
    fired_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    flow_run_id: str | None = Field(default=None, max_length=64)
    message_ids: list = Field(default_factory=list, sa_column=json_column(nullable=False))
    outcome: str = Field(default="delivered", max_length=16, description="delivered or missed")

    def to_json(self) -> dict[str, Any]:
        return {
            "alertId": self.alert_id,
            "team": self.team,
            "type": self.alert_type,
            "name": self.name,
            "message": self.message,
            "recipients": list(self.recipients),
            "dueAt": _iso(self.due_at),
            "firedAt": _iso(self.fired_at),
            "flowRunId": self.flow_run_id,
            "messageIds": list(self.message_ids),
            "outcome": self.outcome,
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def check_alert(
    team: str,
    name: str,
    message: str,
    recipient: str | None = None,
    *,
    session: Session | None = None,
) -> None:
    """Raises `AlertError`/`TeamError` (one line) unless an alert with these may be set."""
    if not _NAME.fullmatch(name or ""):
        raise AlertError(
            f"{name!r} is not an alert name: 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    if not message or not message.strip():
        raise AlertError("the alert message is empty")
    if len(message) > MAX_MESSAGE:
        raise AlertError(f"the alert message is {len(message)} characters; at most {MAX_MESSAGE}")
    with session_scope(session) as s:
        try:
            get_team(team, session=s)
            if recipient is not None:
                get_member(team, recipient, active=True, session=s)
        except ValueError as exc:
            raise AlertError(str(exc)) from None


def create_alert(
    team: str,
    alert_type: AlertType | str,
    name: str,
    message: str,
    *,
    recipient: str | None = None,
    fire_at: datetime | None = None,
    schedule: dict[str, Any] | None = None,
    session: Session | None = None,
) -> Alert:
    """Records a new alert (checked first); returns it with its id."""
    kind = AlertType(alert_type).value
    with session_scope(session) as s:
        check_alert(team, name, message, recipient, session=s)
        alert = Alert(
            team=team, name=name, alert_type=kind, message=message, recipient=recipient,
            fire_at=fire_at, schedule=schedule,
        )  # fmt: skip
        s.add(alert)
        s.flush()
        s.refresh(alert)
        return alert


def get_alert(alert_id: int, *, team: str | None = None, session: Session | None = None) -> Alert:
    """The alert with id `alert_id` (of `team`, if given); `AlertError` if there is none."""
    with session_scope(session) as s:
        alert = s.get(Alert, alert_id)
        if alert is None or (team is not None and alert.team != team):
            where = f"team {team!r} has" if team else "there is"
            raise AlertError(f"{where} no alert with id {alert_id}")
        return alert


def list_alerts(
    team: str, *, include_ended: bool = True, session: Session | None = None
) -> list[Alert]:
    """A team's alerts, oldest first (`include_ended=False`: without cancelled and done)."""
    with session_scope(session) as s:
        get_team(team, session=s)
        query = select(Alert).where(Alert.team == team)
        if not include_ended:
            query = query.where(col(Alert.status).in_([AlertStatus.ACTIVE, AlertStatus.PAUSED]))
        return list(s.exec(query.order_by(col(Alert.id))).all())


def set_prefect_ids(
    alert_id: int,
    *,
    flow_run_id: str | None = None,
    schedule_id: str | None = None,
    deployment_id: str | None = None,
    session: Session | None = None,
) -> Alert:
    """Records where the alert lives in Prefect: its timer run or its deployment schedule."""
    with session_scope(session) as s:
        alert = get_alert(alert_id, session=s)
        if flow_run_id is not None:
            alert.flow_run_id = flow_run_id
        if schedule_id is not None:
            alert.schedule_id = schedule_id
        if deployment_id is not None:
            alert.deployment_id = deployment_id
        s.add(alert)
        s.flush()
        return alert


def set_status(
    alert_id: int,
    status: str,
    *,
    only_from: tuple[str, ...] | None = None,
    session: Session | None = None,
) -> Alert:
    """Pauses, resumes (`active`), cancels or ends (`done`) an alert; records when.

    `only_from`: the statuses it may change from; another (a timer that went off meanwhile)
    is refused, and nothing changes."""
    known = {AlertStatus.ACTIVE, AlertStatus.PAUSED, AlertStatus.CANCELLED, AlertStatus.DONE}
    if status not in known:
        raise AlertError(f"unknown alert status {status!r}")
    with session_scope(session) as s:
        alert = get_alert(alert_id, session=s)
        s.refresh(alert, with_for_update=True)  # a row lock on PostgreSQL (the clock's race)
        if only_from is not None and alert.status not in only_from:
            raise AlertError(f"alert {alert_id} ({alert.name}) is {alert.status}")
        alert.status = status
        alert.active = status == AlertStatus.ACTIVE
        alert.status_changed_at = utcnow()
        s.add(alert)
        s.flush()
        return alert


def _armed_timers() -> Any:
    # A timer whose Prefect run exists (its creation finished) and that has not gone off.
    return select(Alert).where(
        Alert.alert_type == AlertType.TIMER.value,
        Alert.status == AlertStatus.ACTIVE,
        col(Alert.flow_run_id).is_not(None),
    )


def due_timers(*, now: datetime | None = None, session: Session | None = None) -> list[Alert]:
    """The timers due at `now` (default: now) that have not gone off, earliest first."""
    with session_scope(session) as s:
        query = _armed_timers().where(Alert.fire_at <= (now or utcnow()))
        return list(s.exec(query.order_by(Alert.fire_at, Alert.id)).all())


def next_timer_due(*, session: Session | None = None) -> datetime | None:
    """When the next timer that has not gone off is due; None when there is none."""
    with session_scope(session) as s:
        first = s.exec(_armed_timers().order_by(Alert.fire_at).limit(1)).first()
        return first.fire_at if first is not None else None


def claim_timer(alert_id: int, *, session: Session) -> bool:
    """Marks an active TIMER done, in the caller's transaction, if nobody did yet.

    One conditional update: of teamflow's clocks (one per worker) and the timer's own run,
    exactly one gets True and delivers; the others see it fired (or was cancelled).
    """
    done = session.execute(
        sa.update(Alert)
        .where(
            col(Alert.id) == alert_id,
            col(Alert.alert_type) == AlertType.TIMER.value,
            col(Alert.status) == AlertStatus.ACTIVE,
        )
        .values(status=AlertStatus.DONE, active=False, status_changed_at=utcnow())
    )
    return rowcount(done) == 1


def delete_alert(alert_id: int, *, session: Session | None = None) -> None:
    """Removes an alert that never reached Prefect (its creation failed half-way)."""
    with session_scope(session) as s:
        alert = s.get(Alert, alert_id)
        if alert is not None:
            s.delete(alert)
            s.flush()


def record_firing(
    team: str,
    alert_type: AlertType | str,
    name: str,
    message: str,
    *,
    alert_id: int | None,
    recipients: list[str],
    message_ids: list[str],
    flow_run_id: str | None,
    due_at: datetime | None = None,
    fired_at: datetime | None = None,
    outcome: str = "delivered",
    session: Session | None = None,
) -> AlertFiring:
    """Records one firing; a fired TIMER is `done` and its alert's `last_fired_at` is set."""
    with session_scope(session) as s:
        firing = AlertFiring(
            alert_id=alert_id, team=team, alert_type=AlertType(alert_type).value, name=name,
            message=message, recipients=list(recipients), message_ids=list(message_ids),
            flow_run_id=flow_run_id, due_at=due_at, fired_at=fired_at or utcnow(),
            outcome=outcome,
        )  # fmt: skip
        s.add(firing)
        if alert_id is not None:
            alert = s.get(Alert, alert_id)
            if alert is None or alert.team != team:
                raise AlertError(f"team {team!r} has no alert with id {alert_id}")
            if outcome == "delivered":
                alert.last_fired_at = firing.fired_at
            if alert.alert_type == AlertType.TIMER.value and alert.status == AlertStatus.ACTIVE:
                alert.status = AlertStatus.DONE
                alert.active = False
                alert.status_changed_at = firing.fired_at
            s.add(alert)
        s.flush()
        return firing


def firings(
    team: str,
    *,
    alert_id: int | None = None,
    limit: int | None = None,
    session: Session | None = None,
) -> list[AlertFiring]:
    """A team's firings (of one alert, if given), newest first."""
    with session_scope(session) as s:
        query = select(AlertFiring).where(AlertFiring.team == team)
        if alert_id is not None:
            query = query.where(AlertFiring.alert_id == alert_id)
        query = query.order_by(col(AlertFiring.fired_at).desc(), col(AlertFiring.id).desc())
        if limit is not None:
            query = query.limit(limit)
        return list(s.exec(query).all())


def last_firing(alert_id: int, *, session: Session | None = None) -> AlertFiring | None:
    """The alert's most recent firing, or None."""
    with session_scope(session) as s:
        alert = get_alert(alert_id, session=s)
        found = firings(alert.team, alert_id=alert_id, limit=1, session=s)
        return found[0] if found else None
