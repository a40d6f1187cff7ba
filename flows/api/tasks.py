"""`/api/v1/teams/{team}/tasks` and `/api/v1/tasks/{id}`: a team's tasks (seed `001`
TaskCreate in, the task as the MCP tools show it out), and starting one's run.

The stores are the ones `teamflow task` and the MCP task tools use (`models.task`,
`models.task_edit`, `models.dependencies`, `flows.runner.start_task`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, Field

from flows.api.auth import Caller
from flows.api.envelopes import SUCCESS_SCHEMA, Conflict, ok
from flows.api.paths import TaskIdPath, TeamPath
from flows.api.teams import Body
from models.identity import Action, PrincipalKind, TaskTarget, authorize

router = APIRouter(tags=["tasks"])


class TaskIn(Body):
    """Seed `001` TaskCreate, with teamflow's own optional fields."""

    title: str = Field(min_length=1, max_length=500, description="What is to be done")
    description: str | None = Field(default=None, description="Details")
    creator_id: str | None = Field(default=None, max_length=64, description="Who asks")
    assignee_ids: list[str] = Field(default_factory=list, max_length=64)
    priority: str | None = Field(default=None, description="low, normal, high or critical")
    deadline: AwareDatetime | None = Field(default=None, description="ISO 8601 with a zone")
    params: dict[str, Any] | None = Field(default=None, description="Handed to the agents")
    blocked_by: list[str] = Field(default_factory=list, max_length=64)


def _view(row: Any, session: Any) -> dict[str, Any]:
    from models.task_edit import task_views

    view = task_views([row], session=session)[0]
    view["team"] = row.team
    return view


@router.post(
    "/teams/{team}/tasks", response_model=SUCCESS_SCHEMA, status_code=201, summary="New task"
)
def create_task(team: TeamPath, body: TaskIn, who: Caller) -> JSONResponse:
    """A pending task (as `teamflow task create`); a member may assign it only to itself."""
    from models.db import session_scope
    from models.dependencies import add_blockers
    from models.task import create_task as create

    creator = body.creator_id
    if who.kind is PrincipalKind.MEMBER:
        creator = who.name
    with session_scope() as s:
        authorize(who, Action.TASK_CREATE, team, session=s)
        for name in body.assignee_ids:
            authorize(who, Action.TASK_UPDATE, team, TaskTarget((), name), session=s)
        row = create(
            team, title=body.title, description=body.description,
            assignees=body.assignee_ids, creator=creator, priority=body.priority,
            deadline=body.deadline, params=body.params, session=s,
        )  # fmt: skip
        add_blockers(row, body.blocked_by, session=s)
        return ok(_view(row, s), f"task {row.id} created", 201)


@router.get("/teams/{team}/tasks", response_model=SUCCESS_SCHEMA, summary="A team's tasks")
def list_tasks(
    team: TeamPath,
    who: Caller,
    status: str | None = Query(default=None, description="pending, in_progress, ..."),
) -> JSONResponse:
    from models.db import session_scope
    from models.task import list_tasks as listed
    from models.task_edit import task_views

    with session_scope() as s:
        authorize(who, Action.TASK_READ, team, session=s)
        rows = listed(team, status=status, session=s)
        return ok(task_views(rows, session=s), f"{len(rows)} task(s)")


@router.get("/tasks/{task_id}", response_model=SUCCESS_SCHEMA, summary="One task")
def get_task(task_id: TaskIdPath, who: Caller) -> JSONResponse:
    from models.db import session_scope
    from models.task import get_task as found

    with session_scope() as s:
        row = found(task_id, session=s)
        authorize(who, Action.TASK_READ, row.team, session=s)
        return ok(_view(row, s))


@router.post("/tasks/{task_id}/run", response_model=SUCCESS_SCHEMA, summary="Start a task")
def run_task(task_id: TaskIdPath, who: Caller) -> JSONResponse:
    """Starts the task's `team-task` run (as `teamflow task run`; needs `teamflow up`). A
    task whose blockers have not all completed is a 409: it starts by itself later."""
    from flows.runner import start_task
    from models.db import session_scope
    from models.dependencies import open_blockers, short
    from models.task import get_task as found

    with session_scope() as s:
        row = found(task_id, session=s)
        assignees = tuple(a.assignee_id for a in row.assignees)
        authorize(who, Action.TASK_UPDATE, row.team, TaskTarget(assignees), session=s)
        blockers = open_blockers(row.id, session=s)
        if blockers:
            named = ", ".join(f"{b} ({status})" for b, status in blockers)
            raise Conflict(
                f"task {short(row.id)} is blocked by {named}; it starts by itself when they "
                "complete"
            )
    run = start_task(str(row.id))
    data = {"task_id": str(row.id), "flow_run_id": str(run.id), "url": run.url}
    return ok(data, f"started {run.name}")
