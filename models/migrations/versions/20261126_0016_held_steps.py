"""held steps: tool_approvals.held_step and held_tokens, the step a suspended team-task run
waits to go on with (the member's Chimera response, and the tokens spent up to it), so the
run, resumed, goes on with that very step instead of asking the member's agent again

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 17:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tool_approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held_step", models.base.JSONValue(), nullable=True))
        batch_op.add_column(sa.Column("held_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_approvals", schema=None) as batch_op:
        batch_op.drop_column("held_tokens")
        batch_op.drop_column("held_step")
