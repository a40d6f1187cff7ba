"""What each member is doing: its `004` `task-status.json`, and the files beside it.

`task_status` holds each member's `004` task status (one row per team and member);
`set_member_status` changes it and, after the commit, writes it to
`tasks/{team}/{member}/task-status.json`, where the member's `output.log` and `artifacts/`
are too (`member_files`, `append_output`).
"""

from __future__ import annotations

import os
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Self

import sqlalchemy as sa
from pydantic import ConfigDict, Field, StrictFloat, StrictInt
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel

from models import db, mirror
from models.base import (
    JsTimestamp,
    SnakeWireModel,
    WireModel,
    check_member_name,
    check_team_name,
    json_column,
    utc_column,
    utcnow,
)
from models.db import session_scope
from models.mirror import mark
from models.team import get_member
from models.wire_support import explicit_nulls, wire_values

# --- 004 task-status.json ------------------------------------------------------------------


class ExecutionStatus(StrEnum):
    """`004` TaskStatus `status`: what a member's task execution is doing."""

    RUNNING = "running"
    IDLE = "idle"
    COMPLETE = "complete"
    ERROR = "error"


JS_MAX_SAFE_INTEGER = 2**53 - 1

Count = Annotated[StrictInt, Field(ge=0, le=JS_MAX_SAFE_INTEGER)]
"""A JSON integer, 0 or more (and exact in JavaScript)."""


class TaskStatusMetrics(SnakeWireModel):
    """`004` TaskStatus `metrics` (its keys are snake_case, unlike the rest of the file)."""

    # 004 files are not teamflow's own: unknown keys are kept and written back.
    model_config = ConfigDict(extra="allow")

    tokens_used: Count
    tasks_completed: Count
    avg_response_time: (
        Annotated[StrictInt, Field(ge=0)] | Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)]
    ) = Field(description="Average response time; an integer stays an integer")


class TaskStatus(WireModel):
    """`004` `task-status.json`: one member's task execution status and metrics."""

    # 004 files are not teamflow's own: unknown keys are kept and written back.
    model_config = ConfigDict(extra="allow")

    agent_id: str = Field(min_length=1, max_length=255, description='"{name}@{team}"')
    status: ExecutionStatus
    started_at: JsTimestamp
    last_active_at: JsTimestamp
    completed_at: JsTimestamp | None = None
    error_message: str | None = None
    metrics: TaskStatusMetrics | None = None


class TaskStatusRow(SQLModel, table=True):
    """A member's `004` task status: one row per team and member."""

    __tablename__ = "task_status"

    team: str = SQLField(sa_column=sa.Column(sa.String(64), primary_key=True))
    member: str = SQLField(sa_column=sa.Column(sa.String(64), primary_key=True))
    agent_id: str = SQLField(sa_column=sa.Column(sa.String(255), nullable=False))
    status: str = SQLField(sa_column=sa.Column(sa.String(16), nullable=False, index=True))
    started_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    last_active_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    completed_at: datetime | None = SQLField(default=None, sa_column=utc_column())
    error_message: str | None = SQLField(default=None, sa_column=sa.Column(sa.Text))
    tokens_used: int | None = SQLField(default=None, sa_column=sa.Column(sa.BigInteger))
    tasks_completed: int | None = SQLField(default=None, sa_column=sa.Column(sa.BigInteger))
    avg_response_time: float | None = SQLField(default=None, sa_column=sa.Column(sa.Float))
    metrics_extra: dict | None = SQLField(
        default=None, sa_column=json_column(), description="Unknown keys of `metrics`"
    )
    extra: dict = SQLField(
        default_factory=dict,
        sa_column=json_column(nullable=False),
        description="Unknown top-level keys",
    )
    explicit_nulls: list | None = SQLField(default=None, sa_column=json_column())

    @classmethod
    def from_wire(
        cls, wire: TaskStatus, *, team: str | None = None, member: str | None = None
    ) -> Self:
        """A row holding `wire`; team and member default to those of its `{name}@{team}` id."""
        if team is None or member is None:
            name, at, team_name = wire.agent_id.rpartition("@")
            if not at:
                raise ValueError(
                    f"agentId {wire.agent_id!r} is not '{{name}}@{{team}}': give team and member"
                )
            team = team if team is not None else team_name
            member = member if member is not None else name
        metrics = wire.metrics
        return cls(
            team=check_team_name(team),
            member=check_member_name(member),
            agent_id=wire.agent_id,
            status=wire.status.value,
            started_at=wire.started_at,
            last_active_at=wire.last_active_at,
            completed_at=wire.completed_at,
            error_message=wire.error_message,
            tokens_used=metrics.tokens_used if metrics else None,
            tasks_completed=metrics.tasks_completed if metrics else None,
            avg_response_time=metrics.avg_response_time if metrics else None,
            metrics_extra=(dict(metrics.model_extra or {}) or None) if metrics else None,
            extra=dict(wire.model_extra or {}),
            explicit_nulls=explicit_nulls(wire),
        )

    def to_wire(self) -> TaskStatus:
        """The row as the member's `004` `task-status.json`."""
        metrics: dict[str, Any] | None = None
        if self.tokens_used is not None:
            average = self.avg_response_time
            # A float column gives 120.0 for 120; JSON written by JavaScript has no 120.0.
            if isinstance(average, float) and average.is_integer():
                average = int(average)
            metrics = {
                "tokens_used": self.tokens_used,
                "tasks_completed": self.tasks_completed,
                "avg_response_time": average,
                **(self.metrics_extra or {}),
            }
        values = {name: getattr(self, name) for name in _STATUS_COLUMNS}
        data = wire_values(TaskStatus, {**values, "metrics": metrics}, self.explicit_nulls)
        data.update(self.extra or {})
        return TaskStatus.model_validate(data)


