"""The root `teamflow` app: every command and command group, and the console entry point.

Commands are thin: they parse, call one store or flow function, and print. Commands that
only touch data never import Prefect, so they start fast; a test checks `sys.modules`.
Every command that prints data takes `--json`; bad input exits non-zero with one line.
Each noun's commands live in their own module; this one only puts them together, and
imports a module only when one of its commands runs (or `--help` lists them).
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import sys
import threading

import typer

from flows.cli.output import error
from flows.compat.typer_cli import lazy_group, usage_errors

COMMANDS = {
    "validate": ("flows.cli.validate", "validate"),
    "log": ("flows.cli.status", "log"),
    "status": ("flows.cli.status", "status"),
    "sync": ("flows.cli.status", "sync"),
    "up": ("flows.cli.ops", "up"),
    "worker": ("flows.cli.ops", "worker"),
    "demo": ("flows.cli.demo", "demo"),
    "metrics": ("flows.cli.metrics", "metrics"),
    "mcp": ("flows.cli.mcp", "mcp"),
    "api": ("flows.cli.api", "api"),
}
"""The root's commands: name -> (module, function), in the order `--help` lists them."""

GROUPS = {
    "db": ("flows.cli.db", "db_app"),
    "team": ("flows.cli.team", "team_app"),
    "member": ("flows.cli.member", "member_app"),
    "msg": ("flows.cli.msg", "msg_app"),
    "tool": ("flows.cli.tool", "tool_app"),
    "plan": ("flows.cli.plan", "plan_app"),
    "action": ("flows.cli.action", "action_app"),
    "task": ("flows.cli.task", "task_app"),
    "alert": ("flows.cli.alert", "alert_app"),
    "memory": ("flows.cli.memory", "memory_app"),
    "knowledge": ("flows.cli.knowledge", "knowledge_app"),
    "resource": ("flows.cli.resource", "resource_app"),
    "template": ("flows.cli.template", "template_app"),
    "project": ("flows.cli.project", "project_app"),
    "user": ("flows.cli.user", "user_app"),
}
"""The root's command groups: name -> (module, Typer app)."""


def _build(name: str):
    """The click command of one root command or group, as `add_typer`/`command` would give."""
    from flows.compat.typer_cli import function_command, group_command

    if name in GROUPS:
        module, attribute = GROUPS[name]
        command = group_command(getattr(importlib.import_module(module), attribute), name, app)
    else:
        module, attribute = COMMANDS[name]
        function = getattr(importlib.import_module(module), attribute)
        command = function_command(function, None if name == attribute else name, app)
    return _reflowed(command)


def _reflowed(command):
    """`command` (and, for a group, its commands) with its help's paragraphs each one line.

    The help comes from docstrings wrapped at 100 columns. Typer (0.29.2, rich mode) joins
    the lines of the first paragraph only and keeps the others' line breaks, so `--help`
    showed a paragraph broken mid-sentence wherever its source line ended; the terminal
    wraps a one-line paragraph itself. A line that starts a `- ` or `* ` item, or a
    paragraph that starts with click's `\\b`, keeps its breaks."""
    if command.help:
        command.help = "\n\n".join(map(_one_line, inspect.cleandoc(command.help).split("\n\n")))
    for sub in getattr(command, "commands", {}).values():
        _reflowed(sub)
    return command


def _one_line(paragraph: str) -> str:
    if paragraph.startswith("\b"):
        return paragraph
    lines = paragraph.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        if line.lstrip().startswith(("- ", "* ")):
            out.append(line)
        else:
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
    return "\n".join(out)


def _root() -> None:
    # Nothing to do before a command; a callback makes the root a group without any
    # command registered up front (they come from `lazy_group`).
    pass


app = typer.Typer(
    name="teamflow",
    help="Teams of AI agents on Prefect: inboxes, plan approvals, shutdowns and alerts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Each command imported and built on first use: `teamflow msg send` imports and builds
    # the `msg` group only, not the other command modules (issue 16: CLI start).
    cls=lazy_group(lambda: [*COMMANDS, *GROUPS], _build),
    callback=_root,
)


def main() -> None:
    """Console entry point: refusals from the stores become one line and exit code 1.

    A command line that does not parse (a missing option, an unknown command) is one line
    too, with exit code 2.
    """
    ClickException, NoArgsIsHelpError = usage_errors()

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        sys.exit(exc.exit_code)  # the help is printed already
    except ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        error(f"{exc.format_message()}{hint}", code=exc.exit_code, kind="UsageError")
        sys.exit(exc.exit_code)
    except typer.Abort:
        error("aborted", kind="Aborted")
        sys.exit(1)
    except (ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        error(message, kind=type(exc).__name__)
        sys.exit(1)
    except Exception as exc:
        unwritable = _unwritable(exc)
        if unwritable is not None:
            error(unwritable, kind="DatabaseError")
            sys.exit(1)
        if not _missing_table(exc):
            raise
        error(
            "teamflow's database has no tables for this yet: run `teamflow db upgrade`",
            kind="DatabaseNotUpgraded",
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def console() -> None:
    """The `teamflow` console script and `python -m flows.cli`: `main`, then a quick exit.

    Tearing the interpreter down (freeing every module of SQLAlchemy, pydantic and typer)
    costs a data command about 40 ms, an eighth of its start (issue 16). A process that has
    not imported Prefect and runs no other thread has nothing to tear down that matters: it
    flushes its output, closes its database connections, runs its exit handlers and leaves
    with `os._exit`. Anything else (Prefect's threads, output that cannot be flushed, a
    non-numeric exit) exits the normal way.
    """
    code: str | int | None
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    if not isinstance(code, int) or "prefect" in sys.modules or threading.active_count() > 1:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)  # a closed pipe: let Python report it as it always does
    if "models.db" in sys.modules:
        sys.modules["models.db"].dispose_engines()
    atexit._run_exitfuncs()
    os._exit(code)


def _unwritable(exc: Exception) -> str | None:
    """One line for the database refusing a write (read-only file, full disk, no space on
    PostgreSQL's side), naming the database; None for anything else."""
    if not type(exc).__module__.startswith("sqlalchemy"):
        return None
    reason = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"])[0]
    words = ("readonly", "read-only", "disk is full", "no space", "disk full", "disk i/o")
    unopened = "unable to open database file" in reason.lower()
    if not unopened and not any(w in reason.lower() for w in words):
        return None
    from models import db
    from models.settings import get_settings

    url = get_settings().database_url
    where = db.redact(url)
    if unopened:
        return f"the database {where} cannot be opened: {reason}{_sqlite_folder(url)}"
    return f"the database {where} refuses to write: {reason}"


def _sqlite_folder(url: str) -> str:
    """Why SQLite may not open its file: its folder is missing or read-only (it writes its
    journal and WAL files beside the database)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url.startswith(prefix + "file:"):
        return ""
    folder = os.path.dirname(os.path.abspath(url.removeprefix(prefix).partition("?")[0]))
    if not os.path.isdir(folder):
        return f" (its folder {folder} does not exist)"
    if not os.access(folder, os.W_OK):
        return f" (its folder {folder} is read-only; SQLite writes its journal beside the file)"
    return ""


def _missing_table(exc: Exception) -> bool:
    """Whether `exc` is the database saying a table is missing (SQLite's `no such table`,
    PostgreSQL's undefined table): a database that `teamflow db upgrade` has not set up."""
    if not type(exc).__module__.startswith("sqlalchemy"):
        return False
    text = str(exc)
    return "no such table" in text or "UndefinedTable" in text
