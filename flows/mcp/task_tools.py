"""MCP tools for a team's tasks, with claude-teams' names and arguments.

`task_create`, `task_update`, `task_list`, `task_get`: adapters over `models.task`,
`models.task_edit` and `models.dependencies` (the stores `teamflow task` uses). A task given
to a member (`task_update owner=`) sends it the `task_assignment` that a team-task run sends.
"""

import uuid
from typing import Any, Literal

from mcp.server.mcpserver import Context

from flows.mcp.server import TeamflowMCP, refusals
from models.identity import Action, PrincipalKind, TaskTarget, authorize

TaskStatus = Literal["pending", "in_progress", "completed", "deleted", "failed"]


def task_create(
    team_name: str,
    subject: str,
    ctx: Context,
    description: str = "",
    active_form: str = "",
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create a pending task for the team.

    Args:
        team_name: the team.
        subject: what is to be done, imperative (1-500 characters): "Write the report".
        description: details, acceptance criteria.
        active_form: the task in progress, for status lines: "Writing the report".
        metadata: a JSON object kept with the task (handed to its agents).

    Give it to a member with task_update(owner=NAME); chain tasks with
    task_update(add_blocked_by=[ID]). Returns the task (id, status, subject, owner, ...).
    """
    from models.db import session_scope
    from models.task import create_task
    from models.task_edit import TaskChanges, task_view, update_task

    with refusals(ctx) as who:
        authorize(who, Action.TASK_CREATE, team_name)
        with session_scope() as s:
            row = create_task(
                team_name,
                title=subject,
                description=description or None,
                creator=who.name if who.kind is PrincipalKind.MEMBER else None,
                params=None,
                session=s,
            )
            if metadata is not None or active_form:
                changes = TaskChanges(metadata=metadata, active_form=active_form or None)
                row = update_task(team_name, str(row.id), changes, session=s).task
            return task_view(row)


def task_update(
    team_name: str,
    task_id: str,
    ctx: Context,
    status: TaskStatus | None = None,
    owner: str | None = None,
    subject: str | None = None,
    description: str | None = None,
    active_form: str | None = None,
    add_blocks: list[str] | None = None,
    add_blocked_by: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    result: str | None = None,
) -> dict[str, Any]:
    """Change a task: only what you give changes, all or nothing.

    Args:
        status: pending, in_progress (you started), completed (done: `result` says what came
            of it), deleted (archived), failed (archived; `result` says why; its dependents
            fail too).
        owner: the member to do it ("" for nobody). It gets a task_assignment message.
            A member may only take an unassigned task for itself (owner = its own name).
        subject, description, active_form: new text.
        add_blocks: ids of tasks that must wait for this one.
        add_blocked_by: ids of tasks this one waits for (a cycle is refused).
        metadata: keys merged into the task's metadata; a key set to null is removed.
        result: with completed or failed, the outcome or the reason (kept on the task).

    A member changes only tasks assigned to it (or claims an unassigned one). When a task
    completes, the tasks it blocked and that are now free start (or their owners are told).
    Returns the task as it now stands, and "started": the tasks that became ready.
    """
    from flows.reported import resume_reported
    from models.db import session_scope
    from models.task_edit import TaskChanges, find_task, task_views, update_task

    changes = TaskChanges(
        status=status,
        owner=owner,
        subject=subject,
        description=description,
        active_form=active_form,
        add_blocks=add_blocks or [],
        add_blocked_by=add_blocked_by or [],
        metadata=metadata,
        reason=result,
    )
    with refusals(ctx) as who:
        with session_scope() as s:
            row = find_task(team_name, task_id, session=s)
            target = TaskTarget(tuple(a.assignee_id for a in row.assignees), owner)
            authorize(who, Action.TASK_UPDATE, team_name, target, session=s)
            done = update_task(team_name, task_id, changes, session=s)
            view = task_views([done.task], session=s)[0]
        if done.owner_changed and owner:
            view["run"] = _start(str(done.task.id), team_name, owner_changed=True)
        view["started"] = [_start(str(t), team, owner_changed=False) for t, team in done.ready]
        if done.owner_changed or status in ("completed", "failed", "deleted"):
            # The report (or the new owner) ends the wait of the task's suspended run.
            resume_reported([str(done.task.id)], team=team_name)
        return view


def _lead(team: str, session: Any) -> str:
    from models import team as teams

    return teams.get_team(team, session=session).lead


def _start(task_id: str, team: str, *, owner_changed: bool) -> dict[str, Any] | None:
    """Puts a task given to a member (or freed by its blockers) to work, as teamflow does
    for any task: its `team-task` run, which claims it and sends the `task_assignment`
    (an outside member's run then waits for its report). A task still blocked waits for
    its blockers. With no run to start (no assignee teamflow can run, or no Prefect server
    reachable), its assignees are told directly, so outside members can still work."""
    from flows import runner
    from flows.dependencies import runtime_usable
    from models import team as teams
    from models.assignment import notify, task_info
    from models.db import session_scope
    from models.dependencies import open_blockers

    # A task freed by a close may be taken by its outside member in the instant the close
    # commits, before its run is started here: the run adopts it (`team_task.adopt`).
    startable = ("pending",) if owner_changed else ("pending", "in_progress")
    with session_scope() as s:
        info = task_info(task_id, session=s)
        if not info["assignees"] or info["status"] not in startable:
            return None
        if owner_changed and open_blockers(uuid.UUID(task_id), session=s):
            return {"task_id": task_id, "note": "it starts when its blockers complete"}
        members = {m.name: m for m in teams.list_members(team, session=s)}
        runnable = all(
            n in members and runtime_usable(members[n].runtime or {}) for n in info["assignees"]
        )
    note = "no assignee teamflow can run"
    if runnable:
        # Outside any transaction of ours: starting a run writes to the database too.
        try:
            run = runner.start_task(task_id)
            return {"task_id": task_id, "flow_run_id": str(run.id), "url": run.url}
        except runner.RunnerError as exc:
            note = f"no team-task run: {exc}"
    with session_scope() as s:
        notify(info, lead=_lead(team, s), session=s)
    return {"task_id": task_id, "told": info["assignees"], "note": note}


def task_list(team_name: str, ctx: Context) -> list[dict[str, Any]]:
    """List a team's tasks, oldest first, with status, owner and blockers."""
    from models.db import session_scope
    from models.task import list_tasks
    from models.task_edit import task_views

    with refusals(ctx) as who:
        authorize(who, Action.TASK_READ, team_name)
        with session_scope() as s:
            return task_views(list_tasks(team_name, session=s), session=s)


def task_get(team_name: str, task_id: str, ctx: Context) -> dict[str, Any]:
    """One task of the team, in full (id, subject, description, status, owner, blockedBy,
    metadata, reason)."""
    from models.db import session_scope
    from models.task_edit import find_task, task_views

    with refusals(ctx) as who:
        authorize(who, Action.TASK_READ, team_name)
        with session_scope() as s:
            return task_views([find_task(team_name, task_id, session=s)], session=s)[0]


TOOLS = (task_create, task_update, task_list, task_get)


def register(server: TeamflowMCP) -> None:
    """Adds these tools to `server`."""
    for fn in TOOLS:
        server.add_tool(fn)
