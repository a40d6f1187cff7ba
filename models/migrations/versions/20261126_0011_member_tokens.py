"""member tokens: member_tokens, each member token's SHA-256 with its team and member, when
it was made and when it was revoked (the token itself is never stored)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "member_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("member", sa.String(length=64), nullable=False),
        sa.Column("created_at", models.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", models.base.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_member_tokens")),
    )
    with op.batch_alter_table("member_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_member_tokens_team"), ["team"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("member_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_member_tokens_team"))

    op.drop_table("member_tokens")
