"""The watchdog's decisions: which conditions of a team deserve an ALARM, once each.

Pure over the database and a given "now" (the `watchdog` flow in `flows/watchdog.py` reads
Prefect's run states, calls `scan`, and delivers what it returns). Conditions:

- `offline:{team}:{member}`: a member that should be heartbeating has not for longer than
  the team's `offline_after_seconds` (default 300). Should be: its run is active (its
  `agent_state` is `thinking` or `executing_tools`, which teamflow renews every 10 s while a
  step runs) and it is not waiting on a plan approval; or it is a connected outside member
  (`--runtime mcp`: every MCP call is a heartbeat, and one that reported `offline` itself has
  left). A member that is idle because its work is done is not offline. The member becomes
  `offline` and the lead gets a `status_update`; the condition lasts while the member stays
  offline (a heartbeat brings it back, see `models.presence.heartbeat`).
- `deadline:{task-id}`: an open task is past its deadline; it lasts until the task closes or
  its deadline moves.
- `crashed:{run-id}`: a run died (Crashed, Failed or Cancelled in Prefect) and left teamflow
  waiting: a team task's run (the task is resumed from its members' last completed steps,
  `models.task_lease.decide_resume`, up to `TEAMFLOW_RESUME_ATTEMPTS` times; then it is
  closed as failed, `failure` says why, and `teamflow task run ID` starts it again, see
  `reopen_task`); not while the worker that runs it still beats in teamflow's database and
  lists it (`models.worker_beat`): a slow but live run keeps its task), a shutdown's run
  (the shutdown is forced) or a plan request's run (the request stays pending until its
  deadline, where teamflow's clock, `flows/timers.py`, applies the team's timeout policy).
  A dead run stays dead: this condition never clears.

Each condition is one row of `watchdog_alarms` (its key is the primary key), so it raises one
ALARM however many scans see it. A condition no scan sees any more is cleared; if it comes back,
it alarms again (`times` counts how often).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col, select

from models.agent import AGENT_BUSY, AgentStateRow, AgentStateStatus, change_agent_status
from models.approval import ApprovalStatus, PlanApproval
from models.base import rowcount, table_of, utc_column, utcnow
from models.db import session_scope
from models.presence import tell_lead
from models.settings import get_settings
from models.shutdown import Shutdown, ShutdownStatus, complete_shutdown
from models.task import OPEN_TASK_STATES, TaskError, TaskRow, TaskState
from models.task_lease import backoff, decide_resume
from models.team import Member, Team
from models.team_settings import DEFAULT_OFFLINE_AFTER_S, ApprovalError, ApprovalSettings
from models.worker_beat import still_runs

DEAD_STATES = frozenset({"CRASHED", "FAILED", "CANCELLED"})
"""Prefect state types of a run that will not finish its work."""


class AlarmKind(StrEnum):
    """What a watchdog alarm is about."""

    OFFLINE = "offline"
    DEADLINE = "deadline"
    CRASHED = "crashed"


STICKY = frozenset({AlarmKind.CRASHED})
"""Kinds whose condition never clears (a dead run stays dead)."""


class WatchdogAlarm(SQLModel, table=True):
    """One condition the watchdog alarmed about; `cleared_at` set once it went away."""

    __tablename__ = "watchdog_alarms"
    __table_args__ = (sa.Index("ix_watchdog_alarms_team_cleared", "team", "cleared_at"),)

    key: str = Field(primary_key=True, max_length=255)
    team: str = Field(max_length=64)
    kind: str = Field(max_length=16)
    subject: str = Field(max_length=255, description="The member, task id or run id")
    message: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    times: int = Field(
        default=1,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="1"),
        description="How many times the condition came up (again after clearing)",
    )
    raised_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    delivered_at: Any = Field(default=None, sa_column=utc_column())
    cleared_at: Any = Field(default=None, sa_column=utc_column())

    @property
    def alert_name(self) -> str:
        """The ALARM's `alert_name`: e.g. `offline:research-team:analyst-1`."""
        return self.key


