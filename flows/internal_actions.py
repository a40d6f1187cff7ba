"""A member's `internal` actions: finish, send a message, ask for plan approval, create a task.

Run by a step of `flows/steps.py`; each gives the member a `001` ToolResult (in `results`).
A plan request may carry its `request_id` (a resumed run asks with the id it recorded, so a
plan already decided is not asked again: `flows/durable.py`).
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from flows.runtimes import StepError
from models import notify
from models.tool import ToolResult


async def internal_action(
    info: dict[str, Any],
    name: str,
    lead: str,
    action: str,
    params: dict[str, Any],
    work: Any,
    results: list[ToolResult],
    request_id: str | None = None,
) -> bool:
    """Runs an `internal` action; True if it ends the member's work."""
    team = info["team"]
    if action in ("finish", "finishRequest"):
        return True
    if action in ("send_message", "postMessage"):
        to = params.get("to", lead)
        text = str(params.get("text", ""))
        attachments = params.get("attachments")
        row = await anyio.to_thread.run_sync(
            lambda: notify.agent_message(
                team,
                to=to,
                sender=name,
                text=text,
                summary=params.get("summary"),
                attachments=list(attachments) if isinstance(attachments, list) else None,
            )
        )
        if params.get("wait"):  # the member waits for the answer: it is idle meanwhile
            await anyio.to_thread.run_sync(lambda: notify.waiting_response(team, name, on=to))
        results.append(ToolResult.success(action, {"messageId": row.message_id}))
        return False
    if action == "request_plan_approval":
        from flows.plan_approval import denial_note, plan_approval

        asked = time.monotonic()
        await anyio.to_thread.run_sync(lambda: notify.waiting_response(team, name, on=lead))
        decision = await plan_approval(
            team=team,
            member=name,
            plan=str(params.get("plan", "")),
            summary=str(params.get("summary", info["title"])),
            # Asking again after a denial is a revision of it: the team's limit counts.
            previous_request_id=work.denied_request,
            request_id=request_id,
        )
        work.approval_wait_s += time.monotonic() - asked
        work.plan_approved = bool(decision.get("approve"))
        work.denied_request = decision["requestId"] if decision["status"] == "denied" else None
        if decision["status"] == "rejected":
            raise StepError(f"plan {decision['requestId']} was rejected: {decision['cause']}")
        results.append(ToolResult.success(action, decision))
        if decision["status"] == "denied":
            work.notes.append(await anyio.to_thread.run_sync(denial_note, team, lead, decision))
        return False
    if action == "create_task":
        from models.task import create_task

        created = await anyio.to_thread.run_sync(
            lambda: create_task(
                team,
                title=str(params.get("title", "")),
                description=params.get("description"),
                assignees=list(params.get("assignees", [])),
                creator=name,
            )
        )
        results.append(ToolResult.success(action, {"task_id": str(created.id)}))
        return False
    results.append(ToolResult.failure(action, f"unknown internal action {action!r}"))
    return False
