"""Alembic environment: teamflow's tables, batch mode on SQLite, a given connection if any."""

from alembic import context
from sqlalchemy import engine_from_config, pool

import models.tables  # noqa: F401  (registers every table on the metadata)
from models.tables import metadata

config = context.config


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    if not config.get_main_option("sqlalchemy.url"):
        from models.db import settings

        config.set_main_option("sqlalchemy.url", settings().database_url.replace("%", "%%"))
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        run_migrations(conn)
