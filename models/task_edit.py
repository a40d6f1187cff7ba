"""Changing a task after it was made: its owner, status, text, metadata and dependencies.

The store behind MCP's `task_update` (claude-teams' arguments: `owner`, `status`, `subject`,
`description`, `active_form`, `add_blocks`, `add_blocked_by`, `metadata`), above
`models.task` and `models.dependencies`. Every change of one call is one transaction: a
refused part (an unknown owner, a dependency cycle, a bad status) leaves nothing changed.

claude-teams' words map onto teamflow's tasks: `subject` is the title, `owner` the single
assignee, `metadata` (merged; a key set to null is removed) and `active_form` live in the
task's `params`, `deleted` archives the task with the reason "deleted", and `failed`
(teamflow's addition) archives it with the member's reason, failing its dependents.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlmodel import Session, col

from models.base import utcnow
from models.db import session_scope
from models.dependencies import add_blockers, blockers_of, set_reason, settle
from models.limits import check_depth
from models.task import TaskAssigneeRow, TaskError, TaskRow, TaskState, get_task
from models.team import get_member, get_team

ACTIVE_FORM_KEY = "activeForm"
"""Where a task's `active_form` (claude-teams: "Running the tests") is kept in its params."""


class TaskUpdateStatus(StrEnum):
    """The statuses `task_update` takes: claude-teams' four, and teamflow's `failed`."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    DELETED = "deleted"
    FAILED = "failed"


_TO_STATE = {
    TaskUpdateStatus.PENDING: TaskState.PENDING,
    TaskUpdateStatus.IN_PROGRESS: TaskState.IN_PROGRESS,
    TaskUpdateStatus.COMPLETED: TaskState.COMPLETED,
    TaskUpdateStatus.DELETED: TaskState.ARCHIVED,
    TaskUpdateStatus.FAILED: TaskState.ARCHIVED,
}


@dataclass
class TaskChanges:
    """What one `update_task` call changes (None: unchanged)."""

    status: str | None = None
    owner: str | None = None
    subject: str | None = None
    description: str | None = None
    active_form: str | None = None
    add_blocks: list[str] = field(default_factory=list)
    add_blocked_by: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    reason: str | None = None


@dataclass
class TaskUpdate:
    """The task as the call left it, what the call changed, and the tasks it made ready."""

    task: TaskRow
    owner_changed: bool = False
    ready: list[tuple[uuid.UUID, str]] = field(default_factory=list)


def find_task(team: str, task_id: str, *, session: Session | None = None) -> TaskRow:
    """Task `task_id` of `team`; `TaskError` when it is unknown or another team's."""
    with session_scope(session) as s:
        get_team(team, session=s)
        row = get_task(task_id, session=s)
        if row.team != team:
            raise TaskError(f"task {task_id} is not a task of team {team!r}")
        return row


def parse_status(status: str) -> TaskUpdateStatus:
    """The status named `status`; `TaskError` naming the choices otherwise."""
    try:
        return TaskUpdateStatus(status)
    except ValueError:
        choices = ", ".join(s.value for s in TaskUpdateStatus)
        raise TaskError(f"status {status!r} is not one of {choices}") from None


def update_task(
    team: str, task_id: str, changes: TaskChanges, *, session: Session | None = None
) -> TaskUpdate:
    """Applies `changes` to task `task_id` of `team`, all or nothing.

    Raises:
        TaskError: unknown task or owner, a bad status, a blocker the task cannot have.
        TeamError: unknown team.
    """
    status = parse_status(changes.status) if changes.status is not None else None
    if changes.metadata is not None:
        if not isinstance(changes.metadata, dict):
            raise TaskError("metadata must be a JSON object")
        check_depth(changes.metadata, what="metadata")
    with session_scope(session) as s:
        row = find_task(team, task_id, session=s)
        result = TaskUpdate(task=row)
        if changes.subject is not None:
            if not 1 <= len(changes.subject) <= 500:
                raise TaskError("subject must be 1 to 500 characters")
            row.title = changes.subject
        if changes.description is not None:
            row.description = changes.description
        if changes.metadata is not None or changes.active_form is not None:
            params = dict(row.params or {})
            for key, value in (changes.metadata or {}).items():
                if value is None:
                    params.pop(key, None)
                else:
                    params[key] = value
            if changes.active_form is not None:
                params[ACTIVE_FORM_KEY] = changes.active_form
            row.params = params
        if changes.owner is not None:
            result.owner_changed = _set_owner(s, row, changes.owner)
        add_blockers(row, changes.add_blocked_by, session=s)
        for blocked in changes.add_blocks:
            add_blockers(find_task(team, blocked, session=s), [row.id], session=s)
        row.updated_at = utcnow()
        s.add(row)
        s.flush()
        if status is not None:
            result.ready = _move(s, row, status, changes.reason)
        s.refresh(row)
        return result


