"""The metrics people look at, one function per metric: every query behind the notebooks,
`teamflow metrics` and the tests (no SQL for metrics elsewhere).

Each takes `team` (None: every team) and most a time window `since` (a datetime, a
timedelta back from now, or None for all history), and returns a pandas DataFrame. pandas
(the `notebooks` extra) is imported inside the functions, so `models` imports without it.
Counting and summing happen in SQL; only percentiles need the values themselves, and those
queries fetch one float column per row. The indexes they use come with migration
`0006` (`ix_task_metrics_metrics`, covering, and `plan_approvals (team,
requested_at)`);
unread counts use `ix_inbox_messages_unread`.

Sources: `task_metrics` (one row per member per task execution: duration, tokens, steps,
tool calls and failed ones, plan wait, outcome), `plan_approvals`, `inbox_messages`,
`task_status`, `tasks`, `members`, `alert_firings` (alert lateness, through
`ix_alert_firings_metrics` of migration `0008`) and `agent_state_history` (liveness: one row
per status a member was in, from when to when; `ix_agent_state_history_liveness`, `0008`).
The metrics of plan approvals are `models.approval_metrics`; the time window, the read-only
connection and the DataFrames from the driver's rows are `models.metric_frames`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from models import db, durations
from models.agent import AgentStateHistoryRow
from models.alert import AlertFiring
from models.approval import PlanApproval
from models.base import table_of
from models.inbox_table import InboxRow
from models.metric_frames import (
    MetricsError,
    Since,
    as_bool,
    as_time,
    as_utc,
    in_window,
    plain_number,
    quantile_columns,
    raw_time,
    read_frame,
    read_only,
    seconds_between,
    time_bucket,
    window_start,
)
from models.metrics_headline import headline  # noqa: F401 (`teamflow metrics`' table)
from models.task import TaskMetricsRow, TaskRow
from models.task_status import TaskStatusRow
from models.team import Member, Team, TeamError, check_team_name

if TYPE_CHECKING:
    import pandas as pd


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `12h`, `7d`, `2w` as a timedelta; `MetricsError` otherwise."""
    try:
        return durations.parse_duration(text)
    except durations.DurationError as exc:
        raise MetricsError(str(exc)) from None


def check_team(team: str, *, url: str | None = None) -> None:
    """`TeamError` (one line) unless `team` exists."""
    check_team_name(team)
    with read_only(url) as conn:
        found = conn.execute(
            sa.select(table_of(Team).c.name).where(table_of(Team).c.name == team)
        ).first()
    if found is None:
        raise TeamError(f"no team named {team!r}")


# --- work per member -------------------------------------------------------------------------

M = table_of(TaskMetricsRow).c


