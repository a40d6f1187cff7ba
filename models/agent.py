"""Agents: how an agent is configured and what it did (`000`), and what state it is in.

- `000` `AgentConfiguration` and `ExperienceLog`, and their tables `agent_configs`,
  `experience_logs`.
- The `001` `agent_state` table (the seed's name, columns and indexes, plus
  `agent_state.team`), its history, and `change_agent_status`.

What a runtime is given and keeps is `models.conversation`; what it answers for a step,
`models.chimera_response`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Self

import sqlalchemy as sa
from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col

from models.base import SnakeWireModel, Timestamp, json_column, table_of, utc_column, utcnow
from models.knowledge import ElmoStatus
from models.tool import Identifier

# --- 000 Agent Configuration and Experience Log --------------------------------------------


class AgentConfiguration(SnakeWireModel):
    """`000` Agent Configuration: who an agent is, what it runs in, what it may use."""

    agent_id: Identifier
    name: str = Field(min_length=1, max_length=255)
    description: str
    image: str = Field(description="The image the agent runs in")
    resources: list[str] = Field(description="Ids of `000` resources the agent may use")
    tools: list[str] = Field(description="Ids of `000` tool definitions the agent may call")
    created_at: Timestamp
    updated_at: Timestamp
    status: ElmoStatus
    current_task: str | None = Field(description="The task it works on; null when it has none")


class ExperienceStatus(StrEnum):
    """How a task execution ended (`000` Experience Log)."""

    SUCCESS = "success"
    FAILURE = "failure"


class ExperienceLog(SnakeWireModel):
    """`000` Experience Log: one agent's execution of one task, and how it went."""

    log_id: Identifier
    agent_id: Identifier
    task_id: Identifier
    start_time: Timestamp
    end_time: Timestamp
    status: ExperienceStatus
    feedback_id: Identifier = Field(description="The `000` Feedback (execution_id) it produced")
    created_at: Timestamp
    updated_at: Timestamp

    @field_validator("end_time")
    @classmethod
    def _ends_after_start(cls, value: datetime, info: ValidationInfo) -> datetime:
        start = info.data.get("start_time")
        if start is not None and value < start:
            raise ValueError("end_time is before start_time")
        return value


class AgentStateStatus(StrEnum):
    """`agent_state.status` (`001`)."""

    IDLE = "idle"
    THINKING = "thinking"
    EXECUTING_TOOLS = "executing_tools"
    OFFLINE = "offline"


AGENT_AVAILABLE = frozenset({AgentStateStatus.IDLE})
"""Can take work now."""
AGENT_BUSY = frozenset({AgentStateStatus.THINKING, AgentStateStatus.EXECUTING_TOOLS})
"""Working on a step."""
AGENT_GONE = frozenset({AgentStateStatus.OFFLINE})
"""Not running."""


class AgentStateRow(SQLModel, table=True):
    """An agent's live state (`001` `agent_state`), plus the team it belongs to."""

    __tablename__ = "agent_state"

    agent_id: str = SQLField(sa_column=sa.Column(sa.String(255), primary_key=True))
    status: str = SQLField(
        default=AgentStateStatus.IDLE.value,
        sa_column=sa.Column(sa.String(50), server_default=AgentStateStatus.IDLE.value),
        description="idle|thinking|executing_tools|offline (AgentStateStatus)",
    )
    processing_state: str = SQLField(
        default="idle", sa_column=sa.Column(sa.String(50), server_default="idle")
    )
    last_heartbeat: datetime | None = SQLField(
        default_factory=utcnow, sa_column=utc_column(server_default=sa.func.current_timestamp())
    )
    created_at: datetime | None = SQLField(
        default_factory=utcnow, sa_column=utc_column(server_default=sa.func.current_timestamp())
    )
    updated_at: datetime | None = SQLField(
        default_factory=utcnow,
        sa_column=utc_column(server_default=sa.func.current_timestamp(), onupdate=utcnow),
    )
    # teamflow's: the `004` team the agent is a member of, if any.
    team: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(64), index=True))


class AgentStateHistoryRow(SQLModel, table=True):
    """One stretch of a member's `agent_state` status: from `changed_at` (when the status
    became this) to `ended_at` (when it changed again; None while it is in force).

    Written only when the status changes (`change_agent_status`), in the transaction that
    changes `agent_state`: heartbeats that repeat the status add nothing. Closing the stretch
    when the next begins keeps each row's span on the row, so time per status in a window is
    one aggregate (`models.metrics.liveness`), no window function over a member's history.
    """

    __tablename__ = "agent_state_history"
    __table_args__ = (
        # Liveness per team and window from the index alone, already in GROUP BY order.
        sa.Index(
            "ix_agent_state_history_liveness", "team", "member", "status", "changed_at",
            "ended_at",
        ),
        # The open row of each member (one per member), which a change closes.
        sa.Index(
            "ix_agent_state_history_open", "team", "member",
            sqlite_where=sa.text("ended_at IS NULL"),
            postgresql_where=sa.text("ended_at IS NULL"),
        ),
    )  # fmt: skip

    id: int | None = SQLField(default=None, primary_key=True)
    team: str = SQLField(max_length=64)
    member: str = SQLField(max_length=64)
    status: str = SQLField(max_length=50, description="an AgentStateStatus")
    changed_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    ended_at: datetime | None = SQLField(default=None, sa_column=utc_column())