@dataclass(frozen=True)
class DeadRun:
    """A Prefect flow run that ended without finishing (as the flow read it)."""

    id: str
    flow: str
    state: str
    message: str | None = None
    task_id: str | None = None
    idempotency_key: str | None = None
    lease: int | None = None
    """The lease a resume's run was started for (its `lease` parameter)."""

    def describe(self) -> str:
        why = f": {self.message}" if self.message else ""
        return f"its {self.flow} run {self.id} ended {self.state}{why}"


@dataclass(frozen=True)
class Condition:
    key: str
    team: str
    kind: AlarmKind
    subject: str
    message: str


def task_run_key(task_id: str | uuid.UUID, attempt: int) -> str:
    """The idempotency key of a task's `team-task` run: `team-task-{id}`, then `-{attempt}`
    for each start after a failure (so a new run starts, not the dead one handed back)."""
    return f"team-task-{task_id}" if not attempt else f"team-task-{task_id}-{attempt}"


def watched_runs(*, session: Session | None = None) -> list[str]:
    """The runs whose death would leave teamflow waiting: those of open shutdowns and of
    pending plan requests (the flow asks Prefect for their states)."""
    with session_scope(session) as s:
        shutdowns = s.exec(
            select(Shutdown.flow_run_id).where(
                col(Shutdown.completed_at).is_(None), col(Shutdown.flow_run_id).is_not(None)
            )
        )
        plans = s.exec(
            select(PlanApproval.flow_run_id).where(
                PlanApproval.status == ApprovalStatus.PENDING.value,
                col(PlanApproval.flow_run_id).is_not(None),
            )
        )
        return sorted({*shutdowns, *plans})


def scan(
    *,
    now: datetime | None = None,
    dead_runs: Iterable[DeadRun] = (),
    dead_panes: Iterable[tuple[str, str, str]] = (),
    session: Session | None = None,
) -> list[WatchdogAlarm]:
    """Looks at every team as of `now`: acts on what it finds (members offline, tasks of dead
    runs failed, shutdowns of dead runs forced, members whose tmux pane is gone (`dead_panes`:
    team, member, pane) offline with their open tasks freed), records each condition once,
    clears the ones gone. Returns every alarm raised and not delivered yet, oldest first."""
    now = now or utcnow()
    dead = list(dead_runs)
    with session_scope(session) as s:
        conditions = [c for gone in dead_panes if (c := _pane_gone(s, *gone, now=now)) is not None]
        for team in s.exec(select(Team).order_by(Team.name)):
            conditions += _offline(s, team, now)
            conditions += _deadlines(s, team.name, now)
        conditions += _dead_runs(s, dead, now)
        _record(s, conditions, now)
        return list(
            s.exec(
                select(WatchdogAlarm)
                .where(WatchdogAlarm.cleared_at.is_(None), WatchdogAlarm.delivered_at.is_(None))
                .order_by(WatchdogAlarm.raised_at, WatchdogAlarm.key)
            )
        )


def claim_delivery(key: str, raised_at: datetime, *, session: Session | None = None) -> bool:
    """Marks the alarm delivered if nobody did since it was raised; True if this caller won
    (and so delivers it)."""
    table = table_of(WatchdogAlarm)
    with session_scope(session) as s:
        won = rowcount(
            s.execute(
                sa.update(table)
                .where(
                    table.c.key == key,
                    table.c.raised_at == raised_at,
                    table.c.delivered_at.is_(None),
                )
                .values(delivered_at=utcnow())
            )
        )
        return won == 1


def release_delivery(key: str, *, session: Session | None = None) -> None:
    """Undoes `claim_delivery` when the delivery failed: the next scan delivers it."""
    table = table_of(WatchdogAlarm)
    with session_scope(session) as s:
        s.execute(sa.update(table).where(table.c.key == key).values(delivered_at=None))


def alarms(team: str | None = None, *, session: Session | None = None) -> list[WatchdogAlarm]:
    """The alarms recorded (of one team, or all), cleared ones included."""
    with session_scope(session) as s:
        query = select(WatchdogAlarm).order_by(WatchdogAlarm.raised_at, WatchdogAlarm.key)
        if team is not None:
            query = query.where(WatchdogAlarm.team == team)
        return list(s.exec(query))


