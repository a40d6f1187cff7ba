"""What a restored row is held to: every column's type, size and nullability as its table
declares them, every enum its store keeps to, and the wire validators of its format.

A backup's rows (`models.backup.restore`) are checked here, all of them, before anything is
written: a database does not refuse everything a store would (SQLite keeps a 20-character
string in a `VARCHAR(16)`, and any text in a status column), and a row the stores would
never have written must not come back through a restore. `check_rows` raises `RowError`
naming the table, the row (its position in the dump and its key) and the field.

The checks are the stores' own: a row is read back through its class's `to_wire` (the `000`
and `001` wire models, the `004` inbox entry and team member), and the status columns are
held to the enums their stores branch on (`ENUMS`).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import SQLModel

from models.agent import AgentStateStatus
from models.alert import AlertStatus
from models.approval import ApprovalStatus
from models.base import UTCDateTime
from models.conversation import CONVERSATION_ROLES, MessageRole
from models.notification import AlertType
from models.shutdown import ShutdownStatus
from models.tables import metadata
from models.task import TaskPriority, TaskState
from models.team_settings import TimeoutPolicy
from models.watchdog import AlarmKind
from models.wire_support import error_lines


class RowError(ValueError):
    """A restored row its store would refuse; one line naming table, row and field."""


def _values(enum: Any) -> frozenset[str]:
    if isinstance(enum, type) and not hasattr(enum, "__members__"):  # a plain holder class
        return frozenset(v for k, v in vars(enum).items() if k.isupper())
    return frozenset(e.value for e in enum)


ENUMS: dict[tuple[str, str], frozenset[str]] = {
    ("tasks", "status"): _values(TaskState),
    ("tasks", "priority"): _values(TaskPriority),
    ("agent_state", "status"): _values(AgentStateStatus),
    ("agent_state_history", "status"): _values(AgentStateStatus),
    ("alerts", "alert_type"): _values(AlertType),
    ("alerts", "status"): _values(AlertStatus),
    ("alert_firings", "alert_type"): _values(AlertType),
    ("alert_firings", "outcome"): frozenset({"delivered", "missed"}),
    ("plan_approvals", "status"): _values(ApprovalStatus),
    ("plan_approvals", "timeout_policy"): _values(TimeoutPolicy),
    ("shutdowns", "status"): _values(ShutdownStatus),
    ("messages", "role"): _values(MessageRole),
    ("watchdog_alarms", "kind"): _values(AlarmKind),
}
"""(table, column) -> the values its store writes; any other is refused."""

_INT64 = 2**63


def check_rows(
    rows_by_table: dict[str, list[dict[str, Any]]], *, skip: frozenset = frozenset()
) -> None:
    """Checks every row of every table (see the module docstring); `RowError` at the first
    row a store would refuse. `skip`: columns (`table.column`) a restore fills in itself."""
    classes = _classes()
    for name, rows in rows_by_table.items():
        table = metadata.tables[name]
        for i, row in enumerate(rows):
            where = f"table {name} row {i}{_key(table, row)}"
            for column in table.c:
                if f"{name}.{column.name}" in skip:
                    continue
                problem = _column_problem(column, row)
                if problem is not None:
                    raise RowError(f"{where}: {column.name}: {problem}")
            for (table_name, column_name), allowed in ENUMS.items():
                value = row.get(column_name)
                if table_name == name and value is not None and value not in allowed:
                    raise RowError(
                        f"{where}: {column_name}: {value!r} is not one of "
                        f"{', '.join(sorted(allowed))}"
                    )
            wire = _WIRE.get(name)
            cls = classes.get(name)
            if wire is None or cls is None:
                continue
            mapper = sa.inspect(cls, raiseerr=True)
            try:
                values = {
                    mapper.get_property_by_column(table.c[k]).key: _loaded(table.c[k], v)
                    for k, v in row.items()
                }
                wire(cls(**values))
            except ValidationError as exc:
                raise RowError(f"{where}: {error_lines(exc)[0]}") from None
            except (TypeError, ValueError) as exc:
                raise RowError(f"{where}: {str(exc).splitlines()[0]}") from None


_WIRE: dict[str, Callable[[Any], Any]] = {
    "members": lambda r: r.to_wire(),
    "inbox_messages": lambda r: r.to_entry(),
    "messages": lambda r: r.to_wire(index=0) if r.role in CONVERSATION_ROLES else None,
    "tasks": lambda r: r.to_wire(),
    "task_status": lambda r: r.to_wire(),
    "contexts": lambda r: r.to_wire(),
    "agent_configs": lambda r: r.to_wire(),
    "experience_logs": lambda r: r.to_wire(),
    "memories": lambda r: r.to_wire(),
}
"""The tables of a team whose rows read back as a wire format, and how: the validators of
the formats the stores write."""


def _classes() -> dict[str, type[SQLModel]]:
    return {
        m.class_.__table__.name: m.class_
        for m in SQLModel._sa_registry.mappers
        if hasattr(m.class_, "__table__")
    }


def _key(table: sa.Table, row: dict[str, Any]) -> str:
    keys = [str(row.get(c.name)) for c in table.primary_key.columns if row.get(c.name) is not None]
    return f" ({', '.join(keys)})" if keys else ""


def _loaded(column: sa.Column, value: Any) -> Any:
    """A dumped value as the column holds it (timestamps and uuids parsed)."""
    if value is None:
        return None
    if isinstance(column.type, UTCDateTime):
        return datetime.fromisoformat(value)
    if isinstance(column.type, sa.Uuid):
        return uuid.UUID(value)
    return value


def _column_problem(column: sa.Column, row: dict[str, Any]) -> str | None:
    """Why `row`'s value of `column` does not fit it (None: it fits)."""
    if column.name not in row:
        optional = (
            column.nullable or column.default is not None or column.server_default is not None
        )
        return None if optional or column.autoincrement is True else "missing"
    value = row[column.name]
    if value is None:
        return None if column.nullable else "null, but a value is required"
    kind = column.type
    if isinstance(kind, sa.types.TypeDecorator) and not isinstance(kind, UTCDateTime):
        kind = kind.impl_instance  # e.g. SQLModel's AutoString: a String of that length
    if isinstance(kind, UTCDateTime):
        try:
            moment = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            return f"{value!r} is not an ISO 8601 timestamp with a timezone"
    elif isinstance(kind, sa.Uuid):
        try:
            uuid.UUID(str(value))
        except ValueError:
            return f"{value!r} is not a uuid"
    elif isinstance(kind, sa.Boolean):
        if not isinstance(value, bool):
            return f"{value!r} is not true or false"
    elif isinstance(kind, sa.Integer):
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= _INT64:
            return f"{value!r} is not a whole number within 64 bits"
    elif isinstance(kind, sa.Float):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            return f"{value!r} is not a finite number"
    elif isinstance(kind, sa.String):  # Text too
        if not isinstance(value, str):
            return f"{value!r} is not a string"
        if kind.length is not None and len(value) > kind.length:
            return f"{len(value)} characters; at most {kind.length}"
    return None
