"""memory vectors: memories.vector, each embedding's float32 little-endian bytes (what vector
search loads instead of the JSON), filled for the memories there are; memory_versions, one
version per team's memories (a process's cached vectors of a team are good while it stays),
one for each team that has memories

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 09:00:00.000000

Neither way rebuilds `memories` on SQLite (ADD COLUMN and DROP COLUMN are plain ALTER TABLE
there), so the FTS5 triggers of 0009 stay and its rowids do not move.
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.base

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHUNK = 1000

memories = sa.table(
    "memories",
    sa.column("memory_id"),
    sa.column("team", sa.String),
    sa.column("embedding", models.base.JSONValue()),
    sa.column("vector", sa.LargeBinary),
)


def upgrade() -> None:
    versions = op.create_table('memory_versions',
    sa.Column('team', sa.String(length=64), nullable=False),
    sa.Column('version', sa.String(length=32), nullable=False),
    sa.PrimaryKeyConstraint('team', name=op.f('pk_memory_versions'))
    )
    op.add_column('memories', sa.Column('vector', sa.LargeBinary(), nullable=True))

    import numpy as np  # here: Alembic imports every migration to read the history

    bind = op.get_bind()
    embedded = memories.c.embedding.is_not(None)
    ids = bind.execute(sa.select(memories.c.memory_id).where(embedded)).scalars().all()
    for start in range(0, len(ids), CHUNK):
        chunk = bind.execute(
            sa.select(memories.c.memory_id, memories.c.embedding).where(
                memories.c.memory_id.in_(ids[start : start + CHUNK])
            )
        ).all()
        bind.execute(
            memories.update()
            .where(memories.c.memory_id == sa.bindparam("key"))
            .values(vector=sa.bindparam("stored")),
            [{"key": key, "stored": np.asarray(e, dtype="<f4").tobytes()} for key, e in chunk],
        )
    teams = bind.execute(
        sa.select(memories.c.team).where(memories.c.team.is_not(None)).distinct()
    ).scalars()
    op.bulk_insert(versions, [{"team": team, "version": uuid.uuid4().hex} for team in teams])


def downgrade() -> None:
    op.drop_column('memories', 'vector')
    op.drop_table('memory_versions')
