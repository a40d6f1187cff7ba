"""durable members: step_journal (each step of a member, keyed per task attempt, step and
part), worker_beats (teamflow workers' own heartbeats), and the tasks' lease, resumes,
run_id, worker and resume_at

Revision ID: 0017
Revises: 0016 (0015 where no 0016 exists)
Create Date: 2026-11-26 17:20:00.000000
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    utc = models.base.UTCDateTime(timezone=True)
    op.create_table(
        "step_journal",
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("member", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("part", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("data", models.base.JSONValue(), nullable=False),
        sa.Column("lease", sa.Integer(), nullable=False),
        sa.Column("written_at", utc, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_step_journal")),
    )
    with op.batch_alter_table("step_journal", schema=None) as batch_op:
        batch_op.create_index(
            "ix_step_journal_task_member", ["task_id", "attempt", "member"], unique=False
        )
    op.create_table(
        "worker_beats",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("beat_at", utc, nullable=False),
        sa.Column("runs", models.base.JSONValue(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_worker_beats")),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(
            sa.Column("resumes", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("run_id", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("worker", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("resume_at", utc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("resume_at")
        batch_op.drop_column("worker")
        batch_op.drop_column("run_id")
        batch_op.drop_column("resumes")
        batch_op.drop_column("lease")
    op.drop_table("worker_beats")
    with op.batch_alter_table("step_journal", schema=None) as batch_op:
        batch_op.drop_index("ix_step_journal_task_member")
    op.drop_table("step_journal")
