"""The step journal: each step of a member on a team task, durable with an idempotency key.

A member's work on a task (`flows/steps.py`) writes, per step, its Chimera response (part
`response`), each action before it runs (`action-N`, state `started`, with what it needs
to run it the same way again: the ASYNC action's `task_id`, the plan's `request_id`) and
after (state `done`, with its outcome), and, with the step's conversation, where the
member's work stands (`step`). The key is the task, its attempt, the member, the step and
the part (`journal_key`), so a run that resumes the attempt (`models.task_lease`) finds
what was done: it does not ask for a recorded response again, does not run a completed
action again (its recorded result is given back), and knows which action was running when
its worker died (the only one that may run twice).

Every write first checks the run's lease on the task (`models.task_lease.hold`) in the same
transaction: a superseded run writes nothing and stops.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, select

from models.base import json_column, utc_column, utcnow
from models.db import session_scope
from models.task_lease import hold

STARTED, DONE = "started", "done"
RESPONSE, STEP = "response", "step"


def action_part(position: int) -> str:
    """The part of the step's action at `position` (0-based)."""
    return f"action-{position}"


def journal_key(task_id: str, attempt: int, member: str, step: int, part: str) -> str:
    """The idempotency key of one part of one step: task attempt, member, step, part."""
    return f"{task_id}/{attempt}/{member}/{step}/{part}"


class StepRecord(SQLModel, table=True):
    """One part of one step of a member's work on a team task (see the module docstring)."""

    __tablename__ = "step_journal"
    __table_args__ = (sa.Index("ix_step_journal_task_member", "task_id", "attempt", "member"),)

    key: str = Field(primary_key=True, max_length=255)
    task_id: str = Field(max_length=64)
    attempt: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    member: str = Field(max_length=64)
    step: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    part: str = Field(max_length=32, description="response, step, or action-N")
    state: str = Field(max_length=16, description="started or done")
    data: dict = Field(default_factory=dict, sa_column=json_column(nullable=False))
    lease: int = Field(
        sa_column=sa.Column(sa.Integer, nullable=False), description="The lease of the writer"
    )
    written_at: datetime = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))


def load(task_id: str, attempt: int, member: str, *, session: Session | None = None) -> dict:
    """The member's records on the task's attempt: `{(step, part): (state, data)}`."""
    with session_scope(session) as s:
        rows = s.exec(
            select(StepRecord).where(
                StepRecord.task_id == task_id,
                StepRecord.attempt == attempt,
                StepRecord.member == member,
            )
        )
        return {(r.step, r.part): (r.state, dict(r.data)) for r in rows}


def write(
    task_id: str, attempt: int, lease: int, member: str, step: int, part: str, state: str,
    data: dict[str, Any], *, session: Session | None = None,
) -> None:  # fmt: skip
    """Records one part of a step (replacing what its key held), if the writer's `lease`
    still holds the task; `models.task_lease.Superseded` otherwise (nothing written)."""
    key = journal_key(task_id, attempt, member, step, part)
    with session_scope(session) as s:
        hold(task_id, lease, session=s)
        row = s.get(StepRecord, key)
        if row is None:
            row = StepRecord(
                key=key, task_id=task_id, attempt=attempt, member=member, step=step, part=part,
                state=state, data=data, lease=lease,
            )  # fmt: skip
        else:
            row.state, row.data, row.lease, row.written_at = state, data, lease, utcnow()
        s.add(row)
        s.flush()


def delivered(team: str, member: str, task_ids: list[str], *, session: Session) -> set[str]:
    """Those of the ASYNC actions `task_ids` whose `tool_result` reached the member's inbox."""
    from models import inbox

    if not task_ids:
        return set()
    sent = inbox.messages(team, member, sender="system", session=session)
    wanted = set(task_ids)
    found = {str((m.meta or {}).get("task_id")) for m in sent if m.type == "tool_result"}
    return found & wanted
