"""Writes `docs/cli.md`, the reference of every `teamflow` command, from the command line itself.

    .venv/bin/python docs/gen_cli_reference.py          # rewrites docs/cli.md
    .venv/bin/python docs/gen_cli_reference.py --check  # exit 1 if docs/cli.md is stale

Each command's text is its `--help`: the docstring, the usage line, and every argument and
option with its type, help and default. `tests/test_docs.py` fails when `docs/cli.md`
differs from what this writes, so the page stays true when a command changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"

INTRO = """\
# CLI reference

Every `teamflow` command and command group, as `teamflow COMMAND --help` prints it.
Every command that prints data takes `--json`. Bad input is one line on stderr, a non-zero
exit, and nothing written (see [Getting started](getting-started.md#errors-and-bad-input)).

This page is generated from the command line itself: after changing a command, run
`.venv/bin/python docs/gen_cli_reference.py` (`tests/test_docs.py` fails until you do).
"""


def render() -> str:
    """The whole page, root commands first, then each group with its commands."""
    import typer.main

    from flows.cli.app import app

    root = typer.main.get_command(app)
    ctx = _context(root, "teamflow", None)
    commands, groups = [], []
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        (groups if hasattr(command, "list_commands") else commands).append((name, command))

    out = [INTRO, "## Commands\n", _index(ctx, commands)]
    for name, command in commands:
        out.append(_command(command, _context(command, name, ctx), level=3))
    for name, group in groups:
        group_ctx = _context(group, name, ctx)
        out.append(f"## `teamflow {name}`\n\n{_help(group)}\n")
        subs = [(n, group.get_command(group_ctx, n)) for n in group.list_commands(group_ctx)]
        out.append(_index(group_ctx, subs))
        for sub_name, sub in subs:
            out.append(_command(sub, _context(sub, sub_name, group_ctx), level=3))
    return "\n".join(out).rstrip() + "\n"


def _context(command, name: str, parent):
    from typer import _click

    return _click.Context(command, info_name=name, parent=parent)


def _path(ctx) -> str:
    return ctx.command_path


def _index(ctx, commands: list) -> str:
    rows = ["| command | what it does |", "|---|---|"]
    for name, command in commands:
        anchor = _slug(f"{_path(ctx)} {name}")
        summary = _cell(_help(command).split("\n\n", 1)[0])
        rows.append(f"| [`{name}`](#{anchor}) | {summary} |")
    return "\n".join(rows) + "\n"


def _command(command, ctx, level: int) -> str:
    usage = command.get_usage(ctx).removeprefix("Usage: ")
    parts = [f"{'#' * level} `{_path(ctx)}`\n", f"{_help(command)}\n", f"```text\n{usage}\n```\n"]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        rows.append(_param_row(param, ctx))
    if rows:
        header = "| argument or option | type | what it is |\n|---|---|---|\n"
        parts.append(header + "\n".join(rows))
        parts.append("")
    return "\n".join(parts)


def _param_row(param, ctx) -> str:
    if param.param_type_name == "argument":
        name = f"`{param.metavar or param.name.upper()}`"
    else:
        name = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
    kind = param.metavar if param.param_type_name == "option" and param.metavar else None
    if kind is None:
        kind = param.display_type(ctx) if hasattr(param, "display_type") else ""
    text = (getattr(param, "help", None) or "").strip()
    extras = []
    default = param.default
    if (
        param.param_type_name == "option"
        and param.show_default is not False
        and default not in (None, False, (), [])
        and not callable(default)
    ):
        extras.append(f"Default: `{getattr(default, 'value', default)}`.")
    if param.required:
        extras.append("Required.")
    return f"| {name} | `{_cell(kind)}` | {_cell(' '.join([text, *extras]).strip())} |"


def _help(command) -> str:
    text = (command.help or command.short_help or "").split("\f", 1)[0]
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _slug(text: str) -> str:
    """The anchor MkDocs gives a heading of this text (its `toc` extension's slugify)."""
    return "-".join(word.lower() for word in text.replace("`", "").split())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args()
    page = render()
    if args.check:
        if PAGE.read_text() != page:
            print(f"{PAGE} is stale: run python docs/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
