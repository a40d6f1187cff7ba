"""Task dependencies: a task blocked by others starts when the last of them completes.

`task_dependencies` holds one row per (task, blocker). The rules, all guarded by the
database rather than by any process's memory (several workers close tasks at once):

- `add_blockers` refuses an unknown blocker, one of another team, one that failed already,
  a repeat, and a cycle, with one line; the caller's transaction then writes nothing.
- `settle` runs in the transaction that closes a task. Completed: it locks the task's
  pending dependents (in id order, so two closes never deadlock) and, for each whose
  blockers are now all completed, claims its start with a conditional UPDATE
  (`start_claimed_at` set once). Because the dependent's row is locked before its blockers
  are read, two blockers completing at once on two workers cannot both miss the other's
  completion (the second waits for the first's commit and then sees it), nor both claim.
  Failed (archived): its pending dependents are archived with the reason
  "blocked by task X, which failed", and theirs in turn, transitively.
- `before_claim` runs in the transaction of a run's claim: a task with open blockers stays
  pending with a reason; a task without assignees gets one idle active member (not the
  lead, with a usable runtime) while its row is locked, so at most one member takes it.

Above `models.task` and `models.team`; never imports Prefect or `flows`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col

from models.base import rowcount, table_of, utcnow
from models.task import TaskError, TaskRow, TaskState
from models.task_status import TaskStatusRow
from models.team import Member, get_team

FAILED_BLOCKER = "blocked by task {id}, which failed"
START_FAILED = "its blockers completed but its run could not be started"
"""The start of a claimed task's run failed; the reason's first words (the watchdog retries)."""
NO_IDLE_MEMBER = "no idle active member with a usable runtime to take it"


class TaskDependencyRow(SQLModel, table=True):
    """`task_id` cannot start before `blocked_by` has completed."""

    __tablename__ = "task_dependencies"

    task_id: uuid.UUID = SQLField(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
        )
    )
    blocked_by: uuid.UUID = SQLField(
        sa_column=sa.Column(
            sa.Uuid, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True, index=True
        )
    )


_deps = table_of(TaskDependencyRow)
_tasks = table_of(TaskRow)


def short(task_id: uuid.UUID | str) -> str:
    """The first 8 characters of a task id, as lists show it."""
    return str(task_id)[:8]


def _parse(task_id: str | uuid.UUID) -> uuid.UUID:
    try:
        return task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id))
    except ValueError:
        raise TaskError(f"--blocked-by {task_id!r} is not a task id (a UUID)") from None


def add_blockers(task: TaskRow, blocked_by: Iterable[str | uuid.UUID], *, session: Session) -> None:
    """Records that `task` is blocked by each of `blocked_by` (ids of tasks of its team).

    Raises `TaskError` (one line) for a malformed, unknown, repeated or other team's id, a
    blocker that failed (archived: the task could never start), or a cycle.
    """
    ids = [_parse(i) for i in blocked_by]
    if len(set(ids)) != len(ids):
        raise TaskError("--blocked-by names the same task twice")
    for blocker_id in ids:
        row = session.execute(
            sa.select(_tasks.c.team, _tasks.c.status).where(_tasks.c.id == blocker_id)
        ).first()
        if row is None:
            raise TaskError(f"--blocked-by {blocker_id}: no task with this id")
        if row.team != task.team:
            raise TaskError(
                f"--blocked-by {blocker_id}: that task is of team {row.team!r}, not {task.team!r}"
            )
        if row.status == TaskState.ARCHIVED.value:
            raise TaskError(
                f"--blocked-by {blocker_id}: that task failed (archived); "
                "this one could never start"
            )
        path = _path(session, blocker_id, task.id)
        if path is not None:
            chain = " -> ".join(short(i) for i in [task.id, *path])
            raise TaskError(f"--blocked-by {blocker_id} would make a dependency cycle: {chain}")
    if ids:
        session.execute(sa.insert(_deps), [{"task_id": task.id, "blocked_by": b} for b in ids])


def _path(session: Session, start: uuid.UUID, goal: uuid.UUID) -> list[uuid.UUID] | None:
    """A chain of blockers from `start` (blocked by ... blocked by) to `goal`, if one exists."""
    came_from: dict[uuid.UUID, uuid.UUID | None] = {start: None}
    frontier = [start]
    while frontier:
        if goal in came_from:
            break
        rows = session.execute(
            sa.select(_deps.c.task_id, _deps.c.blocked_by).where(_deps.c.task_id.in_(frontier))
        ).all()
        frontier = []
        for task_id, blocker in rows:
            if blocker not in came_from:
                came_from[blocker] = task_id
                frontier.append(blocker)
    if goal not in came_from:
        return None
    chain = [goal]
    while (step := came_from[chain[-1]]) is not None:
        chain.append(step)
    return list(reversed(chain))


def blockers_of(task_ids: Iterable[uuid.UUID], *, session: Session) -> dict[uuid.UUID, list[str]]:
    """Each task's blocker ids (strings), in id order; tasks without blockers are left out."""
    ids = list(task_ids)
    found: dict[uuid.UUID, list[str]] = {}
    if not ids:
        return found
    rows = session.execute(
        sa.select(_deps.c.task_id, _deps.c.blocked_by)
        .where(_deps.c.task_id.in_(ids))
        .order_by(_deps.c.task_id, _deps.c.blocked_by)
    ).all()
    for task_id, blocker in rows:
        found.setdefault(task_id, []).append(str(blocker))
    return found


