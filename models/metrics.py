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
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from models import db, durations
from models.agent import AgentStateHistoryRow
from models.alert import AlertFiring
from models.approval import SYSTEM, PlanApproval
from models.base import UTCDateTime
from models.inbox_table import InboxRow
from models.task import TaskMetricsRow, TaskRow, TaskStatusRow
from models.team import Member, Team, TeamError, check_team_name

if TYPE_CHECKING:
    import pandas as pd

Since = datetime | timedelta | None
"""A time window's start: a time, how long back from now, or None (all history)."""

TIMEOUT_CAUSE = "no decision within %"
"""How `plan_timeout.apply_timeout` starts the cause of a request its timeout policy decided."""

FREQS = {"hour": "%Y-%m-%d %H:00:00", "day": "%Y-%m-%d 00:00:00"}


class MetricsError(ValueError):
    """Refused metrics input; the message is one line for the user."""


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `12h`, `7d`, `2w` as a timedelta; `MetricsError` otherwise."""
    try:
        return durations.parse_duration(text)
    except durations.DurationError as exc:
        raise MetricsError(str(exc)) from None


def window_start(since: Since, now: datetime | None = None) -> datetime | None:
    """The time a window `since` starts at (None: no start)."""
    if since is None or isinstance(since, datetime):
        if since is not None and (since.tzinfo is None or since.utcoffset() is None):
            raise MetricsError(f"naive datetime {since!r} refused: give an aware time")
        return since
    return (now or datetime.now(UTC)) - since


def check_team(team: str, *, url: str | None = None) -> None:
    """`TeamError` (one line) unless `team` exists."""
    check_team_name(team)
    with _reading(url) as conn:
        found = conn.execute(sa.select(Team.name).where(Team.name == team)).first()
    if found is None:
        raise TeamError(f"no team named {team!r}")


# --- helpers ---------------------------------------------------------------------------------


def _frame(stmt: sa.Select, url: str | None) -> pd.DataFrame:
    """The rows of `stmt` as the database driver gives them.

    The DBAPI cursor is read directly: SQLAlchemy's per-value result processing (and pandas
    probing each Row) cost more than the query at 100,000 rows. So timestamps come back as the
    driver has them (`_raw` + `_utc`) and SQLite booleans as 0/1 (`_bool`). The connection
    only reads: on SQLite it does not take the write lock (`db`), so a long metrics query
    does not hold up heartbeats and messages."""
    import pandas as pd

    with _reading(url) as conn:
        result = conn.execute(stmt)
        keys = list(result.keys())
        rows = result.cursor.fetchall()
        result.close()
    frame = pd.DataFrame.from_records(rows, columns=keys)
    for key in keys:
        if rows and isinstance(frame[key].iloc[0], Decimal):  # PostgreSQL's sum of a bigint
            frame[key] = pd.to_numeric(frame[key].map(_number))
    return frame


def _reading(url: str | None) -> sa.Connection:
    return db.engine(url).connect().execution_options(teamflow_read_only=True)


def _number(value: Decimal | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def _raw(column: Any, name: str | None = None) -> Any:
    """A timestamp as the database gives it (SQLite: text), for `_utc` to convert all at once:
    much faster than converting each value in Python."""
    return sa.type_coerce(column, sa.String).label(name or column.key)


def _where(stmt: sa.Select, table: Any, team: str | None, start: datetime | None, column: Any):
    if team is not None:
        stmt = stmt.where(table.team == team)
    if start is not None:
        stmt = stmt.where(column >= start)
    return stmt


def _bucket(column: Any, freq: str, url: str | None) -> Any:
    """A timestamp truncated to its hour or day, as text `YYYY-MM-DD HH:00:00` (UTC)."""
    if freq not in FREQS:
        raise MetricsError(f"bad frequency {freq!r}: one of {', '.join(FREQS)}")
    if db.engine(url).dialect.name == "postgresql":
        utc = sa.func.timezone("UTC", column)
        return sa.func.to_char(sa.func.date_trunc(freq, utc), "YYYY-MM-DD HH24:00:00")
    return sa.func.strftime(FREQS[freq], column)


def _quantiles(values: pd.DataFrame, keys: list[str], column: str, prefix: str) -> pd.DataFrame:
    import pandas as pd

    grouped = values.astype({column: float}).groupby(keys)[column]
    return pd.concat(
        {
            f"p50_{prefix}": grouped.median(),
            f"p95_{prefix}": grouped.quantile(0.95),
            f"max_{prefix}": grouped.max(),
        },
        axis=1,
    )


def _bool(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    for column in columns:
        frame[column] = frame[column].map({1: True, 0: False}).astype("boolean")
    return frame


def _utc(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    import pandas as pd

    for column in columns:
        frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
    return frame


# --- work per member -------------------------------------------------------------------------

M = TaskMetricsRow


def member_work(team: str | None, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """Per member (team, member): executions, distinct tasks, done and failed ones, duration
    p50 / p95 / max (seconds), tokens, steps, tool calls, failed tool calls and their rate,
    plan approval wait (seconds, summed). One row per member with metrics in the window."""
    start = window_start(since)
    keys = ["team", "member"]
    sums = _where(
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
    frame = _frame(sums, url).set_index(keys)
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
        return _frame(stmt, url).set_index(["team", "member"])[columns]
    team_p, member_p = sa.bindparam("team"), sa.bindparam("member")
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
    with _reading(url) as conn:
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
                    values = conn.execute(up, {**names, "off": low}).scalars().all()
                else:
                    values = conn.execute(down, {**names, "off": n - 1 - high}).scalars().all()
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
    stmt = _where(
        sa.select(
            M.team,
            M.member,
            M.task_id,
            _raw(M.started_at),
            _raw(M.ended_at),
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
    frame = _bool(_utc(_frame(stmt, url), "started_at", "ended_at"), "ok")
    return frame.sort_values("started_at", kind="stable", ignore_index=True)


def work_over_time(
    team: str | None, since: Since = None, *, freq: str = "day", url: str | None = None
) -> pd.DataFrame:
    """Per hour or day (`freq`) and member: executions started, tokens, steps, tool calls
    and failed ones: the trend of work and cost. Columns: bucket (UTC), team, member, ..."""
    bucket = _bucket(M.started_at, freq, url).label("bucket")
    stmt = _where(
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
    return _utc(_frame(stmt, url), "bucket")


def throughput(
    team: str | None, since: Since = None, *, freq: str = "hour", url: str | None = None
) -> pd.DataFrame:
    """Per hour or day (`freq`) a task execution ended in: tasks finished (distinct), member
    executions, and failed executions. Columns: bucket (UTC), team, tasks, executions, failed."""
    bucket = _bucket(M.ended_at, freq, url).label("bucket")
    stmt = _where(
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
    return _utc(_frame(stmt, url), "bucket")


# --- tasks and their status ------------------------------------------------------------------


def tasks_by_status(team: str | None, since: Since = None, *, url: str | None = None):
    """How many of the team's tasks stand in each status (created in the window)."""
    T = TaskRow
    stmt = sa.select(T.team, T.status, sa.func.count().label("tasks")).group_by(T.team, T.status)
    if team is not None:
        stmt = stmt.where(T.team == team)
    start = window_start(since)
    if start is not None:
        stmt = stmt.where(T.created_at >= start)
    return _frame(stmt.order_by(T.team, T.status), url)


