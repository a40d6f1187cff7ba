"""`teamflow tool`: the tools agents may use (000 Tool Definitions)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

tool_app = typer.Typer(help="Tools agents may use (000 Tool Definitions).", no_args_is_help=True)


@tool_app.command("add")
def tool_add(
    file: Annotated[Path, typer.Argument(help="A 000 Tool Definition JSON file.")],
    as_json: JsonFlag = False,
) -> None:
    """Adds a tool from its definition file, replacing a tool with the same tool_id.

    `{here}` in its command is the file's folder; `{python}` is teamflow's Python; missing
    `created_at` / `updated_at` default to now.
    """
    from pydantic import ValidationError

    from flows.tools import load_tool_file
    from models.tool import add_tool
    from models.wire_support import error_lines

    try:
        definition = load_tool_file(file)
    except FileNotFoundError:
        fail(f"{file}: no such file")
    except ValidationError as exc:
        fail(f"{file}: not a valid Tool Definition: {'; '.join(error_lines(exc))}")
    added = add_tool(definition)
    if as_json:
        emit(added.to_wire())
    else:
        typer.echo(f"added tool {added.tool_id} ({added.type.value})")


@tool_app.command("list")
def tool_list(as_json: JsonFlag = False) -> None:
    """Lists the stored tools."""
    from models.tool import list_tools

    tools = list_tools()
    if as_json:
        emit([t.to_wire() for t in tools])
        return
    for t in tools:
        typer.echo(f"{t.tool_id:<30} {t.type.value:<6} {t.description}")
    if not tools:
        typer.echo("no tools (add one with `teamflow tool add FILE.json`)")
