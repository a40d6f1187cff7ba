"""Task dependencies in the `team-task` flow: the claim's gate and the starts at close.

A blocked task starts by itself through Prefect: when a `team-task` run closes its task as
completed, the same transaction claims the start of every dependent whose blockers are now
all completed (`models.dependencies.settle`, a conditional UPDATE on a locked row: exactly one
claim per dependent, even when two blockers complete at once on two workers); after the
commit, the run creates a run of the `team-task` deployment for each (`flows.runner.start`,
which returns without waiting for it, with the idempotency key `teamflow task run` uses, so
a retry or a manual start makes no second run). A failed task archives its dependents, with
the reason, in its close's transaction. No loop of ours polls for ready tasks; but a
closing process that dies between its commit and the start (or a server that refuses the
start) leaves a claimed task without a run, and the watchdog starts it
(`flows.watchdog.start_unblocked`, with the same idempotency key).

Chosen over a Prefect automation on the run's Completed event: a failed task's run also
ends Completed (the task is archived, the run is not crashed), so the automation would
still have to ask the database which dependents are ready and claim them; here that is one
transaction with the close, and no automation must be registered for it to work.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from models import dependencies as deps
from models.task import TaskState, move_task

DEPLOYMENT = "team-task/team-task"


def runtime_usable(config: dict[str, Any]) -> bool:
    """Whether a member's runtime can work a task (`runtime_problem` finds nothing wrong)."""
    from flows.runtimes.kinds import runtime_problem

    return runtime_problem(config) is None


def claim(session: Any, info: dict[str, Any]) -> bool:
    """The claim of `team_task` (pending -> in_progress, exactly once), gated: a task whose
    blockers have not all completed, or that has no assignee and finds no idle member, stays
    pending with the reason recorded (`info["reason"]`). A task without assignees gets one
    (`info["assignees"]`)."""
    task_id = uuid.UUID(info["id"])
    assignees, reason = deps.before_claim(task_id, runtime_usable, session=session)
    info["assignees"], info["reason"] = assignees, reason
    if reason is not None:
        if info["status"] == TaskState.PENDING.value:
            deps.set_reason(task_id, reason, session=session)
        return False
    claimed = move_task(
        task_id, to=TaskState.IN_PROGRESS, only_from={TaskState.PENDING}, session=session
    )
    if claimed:
        deps.set_reason(task_id, None, session=session)
    return claimed


def settle(session: Any, info: dict[str, Any], completed: bool) -> list[tuple[uuid.UUID, str]]:
    """In the close's transaction: the dependents to start now (claimed), or, when the task
    failed, its dependents archived with the reason."""
    return deps.settle(uuid.UUID(info["id"]), completed, session=session)


def start_run(task_id: uuid.UUID, team: str) -> Any:
    """Starts the `team-task` run of claimed `task_id` (a `runner.StartedRun`), with the
    idempotency key `teamflow task run` and MCP use: one run per attempt, whoever starts it
    and however often. Raises what `runner.start` raises."""
    from flows import runner
    from models.task import get_task
    from models.watchdog import task_run_key

    task = get_task(str(task_id))
    assignees = [a.assignee_id for a in task.assignees]
    return runner.start(
        DEPLOYMENT,
        {"task_id": str(task_id), "team": team},
        idempotency_key=task_run_key(task_id, task.attempt),
        tags=[f"team:{team}"],
        flow_run_name=runner.task_run_name(team, task.title, assignees),
        require_worker=False,
    )


def start_failed(task_id: uuid.UUID, exc: Exception) -> str:
    """Records on the pending task why its run could not be started, and what to do (the
    watchdog tries again). Returns that reason."""
    from models.db import session_scope

    reason = (
        f"{deps.START_FAILED} ({exc}); the watchdog tries again, or start it with "
        f"`teamflow task run {task_id}`"
    )
    with session_scope() as s:
        deps.set_reason(task_id, " ".join(reason.split()), session=s)
    return reason


def start_ready(ready: list[tuple[uuid.UUID, str]]) -> list[str]:
    """Starts a `team-task` run for each claimed dependent (after the close committed).

    A start that fails (no server reachable, say) is recorded as the task's reason; the task
    stays pending, and the watchdog starts it later (`flows.watchdog.start_unblocked`), as it
    does when this process dies before it gets here. Returns the ids of the runs started.
    """
    log = run_logger()
    started = []
    for task_id, team in ready:
        try:
            run = start_run(task_id, team)
        except Exception as exc:  # the close is committed: record what went wrong
            log.error("Task %s: %s", task_id, start_failed(task_id, exc))
            continue
        log.info("Task %s is unblocked: started %s", task_id, run.name)
        started.append(str(run.id))
    return started


def run_logger() -> Any:
    """The run's logger, in a flow run; this module's outside one (a test, the CLI)."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)