def change_agent_status(
    state: AgentStateRow, status: str, *, session: Session, member: str, now: datetime
) -> bool:
    """Sets `state.status` to `status` at `now`; if that changes it (or the row is new),
    closes the member's open history row and opens one for `status`, in `session`'s
    transaction. Returns whether the status changed. `state.team` must be set."""
    assert state.team is not None, "a member's agent_state row names its team"
    if state.status == status and _known(session, state):
        return False
    state.status = status
    state.updated_at = now
    session.add(state)
    table = table_of(AgentStateHistoryRow)
    session.execute(
        sa.update(table)
        .where(table.c.team == state.team, table.c.ended_at.is_(None), table.c.member == member)
        .values(ended_at=now)
    )
    session.add(AgentStateHistoryRow(team=state.team, member=member, status=status, changed_at=now))
    return True


def _known(session: Session, state: AgentStateRow) -> bool:
    """Whether `state` is a stored row (a new one's first status is a change)."""
    return sa.inspect(state, raiseerr=True).persistent


# --- 000 tables: agent_configs and experience_logs -----------------------------------------


class AgentConfigurationRow(SQLModel, table=True):
    """A stored `000` Agent Configuration."""

    __tablename__ = "agent_configs"

    agent_id: str = SQLField(primary_key=True, max_length=255)
    name: str = SQLField(max_length=255)
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    image: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    resources: list = SQLField(default_factory=list, sa_column=json_column(nullable=False))
    tools: list = SQLField(default_factory=list, sa_column=json_column(nullable=False))
    created_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    status: str = SQLField(max_length=16)
    current_task: str | None = SQLField(default=None, sa_column=sa.Column(sa.Text))

    @classmethod
    def from_wire(cls, wire: AgentConfiguration) -> Self:
        """A row holding `wire`."""
        return cls(
            agent_id=wire.agent_id,
            name=wire.name,
            description=wire.description,
            image=wire.image,
            resources=list(wire.resources),
            tools=list(wire.tools),
            created_at=wire.created_at,
            updated_at=wire.updated_at,
            status=wire.status.value,
            current_task=wire.current_task,
        )

    def to_wire(self) -> AgentConfiguration:
        """The row as a `000` Agent Configuration."""
        return AgentConfiguration.model_validate(
            {
                "agent_id": self.agent_id,
                "name": self.name,
                "description": self.description,
                "image": self.image,
                "resources": self.resources,
                "tools": self.tools,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "status": self.status,
                "current_task": self.current_task,
            }
        )


class ExperienceLogRow(SQLModel, table=True):
    """A stored `000` Experience Log."""

    __tablename__ = "experience_logs"

    log_id: str = SQLField(primary_key=True, max_length=255)
    agent_id: str = SQLField(max_length=255, index=True)
    task_id: str = SQLField(max_length=255, index=True)
    start_time: datetime = SQLField(sa_column=utc_column(nullable=False))
    end_time: datetime = SQLField(sa_column=utc_column(nullable=False))
    status: str = SQLField(max_length=16)
    feedback_id: str = SQLField(max_length=255)
    created_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: ExperienceLog) -> Self:
        """A row holding `wire`."""
        return cls(
            log_id=wire.log_id,
            agent_id=wire.agent_id,
            task_id=wire.task_id,
            start_time=wire.start_time,
            end_time=wire.end_time,
            status=wire.status.value,
            feedback_id=wire.feedback_id,
            created_at=wire.created_at,
            updated_at=wire.updated_at,
        )

    def to_wire(self) -> ExperienceLog:
        """The row as a `000` Experience Log."""
        return ExperienceLog.model_validate(
            {
                "log_id": self.log_id,
                "agent_id": self.agent_id,
                "task_id": self.task_id,
                "start_time": self.start_time,
                "end_time": self.end_time,
                "status": self.status,
                "feedback_id": self.feedback_id,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            }
        )


# --- reading what a task's executions left -------------------------------------------------


def task_experience(task_id: str, *, session: Session | None = None) -> list[ExperienceLog]:
    """The `000` Experience Logs of a task's executions (one per member run), oldest first."""
    from sqlmodel import select

    from models.db import session_scope

    with session_scope(session) as s:
        rows = s.exec(
            select(ExperienceLogRow)
            .where(ExperienceLogRow.task_id == str(task_id))
            .order_by(col(ExperienceLogRow.start_time))
        )
        return [row.to_wire() for row in rows]


def task_feedback(task_id: str, *, session: Session | None = None) -> list[Any]:
    """The `000` Feedback (stdout, stderr, exit code) its executions' experience logs name."""
    from models.db import session_scope
    from models.tool import FeedbackRow

    with session_scope(session) as s:
        found = []
        for log in task_experience(task_id, session=s):
            row = s.get(FeedbackRow, log.feedback_id)
            if row is not None:
                found.append(row.to_wire())
        return found
