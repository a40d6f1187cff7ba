"""System alerts: timers, alarms and scheduled events (`001` system_alert)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from models.base import json_column, utc_column, utcnow
from models.notification import AlertType

__all__ = ["Alert", "AlertType"]


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