def team_glance(team: str, *, url: str | None = None) -> dict[str, Any]:
    """What the Prefect UI's members' table and team artifact show (`flows.team_view`), as
    plain values from four aggregate queries on one connection: no pandas, no percentiles,
    since every team task and alert run publishes it.

    `{"members": {member: {status, tasks_completed, tokens_used (task_status); tokens,
    steps, tool_calls, approval_wait_s (summed over task_metrics); requests, pending (plan
    requests)}}, "tasks": {status: count}}`. The sums are `member_work`'s and the plan
    counts `approval_waits`', over all history."""
    S, M = TaskStatusRow, TaskMetricsRow
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
    tasks = sa.select(TaskRow.status, sa.func.count()).where(TaskRow.team == team)
    members: dict[str, dict[str, Any]] = {}
    with _reading(url) as conn:
        for stmt in queries:
            result = conn.execute(stmt)
            keys = list(result.keys())
            for row in result.cursor.fetchall():
                values = [_number(v) if isinstance(v, Decimal) else v for v in row]
                members.setdefault(values[0], {}).update(zip(keys[1:], values[1:], strict=True))
            result.close()
        counts = dict(conn.execute(tasks.group_by(TaskRow.status)).tuples().all())
    return {"members": members, "tasks": counts}


def member_status(team: str | None, *, url: str | None = None) -> pd.DataFrame:
    """Each member's `004` task status now: status, tasks_completed, tokens_used, ..."""
    S = TaskStatusRow
    stmt = sa.select(
        S.team, S.member, S.status, S.tasks_completed, S.tokens_used, S.avg_response_time,
        _raw(S.last_active_at), S.error_message,
    ).order_by(S.team, S.member)  # fmt: skip
    if team is not None:
        stmt = stmt.where(S.team == team)
    return _utc(_frame(stmt, url), "last_active_at")


