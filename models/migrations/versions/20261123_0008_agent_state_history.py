"""agent state history: every change of a member's agent_state status (liveness metrics);
a covering index of alert_firings for the alert metrics; task_metrics durations in order per
member (percentiles without sorting) instead of (team, member, started_at), a prefix of
ix_task_metrics_metrics

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 18:00:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

import models.base

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('agent_state_history',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('team', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('member', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=50), nullable=False),
    sa.Column('changed_at', models.base.UTCDateTime(timezone=True), nullable=False),
    sa.Column('ended_at', models.base.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agent_state_history'))
    )
    with op.batch_alter_table('agent_state_history', schema=None) as batch_op:
        batch_op.create_index('ix_agent_state_history_liveness', ['team', 'member', 'status', 'changed_at', 'ended_at'], unique=False)
        batch_op.create_index('ix_agent_state_history_open', ['team', 'member'], unique=False, sqlite_where=sa.text('ended_at IS NULL'), postgresql_where=sa.text('ended_at IS NULL'))

    with op.batch_alter_table('alert_firings', schema=None) as batch_op:
        batch_op.create_index('ix_alert_firings_metrics', ['team', 'fired_at', 'alert_type', 'outcome', 'due_at'], unique=False)

    with op.batch_alter_table('task_metrics', schema=None) as batch_op:
        batch_op.drop_index('ix_task_metrics_team_member_started_at')
        batch_op.create_index('ix_task_metrics_durations', ['team', 'member', 'duration_s', 'started_at'], unique=False)

    # Members' states before this revision: known from now on (when they began is not kept).
    bind = op.get_bind()
    now = datetime.now(UTC)
    if bind.dialect.name == "sqlite":
        member = "substr(agent_id, 1, instr(agent_id, '@') - 1)"
        stamp = now.strftime("%Y-%m-%d %H:%M:%S.%f")
    else:
        member = "split_part(agent_id, '@', 1)"
        stamp = now
    op.execute(
        sa.text(
            "INSERT INTO agent_state_history (team, member, status, changed_at)"
            f" SELECT team, {member}, coalesce(status, 'idle'), :now FROM agent_state"
            " WHERE team IS NOT NULL AND agent_id LIKE '%@%'"
        ).bindparams(now=stamp)
    )


def downgrade() -> None:
    with op.batch_alter_table('task_metrics', schema=None) as batch_op:
        batch_op.drop_index('ix_task_metrics_durations')
        batch_op.create_index('ix_task_metrics_team_member_started_at', ['team', 'member', 'started_at'], unique=False)

    with op.batch_alter_table('alert_firings', schema=None) as batch_op:
        batch_op.drop_index('ix_alert_firings_metrics')

    with op.batch_alter_table('agent_state_history', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_state_history_open')
        batch_op.drop_index('ix_agent_state_history_liveness')

    op.drop_table('agent_state_history')
