"""tool approvals: tool_approvals, each tool call a person must decide on (approve, edit,
reject), who decided it, through which door, and whether it ran (`executed_at`)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 14:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    utc = models.base.UTCDateTime(timezone=True)
    op.create_table(
        "tool_approvals",
        sa.Column("call_id", sa.String(length=255), nullable=False),
        sa.Column("batch_id", sa.String(length=255), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("member", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=True),
        sa.Column("task_title", sa.String(length=500), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("tool_id", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("params", models.base.JSONValue(), nullable=False),
        sa.Column("thoughts", sa.Text(), nullable=False),
        sa.Column("reasons", models.base.JSONValue(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("warnings", models.base.JSONValue(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("new_params", models.base.JSONValue(), nullable=True),
        sa.Column("feedback", sa.Text(), nullable=True),
        sa.Column("decided_by", sa.String(length=64), nullable=True),
        sa.Column("door", sa.String(length=16), nullable=True),
        sa.Column("decided_at", utc, nullable=True),
        sa.Column("cause", sa.String(length=255), nullable=True),
        sa.Column("flow_run_id", sa.String(length=64), nullable=True),
        sa.Column("requested_at", utc, nullable=False),
        sa.Column("deadline", utc, nullable=True),
        sa.Column("timeout_policy", sa.String(length=16), nullable=False),
        sa.Column("escalated_at", utc, nullable=True),
        sa.Column("hard_deadline", utc, nullable=True),
        sa.Column("executed_at", utc, nullable=True),
        sa.Column("result", models.base.JSONValue(), nullable=True),
        sa.PrimaryKeyConstraint("call_id", name=op.f("pk_tool_approvals")),
    )
    with op.batch_alter_table("tool_approvals", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tool_approvals_batch_id"), ["batch_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_tool_approvals_flow_run_id"), ["flow_run_id"], unique=False
        )
        batch_op.create_index("ix_tool_approvals_team_status", ["team", "status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tool_approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_tool_approvals_team_status")
        batch_op.drop_index(batch_op.f("ix_tool_approvals_flow_run_id"))
        batch_op.drop_index(batch_op.f("ix_tool_approvals_batch_id"))

    op.drop_table("tool_approvals")
