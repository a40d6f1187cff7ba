"""`teamflow tool`: the tools agents may use (000 Tool Definitions)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

tool_app = typer.Typer(help="Tools agents may use (000 Tool Definitions).", no_args_is_help=True)


@tool_app.command("add")
def tool_add(
    file: Annotated[Path | None, typer.Argument(help="A 000 Tool Definition JSON file.")] = None,
    builtin: Annotated[
        bool,
        typer.Option("--builtin", help="(Re)install teamflow's built-in tools instead."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Adds a tool from its definition file, replacing a tool with the same tool_id.

    `{here}` in its command is the file's folder; `{python}` is teamflow's Python; missing
    `created_at` / `updated_at` default to now. `--builtin` installs (again) the built-in
    tools of teamflow's toolbox (`teamflow db upgrade` adds those a home lacks).
    """
    from pydantic import ValidationError

    from flows.tools import install_builtin_tools, load_tool_file
    from models.tool import add_tool
    from models.wire_support import error_lines

    if builtin == (file is not None):
        fail("give a tool definition FILE or --builtin (one of them)")
    if builtin:
        installed = install_builtin_tools()
        if as_json:
            emit([t.to_wire() for t in installed])
        else:
            typer.echo(f"added built-in tools: {', '.join(t.tool_id for t in installed)}")
        return
    assert file is not None
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
    """Lists the stored tools and where each comes from (built-in, or added from a file)."""
    from flows.tools import tool_origin
    from models.tool import list_tools

    tools = list_tools()
    if as_json:
        emit([{**t.to_wire(), "origin": tool_origin(t)} for t in tools])
        return
    for t in tools:
        origin = f"[{tool_origin(t)}]"
        typer.echo(f"{t.tool_id:<30} {t.type.value:<6} {origin:<19} {t.description}")
    if not tools:
        typer.echo("no tools (add one with `teamflow tool add FILE.json`)")
