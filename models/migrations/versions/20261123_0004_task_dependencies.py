"""task dependencies

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "task_dependencies",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("blocked_by", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.id"],
            name=op.f("fk_task_dependencies_task_id_tasks"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["blocked_by"], ["tasks.id"],
            name=op.f("fk_task_dependencies_blocked_by_tasks"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", "blocked_by", name=op.f("pk_task_dependencies")),
    )  # fmt: skip
    with op.batch_alter_table("task_dependencies", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_task_dependencies_blocked_by"), ["blocked_by"], unique=False
        )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reason", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("start_claimed_at", models.base.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("start_claimed_at")
        batch_op.drop_column("reason")
    with op.batch_alter_table("task_dependencies", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_task_dependencies_blocked_by"))
    op.drop_table("task_dependencies")