def reopen_task(task_id: str | uuid.UUID, *, session: Session | None = None) -> TaskRow:
    """Makes a task the watchdog closed as failed pending again, as its next attempt (a new
    `task_run_key`). Any other task is returned unchanged."""
    with session_scope(session) as s:
        row = s.get(TaskRow, uuid.UUID(str(task_id)))
        if row is None:
            raise TaskError(f"no task with id {task_id}")
        if row.status == TaskState.ARCHIVED.value and row.reason:
            table = table_of(TaskRow)
            won = rowcount(
                s.execute(
                    sa.update(table)
                    .where(
                        table.c.id == row.id,
                        table.c.status == TaskState.ARCHIVED.value,
                        table.c.reason.is_not(None),
                    )
                    .values(
                        status=TaskState.PENDING.value,
                        reason=None,
                        attempt=table.c.attempt + 1,
                        updated_at=utcnow(),
                    )
                )
            )
            s.refresh(row)
            if not won:
                return row
        return row


# --- conditions ----------------------------------------------------------------------------


def _offline(s: Session, team: Team, now: datetime) -> list[Condition]:
    try:
        limit = timedelta(seconds=ApprovalSettings.of(team).offline_after_s)
    except ApprovalError:  # one team's broken settings must not stop the watch on all
        limit = timedelta(seconds=DEFAULT_OFFLINE_AFTER_S)
    members = {
        m.agent_id: m
        for m in s.exec(select(Member).where(Member.team == team.name, Member.is_active))
    }
    if not members:
        return []
    found = []
    waiting = set(
        s.exec(
            select(PlanApproval.member).where(
                PlanApproval.team == team.name,
                PlanApproval.status == ApprovalStatus.PENDING.value,
            )
        )
    )
    alarmed = set(
        s.exec(
            select(WatchdogAlarm.subject).where(
                WatchdogAlarm.team == team.name,
                WatchdogAlarm.kind == AlarmKind.OFFLINE.value,
                col(WatchdogAlarm.cleared_at).is_(None),
            )
        )
    )
    states = s.exec(select(AgentStateRow).where(col(AgentStateRow.agent_id).in_(list(members))))
    for state in states:
        member = members[state.agent_id]
        offline = state.status == AgentStateStatus.OFFLINE.value
        if offline and member.name not in alarmed:
            continue  # it said so itself (an outside agent that left): nobody is missing
        if not offline and not _should_beat(member, state.status, waiting):
            continue
        beat = state.last_heartbeat
        stale = beat is not None and now - beat > limit
        if not (offline or stale):
            continue
        since = beat.isoformat() if beat is not None else "never"
        message = (
            f"{member.name} of {team.name} is offline: no heartbeat since {since} "
            f"(offline after {limit.total_seconds():g} s)"
        )
        if not offline:
            # Locked and read again (PostgreSQL): a heartbeat may have just arrived.
            s.refresh(state, with_for_update=True)
            beat = state.last_heartbeat
            if state.status != AgentStateStatus.OFFLINE.value:
                if beat is None or now - beat <= limit:
                    continue  # it has just beaten
                if state.team is None:
                    state.team = team.name
                change_agent_status(state, AgentStateStatus.OFFLINE.value,
                                    member=member.name, now=now, session=s)  # fmt: skip
                tell_lead(team.name, member, AgentStateStatus.OFFLINE.value, message, session=s)
        found.append(
            Condition(
                f"offline:{team.name}:{member.name}",
                team.name,
                AlarmKind.OFFLINE,
                member.name,
                message,
            )
        )
    return found


