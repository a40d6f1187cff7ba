"""The metrics of plan approvals: requests, waits, outcomes, deciders, revisions, timeouts.

One function per metric, as in `models.metrics`; each takes `team` (None: every team) and a
time window `since`, and returns a pandas DataFrame (rows by `plan_approvals.requested_at`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from models.approval import SYSTEM, PlanApproval
from models.base import table_of
from models.metric_frames import Since, as_utc, in_window, raw_time, read_frame, window_start

if TYPE_CHECKING:
    import pandas as pd

TIMEOUT_CAUSE = "no decision within %"
"""How `plan_timeout.apply_timeout` starts the cause of a request its timeout policy decided."""


P = table_of(PlanApproval).c


def approvals(team: str | None, since: Since = None, *, url: str | None = None) -> pd.DataFrame:
    """Every plan request in the window (by requested_at): team, request_id, member, status,
    revision, timeout_policy, requested_at, decided_at, decided_by, escalated, timed_out,
    wait_s (request to decision; open ones: NaN)."""
    stmt = in_window(
        sa.select(
            P.team, P.request_id, P.member, P.status, P.revision, P.timeout_policy,
            raw_time(P.requested_at), raw_time(P.decided_at), P.decided_by,
            P.escalated_at.is_not(None).label("escalated"),
            sa.and_(P.decided_by == SYSTEM, P.cause.like(TIMEOUT_CAUSE)).label("timed_out"),
        ).order_by(P.requested_at),
        P, team, window_start(since), P.requested_at,
    )  # fmt: skip
    frame = as_utc(read_frame(stmt, url), "requested_at", "decided_at")
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
    stmt = in_window(
        sa.select(P.team, *keys, sa.func.count().label("requests")).group_by(P.team, *keys),
        P, team, window_start(since), P.requested_at,
    ).order_by(P.team, *keys)  # fmt: skip
    return read_frame(stmt, url)


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
    stmt = in_window(
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
    return read_frame(stmt, url)
