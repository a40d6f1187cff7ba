"""Projects: `000` Project Definitions, their milestones, and the tasks placed in them.

A new project is `ready` (`000` status: nothing in it has started; `000` has no `active`).
Its id is a slug of its name unless one is given; its milestones are ids, in the order given.

A task joins a project, and optionally one of its milestones, when it is created:
`place_task` writes the task's `000` Context (`contexts` row: project_id, milestone_id,
task_id; its parent the milestone, or the project) in the caller's transaction, so a refused
project or milestone leaves no task behind either. `project_view` groups the project's tasks
by milestone and reads each task's status from `tasks`, where it is kept up to date; the
context's own status is the task's at creation. A task deleted with its team drops out.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

import sqlalchemy as sa
from pydantic import Field, ValidationError
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from models.base import SnakeWireModel, Timestamp, json_column, utc_column, utcnow
from models.db import session_scope
from models.knowledge import (
    Context,
    ContextRow,
    ElmoStatus,
    Id,
    KnowledgeError,
    ParentContext,
    check_id,
    check_tags,
)
from models.limits import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, LimitError, check_chars
from models.status import TASK_TO_ELMO
from models.task import TaskRow, TaskState
from models.wire_support import error_lines, row_values, wire_from_row

NEW_PROJECT_STATUS = ElmoStatus.READY
"""The status of a new project."""


# --- 000 Project Definition ----------------------------------------------------------------


class ProjectDefinition(SnakeWireModel):
    """`000` Project Definition: a project, its status and its milestones."""

    project_id: Id
    name: str = Field(min_length=1)
    description: str
    created_at: Timestamp
    updated_at: Timestamp
    status: ElmoStatus
    milestones: list[str] = Field(description="Milestone ids")
    tags: list[str]


class ProjectRow(SQLModel, table=True):
    """A stored `000` Project Definition."""

    __tablename__ = "projects"

    project_id: str = SQLField(sa_column=sa.Column(sa.String, primary_key=True))
    name: str = SQLField(sa_column=sa.Column(sa.String, nullable=False, index=True))
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    created_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    status: str = SQLField(sa_column=sa.Column(sa.String(16), nullable=False, index=True))
    milestones: list = SQLField(sa_column=json_column(nullable=False))
    tags: list = SQLField(sa_column=json_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: ProjectDefinition) -> Self:
        """A row holding `wire`."""
        return cls(**row_values(wire))

    def to_wire(self) -> ProjectDefinition:
        """The row as the `000` Project Definition it was built from."""
        return wire_from_row(ProjectDefinition, self)


class ProjectError(KnowledgeError):
    """A refused project operation (unknown project or milestone, a taken id, ...)."""


def slug(name: str) -> str:
    """`name` as a project id: lower-case ASCII letters and digits joined by `-` (at most 64)."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:64].strip("-")


@dataclass(frozen=True)
class TaskRef:
    """A task of a project as `project show` lists it."""

    id: uuid.UUID
    team: str | None
    title: str
    status: str

    def to_json(self) -> dict[str, Any]:
        return {"id": str(self.id), "team": self.team, "title": self.title, "status": self.status}


@dataclass(frozen=True)
class ProjectView:
    """A project and its tasks: per milestone (in the project's order) and without one."""

    project: ProjectDefinition
    milestones: dict[str, list[TaskRef]]
    without_milestone: list[TaskRef] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project.to_wire(),
            "milestones": [
                {"milestone_id": m, "tasks": [t.to_json() for t in tasks]}
                for m, tasks in self.milestones.items()
            ],
            "without_milestone": [t.to_json() for t in self.without_milestone],
        }


