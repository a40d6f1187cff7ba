"""`002` ASYNC actions looked up by their `task_id` (`teamflow task action TASK_ID`).

A step that starts an `ASYNC` action records it (`TASK_STARTED`, the action with its
`task_id`) in the `001` `messages.tool_calls` of the member's conversation; its result
arrives later as a `tool_result` notification in the member's inbox whose metadata names the
same `task_id` (`flows/tool_action.py`). `find_action` joins the two: `running` while no
result has come, `finished` with the `001` ToolResult once it has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from models.conversation import MessageRow
from models.db import session_scope
from models.inbox_table import InboxRow


class ActionError(ValueError):
    """No ASYNC action has the `task_id` asked for; one line for the user."""


@dataclass(frozen=True)
class AsyncAction:
    """An ASYNC action and where it stands."""

    task_id: str
    agent_id: str
    action: str
    params: dict[str, Any]
    started_at: datetime | None
    result: dict[str, Any] | None
    """The `001` ToolResult it delivered (None: still running)."""
    finished_at: datetime | None

    @property
    def state(self) -> str:
        """`running` until its result arrived, then `finished`."""
        return "running" if self.result is None else "finished"

    def to_json(self) -> dict[str, Any]:
        """What `teamflow task action --json` prints."""
        return {
            "task_id": self.task_id,
            "agent_id": self.agent_id,
            "action": self.action,
            "params": self.params,
            "state": self.state,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "result": self.result,
        }


def find_action(task_id: str, *, session: Session | None = None) -> AsyncAction:
    """The ASYNC action whose `task_id` is `task_id`; `ActionError` when none is recorded."""
    task_id = task_id.strip()
    with session_scope(session) as s:
        started = s.exec(
            select(MessageRow)
            .where(col(MessageRow.tool_calls).contains(task_id, autoescape=True))
            .order_by(col(MessageRow.id))
        )
        for row in started:
            call = _call(row.tool_calls, task_id)
            if call is not None:
                break
        else:
            raise ActionError(f"no ASYNC action has task_id {task_id!r}")
        name, _, team = row.agent_id.partition("@")
        results = s.exec(
            select(InboxRow)
            .where(
                col(InboxRow.team) == team,
                col(InboxRow.recipient) == name,
                col(InboxRow.type) == "tool_result",
            )
            .order_by(col(InboxRow.seq))
        )
        delivered = next((r for r in results if (r.meta or {}).get("task_id") == task_id), None)
        return AsyncAction(
            task_id=task_id,
            agent_id=row.agent_id,
            action=str(call.get("action")),
            params=dict(call.get("params") or {}),
            started_at=row.timestamp,
            result=delivered.payload if delivered is not None else None,
            finished_at=delivered.timestamp if delivered is not None else None,
        )


def _call(tool_calls: str | None, task_id: str) -> dict[str, Any] | None:
    """The ASYNC action of `tool_calls` (a step's JSON array) with `task_id`, if any."""
    try:
        calls = json.loads(tool_calls or "[]")
    except ValueError:
        return None
    return next(
        (
            c
            for c in calls
            if isinstance(c, dict) and c.get("task_id") == task_id and c.get("execution") == "ASYNC"
        ),
        None,
    )
