"""`teamflow db`: the teamflow database's migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail
from models.settings import get_settings

db_app = typer.Typer(help="The teamflow database: migrations.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Migration to go to.")] = "head",
    as_json: JsonFlag = False,
) -> None:
    """Applies teamflow's database migrations (creates every table on a new database), and
    registers the built-in tools the home lacks (`teamflow tool list` shows them)."""
    from flows.tools import install_builtin_tools
    from models import db

    settings = get_settings()
    try:
        db.upgrade(settings.database_url, revision)
        current = db.current_revision(settings.database_url)
    except db.DatabaseError as exc:
        fail(str(exc))
    url = db.redact(settings.database_url)
    added = install_builtin_tools(missing_only=True) if revision == "head" else []
    if as_json:
        emit(
            {
                "database": url,
                "revision": current,
                "builtin_tools_added": [t.tool_id for t in added],
            }
        )
    else:
        typer.echo(f"database {url} is at migration {current}")
        if added:
            typer.echo(f"built-in tools added: {', '.join(t.tool_id for t in added)}")
