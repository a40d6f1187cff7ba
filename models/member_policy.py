"""A member's tool policy and token budget, read and set in the database; spend against budget.

The rules are `models.tool_policy` (pure); this is their store.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from models.db import session_scope
from models.task import TaskMetricsRow
from models.team import get_member, get_team, list_members
from models.team_settings import ApprovalError
from models.tool_policy import BUDGET_KEY, POLICY_KEY, TOOL_SETTINGS, ToolPolicy, check_tool_setting


def policy_of(team: str, member: str, *, session: Session | None = None) -> ToolPolicy:
    """The tool policy and budget of `member` of `team`."""
    with session_scope(session) as s:
        row = get_team(team, session=s)
        return ToolPolicy.of(row.settings, get_member(team, member, session=s).meta)


def set_member_policy(
    team: str, member: str, changes: dict[str, Any], *, session: Session | None = None
) -> dict[str, Any]:
    """Sets a member's own policy keys (`budget_tokens` included); None drops a key (the
    team's value applies again). Checked before anything is written. Returns the member's
    own keys as stored."""
    unknown = sorted(set(changes) - set(TOOL_SETTINGS))
    if unknown:
        raise ApprovalError(f"unknown setting {unknown[0]!r} (known: {', '.join(TOOL_SETTINGS)})")
    for key, value in changes.items():
        check_tool_setting(key, value)
    with session_scope(session) as s:
        row = get_member(team, member, session=s)
        meta = dict(row.meta or {})
        own = dict(meta.get(POLICY_KEY) or {})
        for key, value in changes.items():
            target = meta if key == BUDGET_KEY else own
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
        if own:
            meta[POLICY_KEY] = own
        else:
            meta.pop(POLICY_KEY, None)
        row.meta = meta or None
        s.add(row)
        return {**own, **({BUDGET_KEY: meta[BUDGET_KEY]} if BUDGET_KEY in meta else {})}


def budget_spend(team: str, *, session: Session | None = None) -> list[dict[str, Any]]:
    """Each member with a budget (tokens, seconds of work): its budgets and what its latest
    task spent of them (seconds: its execution's duration without its waits for decisions).
    `share` is the larger share spent; `exhausted`, whether a budget was spent in full."""
    with session_scope(session) as s:
        settings = get_team(team, session=s).settings
        out = []
        for member in list_members(team, session=s):
            policy = ToolPolicy.of(settings, member.meta)
            budget, seconds = policy.budget_tokens, policy.budget_seconds
            if not budget and not seconds:
                continue
            query = (
                select(TaskMetricsRow)
                .where(TaskMetricsRow.team == team, TaskMetricsRow.member == member.name)
                .order_by(col(TaskMetricsRow.started_at).desc())
                .limit(1)
            )
            latest = s.exec(query).first()
            spent = latest.tokens if latest is not None else 0
            worked = (
                round(max((latest.duration_s or 0) - (latest.approval_wait_s or 0), 0), 1)
                if latest is not None
                else 0
            )
            shares = [spent / budget if budget else 0, worked / seconds if seconds else 0]
            out.append({
                "member": member.name, "budget_tokens": budget, "spent_tokens": spent,
                "budget_seconds": seconds, "spent_seconds": worked if seconds else None,
                "task_id": latest.task_id if latest is not None else None,
                "share": round(max(shares), 4),
                "exhausted": bool(budget and spent >= budget)
                or bool(seconds and worked >= seconds),
            })  # fmt: skip
        return out
