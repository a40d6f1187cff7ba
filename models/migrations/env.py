"""Alembic environment: teamflow's tables, batch mode on SQLite, a given connection if any."""

from alembic import context
from sqlalchemy import engine_from_config, pool

import models.tables  # noqa: F401  (registers every table on the metadata)
from models.tables import metadata

config = context.config

# Full-text search objects made by raw SQL in migration 0009, not described by the models:
# SQLite's FTS5 table `memories_fts` (and the shadow tables FTS5 makes for it), PostgreSQL's
# generated `memories.content_tsv` column and its GIN index. Autogenerate leaves them alone.
SEARCH_OBJECTS = ("memories_fts", "content_tsv", "ix_memories_content_tsv")


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    return not (reflected and name and name.startswith(SEARCH_OBJECTS))


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    if not config.get_main_option("sqlalchemy.url"):
        from models.settings import get_settings

        config.set_main_option("sqlalchemy.url", get_settings().database_url.replace("%", "%%"))
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        run_migrations(conn)