def create_project(
    name: str,
    *,
    description: str,
    milestones: list[str] | None = None,
    tags: list[str] | None = None,
    project_id: str | None = None,
    session: Session | None = None,
) -> ProjectDefinition:
    """Stores a new project, `ready`, created now; its id `project_id` or a slug of `name`.

    Refused (`ProjectError`, nothing written): an empty name, a malformed or taken id, a
    malformed or repeated milestone, an empty tag.
    """
    if not name.strip():
        raise ProjectError("name: empty")
    try:
        check_chars(name, MAX_NAME_CHARS, what="name")
        check_chars(description, MAX_DESCRIPTION_CHARS, what="description")
    except LimitError as exc:
        raise ProjectError(str(exc)) from None
    if project_id is None:
        project_id = slug(name)
        if not project_id:
            raise ProjectError(f"cannot make a project id of the name {name!r}; give one (--id)")
    check_id(project_id, "project id")
    for milestone in milestones or []:
        check_id(milestone, "milestone")
    repeated = sorted({m for m in milestones or [] if (milestones or []).count(m) > 1})
    if repeated:
        raise ProjectError(f"milestone {repeated[0]!r} is given twice")
    now = utcnow()
    try:
        project = ProjectDefinition(
            project_id=project_id, name=name, description=description, created_at=now,
            updated_at=now, status=NEW_PROJECT_STATUS, milestones=list(milestones or []),
            tags=check_tags(tags),
        )  # fmt: skip
    except ValidationError as exc:
        raise ProjectError(error_lines(exc)[0]) from None
    with session_scope(session) as s:
        taken = ProjectError(f"project {project_id!r} exists already")
        if s.get(ProjectRow, project_id) is not None:
            raise taken
        try:
            with s.begin_nested():  # another process may take the id meanwhile
                s.add(ProjectRow.from_wire(project))
        except sa.exc.IntegrityError:
            raise taken from None
        return project


def get_project(project_id: str, *, session: Session | None = None) -> ProjectDefinition:
    """The project `project_id`; `ProjectError` if there is none."""
    with session_scope(session) as s:
        row = s.get(ProjectRow, project_id)
        if row is None:
            raise ProjectError(f"no project {project_id!r}")
        return row.to_wire()


def list_projects(*, session: Session | None = None) -> list[ProjectDefinition]:
    """Every project, by id."""
    with session_scope(session) as s:
        rows = s.exec(select(ProjectRow).order_by(col(ProjectRow.project_id)))
        return [row.to_wire() for row in rows]


def update_project(
    project_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    status: ElmoStatus | str | None = None,
    add_milestones: list[str] | None = None,
    drop_milestones: list[str] | None = None,
    tags: list[str] | None = None,
    session: Session | None = None,
) -> ProjectDefinition:
    """Changes a stored project (`teamflow project update`); None: unchanged.

    New milestones go after the project's own, in the order given; a milestone is dropped
    only while no task is placed in it. `tags` replace the stored ones (`[]`: none).
    `updated_at` becomes now when something changes; the id and `created_at` never change.
    Refused with one line (`ProjectError`), nothing written: an unknown project, nothing to
    change, an empty name, a status `000` does not have, a malformed, repeated or unknown
    milestone, a milestone that holds tasks, an empty tag.
    """
    if not (name is not None or description is not None or status is not None
            or add_milestones or drop_milestones or tags is not None):  # fmt: skip
        raise ProjectError(
            "nothing to change: give --name, --description, --status, --milestone, "
            "--drop-milestone or --tag/--no-tags"
        )
    if name is not None and not name.strip():
        raise ProjectError("name: empty")
    for milestone in add_milestones or []:
        check_id(milestone, "milestone")
    checked_tags = None if tags is None else check_tags(tags)
    with session_scope(session) as s:
        row = s.get(ProjectRow, project_id, with_for_update=True)
        if row is None:
            raise ProjectError(f"no project {project_id!r}")
        current = row.to_wire()
        milestones = list(current.milestones)
        for milestone in drop_milestones or []:
            if milestone not in milestones:
                raise _no_milestone(current, milestone)
            placed = _tasks_in(s, project_id, milestone)
            if placed:
                raise ProjectError(
                    f"milestone {milestone!r} of project {project_id!r} holds {placed} "
                    f"task(s); it is dropped only when empty"
                )
            milestones.remove(milestone)
        for milestone in add_milestones or []:
            if milestone in milestones:
                raise ProjectError(f"project {project_id!r} has a milestone {milestone!r} already")
            milestones.append(milestone)
        changes: dict[str, Any] = {"milestones": milestones}
        for key, value in (
            ("name", name), ("description", description), ("status", status),
            ("tags", checked_tags),
        ):  # fmt: skip
            if value is not None:
                changes[key] = value
        try:
            project = ProjectDefinition.model_validate({**current.model_dump(), **changes})
        except ValidationError as exc:
            raise ProjectError(error_lines(exc)[0]) from None
        if project == current:
            return current  # nothing changes, not even updated_at
        project = project.model_copy(update={"updated_at": utcnow()})
        for key, value in ProjectRow.from_wire(project).model_dump().items():
            setattr(row, key, value)
        s.flush()
        return project