def _pane_gone(s: Session, team: str, name: str, pane: str, *, now: datetime) -> Condition | None:
    """The member's tmux pane is gone: it is offline at once (the lead is told, and the
    offline alarm follows in this scan) and its open tasks are freed, as a forced shutdown
    frees them; it stays a member, so `teamflow member spawn` can start it again."""
    from models.task_edit import free_tasks

    member = s.get(Member, (team, name))
    if member is None or not member.is_active or member.tmux_pane_id != pane:
        return None  # stopped, or spawned again since
    freed = free_tasks(team, name, why=f"freed: {name}'s tmux pane {pane} is gone", session=s)
    state = s.get(AgentStateRow, member.agent_id)
    if state is None or state.status == AgentStateStatus.OFFLINE.value:
        return None  # never connected, or gone already (and alarmed, if it was missed)
    s.refresh(state, with_for_update=True)
    if state.team is None:
        state.team = team
    tasks = f"; its open tasks were freed: {', '.join(map(str, freed))}" if freed else ""
    message = f"{name} of {team} is offline: its tmux pane {pane} is gone{tasks}"
    change_agent_status(state, AgentStateStatus.OFFLINE.value, member=name, now=now, session=s)
    tell_lead(team, member, AgentStateStatus.OFFLINE.value, message, session=s)
    s.add(state)
    s.flush()
    return Condition(f"offline:{team}:{name}", team, AlarmKind.OFFLINE, name, message)


def _should_beat(member: Member, status: str, waiting: set[str]) -> bool:
    """Whether the member is expected to send heartbeats now: a connected outside member
    always; any other only while its run steps (busy), not while it waits on a plan."""
    if (member.runtime or {}).get("kind") == "mcp":
        return True
    busy = status in {s.value for s in AGENT_BUSY}
    return busy and member.name not in waiting


def _deadlines(s: Session, team: str, now: datetime) -> list[Condition]:
    rows = s.exec(
        select(TaskRow).where(
            TaskRow.team == team,
            col(TaskRow.status).in_([t.value for t in OPEN_TASK_STATES]),
            col(TaskRow.deadline).is_not(None),
            col(TaskRow.deadline) <= now,
        )
    )
    return [
        Condition(
            f"deadline:{row.id}",
            team,
            AlarmKind.DEADLINE,
            str(row.id),
            f"task {row.title!r} ({row.id}) is {row.status} past its deadline "
            f"{row.deadline.isoformat()}",  # type: ignore[union-attr]  # selected IS NOT NULL
        )
        for row in rows
    ]


def _dead_runs(s: Session, dead: list[DeadRun], now: datetime) -> list[Condition]:
    found = []
    known = {
        key
        for key in s.exec(
            select(WatchdogAlarm.key).where(
                col(WatchdogAlarm.key).in_([f"crashed:{run.id}" for run in dead])
            )
        )
    }
    for run in dead:
        key = f"crashed:{run.id}"
        if key in known:  # acted on already: a dead run stays dead
            continue
        condition = (
            _dead_task_run(s, run, now)
            if run.flow == "team-task"
            else _dead_shutdown_run(s, run) or _dead_plan_run(s, run)
        )
        if condition is not None:
            found.append(condition)
    return found


def close_failed(row: TaskRow, reason: str, now: datetime, *, session: Session) -> bool:
    """Closes as failed (archived, with `reason`) the task in progress whose run died and
    whose resumes are used up, if its lease is still the one `row` was read with: a check
    beside this one (two watchdog runs overlap at a window's edge) may have resumed it
    meanwhile, and that resume stands. True if it closed it."""
    table = table_of(TaskRow)
    return bool(
        rowcount(
            session.execute(
                sa.update(table)
                .where(
                    table.c.id == row.id,
                    table.c.status == TaskState.IN_PROGRESS.value,
                    table.c.lease == row.lease,
                )
                .values(status=TaskState.ARCHIVED.value, reason=reason, updated_at=now)
            )
        )
    )


