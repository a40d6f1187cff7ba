"""`teamflow metrics`' table, `headline`: per member of a team, the figures people look at
first, from one statement (issue 35: under 0.5 s at 1,000,000 rows). Re-exported by
`models.metrics`, where the metrics it sums up are."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from models import db
from models.agent import AgentStateHistoryRow
from models.approval import PlanApproval
from models.base import table_of
from models.inbox_table import InboxRow
from models.metric_frames import (
    Since,
    as_time,
    in_window,
    read_frame,
    seconds_between,
    window_start,
)
from models.task import TaskMetricsRow
from models.team import Member

if TYPE_CHECKING:
    import pandas as pd


def headline(team: str, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """What `teamflow metrics` shows, per member of `team` (and anyone with metrics):
    tasks, failed, p50 duration, tokens, p50 plan wait (request to decision), unread, and
    seconds busy / idle / offline (`liveness`; NaN for a member with no recorded status).

    One statement: the figures of `member_work`, `approval_waits`, `unread_backlog` and
    `liveness` as its parts, each reading its table once through its index, and the p50s
    (linear between the two middle values, as pandas' median) ranked in the database."""
    frame = read_frame(_headline_statement(team, window_start(since), url), url)
    for column in ("tasks", "failed", "tokens", "tool_calls", "tool_failures", "plans", "unread"):
        frame[column] = frame[column].fillna(0).astype(int)
    for column in ("p50_duration_s", "p50_plan_wait_s", "busy_s", "idle_s", "offline_s"):
        frame[column] = frame[column].astype(float)
    if db.engine(url).dialect.name == "sqlite":
        # SQLite's times difference is julianday's (a float of days: about 40 us off), so
        # the wait is given to the millisecond, as the times were recorded.
        frame["p50_plan_wait_s"] = frame["p50_plan_wait_s"].round(3)
    frame.insert(0, "team", team)
    return frame.sort_values("member", ignore_index=True)


def _median(member: Any, value: Any, where: Any, name: str) -> Any:
    """Per member, the median of `value` over the rows `where` selects: the middle value, or
    the mean of the two middle ones."""
    rank = sa.func.row_number().over(partition_by=member, order_by=value)
    n = sa.func.count().over(partition_by=member)
    ranked = where(
        sa.select(member.label("member"), value.label("v"), rank.label("rn"), n.label("n"))
    ).subquery(f"{name}_ranked")
    middle = sa.or_(ranked.c.rn == (ranked.c.n + 1) // 2, ranked.c.rn == (ranked.c.n + 2) // 2)
    return (
        sa.select(ranked.c.member, sa.func.avg(ranked.c.v).label(name))
        .where(middle)
        .group_by(ranked.c.member)
        .cte(name)
    )


def _headline_statement(team: str, start: datetime | None, url: str | None) -> sa.Select:
    M, P, I, H = (  # noqa: E741
        table_of(model).c
        for model in (TaskMetricsRow, PlanApproval, InboxRow, AgentStateHistoryRow)
    )
    postgres = db.engine(url).dialect.name == "postgresql"
    least, greatest = (sa.func.least, sa.func.greatest) if postgres else (sa.func.min, sa.func.max)
    work = in_window(
        sa.select(
            M.member.label("member"),
            sa.func.count(sa.distinct(M.task_id)).label("tasks"),
            sa.func.count().filter(M.ok.is_(False)).label("failed"),
            sa.func.sum(M.tokens).label("tokens"),
            sa.func.sum(M.tool_calls).label("tool_calls"),
            sa.func.sum(M.tool_failures).label("tool_failures"),
        ).group_by(M.member),
        M, team, start, M.started_at,
    ).cte("work")  # fmt: skip
    durations = _median(
        M.member, M.duration_s,
        lambda q: in_window(q.where(M.duration_s.is_not(None)), M, team, start, M.started_at),
        "p50_duration_s",
    )  # fmt: skip
    plans = in_window(
        sa.select(P.member.label("member"), sa.func.count().label("plans")).group_by(P.member),
        P, team, start, P.requested_at,
    ).cte("plans")  # fmt: skip
    waits = _median(
        P.member, seconds_between(P.decided_at, P.requested_at, url),
        lambda q: in_window(q.where(P.decided_at.is_not(None)), P, team, start, P.requested_at),
        "p50_plan_wait_s",
    )  # fmt: skip
    unread = (
        sa.select(I.recipient.label("member"), sa.func.count().label("unread"))
        .where(I.team == team, I.read == sa.false())
        .group_by(I.recipient)
        .cte("unread")
    )
    now = datetime.now(UTC)
    end = least(sa.func.coalesce(H.ended_at, as_time(now)), as_time(now))
    begin = H.changed_at if start is None else greatest(H.changed_at, as_time(start))
    spans = sa.select(
        H.member.label("member"),
        H.status.label("status"),
        sa.func.sum(seconds_between(end, begin, url)).label("seconds"),
    ).where(H.team == team, H.changed_at < as_time(now))
    if start is not None:
        spans = spans.where(sa.or_(H.ended_at.is_(None), H.ended_at > as_time(start)))
    statuses = spans.group_by(H.member, H.status).subquery("statuses")
    seconds = sa.func.round(sa.cast(greatest(statuses.c.seconds, 0.0), sa.Numeric), 3)

    def spent(*names: str) -> Any:
        return sa.func.sum(sa.case((statuses.c.status.in_(names), seconds), else_=0))

    alive = (
        sa.select(
            statuses.c.member,
            spent("thinking", "executing_tools").label("busy_s"),
            spent("idle").label("idle_s"),
            spent("offline").label("offline_s"),
        )
        .group_by(statuses.c.member)
        .cte("alive")
    )
    parts = (work, durations, plans, waits, unread, alive)
    keys = sa.union(
        sa.select(table_of(Member).c.name.label("member")).where(table_of(Member).c.team == team),
        *(sa.select(part.c.member) for part in parts),
    ).cte("keys")
    stmt = sa.select(
        keys.c.member,
        work.c.tasks, work.c.failed, durations.c.p50_duration_s, work.c.tokens,
        work.c.tool_calls, work.c.tool_failures, plans.c.plans, waits.c.p50_plan_wait_s,
        unread.c.unread, alive.c.busy_s, alive.c.idle_s, alive.c.offline_s,
    ).select_from(keys)  # fmt: skip
    for part in parts:
        stmt = stmt.outerjoin(part, part.c.member == keys.c.member)
    return stmt
