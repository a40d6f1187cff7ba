"""teamflow workers' own heartbeats, in teamflow's database (issue 31, item 4).

Prefect marks a run Crashed when the run's heartbeats stop; under heavy load a live run's
heartbeats can stop for a while too. Before a task's run is declared dead (and its task
closed or resumed), the watchdog asks here whether the worker that runs it still beats: a
worker beats every few seconds from a thread of its own (`flows/worker.py`), so a slow run
in a live worker keeps its task. A worker whose last beat is older than
`TEAMFLOW_WORKER_ALIVE_SECONDS` is taken for dead (killed, or frozen); so is a run its
worker no longer lists (it ended there, or broke off).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import Field, Session, SQLModel, select

from models.base import json_column, utc_column, utcnow
from models.db import session_scope
from models.settings import get_settings


class WorkerBeat(SQLModel, table=True):
    """The last heartbeat of one teamflow worker (by its name)."""

    __tablename__ = "worker_beats"

    name: str = Field(primary_key=True, max_length=255)
    pid: int = Field(default=0)
    host: str = Field(default="", max_length=255)
    beat_at: datetime = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    runs: list = Field(
        default_factory=list,
        sa_column=json_column(nullable=False),
        description="The flow runs it ran in its process at its last beat",
    )


def beat(
    name: str, pid: int, host: str, runs: list[str] = (),  # type: ignore[assignment]  # a tuple, never mutated
    *, session: Session | None = None,
) -> None:  # fmt: skip
    """Records that worker `name` is alive now, running `runs`."""
    with session_scope(session) as s:
        row = s.get(WorkerBeat, name)
        if row is None:
            row = WorkerBeat(name=name, pid=pid, host=host)
        row.pid, row.host, row.beat_at, row.runs = pid, host, utcnow(), list(runs)
        s.add(row)
        s.flush()


def still_runs(
    name: str | None, run_id: str, *, now: datetime | None = None, session: Session | None = None
) -> bool:
    """Whether worker `name` beat within `TEAMFLOW_WORKER_ALIVE_SECONDS` and still ran the
    flow run `run_id` then (False for a worker that never beat: nothing says it lives)."""
    if not name:
        return False
    window = timedelta(seconds=get_settings().worker_alive_seconds)
    with session_scope(session) as s:
        row = s.get(WorkerBeat, name)
        if row is None or (now or utcnow()) - row.beat_at > window:
            return False
        return run_id in (row.runs or [])


def live_runs(*, now: datetime | None = None, session: Session | None = None) -> set[str]:
    """The flow runs that workers which beat within `TEAMFLOW_WORKER_ALIVE_SECONDS` ran then."""
    since = (now or utcnow()) - timedelta(seconds=get_settings().worker_alive_seconds)
    with session_scope(session) as s:
        rows = s.exec(select(WorkerBeat).where(WorkerBeat.beat_at >= since))
        return {run for row in rows for run in (row.runs or [])}


def last_beat(name: str, *, session: Session | None = None) -> WorkerBeat | None:
    """Worker `name`'s last beat, if it ever beat."""
    with session_scope(session) as s:
        row = s.get(WorkerBeat, name)
        if row is not None:
            s.expunge(row)
        return row


def forget_runs(name: str, beat_at: datetime, *, session: Session | None = None) -> bool:
    """Empties worker `name`'s list of runs, unless it beat again after `beat_at` (a frozen
    worker thawed: its new list stands). True when emptied."""
    with session_scope(session) as s:
        row = s.get(WorkerBeat, name)
        if row is None or row.beat_at > beat_at:
            return False
        row.runs = []
        s.add(row)
        s.flush()
        return True