def open_blockers(task_id: uuid.UUID, *, session: Session) -> list[tuple[uuid.UUID, str]]:
    """The blockers of `task_id` that have not completed: (id, status)."""
    rows = session.execute(
        sa.select(_tasks.c.id, _tasks.c.status)
        .join(_deps, _deps.c.blocked_by == _tasks.c.id)
        .where(_deps.c.task_id == task_id, _tasks.c.status != TaskState.COMPLETED.value)
        .order_by(_tasks.c.id)
    ).all()
    return [(r.id, r.status) for r in rows]


def describe_open(blockers: list[tuple[uuid.UUID, str]]) -> str:
    """`blocked by task 1a2b... (pending), ...`: one line naming the open blockers."""
    return "blocked by " + ", ".join(f"task {b} ({status})" for b, status in blockers)


def _not_done():
    """SQL: the dependent (tasks row) has a blocker that has not completed."""
    blocker = _tasks.alias("blocker")
    return sa.exists(
        sa.select(1)
        .select_from(_deps.join(blocker, blocker.c.id == _deps.c.blocked_by))
        .where(_deps.c.task_id == _tasks.c.id, blocker.c.status != TaskState.COMPLETED.value)
    )


def claim_start(task_id: uuid.UUID, *, session: Session) -> bool:
    """Claims starting the run of `task_id` (pending, all blockers completed, not claimed
    before): a conditional UPDATE, so of several claimants exactly one gets True."""
    claimed = rowcount(
        session.execute(
            sa.update(_tasks)
            .where(
                _tasks.c.id == task_id,
                _tasks.c.status == TaskState.PENDING.value,
                _tasks.c.start_claimed_at.is_(None),
                ~_not_done(),
            )
            .values(start_claimed_at=utcnow(), reason=None, updated_at=utcnow())
        )
    )
    return claimed == 1


def unstarted(claimed_before: datetime, *, session: Session) -> list[tuple[uuid.UUID, str]]:
    """The (id, team) of the tasks whose start a blocker's close claimed before
    `claimed_before` and that no run has taken (still pending, with no reason but a failed
    start's): the process that claimed them died between its commit and the start, or the
    server refused the start. A run taking the task moves it on, or records why not."""
    reason = _tasks.c.reason
    rows = session.execute(
        sa.select(_tasks.c.id, _tasks.c.team)
        .where(
            _tasks.c.status == TaskState.PENDING.value,
            _tasks.c.start_claimed_at < claimed_before,
            sa.or_(reason.is_(None), reason.startswith(START_FAILED)),
        )
        .order_by(_tasks.c.start_claimed_at)
    ).all()
    return [(r.id, r.team) for r in rows]


def dependents(task_id: uuid.UUID, *, session: Session) -> list[uuid.UUID]:
    """The tasks `task_id` blocks, in id order."""
    return list(
        session.execute(
            sa.select(_deps.c.task_id)
            .where(_deps.c.blocked_by == task_id)
            .order_by(_deps.c.task_id)
        ).scalars()
    )


def settle(task_id: uuid.UUID, completed: bool, *, session: Session) -> list[tuple[uuid.UUID, str]]:
    """In the transaction that closes `task_id`: its dependents' fate.

    Completed: the dependents now ready, each claimed for starting exactly once (their
    (id, team) returned: the caller starts their runs after the commit). Failed: its pending
    dependents, and theirs, are archived with the reason; nothing is returned.
    """
    if not completed:
        fail_dependents(task_id, session=session)
        return []
    waiting = dependents(task_id, session=session)
    if not waiting:
        return []
    # Lock the dependents before reading their blockers (see the module's docstring).
    rows = session.execute(
        sa.select(_tasks.c.id, _tasks.c.team)
        .where(_tasks.c.id.in_(waiting), _tasks.c.status == TaskState.PENDING.value)
        .order_by(_tasks.c.id)
        .with_for_update()
    ).all()
    return [(r.id, r.team) for r in rows if claim_start(r.id, session=session)]


