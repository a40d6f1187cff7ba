"""Every table of teamflow, registered on one metadata (what Alembic compares against).

Knowing every table, it also knows which rows belong to a team (`team_rows`).
"""
# ruff: noqa: F401, I001  (imported for their tables; base first: it sets the naming convention)

import models.base
import models.agent
import models.alert
import models.approval
import models.conversation
import models.dependencies
import models.identity
import models.users
import models.inbox_table
import models.knowledge
import models.memory
import models.project
import models.prompt_template
import models.shutdown
import models.task
import models.task_status
import models.team
import models.tool
import models.tool_approval
import models.watchdog
import models.journal
import models.worker_beat
import functools
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, SQLModel

metadata = SQLModel.metadata


def clear_rows(team: str, *, session: Session) -> None:
    """Deletes every row of `team` (see `team_rows`), children first."""
    for table, where in reversed(team_rows(team, session=session)):
        session.exec(sa.delete(table).where(where))


def team_rows(team: str, *, session: Session) -> list[tuple[sa.Table, Any]]:
    """Every table holding rows of `team`, parents first, with the clause that selects them.

    A row belongs to a team by its `team` column, by an `agent_id` of the form
    `{name}@{team}`, or (task assignees, task dependencies, and the `000` contexts that place
    a task in a project: `models.project.place_task`) by its task. The contexts come right
    after `tasks`, whose rows select them: `clear_rows` deletes them before their tasks.
    """
    found: list[tuple[sa.Table, Any]] = []
    tasks = metadata.tables["tasks"]
    contexts = metadata.tables["contexts"]
    for table in metadata.sorted_tables:
        if table.name == "teams":
            found.append((table, table.c.name == team))
        elif "team" in table.c:
            found.append((table, table.c.team == team))
        elif table.name in ("task_assignees", "task_dependencies"):
            ids = sa.select(tasks.c.id).where(tasks.c.team == team).scalar_subquery()
            found.append((table, table.c.task_id.in_(ids)))
        elif "agent_id" in table.c:
            found.append((table, table.c.agent_id.like(f"%@{team}")))
    texts = sa.select(_uuid_text(session, tasks.c.id)).where(tasks.c.team == team)
    at = next(i for i, (table, _) in enumerate(found) if table is tasks) + 1
    found.insert(at, (contexts, contexts.c.task_id.in_(texts.scalar_subquery())))
    return found


def _uuid_text(session: Session, column: sa.Column) -> Any:
    """A `sa.Uuid` column as the text `str(uuid)` gives, as a context's `task_id` holds it:
    PostgreSQL casts its uuid; SQLite stores the 32 hex digits, to be put in groups."""
    if session.get_bind().dialect.name == "postgresql":
        return sa.cast(column, sa.String)
    groups: list[Any] = [
        sa.func.substr(column, start, size, type_=sa.String) for start, size in _GROUPS
    ]
    return functools.reduce(lambda text, group: text + "-" + group, groups)


_GROUPS = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
"""Where the groups of a UUID's text are in its 32 hex digits (1-based, as SQL counts)."""
