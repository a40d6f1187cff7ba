"""Every table of teamflow, registered on one metadata (what Alembic compares against).

Knowing every table, it also knows which rows belong to a team (`team_rows`).
"""
# ruff: noqa: F401, I001  (imported for their tables; base first: it sets the naming convention)

import models.base
import models.agent
import models.alert
import models.approval
import models.dependencies
import models.inbox
import models.knowledge
import models.shutdown
import models.task
import models.team
import models.tool
import models.watchdog
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, SQLModel

metadata = SQLModel.metadata


def clear_rows(session: Session, team: str) -> None:
    """Deletes every row of `team` (see `team_rows`), children first."""
    for table, where in reversed(team_rows(session, team)):
        session.exec(sa.delete(table).where(where))


def team_rows(session: Session, team: str) -> list[tuple[sa.Table, Any]]:
    """Every table holding rows of `team`, parents first, with the clause that selects them.

    A row belongs to a team by its `team` column, by an `agent_id` of the form
    `{name}@{team}`, or (task assignees, task dependencies) by its task.
    """
    found: list[tuple[sa.Table, Any]] = []
    tasks = metadata.tables["tasks"]
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
    return found