def fail_dependents(task_id: uuid.UUID, *, session: Session) -> list[uuid.UUID]:
    """Archives the pending tasks blocked by failed `task_id`, and theirs, transitively,
    each with the reason naming the blocker that failed. Returns their ids."""
    failed: list[uuid.UUID] = []
    frontier = [task_id]
    while frontier:
        blocker = frontier.pop(0)
        for dependent in dependents(blocker, session=session):
            moved = rowcount(
                session.execute(
                    sa.update(_tasks)
                    .where(_tasks.c.id == dependent, _tasks.c.status == TaskState.PENDING.value)
                    .values(
                        status=TaskState.ARCHIVED.value,
                        reason=FAILED_BLOCKER.format(id=blocker),
                        updated_at=utcnow(),
                    )
                )
            )
            if moved:
                failed.append(dependent)
                frontier.append(dependent)
    return failed


def set_reason(task_id: uuid.UUID, reason: str | None, *, session: Session) -> None:
    """Records why the task is where it is (None: clears it)."""
    session.execute(
        sa.update(_tasks).where(_tasks.c.id == task_id).values(reason=reason, updated_at=utcnow())
    )


# --- tasks without assignees ------------------------------------------------------------------


def task_needs(
    title: str, description: str | None, params: dict | None, *, session: Session
) -> list[str]:
    """The capabilities (tool ids) a task asks for: its `params["capabilities"]`, else the
    registered tools its title or description names."""
    import re

    from models.tool import list_tools

    given = (params or {}).get("capabilities")
    if isinstance(given, list):
        return [str(c) for c in given]
    words = set(re.findall(r"[\w.-]+", f"{title} {description or ''}"))
    return [t.tool_id for t in list_tools(session=session) if t.tool_id in words]


def _best_fit(session: Session, task: Any, free: list[str]) -> list[str]:
    """The idle members, those whose capabilities match the task's needs first."""
    from models.notify import matching

    needs = task_needs(task.title, task.description, task.params, session=session)
    if not needs or len(free) < 2:
        return free
    members = table_of(Member)
    runtimes: dict[str, Any] = {
        name: runtime
        for name, runtime in session.execute(
            sa.select(members.c.name, members.c.runtime).where(
                members.c.team == task.team, members.c.name.in_(free)
            )
        ).all()
    }
    return matching(needs, [(n, runtimes.get(n)) for n in free], session=session)


def idle_members(team: str, usable: Callable[[dict], bool], *, session: Session) -> list[str]:
    """The team's members free to take a task: active, not the lead, runtime usable, not
    running a task and not assigned to a task in progress; in the team's order."""
    from models.task import TaskAssigneeRow

    lead = get_team(team, session=session).lead
    members = session.execute(
        sa.select(col(Member.name), col(Member.runtime))
        .where(
            col(Member.team) == team, col(Member.is_active) == sa.true(), col(Member.name) != lead
        )
        .order_by(col(Member.position))
    ).all()
    running = set(
        session.execute(
            sa.select(col(TaskStatusRow.member)).where(
                col(TaskStatusRow.team) == team, col(TaskStatusRow.status) == "running"
            )
        ).scalars()
    )
    assignees = table_of(TaskAssigneeRow)
    working = set(
        session.execute(
            sa.select(assignees.c.assignee_id)
            .join(_tasks, _tasks.c.id == assignees.c.task_id)
            .where(_tasks.c.team == team, _tasks.c.status == TaskState.IN_PROGRESS.value)
        ).scalars()
    )
    return [
        m.name
        for m in members
        if m.name not in running and m.name not in working and usable(dict(m.runtime or {}))
    ]


def before_claim(
    task_id: uuid.UUID, usable: Callable[[dict], bool], *, session: Session
) -> tuple[list[str], str | None]:
    """In the transaction of a run's claim: the task's assignees, and why it must stay
    pending (None: it may be claimed).

    Open blockers keep it pending. A pending task without assignees gets an idle member
    (`idle_members`): the first whose tools cover most of what the task needs
    (`task_needs`), else the first; its row is locked first, so of two runs at most one
    assigns.
    """
    from models.task import TaskAssigneeRow

    blockers = open_blockers(task_id, session=session)
    assignees = table_of(TaskAssigneeRow)

    def current() -> list[str]:
        return list(
            session.execute(
                sa.select(assignees.c.assignee_id)
                .where(assignees.c.task_id == task_id)
                .order_by(assignees.c.position)
            ).scalars()
        )

    if blockers:
        return current(), describe_open(blockers)
    row = session.execute(
        sa.select(
            _tasks.c.team, _tasks.c.status, _tasks.c.title, _tasks.c.description, _tasks.c.params
        )
        .where(_tasks.c.id == task_id)
        .with_for_update()
    ).first()
    names = current()
    if names or row is None or row.status != TaskState.PENDING.value:
        return names, None
    free = idle_members(row.team, usable, session=session)
    if not free:
        return [], NO_IDLE_MEMBER
    free = _best_fit(session, row, free)
    session.execute(sa.insert(assignees).values(task_id=task_id, assignee_id=free[0], position=0))
    return [free[0]], None