def _dead_task_run(s: Session, run: DeadRun, now: datetime) -> Condition | None:
    try:
        task_id = uuid.UUID(str(run.task_id))
    except ValueError:
        return None
    row = s.get(TaskRow, task_id)
    if row is None or row.status != TaskState.IN_PROGRESS.value:
        return None
    if not _holds(row, run):
        return None  # a run of an earlier attempt, or one a resume superseded
    if still_runs(row.worker, run.id, now=now, session=s):
        return None  # Prefect lost its heartbeats, but its worker still beats and runs it
    resumed = decide_resume(row, run.describe(), now, session=s)
    if resumed is not None:
        limit = get_settings().resume_attempts
        return Condition(
            f"crashed:{run.id}",
            row.team or "",
            AlarmKind.CRASHED,
            run.id,
            f"task {row.title!r} ({row.id}): {run.describe()}; resumed from its members' "
            f"last completed steps (resume {resumed} of {limit}, in {backoff(resumed):g} s)",
        )
    reason = f"failed: {run.describe()}"
    won = close_failed(row, reason, now, session=s)
    if not won:
        return None
    return Condition(
        f"crashed:{run.id}",
        row.team or "",
        AlarmKind.CRASHED,
        run.id,
        f"task {row.title!r} ({row.id}) closed as {reason}; "
        f"`teamflow task run {row.id}` starts it again",
    )


def _holds(row: TaskRow, run: DeadRun) -> bool:
    """Whether the dead `run` is the one that holds the task's current lease."""
    if row.run_id is not None:
        return run.id == row.run_id
    if run.lease is not None:
        return run.lease == row.lease
    return run.idempotency_key is None or run.idempotency_key == task_run_key(row.id, row.attempt)


def _dead_shutdown_run(s: Session, run: DeadRun) -> Condition | None:
    row = s.exec(
        select(Shutdown).where(Shutdown.flow_run_id == run.id, Shutdown.completed_at.is_(None))
    ).first()
    if row is None:
        return None
    approved = row.status == ShutdownStatus.APPROVED.value
    complete_shutdown(
        row.request_id, forced=not approved, cause=f"shutdown run {run.state}", session=s
    )
    how = "completed (the member had approved)" if approved else "forced"
    return Condition(
        f"crashed:{run.id}",
        row.team,
        AlarmKind.CRASHED,
        run.id,
        f"shutdown {row.request_id} of {row.member}: {run.describe()}; the shutdown was {how}",
    )


def _dead_plan_run(s: Session, run: DeadRun) -> Condition | None:
    row = s.exec(
        select(PlanApproval).where(
            PlanApproval.flow_run_id == run.id,
            PlanApproval.status == ApprovalStatus.PENDING.value,
        )
    ).first()
    if row is None:
        return None
    deadline = row.deadline.isoformat() if row.deadline is not None else "its deadline"
    return Condition(
        f"crashed:{run.id}",
        row.team,
        AlarmKind.CRASHED,
        run.id,
        f"plan request {row.request_id} of {row.member}: {run.describe()}; it stays pending "
        f"until {deadline}, when the team's timeout policy decides it "
        f"(or decide it now with `teamflow plan approve|deny`)",
    )


def _record(s: Session, conditions: list[Condition], now: datetime) -> None:
    seen = {c.key for c in conditions}
    stored = {
        row.key: row
        for row in s.exec(
            select(WatchdogAlarm).where(
                sa.or_(
                    col(WatchdogAlarm.key).in_(list(seen)), col(WatchdogAlarm.cleared_at).is_(None)
                )
            )
        )
    }
    for condition in conditions:
        row = stored.get(condition.key)
        if row is None:
            # Another scan at the same time may raise it too: the first insert wins.
            s.execute(
                _insert(s)(table_of(WatchdogAlarm))
                .values(
                    key=condition.key,
                    team=condition.team,
                    kind=condition.kind.value,
                    subject=condition.subject[:255],
                    message=condition.message,
                    times=1,
                    raised_at=now,
                )
                .on_conflict_do_nothing(index_elements=["key"])
            )
        elif row.cleared_at is not None:  # it came back
            row.cleared_at = None
            row.delivered_at = None
            row.raised_at = now
            row.times += 1
            row.message = condition.message
            s.add(row)
    for key, row in stored.items():
        if key not in seen and row.cleared_at is None and row.kind not in STICKY:
            row.cleared_at = now
            s.add(row)
    s.flush()


def _insert(s: Session) -> Any:
    from sqlalchemy.dialects import postgresql, sqlite

    return postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
