"""memory search: memories.team, full-text search of memories (FTS5 / tsvector + GIN)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 18:00:00.000000

SQLite: `memories_fts` is an external-content FTS5 table over `memories.content` (it stores
only the index; the text stays in `memories`), keyed by `memories.rowid` and kept in sync by
three triggers. `memories` has no INTEGER PRIMARY KEY, so its rowids are SQLite's own: a later
migration that rebuilds `memories` (batch mode copies the table) drops the triggers with it
and may renumber rows; such a migration must recreate the triggers and run
`INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')`, as this one does.

PostgreSQL: a generated column `content_tsv` (`to_tsvector('english', content)`) with a GIN
index. Neither object is in the models' metadata; `env.py` keeps autogenerate off them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_UP = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5("
    "content, content='memories', content_rowid='rowid', tokenize='porter unicode61')",
    "CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); END",
    "CREATE TRIGGER memories_fts_update AFTER UPDATE OF content ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); "
    "INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS memories_fts_update",
    "DROP TRIGGER IF EXISTS memories_fts_delete",
    "DROP TRIGGER IF EXISTS memories_fts_insert",
    "DROP TABLE IF EXISTS memories_fts",
]
POSTGRES_UP = [
    "ALTER TABLE memories ADD COLUMN content_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED",
    "CREATE INDEX ix_memories_content_tsv ON memories USING gin (content_tsv)",
]
POSTGRES_DOWN = [
    "DROP INDEX IF EXISTS ix_memories_content_tsv",
    "ALTER TABLE memories DROP COLUMN IF EXISTS content_tsv",
]


def upgrade() -> None:
    with op.batch_alter_table('memories', schema=None) as batch_op:
        batch_op.add_column(sa.Column('team', sa.String(length=64), nullable=True))
        batch_op.create_index('ix_memories_team_updated', ['team', 'updated_at'], unique=False)
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}.get(dialect, []):
        op.execute(statement)
    with op.batch_alter_table('memories', schema=None) as batch_op:
        batch_op.drop_index('ix_memories_team_updated')
        batch_op.drop_column('team')
