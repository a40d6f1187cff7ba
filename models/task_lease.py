"""Which run holds a team task, and resuming a task whose run died (issue 31).

A task's `lease` is raised each time a run takes it: the run that claims it (pending ->
in_progress, `claim_lease`) and each run that resumes it (`decide_resume` by the watchdog,
`resume_task` by hand, then `take` by the new run). A run remembers the lease it took, and
every write of its steps first checks it still holds it (`hold`, a conditional update in the
write's own transaction): a run that was declared dead and comes back (a worker frozen, then
thawed) finds its lease superseded and stops before it acts again, so a member's work never
runs twice at once.

A resume keeps the task's `attempt` (its steps' journal, `models.journal`, goes on where it
stopped); `teamflow task run` after a failure starts a new attempt, from the first step.
Automatic resumes are bounded (`TEAMFLOW_RESUME_ATTEMPTS`) and wait longer each time
(`TEAMFLOW_RESUME_BACKOFF_SECONDS`, doubled at each): `resume_at` says when the resume's run
is to start, and the watchdog starts it (`due_resumes`, `resume_started`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.base import rowcount, table_of, utcnow
from models.db import session_scope
from models.settings import get_settings
from models.task import TaskError, TaskRow, TaskState


class Superseded(Exception):
    """The run's lease on its task was taken by a resumed run: it stops before acting."""

    def __init__(self, task_id: str, lease: int) -> None:
        super().__init__(task_id, lease)
        self.task_id, self.lease = task_id, lease

    def __str__(self) -> str:
        return (
            f"this run's lease {self.lease} on task {self.task_id} was taken by a resumed run; "
            "it stops before it acts again"
        )


def _id(task_id: str | uuid.UUID) -> uuid.UUID:
    return task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id))


def hold(task_id: str | uuid.UUID, lease: int, *, session: Session) -> None:
    """Raises `Superseded` unless the task's lease is still `lease`.

    A conditional update, not a read: on PostgreSQL it locks the task's row (and on SQLite
    the database) until the caller's transaction ends, so a resume decided meanwhile waits
    for the write it supersedes, or the write sees it.
    """
    table = table_of(TaskRow)
    held = rowcount(
        session.execute(
            sa.update(table)
            .where(table.c.id == _id(task_id), table.c.lease == lease)
            .values(lease=table.c.lease)
        )
    )
    if held != 1:
        raise Superseded(str(task_id), lease)


def claim_lease(
    task_id: str | uuid.UUID, run_id: str | None, worker: str | None, *, session: Session
) -> int:
    """After a fresh claim (pending -> in_progress, in the same transaction): the claimant
    takes the next lease. Returns it."""
    table = table_of(TaskRow)
    session.execute(
        sa.update(table)
        .where(table.c.id == _id(task_id))
        .values(lease=table.c.lease + 1, run_id=run_id, worker=worker, resume_at=None)
    )
    return int(session.execute(sa.select(table.c.lease).where(table.c.id == _id(task_id))).one()[0])


def take(
    task_id: str | uuid.UUID, lease: int, run_id: str | None, worker: str | None, *,
    session: Session,
) -> bool:  # fmt: skip
    """A resume's run takes the lease decided for it; False if the task moved on since (it
    closed, or a later resume superseded this one)."""
    table = table_of(TaskRow)
    return (
        rowcount(
            session.execute(
                sa.update(table)
                .where(
                    table.c.id == _id(task_id),
                    table.c.lease == lease,
                    table.c.status == TaskState.IN_PROGRESS.value,
                )
                .values(run_id=run_id, worker=worker, resume_at=None)
            )
        )
        == 1
    )


def backoff(resumes: int) -> float:
    """Seconds before the `resumes`-th resume's run starts: the setting, doubled each time."""
    return get_settings().resume_backoff_seconds * 2 ** max(0, resumes - 1)


def decide_resume(row: TaskRow, why: str, now: datetime, *, session: Session) -> int | None:
    """The watchdog's choice for an in-progress task whose run died: a resume (the next
    lease, its run due after the backoff; the number of this resume returned), or None when
    the task has used its resumes (the caller closes it as failed)."""
    limit = get_settings().resume_attempts
    if row.resumes >= limit:
        return None
    number = row.resumes + 1
    table = table_of(TaskRow)
    won = rowcount(
        session.execute(
            sa.update(table)
            .where(
                table.c.id == row.id,
                table.c.lease == row.lease,
                table.c.status == TaskState.IN_PROGRESS.value,
            )
            .values(
                lease=table.c.lease + 1,
                resumes=number,
                run_id=None,
                resume_at=now + timedelta(seconds=backoff(number)),
                reason=f"resumed ({number} of {limit}) after {why}",
                updated_at=now,
            )
        )
    )
    return number if won else None


def resume_task(task_id: str | uuid.UUID, *, session: Session | None = None) -> TaskRow:
    """`teamflow task resume ID`: the task goes on from its last completed step in a new run,
    whatever its automatic resumes: one in progress (its run, if alive, stops at its next
    write), or one closed as failed (archived with a reason). Others are refused."""
    with session_scope(session) as s:
        row = s.get(TaskRow, _id(task_id))
        if row is None:
            raise TaskError(f"no task with id {task_id}")
        failed = row.status == TaskState.ARCHIVED.value and bool(row.reason)
        if row.status != TaskState.IN_PROGRESS.value and not failed:
            raise TaskError(
                f"task {row.id} is {row.status}: only a task in progress or one that failed "
                "can be resumed (`teamflow task run` starts a pending one)"
            )
        table = table_of(TaskRow)
        now = utcnow()
        won = rowcount(
            s.execute(
                sa.update(table)
                .where(table.c.id == row.id, table.c.lease == row.lease)
                .values(
                    status=TaskState.IN_PROGRESS.value,
                    lease=table.c.lease + 1,
                    resumes=table.c.resumes + 1,
                    run_id=None,
                    resume_at=now,
                    reason=f"resumed by hand ({row.resumes + 1})",
                    updated_at=now,
                )
            )
        )
        if not won:
            raise TaskError(f"task {row.id} changed while it was being resumed; try again")
        s.refresh(row)
        return row


@dataclass(frozen=True)
class DueResume:
    """A decided resume whose run is to be started."""

    task_id: str
    team: str
    title: str
    assignees: list[str]
    attempt: int
    lease: int
    resumes: int
    at: datetime


def due_resumes(*, session: Session | None = None) -> list[DueResume]:
    """The decided resumes whose run has not been started yet."""
    with session_scope(session) as s:
        rows = s.exec(
            select(TaskRow).where(
                col(TaskRow.resume_at).is_not(None),
                TaskRow.status == TaskState.IN_PROGRESS.value,
            )
        )
        return [
            DueResume(
                task_id=str(r.id),
                team=r.team or "",
                title=r.title,
                assignees=[a.assignee_id for a in r.assignees],
                attempt=r.attempt,
                lease=r.lease,
                resumes=r.resumes,
                at=r.resume_at or utcnow(),
            )
            for r in rows
        ]


def resume_started(task_id: str, lease: int, *, session: Session | None = None) -> None:
    """The resume's run was created: it is not to be started again."""
    table = table_of(TaskRow)
    with session_scope(session) as s:
        s.execute(
            sa.update(table)
            .where(table.c.id == _id(task_id), table.c.lease == lease)
            .values(resume_at=None)
        )


def resume_run_key(task_id: str, attempt: int, lease: int) -> str:
    """The idempotency key of a resume's run: one run per lease."""
    return f"team-task-{task_id}-{attempt}-lease-{lease}"
