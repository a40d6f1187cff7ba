"""watchdog: alarms raised once per condition; a task's failure and restarts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import models.base

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watchdog_alarms",
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("team", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("subject", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("times", sa.Integer(), server_default="1", nullable=False),
        sa.Column("raised_at", models.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("cleared_at", models.base.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_watchdog_alarms")),
    )
    with op.batch_alter_table("watchdog_alarms", schema=None) as batch_op:
        batch_op.create_index("ix_watchdog_alarms_team_cleared", ["team", "cleared_at"])
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("attempt", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("attempt")
    with op.batch_alter_table("watchdog_alarms", schema=None) as batch_op:
        batch_op.drop_index("ix_watchdog_alarms_team_cleared")
    op.drop_table("watchdog_alarms")
