"""`teamflow validate`: checks a JSON file against its seed format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail


def _format_names() -> str:
    from models.formats import FORMATS

    return ", ".join(FORMATS)


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

    from models.formats import FORMATS, detect
    from models.limits import LimitError, loads_json, read_capped
    from models.wire_support import error_lines

    try:
        data = loads_json(read_capped(file).decode("utf-8"), what=str(file))
    except FileNotFoundError:
        fail(f"{file}: no such file")
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        fail(f"{file}: cannot read: {exc}")
    except json.JSONDecodeError as exc:
        fail(f"{file}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except LimitError as exc:
        fail(str(exc))

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
