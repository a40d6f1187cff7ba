"""Outside members' work as Prefect runs: a `team-task` run that waits for the member's report.

A member added with `--runtime mcp` runs its own agent (Claude Code, OpenCode,
`examples/mcp_agent.py`, ...) and works through `teamflow mcp`. A task given to it starts a
`team-task` run as any task does: the run claims the task and sends the `task_assignment`;
then, instead of stepping an agent, it waits for the member's report, which the member
makes with MCP's `task_update`: `in_progress` (the run notes it), `completed` (with an
optional `result`: the run ends Completed, the result in its report artifact) or `failed`
(with its reason: the run ends Failed). A member stopped meanwhile (shut down, killed, its
task freed) fails its part. The run stays Running while it waits, and looks at the task every
`TEAMFLOW_OUTSIDE_CHECK_SECONDS` (default 0.5; the look costs Prefect nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio
from prefect import get_run_logger

from flows.steps import Work, alive, member_status, work_on
from models.settings import get_settings

KIND = "mcp"
"""The runtime kind of an outside member."""


def is_outside(runtime: dict[str, Any] | None) -> bool:
    return (runtime or {}).get("kind") == KIND


async def member_work(info: dict[str, Any], name: str, max_steps: int) -> Work:
    """One member's part of a team task: its agent stepped by teamflow (`work_on`), or, for
    an outside member, its report awaited (`await_report`)."""
    if await anyio.to_thread.run_sync(_outside, info["team"], name):
        return await await_report(info, name)
    return await work_on(info, name, max_steps)


def _outside(team: str, name: str) -> bool:
    from models import team as teams
    from models.db import session_scope

    with session_scope() as s:
        return is_outside(teams.get_member(team, name, session=s).runtime)


@dataclass
class Report:
    """Where an outside member's part of a task stands."""

    status: str
    reason: str | None
    assigned: bool
    active: bool


def _report(task_id: str, team: str, name: str) -> Report:
    from models import team as teams
    from models.db import session_scope
    from models.task import get_task

    with session_scope() as s:
        row = get_task(task_id, session=s)
        member = teams.get_member(team, name, session=s)
        assigned = name in [a.assignee_id for a in row.assignees]
        assert row.status is not None, "a stored task has a status"
        return Report(row.status, row.reason, assigned, member.is_active)


async def await_report(info: dict[str, Any], name: str) -> Work:
    """Waits until the outside member reports its task completed or failed (or stops)."""
    logger = get_run_logger()
    work = Work(member=name)
    team, task_id = info["team"], info["id"]
    check = get_settings().outside_check_seconds
    started = time.monotonic()
    await member_status(team, name, "running")
    logger.info("%s works on the task through MCP; waiting for its report", name)
    noted = False
    while True:
        report = await anyio.to_thread.run_sync(_report, task_id, team, name)
        if report.status == "completed":
            work.response = report.reason or f"{name} reported the task completed"
            break
        if report.status == "archived":
            work.ok, work.error = False, report.reason or f"{name} reported the task failed"
            break
        if not report.active or not report.assigned:
            why = "was shut down" if not report.active else "was taken off the task"
            work.ok, work.error = False, f"{name} {why} before it reported"
            break
        if report.status == "in_progress" and not noted:
            logger.info("%s is on it", name)
            noted = True
        await anyio.sleep(check)
    work.steps = 1
    elapsed = time.monotonic() - started
    if work.ok:
        logger.info("%s completed the task: %s", name, work.response)
    else:
        logger.error("%s failed: %s", name, work.error)
    await alive(team, name, "idle")
    await member_status(
        team,
        name,
        "complete" if work.ok else "error",
        error_message=work.error,
        completed=work.ok,
        response_time=elapsed if work.ok else None,
    )
    return work
