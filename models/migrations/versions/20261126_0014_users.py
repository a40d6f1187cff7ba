"""users: people with a role (lead, approver, viewer) and a token, by its SHA-256; plan
approvals record how a decision came in (decided_via: api, mcp, link, cli, ui, system) and
the identity that made it (decided_identity: user:NAME, member:NAME, local)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 14:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", models.base.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_users")),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_users_token_hash"), ["token_hash"], unique=True)
    with op.batch_alter_table("plan_approvals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("decided_via", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("decided_identity", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plan_approvals", schema=None) as batch_op:
        batch_op.drop_column("decided_identity")
        batch_op.drop_column("decided_via")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_users_token_hash"))
    op.drop_table("users")
