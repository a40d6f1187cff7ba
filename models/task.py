"""Tasks: the `001` TaskCreate and Task and their SQL tables, and the metrics of their runs.

`tasks` and `task_assignees` are the seed's SQL tables with the seed's names and types;
teamflow adds columns only (`team`, `priority`, `deadline`, `updated_at`, the assignees'
`position` so a task gives back its assignees in the order they were given,
`explicit_nulls`, the optional keys a wire Task wrote as `null`, and `reason` and
`start_claimed_at` of task dependencies, `models.dependencies`).

`task_metrics` holds one row per member per task execution, for metrics by member and time.
Each member's `004` `task-status.json` is `models.task_status`.
"""

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

import sqlalchemy as sa
from pydantic import Field, ValidationError, field_validator
from sqlmodel import Field as SQLField
from sqlmodel import Relationship, Session, SQLModel, col

from models.base import (
    SnakeWireModel,
    Timestamp,
    json_column,
    rowcount,
    table_of,
    utc_column,
    utcnow,
)
from models.db import session_scope
from models.limits import MAX_DESCRIPTION_CHARS, LimitError, check_chars
from models.team import get_member, get_team
from models.wire_support import error_lines, row_values, wire_from_row

AgentRef = Annotated[str, Field(min_length=1, max_length=255)]
"""An agent id as the `001` tables store it: VARCHAR(255)."""

Title = Annotated[str, Field(min_length=1, max_length=500)]
"""A task title: required, VARCHAR(500)."""


class TaskState(StrEnum):
    """`001` Task `status`."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    ARCHIVED = "archived"


OPEN_TASK_STATES = frozenset({TaskState.PENDING, TaskState.IN_PROGRESS})
"""A task in one of these still has work to do."""

CLOSED_TASK_STATES = frozenset({TaskState.COMPLETED, TaskState.ARCHIVED})
"""A task in one of these is done with."""


class TaskPriority(StrEnum):
    """`001` task priority (task_assignment `priority`)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"


def _unique(ids: list[str] | None) -> list[str] | None:
    if ids is not None and len(set(ids)) != len(ids):
        # task_assignees' primary key is (task_id, assignee_id): one row per assignee.
        raise ValueError("assignee_ids must not name the same assignee twice")
    return ids


class TaskCreate(SnakeWireModel):
    """`001` TaskCreate: the input that creates a task."""

    creator_id: AgentRef | None = Field(default=None, description="The agent creating the task")
    title: Title
    description: str | None = None
    assignee_ids: list[AgentRef] | None = Field(
        default=None, description="The agents the task is assigned to, without repeats"
    )

    _unique_assignees = field_validator("assignee_ids")(_unique)


class Task(SnakeWireModel):
    """`001` Task: a stored task, as the API returns it."""

    id: uuid.UUID
    created_at: Timestamp
    creator_id: AgentRef | None = None
    title: Title
    description: str | None = None
    status: TaskState
    assignee_ids: list[AgentRef] = Field(description="The assigned agents, without repeats")

    _unique_assignees = field_validator("assignee_ids")(_unique)


