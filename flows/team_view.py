"""What the Prefect UI shows of a team: its members' table and its artifact at a glance.

Every team task run (when it closes its task) and every alert run (once it delivered its
alert) publishes the team's Markdown artifact under the key `team-<name>` (one per team: the
Artifacts page shows its latest version, the history its earlier ones, and the run shows the
version it made): the lead, tasks by status, the plans waiting for a decision, and the
members' table: per member its status, whether it is active, unread messages, tasks done,
tokens, steps, tool calls and plan waits (requests, pending, seconds waited), as of now.
The table is not a second artifact of its own: one artifact a run is half the server's work
of two (issue 35).

The numbers come from teamflow's database through `models.metrics.team_glance` (the sums
and counts of `teamflow metrics`, without pandas) and `models.presence` (as `teamflow
status`).
"""

from __future__ import annotations

import math
import re
from typing import Any

import anyio

COLUMNS = [
    "member", "status", "active", "unread", "tasks done", "tokens", "steps", "tool calls",
    "plans", "plans pending", "plan wait s",
]  # fmt: skip


def team_key(team: str) -> str:
    """The key of the team's artifact: `team-` and the name in Prefect's key alphabet."""
    key = re.sub(r"[^a-z0-9]+", "-", f"team-{team}".lower()).strip("-")
    return key[:100].rstrip("-")


def _int(value: Any) -> int:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0
    return int(value)


def member_rows(
    team: str, glance: dict[str, Any] | None = None, *, session: Any = None
) -> list[dict[str, Any]]:
    """The members' table, one row per member (in the team's order), as of now (`glance`:
    `models.metrics.team_glance` read already)."""
    from models import metrics, presence

    state = presence.team_state(team, session=session)
    known = (glance or metrics.team_glance(team))["members"]
    rows = []
    for member, unread in state["unread"].items():
        m = known.get(member, {})
        rows.append(
            {
                "member": member,
                "status": m.get("status") or "idle",
                "active": member in state["active_members"],
                "unread": unread,
                "tasks done": _int(m.get("tasks_completed")),
                "tokens": _int(m.get("tokens_used")) or _int(m.get("tokens")),
                "steps": _int(m.get("steps")),
                "tool calls": _int(m.get("tool_calls")),
                "plans": _int(m.get("requests")),
                "plans pending": _int(m.get("pending")),
                "plan wait s": round(float(m.get("approval_wait_s") or 0.0), 1),
            }
        )
    return rows


def team_markdown(
    team: str,
    rows: list[dict[str, Any]],
    by: str,
    glance: dict[str, Any] | None = None,
    *,
    session: Any = None,
) -> str:
    """The team's state at a glance (the `team-<name>` artifact), updated `by` a run."""
    from models import approval, metrics
    from models.base import utcnow
    from models.team import settings_of

    lead = settings_of(team, session=session).lead
    counts = (glance or metrics.team_glance(team))["tasks"]
    order = ["pending", "in_progress", "completed", "archived"]
    tasks = ", ".join(f"{counts.get(s, 0)} {s.replace('_', ' ')}" for s in order)
    waiting = approval.list_requests(team, pending=True, session=session)
    now = utcnow()
    lines = [
        f"# Team {team}",
        "",
        f"Lead **{lead}**. Updated {now:%Y-%m-%d %H:%M:%S} UTC by {by}.",
        "",
        f"**Tasks:** {tasks}.",
        "",
    ]
    if waiting:
        lines.append("**Plans waiting for a decision** (`teamflow plan approve|deny ID`):")
        lines.append("")
        for r in waiting:
            minutes = (now - r.requested_at).total_seconds() / 60
            lines.append(f"- `{r.request_id}` of {r.member}: {r.summary} ({minutes:.0f} min)")
    else:
        lines.append("**Plans waiting for a decision:** none.")
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        cells = ["yes" if v is True else "no" if v is False else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def publish(team: str, *, by: str) -> None:
    """The team's artifact, made by the current run."""
    from prefect.artifacts import acreate_markdown_artifact

    def read() -> str:
        from models import metrics
        from models.db import session_scope

        glance = metrics.team_glance(team)
        with session_scope() as s:
            rows = member_rows(team, glance, session=s)
            return team_markdown(team, rows, by, glance, session=s)

    markdown = await anyio.to_thread.run_sync(read)
    await acreate_markdown_artifact(
        markdown, key=team_key(team), description=f"Team {team} at a glance"
    )
