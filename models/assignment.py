"""A task as its `team-task` run and MCP's tools pass it around, and the `001`
task_assignment notification its assignees get. No Prefect here: MCP's `task_update`, which
tells an outside member directly when no run can start, imports it without Prefect's cost."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from models import inbox
from models.task import get_task


def task_info(task_id: str, *, session: Session | None = None) -> dict[str, Any]:
    """The task's fields a team-task run works from (`lease`: none taken yet)."""
    row = get_task(task_id, session=session)
    return {
        "id": str(row.id),
        "team": row.team,
        "title": row.title,
        "description": row.description,
        "status": row.status,
        "priority": row.priority,
        "deadline": row.deadline.isoformat() if row.deadline else None,
        "params": row.params or {},
        "creator": row.creator_id,
        "assignees": [a.assignee_id for a in row.assignees],
        "attempt": row.attempt,
        "lease": None,
    }


def notify(info: dict[str, Any], *, lead: str, session: Session | None = None) -> list[str]:
    """Sends each assignee a `001` task_assignment notification from the lead."""
    payload: dict[str, Any] = {
        "task_id": info["id"],
        "task_description": info["description"] or info["title"],
        "priority": info["priority"] or "normal",
        "context": {"title": info["title"], "params": info["params"]},
    }
    if info["deadline"]:
        payload["deadline"] = info["deadline"]
    rows = inbox.send_many(
        info["team"],
        [
            {
                "to": name,
                "sender": lead,
                "text": payload["task_description"],
                "summary": f"Task: {info['title']}",
                "type": "task_assignment",
                "payload": payload,
            }
            for name in info["assignees"]
        ],
        session=session,
    )
    return [row.message_id for row in rows]