class TaskRow(SQLModel, table=True):
    """The seed's `tasks` table (plus teamflow's `team`, `priority`, `deadline`, `updated_at`)."""

    __tablename__ = "tasks"

    id: uuid.UUID = SQLField(
        default_factory=uuid.uuid4, sa_column=sa.Column(sa.Uuid, primary_key=True)
    )
    created_at: datetime | None = SQLField(
        default_factory=utcnow, sa_column=utc_column(server_default=sa.func.now())
    )
    creator_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(255), index=True))
    title: str = SQLField(sa_column=sa.Column(sa.String(500), nullable=False))
    description: str | None = SQLField(default=None, sa_column=sa.Column(sa.Text))
    status: str | None = SQLField(
        default=TaskState.PENDING.value,
        sa_column=sa.Column(sa.String(50), server_default=TaskState.PENDING.value, index=True),
    )
    # teamflow's additions
    team: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(64), index=True))
    priority: str | None = SQLField(
        default=None, sa_column=sa.Column(sa.String(16)), description="A TaskPriority"
    )
    deadline: datetime | None = SQLField(default=None, sa_column=utc_column())
    updated_at: datetime | None = SQLField(default=None, sa_column=utc_column())
    explicit_nulls: list | None = SQLField(default=None, sa_column=json_column())
    params: dict | None = SQLField(
        default=None,
        sa_column=json_column(),
        description="What the agents work on (file paths, options), given to their runtime",
    )
    reason: str | None = SQLField(
        default=None,
        sa_column=sa.Column(sa.Text),
        description="Why the task is where it is: what keeps it pending, why it failed",
    )
    start_claimed_at: datetime | None = SQLField(
        default=None,
        sa_column=utc_column(),
        description="When a blocker's close claimed starting this task's run (models.dependencies)",
    )
    attempt: int = SQLField(
        default=0,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"),
        description="How many times the task was started again after a failure",
    )
    # issue 31: durable members (models/task_lease.py, models/journal.py)
    lease: int = SQLField(
        default=0,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"),
        description="Which run holds the task: raised at each claim and each resume; a run "
        "whose lease is not the task's any more stops before it acts again",
    )
    resumes: int = SQLField(
        default=0,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"),
        description="How many times this attempt was resumed after its run died",
    )
    run_id: str | None = SQLField(
        default=None,
        sa_column=sa.Column(sa.String(64)),
        description="The Prefect flow run that holds the lease (None: a resume not begun)",
    )
    worker: str | None = SQLField(
        default=None,
        sa_column=sa.Column(sa.String(255)),
        description="The teamflow worker whose process runs the holding run",
    )
    resume_at: datetime | None = SQLField(
        default=None,
        sa_column=utc_column(),
        description="When a decided resume's run is to start (None: none to start)",
    )

    assignees: list["TaskAssigneeRow"] = Relationship(
        back_populates="task",
        cascade_delete=True,
        passive_deletes=True,
        sa_relationship_kwargs={"order_by": "TaskAssigneeRow.position", "lazy": "selectin"},
    )

    @classmethod
    def from_create(
        cls,
        create: TaskCreate,
        *,
        team: str | None = None,
        priority: TaskPriority | None = None,
        deadline: datetime | None = None,
    ) -> Self:
        """A new pending task (new id, created now) from a `001` TaskCreate."""
        return cls(
            creator_id=create.creator_id,
            title=create.title,
            description=create.description,
            team=team,
            priority=priority.value if priority else None,
            deadline=deadline,
            assignees=_assignee_rows(create.assignee_ids or []),
        )

    @classmethod
    def from_wire(cls, wire: Task) -> Self:
        """A row holding the `001` Task `wire` (with its assignees)."""
        values = row_values(wire, exclude={"assignee_ids"})
        return cls(**values, assignees=_assignee_rows(wire.assignee_ids))

    def to_wire(self) -> Task:
        """The row as a `001` Task."""
        return wire_from_row(
            Task, self, assignee_ids=[assignee.assignee_id for assignee in self.assignees]
        )


class TaskAssigneeRow(SQLModel, table=True):
    """The seed's `task_assignees` table: who a task is assigned to (plus their order)."""

    __tablename__ = "task_assignees"

    task_id: uuid.UUID = SQLField(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
        )
    )
    assignee_id: str = SQLField(
        sa_column=sa.Column(sa.String(255), primary_key=True, nullable=False, index=True)
    )
    position: int = SQLField(
        default=0,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"),
        description="Where the assignee stands in the task's assignee_ids",
    )

    task: TaskRow | None = Relationship(back_populates="assignees")


def _assignee_rows(ids: list[str]) -> list[TaskAssigneeRow]:
    # task_id is filled in when the rows join their task's `assignees`.
    return [TaskAssigneeRow(assignee_id=name, position=i) for i, name in enumerate(ids)]  # type: ignore[call-arg]  # see above