def member_work(team: str | None, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """Per member (team, member): executions, distinct tasks, done and failed ones, duration
    p50 / p95 / max (seconds), tokens, steps, tool calls, failed tool calls and their rate,
    plan approval wait (seconds, summed). One row per member with metrics in the window."""
    start = window_start(since)
    keys = ["team", "member"]
    sums = in_window(
        sa.select(
            M.team,
            M.member,
            sa.func.count().label("executions"),
            sa.func.count(sa.distinct(M.task_id)).label("tasks"),
            sa.func.count().filter(M.ok.is_(True)).label("done"),
            sa.func.count().filter(M.ok.is_(False)).label("failed"),
            sa.func.sum(M.tokens).label("tokens"),
            sa.func.sum(M.steps).label("steps"),
            sa.func.sum(M.tool_calls).label("tool_calls"),
            sa.func.sum(M.tool_failures).label("tool_failures"),
            sa.func.sum(M.approval_wait_s).label("approval_wait_s"),
            sa.func.count(M.duration_s).label("durations"),
        ).group_by(M.team, M.member),
        M,
        team,
        start,
        M.started_at,
    )
    frame = read_frame(sums, url).set_index(keys)
    if not frame.empty:
        frame = frame.join(_duration_quantiles(frame["durations"], start, url), how="left")
    for column in ("p50_duration_s", "p95_duration_s", "max_duration_s"):
        if column not in frame:
            frame[column] = float("nan")
    calls = frame["tool_calls"].where(frame["tool_calls"] > 0)
    frame["tool_failure_rate"] = (frame["tool_failures"] / calls).astype(float)
    frame = frame.reset_index()
    return frame[
        [
            "team", "member", "executions", "tasks", "done", "failed",
            "p50_duration_s", "p95_duration_s", "max_duration_s", "tokens", "steps",
            "tool_calls", "tool_failures", "tool_failure_rate", "approval_wait_s",
        ]
    ].sort_values(keys, ignore_index=True)  # fmt: skip


QUANTILES = {"p50": 0.5, "p95": 0.95, "max": 1.0}


def _duration_quantiles(counts: pd.Series, start: datetime | None, url: str | None):
    """Per (team, member) of `counts` (how many durations each has in the window): p50, p95
    and max of `duration_s`, interpolated linearly between ranks as pandas and
    `statistics.quantiles(method="inclusive")` do.

    PostgreSQL: `percentile_cont`, which is that interpolation. SQLite: no row is sorted nor
    fetched but the two around each quantile's rank: `ix_task_metrics_durations` (team,
    member, duration_s, started_at) holds each member's durations in order, and a query per
    quantile steps to its rank from the nearer end (LIMIT 2 OFFSET k)."""
    import pandas as pd

    columns = [f"{name}_duration_s" for name in QUANTILES]
    keys = list(counts.index)
    if db.engine(url).dialect.name == "postgresql":
        wanted = [(team, member) for (team, member), n in counts.items() if n]
        stmt = sa.select(
            M.team, M.member,
            *(sa.func.percentile_cont(q).within_group(M.duration_s).label(c)
              for q, c in zip(QUANTILES.values(), columns, strict=True)),
        ).where(sa.tuple_(M.team, M.member).in_(wanted)).group_by(M.team, M.member)  # fmt: skip
        if start is not None:
            stmt = stmt.where(M.started_at >= start)
        if not wanted:
            return pd.DataFrame(columns=columns, index=counts.index)
        return read_frame(stmt, url).set_index(["team", "member"])[columns]
    team_p, member_p = (
        sa.bindparam("team", type_=sa.String),
        sa.bindparam("member", type_=sa.String),
    )
    base = sa.select(M.duration_s).where(
        M.team == team_p, M.member == member_p, M.duration_s.is_not(None)
    )
    if start is not None:
        base = base.where(M.started_at >= start)
    limit_p, offset_p = (
        sa.bindparam("limit", type_=sa.Integer),
        sa.bindparam("off", type_=sa.Integer),
    )
    up = base.order_by(M.duration_s).limit(limit_p).offset(offset_p)
    down = base.order_by(M.duration_s.desc()).limit(limit_p).offset(offset_p)
    out: dict[tuple[str, str], list[float]] = {}
    with read_only(url) as conn:
        for (team_name, member), n in counts.items():
            n = int(n)
            if not n:
                continue
            figures = []
            for q in QUANTILES.values():
                position = (n - 1) * q
                low = int(position)
                high = min(low + 1, n - 1)
                names = {"team": team_name, "member": member, "limit": high - low + 1}
                if low <= n - 1 - high:
                    values = list(conn.execute(up, {**names, "off": low}).scalars())
                else:
                    values = list(conn.execute(down, {**names, "off": n - 1 - high}).scalars())
                    values.reverse()
                value = float(values[0])
                if high > low and position > low:
                    value += (float(values[1]) - value) * (position - low)
                figures.append(value)
            out[(team_name, member)] = figures
    frame = pd.DataFrame.from_dict(out, orient="index", columns=columns)
    frame.index = pd.MultiIndex.from_tuples(list(out), names=["team", "member"])
    return frame.reindex(pd.MultiIndex.from_tuples(keys, names=["team", "member"]))


def executions(team: str | None, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """Every member execution in the window: team, member, task_id, started_at, ended_at,
    duration_s, tokens, ok (for duration histograms and per-execution plots)."""
    stmt = in_window(
        sa.select(
            M.team,
            M.member,
            M.task_id,
            raw_time(M.started_at),
            raw_time(M.ended_at),
            M.duration_s,
            M.tokens,
            M.ok,
        ),
        M,
        team,
        window_start(since),
        M.started_at,
    )
    # Sorted here: SQLite would sort a copy of every row in a temporary B-tree first.
    frame = as_bool(as_utc(read_frame(stmt, url), "started_at", "ended_at"), "ok")
    return frame.sort_values("started_at", kind="stable", ignore_index=True)


def work_over_time(
    team: str | None, since: Since = None, *, freq: str = "day", url: str | None = None
) -> pd.DataFrame:
    """Per hour or day (`freq`) and member: executions started, tokens, steps, tool calls
    and failed ones: the trend of work and cost. Columns: bucket (UTC), team, member, ..."""
    bucket = time_bucket(M.started_at, freq, url).label("bucket")
    stmt = in_window(
        sa.select(
            bucket,
            M.team,
            M.member,
            sa.func.count().label("executions"),
            sa.func.sum(M.tokens).label("tokens"),
            sa.func.sum(M.steps).label("steps"),
            sa.func.sum(M.tool_calls).label("tool_calls"),
            sa.func.sum(M.tool_failures).label("tool_failures"),
        ).group_by(bucket, M.team, M.member),
        M,
        team,
        window_start(since),
        M.started_at,
    ).order_by(bucket, M.team, M.member)
    return as_utc(read_frame(stmt, url), "bucket")


def throughput(
    team: str | None, since: Since = None, *, freq: str = "hour", url: str | None = None
) -> pd.DataFrame:
    """Per hour or day (`freq`) a task execution ended in: tasks finished (distinct), member
    executions, and failed executions. Columns: bucket (UTC), team, tasks, executions, failed."""
    bucket = time_bucket(M.ended_at, freq, url).label("bucket")
    stmt = in_window(
        sa.select(
            bucket,
            M.team,
            sa.func.count(sa.distinct(M.task_id)).label("tasks"),
            sa.func.count().label("executions"),
            sa.func.count().filter(M.ok.is_(False)).label("failed"),
        )
        .where(M.ended_at.is_not(None))
        .group_by(bucket, M.team),
        M,
        team,
        window_start(since),
        M.started_at,
    ).order_by(bucket, M.team)
    return as_utc(read_frame(stmt, url), "bucket")


# --- tasks and their status ------------------------------------------------------------------


def tasks_by_status(team: str | None, since: Since = None, *, url: str | None = None):
    """How many of the team's tasks stand in each status (created in the window)."""
    T = table_of(TaskRow).c
    stmt = sa.select(T.team, T.status, sa.func.count().label("tasks")).group_by(T.team, T.status)
    if team is not None:
        stmt = stmt.where(T.team == team)
    start = window_start(since)
    if start is not None:
        stmt = stmt.where(T.created_at >= start)
    return read_frame(stmt.order_by(T.team, T.status), url)


def team_glance(team: str, *, url: str | None = None) -> dict[str, Any]:
    """What the Prefect UI's members' table and team artifact show (`flows.team_view`), as
    plain values from four aggregate queries on one connection: no pandas, no percentiles,
    since every team task and alert run publishes it.

    `{"members": {member: {status, tasks_completed, tokens_used (task_status); tokens,
    steps, tool_calls, approval_wait_s (summed over task_metrics); requests, pending (plan
    requests)}}, "tasks": {status: count}}`. The sums are `member_work`'s and the plan
    counts `approval_waits`', over all history."""
    S, M, P = (table_of(t).c for t in (TaskStatusRow, TaskMetricsRow, PlanApproval))
    queries = [
        sa.select(S.member, S.status, S.tasks_completed, S.tokens_used).where(S.team == team),
        sa.select(
            M.member,
            sa.func.sum(M.tokens).label("tokens"),
            sa.func.sum(M.steps).label("steps"),
            sa.func.sum(M.tool_calls).label("tool_calls"),
            sa.func.sum(M.approval_wait_s).label("approval_wait_s"),
        )
        .where(M.team == team)
        .group_by(M.member),
        sa.select(
            P.member,
            sa.func.count().label("requests"),
            sa.func.count().filter(P.decided_at.is_(None)).label("pending"),
        )
        .where(P.team == team)
        .group_by(P.member),
    ]
    tasks = sa.select(table_of(TaskRow).c.status, sa.func.count()).where(
        table_of(TaskRow).c.team == team
    )
    members: dict[str, dict[str, Any]] = {}
    with read_only(url) as conn:
        for stmt in queries:
            result = conn.execute(stmt)
            keys = list(result.keys())
            for row in result.cursor.fetchall():
                values = [plain_number(v) if isinstance(v, Decimal) else v for v in row]
                members.setdefault(str(values[0]), {}).update(
                    zip(keys[1:], values[1:], strict=True)
                )
            result.close()
        counts = dict(conn.execute(tasks.group_by(table_of(TaskRow).c.status)).tuples().all())
    return {"members": members, "tasks": counts}


def member_status(team: str | None, *, url: str | None = None) -> pd.DataFrame:
    """Each member's `004` task status now: status, tasks_completed, tokens_used, ..."""
    S = table_of(TaskStatusRow).c
    stmt = sa.select(
        S.team, S.member, S.status, S.tasks_completed, S.tokens_used, S.avg_response_time,
        raw_time(S.last_active_at), S.error_message,
    ).order_by(S.team, S.member)  # fmt: skip
    if team is not None:
        stmt = stmt.where(S.team == team)
    return as_utc(read_frame(stmt, url), "last_active_at")


# --- inboxes ---------------------------------------------------------------------------------


def unread_backlog(team: str | None, *, url: str | None = None) -> pd.DataFrame:
    """Per member (every member of the team, and any other recipient with unread mail):
    unread messages now and when the oldest of them arrived."""

    I = table_of(InboxRow).c  # noqa: E741
    # Counted from `ix_inbox_messages_unread` alone (team, recipient, seq of the unread rows:
    # migration 0013); the oldest unread message is the first in inbox order (lowest seq),
    # whose time is then looked up by its key: min(timestamp) would read every unread row.
    counted = sa.select(
        I.team,
        I.recipient,
        sa.func.count().label("unread"),
        sa.func.min(I.seq).label("first_seq"),
    ).where(I.read == sa.false())
    if team is not None:
        counted = counted.where(I.team == team)
    firsts = counted.group_by(I.team, I.recipient).subquery()
    stmt = sa.select(
        firsts.c.team,
        firsts.c.recipient.label("member"),
        firsts.c.unread,
        raw_time(I.timestamp, "oldest_unread_at"),
    ).join(
        table_of(InboxRow),
        sa.and_(
            I.team == firsts.c.team,
            I.recipient == firsts.c.recipient,
            I.seq == firsts.c.first_seq,
        ),
    )
    unread = read_frame(stmt, url)
    members = sa.select(table_of(Member).c.team, table_of(Member).c.name.label("member"))
    if team is not None:
        members = members.where(table_of(Member).c.team == team)
    everyone = read_frame(members, url)
    frame = everyone.merge(unread, on=["team", "member"], how="outer")
    frame["unread"] = frame["unread"].fillna(0).astype(int)
    frame = as_utc(frame, "oldest_unread_at")
    return frame.sort_values(["team", "member"], ignore_index=True)


# --- alerts ----------------------------------------------------------------------------------


def alert_lateness(team: str | None, since: Since = None, *, url: str | None = None):
    """Per alert type (TIMER, ALARM, SCHEDULED_EVENT) of the firings in the window (by
    fired_at): firings, delivered, missed, how many had a due time, and lateness (fired
    time minus due time, seconds) p50 / p95 / max over those. Columns: team, alert_type,
    firings, delivered, missed, with_due, p50_lateness_s, p95_lateness_s, max_lateness_s."""
    import pandas as pd

    F = table_of(AlertFiring).c
    start = window_start(since)
    keys = ["team", "alert_type"]
    counts = read_frame(
        in_window(
            sa.select(
                F.team,
                F.alert_type,
                sa.func.count().label("firings"),
                sa.func.count().filter(F.outcome == "delivered").label("delivered"),
                sa.func.count(F.due_at).label("with_due"),
            ).group_by(F.team, F.alert_type),
            F, team, start, F.fired_at,
        ),
        url,
    )  # fmt: skip
    late = read_frame(
        in_window(
            sa.select(
                F.team, F.alert_type,
                seconds_between(F.fired_at, F.due_at, url).label("lateness_s"),
            ).where(F.due_at.is_not(None)),
            F, team, start, F.fired_at,
        ),
        url,
    )  # fmt: skip
    columns = [*keys, "firings", "delivered", "missed", "with_due",
               "p50_lateness_s", "p95_lateness_s", "max_lateness_s"]  # fmt: skip
    if counts.empty:
        return pd.DataFrame(columns=columns)
    counts.insert(4, "missed", counts["firings"] - counts["delivered"])
    if late.empty:
        for column in columns[-3:]:
            counts[column] = float("nan")
        frame = counts
    else:
        frame = counts.merge(
            quantile_columns(late, keys, "lateness_s", "lateness_s").reset_index(),
            on=keys,
            how="left",
        )
    return frame[columns].sort_values(keys, ignore_index=True)


# --- liveness --------------------------------------------------------------------------------

LIVENESS = ["idle", "thinking", "executing_tools", "offline"]
"""The `agent_state` statuses liveness counts time in (`AgentStateStatus`)."""


def liveness(
    team: str | None, since: Since = None, *, url: str | None = None, now: datetime | None = None
) -> pd.DataFrame:
    """Per member with `agent_state` history: seconds in each status within the window
    (`idle_s`, `thinking_s`, `executing_tools_s`, `offline_s`), `busy_s` (thinking and
    executing tools), `known_s` (all of them) and `busy_share` (busy / known).

    A member's status in force at the window start counts from the window start; its
    current status counts until `now` (default: now). Time before a member's first recorded
    status counts nowhere. Summed by the database (`agent_state_history` keeps each
    stretch's end on its row)."""
    import pandas as pd

    H = table_of(AgentStateHistoryRow).c
    now = now or datetime.now(UTC)
    start = window_start(since, now)
    postgres = db.engine(url).dialect.name == "postgresql"
    least, greatest = (sa.func.least, sa.func.greatest) if postgres else (sa.func.min, sa.func.max)
    end = least(sa.func.coalesce(H.ended_at, as_time(now)), as_time(now))
    begin = H.changed_at if start is None else greatest(H.changed_at, as_time(start))
    seconds = sa.func.sum(seconds_between(end, begin, url)).label("seconds")
    stmt = sa.select(H.team, H.member, H.status, seconds).where(H.changed_at < as_time(now))
    if team is not None:
        stmt = stmt.where(H.team == team)
    if start is not None:
        stmt = stmt.where(sa.or_(H.ended_at.is_(None), H.ended_at > as_time(start)))
    rows = read_frame(stmt.group_by(H.team, H.member, H.status), url)
    keys = ["team", "member"]
    columns = [*keys, *(f"{s}_s" for s in LIVENESS), "busy_s", "known_s", "busy_share"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows["seconds"] = rows["seconds"].astype(float).clip(lower=0).round(3)
    wide = rows.pivot_table(
        index=keys, columns="status", values="seconds", aggfunc="sum", fill_value=0.0
    )
    frame = pd.DataFrame(index=wide.index)
    for status in LIVENESS:
        frame[f"{status}_s"] = wide.get(status, 0.0)
    frame["busy_s"] = frame["thinking_s"] + frame["executing_tools_s"]
    frame["known_s"] = wide.sum(axis=1)
    frame["busy_share"] = frame["busy_s"] / frame["known_s"].where(frame["known_s"] > 0)
    return frame.reset_index()[columns].sort_values(keys, ignore_index=True)


# --- the headline ----------------------------------------------------------------------------


def records(frame: pd.DataFrame) -> list[dict]:
    """A frame's rows as JSON-ready dicts: NaN/NaT become None, times ISO 8601 text."""
    import json

    return json.loads(frame.to_json(orient="records", date_format="iso"))
