"""Seed 001 (tasks, notifications, memories, API envelopes) and the `004` task status: the
seed's examples read and write back unchanged, bad input is refused naming the field, and
rows give back the JSON they were built from."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from factories import DB_SETTINGS, changed, fixture, without
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from sqlmodel import Session, select
from stored import store_and_reload
from strategies import (
    api_errors,
    api_successes,
    memories,
    notifications,
    task_creates,
    task_statuses,
    tasks,
)

from models.api import ApiResponseAdapter, ErrorResponse, SuccessResponse
from models.memory import Memory, MemoryRow, MemoryType
from models.notification import (
    NOTIFICATION_CLASSES,
    NotificationAdapter,
    NotificationType,
    ToolResultPayload,
)
from models.task import (
    CLOSED_TASK_STATES,
    OPEN_TASK_STATES,
    Task,
    TaskAssigneeRow,
    TaskCreate,
    TaskMetricsRow,
    TaskRow,
    TaskState,
)
from models.task_status import TaskStatus, TaskStatusRow

EXAMPLES = [
    ("001_task_create", TaskCreate),
    ("001_task", Task),
    ("001_memory", Memory),
    ("001_api_success", ApiResponseAdapter),
    ("001_api_error", ApiResponseAdapter),
    ("004_task_status", TaskStatus),
    *[(f"001_notification_{kind}", NotificationAdapter) for kind in NotificationType],
]


def parse(reader: Any, data: Any) -> Any:
    return (
        reader.validate_python(data)
        if isinstance(reader, TypeAdapter)
        else (reader.model_validate(data))
    )


# --- the seed's examples -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "reader"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_seed_example_reads_and_writes_back_unchanged(name: str, reader: Any) -> None:
    data = fixture(name)
    assert parse(reader, data).to_wire() == data


@pytest.mark.parametrize("kind", list(NotificationType))
def test_each_notification_type_reads_into_its_own_class(kind: NotificationType) -> None:
    notification = NotificationAdapter.validate_python(fixture(f"001_notification_{kind}"))
    assert type(notification) is NOTIFICATION_CLASSES[kind]
    assert notification.notification_type == kind


def test_notification_union_covers_every_type() -> None:
    assert set(NOTIFICATION_CLASSES) == set(NotificationType)
    for kind, cls in NOTIFICATION_CLASSES.items():
        assert cls.model_fields["notification_type"].default == kind


@pytest.mark.parametrize("name", ["001_tool_result_success", "001_tool_result_failure"])
def test_tool_result_standard_is_the_tool_result_payload(name: str) -> None:
    data = fixture(name)
    assert ToolResultPayload.model_validate(data).to_wire() == data


def test_api_envelopes_are_told_apart_by_status() -> None:
    assert isinstance(
        ApiResponseAdapter.validate_python(fixture("001_api_success")), SuccessResponse
    )
    assert isinstance(ApiResponseAdapter.validate_python(fixture("001_api_error")), ErrorResponse)
    typed = SuccessResponse[Task].model_validate(fixture("001_api_success"))
    assert isinstance(typed.data, Task)
    assert typed.to_wire() == fixture("001_api_success")


def test_memory_types_are_the_seeds_eight() -> None:
    assert {t.value for t in MemoryType} == {
        "user_preference",
        "user_fact",
        "conversation_context",
        "agent_procedure",
        "knowledge",
        "event_pattern",
        "error_handling",
        "proactive_action",
    }


def test_open_and_closed_task_states_cover_the_enum() -> None:
    assert set(TaskState) == OPEN_TASK_STATES | CLOSED_TASK_STATES
    assert not OPEN_TASK_STATES & CLOSED_TASK_STATES


# --- tables --------------------------------------------------------------------------------


def test_task_tables_have_the_seeds_names_and_types(session: Session) -> None:
    inspector = sa.inspect(session.get_bind())
    tasks_ = {c["name"]: c for c in inspector.get_columns("tasks")}
    assert {"id", "created_at", "creator_id", "title", "description", "status"} <= set(tasks_)
    assert tasks_["creator_id"]["type"].length == 255
    assert tasks_["title"]["type"].length == 500
    assert not tasks_["title"]["nullable"]
    assert tasks_["status"]["type"].length == 50
    assert "pending" in str(tasks_["status"]["default"])
    assert inspector.get_pk_constraint("tasks")["constrained_columns"] == ["id"]

    assignees = {c["name"]: c for c in inspector.get_columns("task_assignees")}
    assert {"task_id", "assignee_id"} <= set(assignees)
    assert assignees["assignee_id"]["type"].length == 255
    assert not assignees["assignee_id"]["nullable"]
    pk = inspector.get_pk_constraint("task_assignees")["constrained_columns"]
    assert sorted(pk) == ["assignee_id", "task_id"]
    (fk,) = inspector.get_foreign_keys("task_assignees")
    assert fk["referred_table"] == "tasks"
    assert fk["constrained_columns"] == ["task_id"]
    assert fk["options"].get("ondelete") == "CASCADE"


@pytest.mark.parametrize(
    ("name", "model", "row_type"),
    [
        ("001_task", Task, TaskRow),
        ("001_memory", Memory, MemoryRow),
        ("004_task_status", TaskStatus, TaskStatusRow),
    ],
)
def test_seed_example_comes_back_from_the_database_unchanged(
    session: Session, name: str, model: type, row_type: type
) -> None:
    data = fixture(name)
    row = row_type.from_wire(model.model_validate(data))
    assert store_and_reload(session.get_bind(), row, lambda r: r.to_wire().to_wire()) == data


def test_created_task_is_pending_with_its_assignees_in_order(session: Session) -> None:
    create = TaskCreate(title="Compare Q3 and Q4", assignee_ids=["analyst-2", "analyst-1"])
    row = TaskRow.from_create(create, team="research-team")
    task = store_and_reload(session.get_bind(), row, lambda r: r.to_wire())
    assert task.status is TaskState.PENDING
    assert task.assignee_ids == ["analyst-2", "analyst-1"]
    assert task.to_wire().keys() == {"id", "created_at", "title", "status", "assignee_ids"}


def test_deleting_a_task_in_sql_removes_its_assignees(session: Session) -> None:
    session.add(TaskRow.from_wire(Task.model_validate(fixture("001_task"))))
    session.commit()
    session.expunge_all()
    session.execute(sa.delete(TaskRow))
    session.commit()
    assert session.exec(select(TaskAssigneeRow)).all() == []


def test_task_status_row_is_keyed_by_team_and_member(session: Session) -> None:
    status = TaskStatus.model_validate(fixture("004_task_status"))
    row = TaskStatusRow.from_wire(status)
    assert (row.team, row.member) == ("research-team", "analyst-1")
    with pytest.raises(ValueError, match="give team and member"):
        TaskStatusRow.from_wire(status.model_copy(update={"agent_id": "analyst-1"}))
    other = TaskStatusRow.from_wire(
        status.model_copy(update={"agent_id": "analyst-1"}), team="research-team", member="a1"
    )
    assert (other.team, other.member) == ("research-team", "a1")


def test_task_metrics_are_read_by_member_and_time(session: Session) -> None:
    start = datetime(2026, 2, 16, 10, 0, tzinfo=UTC)
    for i, member in enumerate(["analyst-1", "analyst-2", "analyst-1", "analyst-1"]):
        session.add(
            TaskMetricsRow(
                team="research-team",
                member=member,
                task_id=str(uuid.uuid4()),
                started_at=start + timedelta(minutes=10 * i),
                ended_at=start + timedelta(minutes=10 * i + 4),
                duration_s=240.0,
                tokens=1000 + i,
                steps=3,
                tool_calls=2,
            )
        )
    session.commit()
    rows = session.exec(
        select(TaskMetricsRow)
        .where(
            TaskMetricsRow.team == "research-team",
            TaskMetricsRow.member == "analyst-1",
            TaskMetricsRow.started_at >= start + timedelta(minutes=5),
        )
        .order_by(TaskMetricsRow.started_at)
    ).all()
    assert [row.tokens for row in rows] == [1002, 1003]
    assert rows[0].started_at == start + timedelta(minutes=20)
    assert rows[0].approval_wait_s == 0.0
    indexes = sa.inspect(session.connection()).get_indexes("task_metrics")
    # An index that leads with (team, member, started_at) serves the query (the covering
    # index of migration 0006 does; 0008 dropped its duplicate of exactly those columns).
    assert any(ix["column_names"][:3] == ["team", "member", "started_at"] for ix in indexes)


# --- bad input -----------------------------------------------------------------------------

READERS = dict(EXAMPLES)
MISSING = object()
N = "001_notification_"


def bad(case: str, name: str, *path: str | int, to: Any = MISSING, field: str = "") -> Any:
    """A bad input: fixture `name` with `path` set to `to` (or removed), refused at `field`."""
    data = without(name, *path) if to is MISSING else changed(name, *path, to=to)
    return pytest.param(READERS[name], data, field or path[-1], id=case)


BAD_INPUTS = [
    bad("alert-type-snooze", N + "system_alert", "payload", "alert_type", to="SNOOZE"),
    bad("capacity-1.5", N + "status_update", "payload", "capacity", to=1.5),
    bad("agent-status-sleeping", N + "status_update", "payload", "status", to="sleeping"),
    bad("notification-type-unknown", N + "user_message", "notification_type", to="pigeon"),
    bad("notification-type-missing", N + "user_message", "notification_type"),
    bad("priority-urgent", N + "task_assignment", "payload", "priority", to="urgent"),
    bad("deadline-not-iso", N + "task_assignment", "payload", "deadline", to="tomorrow"),
    bad("timestamp-not-iso", N + "user_message", "timestamp", to="2024-01-01 00:00"),
    bad("content-type-audio", N + "user_message", "payload", "content_type", to="audio"),
    bad("tool-result-status-ok", N + "tool_result", "payload", "status", to="OK"),
    bad(
        "tool-failure-without-reason",
        N + "tool_result",
        "payload",
        "status",
        to="FAILURE",
        field="error_message",
    ),
    bad("payload-unknown-key", N + "agent_message", "payload", "priority", to="high"),
    bad("notification-id-not-uuid", N + "agent_message", "notification_id", to="42"),
    bad("importance-negative", "001_memory", "importance", to=-0.1),
    bad("confidence-above-1", "001_memory", "confidence", to=1.01),
    bad("memory-type-gossip", "001_memory", "memory_type", to="gossip"),
    bad("memory-scope-team", "001_memory", "scope", to="team"),
    bad("embedding-holds-string", "001_memory", "embedding", to=[0.1, "0.2"]),
    bad("task-timestamp-naive", "001_task", "created_at", to="2024-01-01T00:00:00"),
    bad("task-status-done", "001_task", "status", to="done"),
    bad("assignee-twice", "001_task", "assignee_ids", to=["a", "a"]),
    bad("title-empty", "001_task_create", "title", to=""),
    bad("title-501-chars", "001_task_create", "title", to="x" * 501),
    bad("title-missing", "001_task_create", "title"),
    bad("task-create-unknown-key", "001_task_create", "owner", to="primary_agent"),
    bad("creator-id-256-chars", "001_task_create", "creator_id", to="c" * 256),
    bad("run-status-finished", "004_task_status", "status", to="finished"),
    bad("started-at-naive", "004_task_status", "startedAt", to="2026-02-16T10:35:00"),
    bad("tokens-negative", "004_task_status", "metrics", "tokens_used", to=-5),
    bad("response-time-string", "004_task_status", "metrics", "avg_response_time", to="120"),
    bad("api-status-failed", "001_api_error", "status", to="failed"),
    bad("api-error-without-error", "001_api_error", "error"),
]


@pytest.mark.parametrize(("reader", "data", "field"), BAD_INPUTS)
def test_bad_input_is_refused_naming_the_field(reader: Any, data: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse(reader, data)
    locations = [error["loc"] for error in caught.value.errors()]
    assert any(field in loc for loc in locations), locations


# --- properties ----------------------------------------------------------------------------

STRATEGIES = [
    pytest.param(task_creates(), TaskCreate, None, id="task-create"),
    pytest.param(tasks(), Task, TaskRow, id="task"),
    pytest.param(memories(), Memory, MemoryRow, id="memory"),
    pytest.param(task_statuses(), TaskStatus, TaskStatusRow, id="task-status"),
    pytest.param(api_successes(), ApiResponseAdapter, None, id="api-success"),
    pytest.param(api_errors(), ApiResponseAdapter, None, id="api-error"),
    *[
        pytest.param(notifications(kind.value), NotificationAdapter, None, id=kind.value)
        for kind in NotificationType
    ],
]


@pytest.mark.parametrize(("strategy", "reader", "row_type"), STRATEGIES)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_any_valid_document_writes_back_unchanged(
    strategy: st.SearchStrategy, reader: Any, row_type: type | None, data: st.DataObject
) -> None:
    document = data.draw(strategy)
    assert parse(reader, document).to_wire() == document


@pytest.mark.parametrize(
    ("strategy", "reader", "row_type"), [p for p in STRATEGIES if p.values[2] is not None]
)
@DB_SETTINGS
@given(data=st.data())
def test_any_valid_document_comes_back_from_the_database_unchanged(
    session: Session, strategy: st.SearchStrategy, reader: Any, row_type: type, data: st.DataObject
) -> None:
    document = data.draw(strategy)
    row = row_type.from_wire(parse(reader, document))
    assert store_and_reload(session.get_bind(), row, lambda r: r.to_wire().to_wire()) == document