class TaskMetricsRow(SQLModel, table=True):
    """One member's execution of one task: how long, how many tokens, steps and tool calls."""

    __tablename__ = "task_metrics"
    __table_args__ = (
        # models/metrics.py: each member's durations in order, so a percentile is found by
        # stepping to its rank in the index instead of sorting the member's rows.
        sa.Index("ix_task_metrics_durations", "team", "member", "duration_s", "started_at"),
        # models/metrics.py: a team's rows (per member, since a time) read from the index
        # alone: every column the metrics sum, so no row of the table is visited.
        sa.Index(
            "ix_task_metrics_metrics",
            "team",
            "member",
            "started_at",
            "task_id",
            "ended_at",
            "duration_s",
            "tokens",
            "steps",
            "tool_calls",
            "tool_failures",
            "approval_wait_s",
            "ok",
        ),
    )

    id: int | None = SQLField(default=None, primary_key=True)
    team: str = SQLField(sa_column=sa.Column(sa.String(64), nullable=False))
    member: str = SQLField(sa_column=sa.Column(sa.String(64), nullable=False))
    task_id: str | None = SQLField(
        default=None,
        sa_column=sa.Column(sa.String(255), index=True),
        description="The task executed: a `001` task id, or an async task id of `002`",
    )
    started_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    ended_at: datetime | None = SQLField(default=None, sa_column=utc_column())
    duration_s: float | None = SQLField(default=None, sa_column=sa.Column(sa.Float))
    tokens: int = SQLField(
        default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0")
    )
    steps: int = SQLField(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    tool_calls: int = SQLField(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )
    approval_wait_s: float = SQLField(
        default=0.0,
        sa_column=sa.Column(sa.Float, nullable=False, server_default="0"),
        description="Seconds spent waiting for plan approvals",
    )
    ok: bool | None = SQLField(
        default=None,
        sa_column=sa.Column(sa.Boolean),
        description="Whether the member's execution succeeded (None: not recorded)",
    )
    tool_failures: int = SQLField(
        default=0,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"),
        description="Tool calls that ended in a failure",
    )


# --- the store -----------------------------------------------------------------------------


class TaskError(ValueError):
    """A refused task operation; the message is one line for the user."""


def create_task(
    team: str,
    *,
    title: str,
    description: str | None = None,
    assignees: list[str] = (),  # type: ignore[assignment]  # a tuple, never mutated
    creator: str | None = None,
    priority: str | None = None,
    deadline: datetime | None = None,
    params: dict[str, Any] | None = None,
    session: Session | None = None,
) -> TaskRow:
    """Creates a pending task of `team` for active members `assignees` (names)."""
    try:
        check_chars(description, MAX_DESCRIPTION_CHARS, what="description")
    except LimitError as exc:
        raise TaskError(str(exc)) from None
    with session_scope(session) as s:
        get_team(team, session=s)
        for name in assignees:
            get_member(team, name, active=True, session=s)
        if creator is not None:
            get_member(team, creator, session=s)
        try:
            create = TaskCreate(
                creator_id=creator, title=title, description=description,
                assignee_ids=list(assignees),
            )  # fmt: skip
            level = TaskPriority(priority) if priority is not None else None
        except ValidationError as exc:
            raise TaskError("; ".join(error_lines(exc))) from None
        except ValueError:
            choices = ", ".join(p.value for p in TaskPriority)
            raise TaskError(f"priority {priority!r} is not one of {choices}") from None
        if deadline is not None and deadline.tzinfo is None:
            raise TaskError("deadline must carry a timezone, e.g. 2026-02-20T17:00:00Z")
        row = TaskRow.from_create(create, team=team, priority=level, deadline=deadline)
        row.params = params
        row.updated_at = utcnow()
        s.add(row)
        s.flush()
        return row


def get_task(task_id: str | uuid.UUID, *, session: Session | None = None) -> TaskRow:
    """The task with this id; `TaskError` if the id is malformed or unknown."""
    try:
        key = task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id))
    except ValueError:
        raise TaskError(f"{task_id!r} is not a task id (a UUID)") from None
    with session_scope(session) as s:
        row = s.get(TaskRow, key)
        if row is None:
            raise TaskError(f"no task with id {key}")
        return row


def list_tasks(
    team: str, *, status: str | None = None, session: Session | None = None
) -> list[TaskRow]:
    """A team's tasks, oldest first, optionally only those in `status`."""
    with session_scope(session) as s:
        get_team(team, session=s)
        query = sa.select(TaskRow).where(col(TaskRow.team) == team)
        if status is not None:
            try:
                query = query.where(col(TaskRow.status) == TaskState(status).value)
            except ValueError:
                choices = ", ".join(t.value for t in TaskState)
                raise TaskError(f"status {status!r} is not one of {choices}") from None
        return list(s.execute(query.order_by(col(TaskRow.created_at))).scalars())


CONTEXT_STATUS: dict[TaskState, str] = {
    TaskState.PENDING: "pending",
    TaskState.IN_PROGRESS: "running",
    TaskState.COMPLETED: "finished",
    TaskState.ARCHIVED: "finished",
}
"""A task's status as the `000` status of the Contexts that place it (`models.status`
names it `TASK_TO_ELMO`)."""


def move_task(
    task_id: uuid.UUID, *, to: TaskState, only_from: set[TaskState] | None = None,
    session: Session | None = None,
) -> bool:  # fmt: skip
    """Moves a task to `to` if it is in one of `only_from` (any, if None); True if it moved.

    A conditional update: of several workers starting the same task, exactly one moves it.
    """
    table = table_of(TaskRow)
    query = sa.update(table).where(table.c.id == task_id)
    if only_from is not None:
        query = query.where(table.c.status.in_([s.value for s in only_from]))
    with session_scope(session) as s:
        now = utcnow()
        moved = rowcount(s.execute(query.values(status=to.value, updated_at=now)))
        if moved == 1:  # the `000` Contexts that place the task follow its status
            from models.knowledge import ContextRow

            contexts = table_of(ContextRow)
            s.execute(
                sa.update(contexts)
                .where(contexts.c.task_id == str(task_id))
                .values(status=CONTEXT_STATUS[to], updated_at=now)
            )
        return moved == 1


def record_metrics(row: TaskMetricsRow, *, session: Session | None = None) -> TaskMetricsRow:
    """Stores one member's execution metrics of one task."""
    with session_scope(session) as s:
        s.add(row)
        s.flush()
        return row