# --- plan approvals --------------------------------------------------------------------------

P = PlanApproval


def approvals(team: str | None, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """Every plan request in the window (by requested_at): team, request_id, member, status,
    revision, timeout_policy, requested_at, decided_at, decided_by, escalated, timed_out,
    wait_s (request to decision; open ones: NaN)."""
    stmt = _where(
        sa.select(
            P.team, P.request_id, P.member, P.status, P.revision, P.timeout_policy,
            _raw(P.requested_at), _raw(P.decided_at), P.decided_by,
            P.escalated_at.is_not(None).label("escalated"),
            sa.and_(P.decided_by == SYSTEM, P.cause.like(TIMEOUT_CAUSE)).label("timed_out"),
        ).order_by(P.requested_at),
        P, team, window_start(since), P.requested_at,
    )  # fmt: skip
    frame = _utc(_frame(stmt, url), "requested_at", "decided_at")
    frame["escalated"] = frame["escalated"].astype(bool)
    frame["timed_out"] = frame["timed_out"].fillna(0).astype(bool)
    frame["wait_s"] = (frame["decided_at"] - frame["requested_at"]).dt.total_seconds()
    return frame


def approval_waits(team: str | None, since: Since = None, *, url: str | None = None):
    """Per member who asked: requests, decided, pending, wait until decision p50 / p95 / max
    (seconds), and how long the oldest open one has waited so far."""
    import pandas as pd

    frame = approvals(team, since, url=url)
    keys = ["team", "member"]
    if frame.empty:
        return pd.DataFrame(
            columns=[*keys, "requests", "decided", "pending", "p50_wait_s", "p95_wait_s",
                     "max_wait_s", "oldest_pending_s"]
        )  # fmt: skip
    now = pd.Timestamp.now(tz="UTC")
    frame["open_s"] = (
        (now - frame["requested_at"]).dt.total_seconds().where(frame["decided_at"].isna())
    )
    grouped = frame.groupby(keys)
    out = pd.concat(
        {
            "requests": grouped.size(),
            "decided": grouped["decided_at"].count(),
            "p50_wait_s": grouped["wait_s"].median(),
            "p95_wait_s": grouped["wait_s"].quantile(0.95),
            "max_wait_s": grouped["wait_s"].max(),
            "oldest_pending_s": grouped["open_s"].max(),
        },
        axis=1,
    )
    out.insert(2, "pending", out["requests"] - out["decided"])
    return out.reset_index()


def _counts(team: str | None, since: Since, url: str | None, *keys: Any) -> pd.DataFrame:
    stmt = _where(
        sa.select(P.team, *keys, sa.func.count().label("requests")).group_by(P.team, *keys),
        P, team, window_start(since), P.requested_at,
    ).order_by(P.team, *keys)  # fmt: skip
    return _frame(stmt, url)


def approval_outcomes(team: str | None, since: Since = None, *, url: str | None = None):
    """Requests per status (pending, approved, denied, rejected) with the p50 wait of the
    decided ones."""
    import pandas as pd

    frame = approvals(team, since, url=url)
    if frame.empty:
        return pd.DataFrame(columns=["team", "status", "requests", "p50_wait_s"])
    grouped = frame.groupby(["team", "status"])
    out = pd.concat({"requests": grouped.size(), "p50_wait_s": grouped["wait_s"].median()}, axis=1)
    return out.reset_index()


def approval_deciders(team: str | None, since: Since = None, *, url: str | None = None):
    """Who decided (a person, the lead, or `system` for policies and timeouts), per status."""
    return _counts(team, since, url, P.decided_by, P.status).query("decided_by.notna()")


def approval_revisions(team: str | None, since: Since = None, *, url: str | None = None):
    """Requests per revision (1: first plan, 2: its first revision, ...) and status."""
    return _counts(team, since, url, P.revision, P.status)


def approval_timeouts(team: str | None, since: Since = None, *, url: str | None = None):
    """Per timeout policy (deny, approve, escalate): requests, how many its timeout decided
    (approved / denied by it), and how many were escalated to the lead."""
    timed_out = sa.and_(P.decided_by == SYSTEM, P.cause.like(TIMEOUT_CAUSE))
    stmt = _where(
        sa.select(
            P.team,
            P.timeout_policy,
            sa.func.count().label("requests"),
            sa.func.count().filter(timed_out).label("timed_out"),
            sa.func.count().filter(timed_out, P.status == "approved").label("approved_by_timeout"),
            sa.func.count().filter(timed_out, P.status != "approved").label("denied_by_timeout"),
            sa.func.count().filter(P.escalated_at.is_not(None)).label("escalated"),
        ).group_by(P.team, P.timeout_policy),
        P, team, window_start(since), P.requested_at,
    ).order_by(P.team, P.timeout_policy)  # fmt: skip
    return _frame(stmt, url)


# --- inboxes ---------------------------------------------------------------------------------


def unread_backlog(team: str | None, *, url: str | None = None) -> pd.DataFrame:
    """Per member (every member of the team, and any other recipient with unread mail):
    unread messages now and when the oldest of them arrived."""
    import pandas as pd

    I = InboxRow  # noqa: E741
    # Counted from `ix_inbox_messages_unread` alone (team, recipient, read, seq); the oldest
    # unread message is the first in inbox order (lowest seq), whose time is then looked up
    # by its key: min(timestamp) would read every unread row from the table.
    counted = sa.select(
        I.team,
        I.recipient,
        sa.func.count().label("unread"),
        sa.func.min(I.seq).label("first_seq"),
    ).where(I.read == sa.false())
    if team is not None:
        counted = counted.where(I.team == team)
    counted = counted.group_by(I.team, I.recipient).subquery()
    stmt = sa.select(
        counted.c.team,
        counted.c.recipient.label("member"),
        counted.c.unread,
        _raw(I.timestamp, "oldest_unread_at"),
    ).join(
        I,
        sa.and_(
            I.team == counted.c.team,
            I.recipient == counted.c.recipient,
            I.seq == counted.c.first_seq,
        ),
    )
    unread = _frame(stmt, url)
    members = sa.select(Member.team, Member.name.label("member"))
    if team is not None:
        members = members.where(Member.team == team)
    everyone = _frame(members, url)
    frame = everyone.merge(unread, on=["team", "member"], how="outer")
    frame["unread"] = frame["unread"].fillna(0).astype(int)
    frame["oldest_unread_at"] = pd.to_datetime(
        frame["oldest_unread_at"], utc=True, format="ISO8601"
    )
    return frame.sort_values(["team", "member"], ignore_index=True)


# --- alerts ----------------------------------------------------------------------------------


def _seconds_between(later: Any, earlier: Any, url: str | None) -> Any:
    """`later - earlier` in seconds (a float), computed by the database."""
    if db.engine(url).dialect.name == "postgresql":
        return sa.cast(sa.extract("epoch", later), sa.Float) - sa.cast(
            sa.extract("epoch", earlier), sa.Float
        )
    return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0


def _at(value: datetime) -> Any:
    """A time as a bound value of teamflow's timestamp type (compares like the columns)."""
    return sa.literal(value, UTCDateTime())


def alert_lateness(team: str | None, since: Since = None, *, url: str | None = None):
    """Per alert type (TIMER, ALARM, SCHEDULED_EVENT) of the firings in the window (by
    fired_at): firings, delivered, missed, how many had a due time, and lateness (fired
    time minus due time, seconds) p50 / p95 / max over those. Columns: team, alert_type,
    firings, delivered, missed, with_due, p50_lateness_s, p95_lateness_s, max_lateness_s."""
    import pandas as pd

    F = AlertFiring
    start = window_start(since)
    keys = ["team", "alert_type"]
    counts = _frame(
        _where(
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
    late = _frame(
        _where(
            sa.select(
                F.team, F.alert_type,
                _seconds_between(F.fired_at, F.due_at, url).label("lateness_s"),
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
            _quantiles(late, keys, "lateness_s", "lateness_s").reset_index(), on=keys, how="left"
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

    H = AgentStateHistoryRow
    now = now or datetime.now(UTC)
    start = window_start(since, now)
    postgres = db.engine(url).dialect.name == "postgresql"
    least, greatest = (sa.func.least, sa.func.greatest) if postgres else (sa.func.min, sa.func.max)
    end = least(sa.func.coalesce(H.ended_at, _at(now)), _at(now))
    begin = H.changed_at if start is None else greatest(H.changed_at, _at(start))
    seconds = sa.func.sum(_seconds_between(end, begin, url)).label("seconds")
    stmt = sa.select(H.team, H.member, H.status, seconds).where(H.changed_at < _at(now))
    if team is not None:
        stmt = stmt.where(H.team == team)
    if start is not None:
        stmt = stmt.where(sa.or_(H.ended_at.is_(None), H.ended_at > _at(start)))
    rows = _frame(stmt.group_by(H.team, H.member, H.status), url)
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


def headline(team: str, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """What `teamflow metrics` shows, per member of `team` (and anyone with metrics):
    tasks, failed, p50 duration, tokens, p50 plan wait (request to decision), unread, and
    seconds busy / idle / offline (`liveness`; NaN for a member with no recorded status)."""
    start = window_start(since)
    work = member_work(team, start, url=url)[
        ["team", "member", "tasks", "failed", "p50_duration_s", "tokens", "tool_calls",
         "tool_failures"]
    ]  # fmt: skip
    waits = approval_waits(team, start, url=url)[["team", "member", "requests", "p50_wait_s"]]
    waits = waits.rename(columns={"requests": "plans", "p50_wait_s": "p50_plan_wait_s"})
    backlog = unread_backlog(team, url=url)[["team", "member", "unread"]]
    alive = liveness(team, start, url=url)[["team", "member", "busy_s", "idle_s", "offline_s"]]
    frame = backlog
    for other in (work, waits, alive):
        frame = frame.merge(other, on=["team", "member"], how="outer")
    for column in ("tasks", "failed", "tokens", "tool_calls", "tool_failures", "plans", "unread"):
        frame[column] = frame[column].fillna(0).astype(int)
    for column in ("busy_s", "idle_s", "offline_s"):
        frame[column] = frame[column].astype(float)
    return frame[
        ["team", "member", "tasks", "failed", "p50_duration_s", "tokens", "tool_calls",
         "tool_failures", "plans", "p50_plan_wait_s", "unread", "busy_s", "idle_s", "offline_s"]
    ].sort_values("member", ignore_index=True)  # fmt: skip


def records(frame: pd.DataFrame) -> list[dict]:
    """A frame's rows as JSON-ready dicts: NaN/NaT become None, times ISO 8601 text."""
    import json

    return json.loads(frame.to_json(orient="records", date_format="iso"))