def _set_owner(session: Session, row: TaskRow, owner: str) -> bool:
    """Makes `owner` (an active member; "" for nobody) the task's only assignee."""
    if owner:
        assert row.team is not None, "a task given owners belongs to a team"
        get_member(row.team, owner, active=True, session=session)
    current = [a.assignee_id for a in row.assignees]
    if current == ([owner] if owner else []):
        return False
    for assignee in list(row.assignees):
        session.delete(assignee)
    session.flush()
    session.expire(row, ["assignees"])
    if owner:
        session.add(TaskAssigneeRow(task_id=row.id, assignee_id=owner, position=0))
    session.flush()
    session.expire(row, ["assignees"])
    return True


def _move(
    session: Session, row: TaskRow, status: TaskUpdateStatus, reason: str | None
) -> list[tuple[uuid.UUID, str]]:
    """Moves the task to `status`; a completed or failed task settles its dependents."""
    if row.status in (TaskState.COMPLETED.value, TaskState.ARCHIVED.value) and status in (
        TaskUpdateStatus.PENDING,
        TaskUpdateStatus.IN_PROGRESS,
    ):
        raise TaskError(f"task {row.id} is {row.status}: it cannot become {status.value} again")
    if status is TaskUpdateStatus.FAILED and not (reason or "").strip():
        raise TaskError("a failed task needs a reason (what went wrong)")
    row.status = _TO_STATE[status].value
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    if status is TaskUpdateStatus.DELETED:
        set_reason(row.id, "deleted", session=session)
    elif status is TaskUpdateStatus.FAILED:
        set_reason(row.id, reason, session=session)
        return settle(row.id, completed=False, session=session)
    elif status is TaskUpdateStatus.COMPLETED:
        if reason:
            set_reason(row.id, reason, session=session)
        return settle(row.id, completed=True, session=session)
    return []


def task_view(row: TaskRow, blocked_by: list[str] | None = None) -> dict[str, Any]:
    """A task as MCP tools show it: the `001` Task with teamflow's fields, plus the words
    claude-teams clients read (`subject`, `owner`, `activeForm`, `blockedBy`, `metadata`)."""
    assignees = [a.assignee_id for a in row.assignees]
    params = dict(row.params or {})
    active_form = params.pop(ACTIVE_FORM_KEY, None)
    return {
        **row.to_wire().to_wire(),
        "team": row.team,
        "subject": row.title,
        "owner": assignees[0] if len(assignees) == 1 else (assignees or None),
        "activeForm": active_form,
        "priority": row.priority,
        "deadline": row.deadline.isoformat() if row.deadline else None,
        "metadata": params,
        "blockedBy": blocked_by or [],
        "reason": row.reason,
    }


def task_views(rows: list[TaskRow], *, session: Session | None = None) -> list[dict[str, Any]]:
    """`task_view` of each row, with its blockers."""
    with session_scope(session) as s:
        blockers = blockers_of([r.id for r in rows], session=s)
    return [task_view(r, [str(b) for b in blockers.get(r.id, [])]) for r in rows]


def free_tasks(
    team: str, member: str, *, why: str | None = None, session: Session | None = None
) -> list[uuid.UUID]:
    """Takes `member` off every open task of `team` (the reason: `why`, default
    "freed: {member} stopped"); a task left without assignees goes back to pending, as its
    next attempt (so its next run is a new one: `models.watchdog.task_run_key`), and another
    member can take it. Returns the freed tasks' ids.

    What every stop of a member does: a shutdown, approved or forced (`complete_shutdown`),
    `force_kill_teammate`, and the watchdog finding its tmux pane gone."""
    from sqlmodel import select

    from models.task import OPEN_TASK_STATES

    with session_scope(session) as s:
        rows = list(
            s.exec(
                select(TaskRow)
                .join(TaskAssigneeRow, col(TaskAssigneeRow.task_id) == col(TaskRow.id))
                .where(
                    TaskRow.team == team,
                    TaskAssigneeRow.assignee_id == member,
                    col(TaskRow.status).in_([st.value for st in OPEN_TASK_STATES]),
                )
            )
        )
        for row in rows:
            for assignee in list(row.assignees):
                if assignee.assignee_id == member:
                    s.delete(assignee)
            s.flush()
            s.expire(row, ["assignees"])
            if not row.assignees:
                row.status = TaskState.PENDING.value
                row.attempt += 1
            row.reason = why or f"freed: {member} stopped"
            row.updated_at = utcnow()
            s.add(row)
        s.flush()
        return [r.id for r in rows]
