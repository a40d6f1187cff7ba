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
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import anyio
from prefect import get_run_logger
from prefect.input import RunInput
from pydantic import Field

from flows.reported import waits_over
from flows.steps import Work, alive, member_status, work_on
from flows.waits import can_suspend, suspend_for_input
from models.settings import get_settings

KIND = "mcp"
"""The runtime kind of an outside member."""


def is_outside(runtime: dict[str, Any] | None) -> bool:
    return (runtime or {}).get("kind") == KIND


async def member_work(info: dict[str, Any], name: str, max_steps: int) -> Work:
    """One member's part of a team task: its agent stepped by teamflow (`work_on`), or, for
    an outside member, its report awaited (`await_report`)."""
    known = info.get("outside")  # which assignees are, read when the run claimed the task
    if known is None:
        outside = await anyio.to_thread.run_sync(_outside, info["team"], name)
    else:
        outside = name in known
    if outside:
        return await await_report(info, name)
    return await work_on(info, name, max_steps)


def _adoptable(task_id: str, run_key: str | None) -> bool:
    """Whether the run with idempotency key `run_key` is the task's own run (the one
    `teamflow task run`, MCP or a blocker's completion started for its current attempt:
    there is exactly one) and every assignee is an outside member."""
    from models import team as teams
    from models.db import session_scope
    from models.task import get_task
    from models.watchdog import task_run_key

    with session_scope() as s:
        row = get_task(task_id, session=s)
        names = [a.assignee_id for a in row.assignees]
        if not names or run_key != task_run_key(row.id, row.attempt):
            return False
        members = {m.name: m for m in teams.list_members(row.team or "", session=s)}
        return all(n in members and is_outside(members[n].runtime) for n in names)


async def adopt(info: dict[str, Any]) -> bool:
    """Takes on a task this run did not claim because its outside member was quicker: it set
    the task in_progress (or even reported it) before the run began. Only the task's own run
    (its idempotency key, see `_adoptable`) adopts it, so a task has one run all the same.
    A run resumed after it suspended while a step's tool calls waited (`flows.tool_gate`)
    takes its task on again too (`info["held"]`)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or info["status"] == "pending":
        return False
    if await anyio.to_thread.run_sync(_held_by, info["id"], str(run.id)):
        info["held"] = True  # it suspended while a step's tool calls waited: it goes on
        return True
    return await anyio.to_thread.run_sync(_adoptable, info["id"], run.idempotency_key)


def _held_by(task_id: str, run_id: str) -> bool:
    from models.tool_approval import held_by

    return held_by(task_id, run_id)


class ReportCheck(RunInput):
    """The form of a team-task run suspended while its outside member works: resuming it
    makes the run look at the task again (the member reports with MCP's task_update)."""

    note: str = Field(
        default="",
        title="Note",
        description="Why you resume the run; it ends only once the member has reported.",
    )


async def _suspensions(info: dict[str, Any]) -> tuple[float, int]:
    """Whether and when this run suspends while it waits (seconds in process, 0: never),
    and how many times it suspended before (a resumed run runs its flow from the start).

    Only a deployed run (no subflow) of a task with one assignee suspends: its one wait is
    the whole run, so running it again from the start redoes nothing."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    if len(info["assignees"]) != 1 or not can_suspend():
        return 0.0, 0
    context = FlowRunContext.get()
    assert context is not None and context.flow_run is not None  # can_suspend says so
    async with get_client() as client:
        saved = await client.filter_flow_run_input(
            flow_run_id=context.flow_run.id,
            # Prefect names a suspended state's input `suspended-{pause key}-schema`.
            key_prefix=f"suspended-report-{info['id']}-",
            limit=1000,
            exclude_keys=set(),
        )
    waited = len({i.key.removesuffix("-schema") for i in saved if i.key.endswith("-schema")})
    return get_settings().suspend_after_seconds, waited


async def resumed(info: dict[str, Any]) -> bool:
    """Whether this run suspended before while it waited for the task's report (or for
    decisions on a step's tool calls: `adopt` said so)."""
    return bool(info.get("held")) or (await _suspensions(info))[1] > 0


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
    suspends, waited = await _suspensions(info)
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
            freed = f" ({report.reason})" if (report.reason or "").startswith("freed") else ""
            work.ok, work.error = False, f"{name} {why} before it reported{freed}"
            break
        if report.status == "in_progress" and not noted:
            logger.info("%s is on it", name)
            noted = True
        if suspends and (waited or time.monotonic() - started >= suspends):
            # Long enough in process: free the worker until the report resumes the run.
            await suspend_for_input(
                ReportCheck, key=f"report-{task_id}-{waited + 1}", what=f"{name}'s report"
            )
            waited += 1  # back here only if that wait had fired before: the next is new
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


# --- resuming suspended runs whose wait is over ---------------------------------------------


async def resume_reported_runs(
    task_ids: Collection[str] | None = None, team: str | None = None
) -> int:
    """Resumes the suspended `team-task` runs (of `task_ids`, else all; of `team`, else of
    every team) whose outside member reported or stopped; each finds why in teamflow's
    database and ends. Returns how many were resumed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateName,
        FlowRunFilterTags,
    )

    from flows import waits

    wanted = set(task_ids) if task_ids is not None else None
    if wanted is not None and not wanted:
        return 0
    runs: list[Any] = []
    async with get_client() as client:
        while True:
            page = await client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["team-task"])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(name=FlowRunFilterStateName(any_=["Suspended"])),
                    tags=FlowRunFilterTags(all_=[f"team:{team}"]) if team else None,
                ),
                limit=waits.PAGE,
                offset=len(runs),
            )
            runs += page
            if len(page) < waits.PAGE:
                break
    pairs = [(str(r.id), str(r.parameters.get("task_id"))) for r in runs]
    if wanted is not None:
        pairs = [p for p in pairs if p[1] in wanted]
    if not pairs:
        return 0
    over = await anyio.to_thread.run_sync(waits_over, pairs)
    return await waits.resume_suspended(over) if over else 0