def delete_project(project_id: str, *, session: Session | None = None) -> ProjectDefinition:
    """Deletes a project and the places of its tasks (`teamflow project delete`); returns
    the project as it was. The tasks stay in their teams, in no project.

    `ProjectError` for an unknown project, nothing deleted.
    """
    with session_scope(session) as s:
        row = s.get(ProjectRow, project_id, with_for_update=True)
        if row is None:
            raise ProjectError(f"no project {project_id!r}")
        project = row.to_wire()
        s.execute(sa.delete(ContextRow).where(col(ContextRow.project_id) == project_id))
        s.delete(row)
        s.flush()
        return project


def task_count(project_id: str, *, session: Session | None = None) -> int:
    """How many tasks are placed in the project (in any milestone or none)."""
    with session_scope(session) as s:
        return _tasks_in(s, project_id)


def _no_milestone(project: ProjectDefinition, milestone_id: str) -> ProjectError:
    has = ", ".join(project.milestones) or "none"
    return ProjectError(
        f"project {project.project_id!r} has no milestone {milestone_id!r} (its milestones: {has})"
    )


def _task_places(project_id: str) -> list[Any]:
    """Where the contexts that place a task in the project are (`place_task` writes them)."""
    return [
        ContextRow.project_id == project_id,
        col(ContextRow.task_id).is_not(None),
        col(ContextRow.process_id).is_(None),
        col(ContextRow.thread_id).is_(None),
        col(ContextRow.branch_id).is_(None),
    ]


def _tasks_in(s: Session, project_id: str, milestone_id: str | None = None) -> int:
    """The tasks placed in the project (with `milestone_id`: in that milestone)."""
    query = sa.select(sa.func.count()).select_from(ContextRow).where(*_task_places(project_id))
    if milestone_id is not None:
        query = query.where(col(ContextRow.milestone_id) == milestone_id)
    return s.execute(query).scalar_one()


def place_task(
    task: TaskRow,
    project_id: str,
    milestone_id: str | None = None,
    *,
    session: Session,
) -> Context:
    """Places the new `task` in project `project_id` (and its milestone `milestone_id`): its
    `000` Context, written in the caller's transaction (the one that writes the task).

    `ProjectError` for an unknown project or a milestone the project does not have.
    """
    project = get_project(project_id, session=session)
    if milestone_id is not None and milestone_id not in project.milestones:
        raise _no_milestone(project, milestone_id)
    now = utcnow()
    context = Context(
        project_id=project_id, milestone_id=milestone_id, task_id=str(task.id),
        process_id=None, thread_id=None, branch_id=None, description=task.title,
        resources=[], tags=[], created_at=now, updated_at=now,
        status=TASK_TO_ELMO[TaskState(task.status or TaskState.PENDING)],
        parent_context=ParentContext(
            project_id=project_id, milestone_id=milestone_id, task_id=None
        ),
    )  # fmt: skip
    session.add(ContextRow.from_wire(context))
    session.flush()
    return context


def project_view(project_id: str, *, session: Session | None = None) -> ProjectView:
    """The project `project_id` and its tasks grouped by milestone (`project show`)."""
    with session_scope(session) as s:
        project = get_project(project_id, session=s)
        contexts = s.exec(select(ContextRow).where(*_task_places(project_id))).all()
        placed: dict[uuid.UUID, str | None] = {}
        for context in contexts:
            try:
                placed.setdefault(uuid.UUID(context.task_id or ""), context.milestone_id)
            except ValueError:
                continue  # a context of work that is no teamflow task
        tasks = s.execute(
            sa.select(TaskRow)
            .where(col(TaskRow.id).in_(list(placed)))
            .order_by(col(TaskRow.created_at), col(TaskRow.id))
        ).scalars()
        groups: dict[str, list[TaskRef]] = {m: [] for m in project.milestones}
        without: list[TaskRef] = []
        for task in tasks:
            ref = TaskRef(task.id, task.team, task.title, task.status or TaskState.PENDING.value)
            milestone = placed[task.id]
            (without if milestone is None else groups.setdefault(milestone, [])).append(ref)
        return ProjectView(project, groups, without)
