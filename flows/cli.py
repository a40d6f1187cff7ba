"""The `teamflow` command line.

Commands are thin: they parse, call one store or flow function, and print. Commands that
only touch data never import Prefect, so they start fast; a test checks `sys.modules`.
Every command that prints data takes `--json`; bad input exits non-zero with one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

app = typer.Typer(
    name="teamflow",
    help="Teams of AI agents on Prefect: inboxes, plan approvals, shutdowns and alerts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The teamflow database: migrations.", no_args_is_help=True)
app.add_typer(db_app, name="db")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class UserError(Exception):
    """Bad input or a refused request: one line for the user, exit code 1."""


def fail(message: str, code: int = 1) -> NoReturn:
    """Prints `teamflow: error: message` on stderr and exits with `code`."""
    typer.echo(f"teamflow: error: {message}", err=True)
    raise typer.Exit(code)


def emit(data: object) -> None:
    """Prints `data` as JSON on stdout."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# --- db --------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Migration to go to.")] = "head",
    as_json: JsonFlag = False,
) -> None:
    """Applies teamflow's database migrations (creates every table on a new database)."""
    from models import db

    settings = db.settings()
    try:
        db.upgrade(settings.database_url, revision)
        current = db.current_revision(settings.database_url)
    except db.DatabaseError as exc:
        fail(str(exc))
    url = db.redact(settings.database_url)
    if as_json:
        emit({"database": url, "revision": current})
    else:
        typer.echo(f"database {url} is at migration {current}")


# --- validate --------------------------------------------------------------------------------


def _format_names() -> str:
    from models.formats import FORMATS

    return ", ".join(FORMATS)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="A JSON file in one of the seed formats.")],
    as_format: Annotated[
        str | None,
        typer.Option("--as", help="The format to check against (default: recognised)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Checks a JSON file against its seed format: prints `ok`, or one line per error.

    The format is recognised from the document's keys, or given with `--as`, e.g.
    `004/config`, `003/conversation`, `001/notification` (an unknown `--as` lists them
    all). Exits 1 when the file has errors, 2 when the format cannot be told.
    """
    from pydantic import ValidationError

    from models.formats import FORMATS, detect, error_lines

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        fail(f"{file}: no such file")
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        fail(f"{file}: cannot read: {exc}")
    except json.JSONDecodeError as exc:
        fail(f"{file}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")

    if as_format is not None:
        fmt = FORMATS.get(as_format)
        if fmt is None:
            fail(f"unknown format {as_format!r}; formats: {_format_names()}", code=2)
    else:
        fmt = detect(data)
        if fmt is None:
            fail(f"{file}: cannot tell which seed format this is; give one with --as", code=2)

    try:
        fmt.validate(data)
        errors: list[str] = []
    except ValidationError as exc:
        errors = error_lines(exc)
    if as_json:
        emit({"file": str(file), "format": fmt.name, "ok": not errors, "errors": errors})
    elif errors:
        for line in errors:
            typer.echo(line)
    else:
        typer.echo(f"ok ({fmt.name})")
    if errors:
        raise typer.Exit(1)


# --- demo ------------------------------------------------------------------------------------


@app.command()
def demo() -> None:
    """Runs a whole team scenario end to end (research-team, Q4 sales analysis)."""
    typer.echo(
        "teamflow demo: not built yet. It will create research-team with analyst-1 (haiku)\n"
        "and analyst-2 (sonnet), hand them the Q4 sales analysis of seed 004, run their\n"
        "tasks as Prefect flows with one plan approval, shut them down through the\n"
        "handshake, and print where to look (files, database, Prefect UI)."
    )


def main() -> None:
    """Console entry point."""
    try:
        app()
    except UserError as exc:
        typer.echo(f"teamflow: error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