_STATUS_COLUMNS = (
    "agent_id",
    "status",
    "started_at",
    "last_active_at",
    "completed_at",
    "error_message",
)


def set_member_status(
    team: str,
    member: str,
    *,
    status: ExecutionStatus,
    error_message: str | None = None,
    tokens: int = 0,
    completed: bool = False,
    response_time: float | None = None,
    session: Session | None = None,
) -> TaskStatusRow:
    """Updates a member's `004` task status (and `task-status.json` on commit).

    `tokens` are added to `tokens_used`; `completed` counts one more task done;
    `response_time` (seconds) joins the running average.
    """
    with session_scope(session) as s:
        agent = get_member(team, member, session=s).agent_id
        now = utcnow()
        # Locked for this transaction: runs of the member's tasks on other workers update
        # the same row, and no count may be lost (SQLite: BEGIN IMMEDIATE locks already).
        row = s.get(TaskStatusRow, (team, member), with_for_update=True)
        if row is None:
            try:
                with s.begin_nested():
                    s.add(
                        TaskStatusRow(
                            team=team, member=member, agent_id=agent, status=status.value,
                            started_at=now, last_active_at=now, tokens_used=0,
                            tasks_completed=0, avg_response_time=0,
                        )
                    )  # fmt: skip
            except sa.exc.IntegrityError:
                pass  # another worker made it first
            row = s.get(TaskStatusRow, (team, member), with_for_update=True, populate_existing=True)
            assert row is not None, "inserted above, by this session or another worker"
        if status is ExecutionStatus.RUNNING and row.status != ExecutionStatus.RUNNING.value:
            row.started_at = now
            row.completed_at = None
            row.error_message = None
        row.status = status.value
        row.last_active_at = now
        row.tokens_used = (row.tokens_used or 0) + tokens
        if completed:
            row.tasks_completed = (row.tasks_completed or 0) + 1
        if status in (ExecutionStatus.COMPLETE, ExecutionStatus.ERROR):
            row.completed_at = now
        if error_message is not None:
            row.error_message = error_message
        if response_time is not None:
            done = max(row.tasks_completed or 0, 1)
            previous = row.avg_response_time or 0.0
            row.avg_response_time = round(previous + (response_time - previous) / done, 3)
        s.add(row)
        s.flush()
        mark("task_status", (team, member), session=s)
        return row


def member_files(team: str, member: str) -> Path:
    """`tasks/{team}/{member}/`, with `artifacts/` in it, created 0700."""
    folder = mirror.member_tasks_dir(team, member)
    mirror.ensure_dir(folder / "artifacts")
    return folder


def append_output(team: str, member: str, text: str) -> None:
    """Appends a line to the member's `output.log` (stdout/stderr capture)."""
    path = member_files(team, member) / "output.log"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def _write_task_status(team: str, member: str) -> None:

    # Read under the lock: two writers that read first could write in the other order, and
    # the file would keep the older row. Each commits before it writes, so the last to hold
    # the lock reads the newest row.
    folder = member_files(team, member)
    with mirror.locked(folder / ".lock"), Session(db.engine()) as s:
        row = s.get(TaskStatusRow, (team, member))
        if row is None:
            return
        mirror.write_atomic(folder / "task-status.json", mirror.dump_json(row.to_wire().to_wire()))


def _register() -> None:

    mirror.register("task_status", _write_task_status)


_register()
