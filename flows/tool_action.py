"""The `tool-action` flow: one `ASYNC` tool action of a member, run apart from its step.

A step that starts an `ASYNC` action (`flows/steps.py`) gets `TASK_STARTED` and the action's
`task_id` at once; the tool runs in a `tool-action` run (the `run-tool` task, also what a
`SYNC` action runs inline) and its result reaches the member later as a `tool_result`
notification in its inbox. `async_action` makes sure a result always arrives, a FAILURE one
when the run dies before it could deliver.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.runner import task_run_tags
from models import inbox
from models.retry import is_transient, retrying_async
from models.task_status import append_output, member_files
from models.tool import ToolResult


def _warn(line: str) -> None:
    """`line` on the run's log (the team-task run that starts the action)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_logger, get_run_logger

    try:
        get_run_logger().warning(line)
    except MissingContextError:
        get_logger("teamflow").warning(line)


@task(name="run-tool", task_run_name="{tool_id} for {member}", cache_policy=NO_CACHE)
async def run_tool(
    tool_id: str, params: dict[str, Any], team: str, member: str, resources: list[dict] | None
) -> dict[str, Any]:
    """Runs a `000` tool (in the member's task folder) and stores its Feedback."""
    from flows.tools import run_tool as execute
    from models.tool import get_tool, record_feedback

    def go() -> dict[str, Any]:
        try:
            definition = get_tool(tool_id)
        except ValueError as exc:
            result = ToolResult.failure(tool_id, str(exc))
            return {"result": result.to_wire(), "feedback_id": None, "log": str(exc)}
        folder = member_files(team, member)
        run = execute(definition, params, cwd=folder, resources=resources or [])
        feedback_id = None
        if run.feedback is not None:
            record_feedback(run.feedback)
            feedback_id = run.feedback.execution_id
            log = (
                f"[{tool_id}] $ {' '.join(run.argv)} (exit {run.feedback.exit_code})\n"
                f"{run.feedback.stdout}{run.feedback.stderr}"
            )
        else:
            log = f"[{tool_id}] not run: {run.result.error_message}"
        return {"result": run.result.to_wire(), "feedback_id": feedback_id, "log": log}

    outcome = await anyio.to_thread.run_sync(go)
    await anyio.to_thread.run_sync(append_output, team, member, outcome["log"])
    return outcome


_begun: set[str] = set()
"""The ASYNC actions (their `task_id`s) whose `tool-action` run began in this process: one
that began may have run its tool, so it is not started again."""


@flow(name="tool-action", flow_run_name="{tool_id} for {member}@{team}", persist_result=False)
async def tool_action(
    team: str,
    member: str,
    tool_id: str,
    params: dict[str, Any],
    task_id: str,
    resources: list[dict] | None = None,
    team_task_id: str | None = None,
) -> dict[str, Any]:
    """An `ASYNC` tool action: runs the tool, then delivers a `tool_result` notification.

    The run is tagged `team:`, `member:` and (given `team_task_id`) `task:` while the tool
    runs. (The run alone: tags on its task runs would cost a concurrency-slot call each.)
    """
    from flows.plan_approval import tag_run

    _begun.add(task_id)
    extra = [f"task:{team_task_id}"] if team_task_id else []
    tagging = asyncio.ensure_future(tag_run(*task_run_tags(team, [member]), *extra))
    try:
        outcome = await run_tool(tool_id, params, team, member, resources)
    finally:
        await tagging
    result = outcome["result"]
    await anyio.to_thread.run_sync(deliver_result, team, member, tool_id, task_id, result)
    return result


def deliver_result(
    team: str, member: str, tool_id: str, task_id: str, result: dict[str, Any]
) -> None:
    """The `tool_result` notification of an ASYNC action, in the member's inbox."""
    inbox.send(
        team,
        to=member,
        sender="system",
        text=json.dumps(result),
        type="tool_result",
        summary=f"{tool_id} finished ({result['status']})",
        payload=result,
        metadata={"task_id": task_id},
    )


async def async_action(
    team: str, member: str, tool_id: str, params: dict[str, Any], task_id: str, **kwargs: Any
) -> dict[str, Any]:
    """Runs `tool_action`; if its run dies before it delivered a result (the Prefect server
    refused to create it, say), the member gets a FAILURE result saying why, instead of
    waiting for one that will never come.

    A transient error (a 503, a dropped connection) before the run began is tried again
    (`models.retry`): the tool has not run, so it runs once. After the run began, the tool
    may have run: no second start."""

    def transient(exc: BaseException) -> bool:
        return task_id not in _begun and is_transient(exc)

    try:
        return await retrying_async(
            f"starting the ASYNC action {tool_id} ({task_id})",
            lambda: tool_action(team, member, tool_id, params, task_id, **kwargs),
            transient=transient,
            on_retry=_warn,
        )
    except Exception as exc:
        failure = ToolResult.failure(
            tool_id, f"the ASYNC run of {tool_id} failed: {exc}"[:2000]
        ).model_dump(mode="json")

        def deliver_once() -> None:
            sent = inbox.messages(team, member, sender="system")
            if not any(
                m.type == "tool_result" and (m.meta or {}).get("task_id") == task_id for m in sent
            ):
                deliver_result(team, member, tool_id, task_id, failure)

        await anyio.to_thread.run_sync(deliver_once)
        raise
    finally:
        _begun.discard(task_id)
