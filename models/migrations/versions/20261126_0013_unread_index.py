"""unread index: ix_inbox_messages_unread holds the unread rows alone (team, recipient, seq
where not read), so the unread query and count read only the rows they return

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-26 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_inbox_messages_unread", table_name="inbox_messages")
    op.create_index(
        "ix_inbox_messages_unread",
        "inbox_messages",
        ["team", "recipient", "seq"],
        unique=False,
        sqlite_where=sa.text("read = 0"),
        postgresql_where=sa.text("read = false"),
    )


def downgrade() -> None:
    op.drop_index("ix_inbox_messages_unread", table_name="inbox_messages")
    op.create_index(
        "ix_inbox_messages_unread",
        "inbox_messages",
        ["team", "recipient", "read", "seq"],
        unique=False,
    )
