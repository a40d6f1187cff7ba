"""metrics: task_metrics records each execution's outcome and failed tool calls; indexes for
the metric queries (a covering index of task_metrics; plans by team and time)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 14:05:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('task_metrics', schema=None) as batch_op:
        batch_op.add_column(sa.Column('ok', sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column('tool_failures', sa.Integer(), server_default='0', nullable=False))
        batch_op.create_index('ix_task_metrics_metrics', ['team', 'member', 'started_at', 'task_id', 'ended_at', 'duration_s', 'tokens', 'steps', 'tool_calls', 'tool_failures', 'approval_wait_s', 'ok'], unique=False)
    # Executions recorded before: their outcome is in the `000` experience log.
    op.execute(
        "UPDATE task_metrics SET ok = (SELECT e.status = 'success' FROM experience_logs e"
        " WHERE e.agent_id = task_metrics.member || '@' || task_metrics.team"
        " AND e.task_id = task_metrics.task_id LIMIT 1)"
    )
    with op.batch_alter_table('plan_approvals', schema=None) as batch_op:
        batch_op.create_index('ix_plan_approvals_team_requested_at', ['team', 'requested_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('plan_approvals', schema=None) as batch_op:
        batch_op.drop_index('ix_plan_approvals_team_requested_at')
    with op.batch_alter_table('task_metrics', schema=None) as batch_op:
        batch_op.drop_index('ix_task_metrics_metrics')
        batch_op.drop_column('tool_failures')
        batch_op.drop_column('ok')
