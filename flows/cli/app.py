"""The root `teamflow` app: every command and command group, and the console entry point.

Commands are thin: they parse, call one store or flow function, and print. Commands that
only touch data never import Prefect, so they start fast; a test checks `sys.modules`.
Every command that prints data takes `--json`; bad input exits non-zero with one line.
Each noun's commands live in their own module; this one only puts them together.
"""

from __future__ import annotations

import sys

import typer

from flows.cli import (
    alert,
    db,
    demo,
    knowledge,
    member,
    memory,
    metrics,
    msg,
    ops,
    plan,
    project,
    status,
    task,
    team,
    template,
    tool,
    validate,
)
from flows.cli.output import error

app = typer.Typer(
    name="teamflow",
    help="Teams of AI agents on Prefect: inboxes, plan approvals, shutdowns and alerts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(db.db_app, name="db")
app.add_typer(team.team_app, name="team")
app.add_typer(member.member_app, name="member")
app.add_typer(msg.msg_app, name="msg")
app.add_typer(tool.tool_app, name="tool")
app.add_typer(plan.plan_app, name="plan")
app.add_typer(task.task_app, name="task")
app.add_typer(alert.alert_app, name="alert")
app.add_typer(memory.memory_app, name="memory")
app.add_typer(knowledge.knowledge_app, name="knowledge")
app.add_typer(template.template_app, name="template")
app.add_typer(project.project_app, name="project")

app.command()(validate.validate)
app.command("log")(status.log)
app.command()(status.status)
app.command()(status.sync)
app.command()(ops.up)
app.command()(ops.worker)
app.command()(demo.demo)
app.command()(metrics.metrics)


def main() -> None:
    """Console entry point: refusals from the stores become one line and exit code 1.

    A command line that does not parse (a missing option, an unknown command) is one line
    too, with exit code 2.
    """
    # typer 0.29 vendors click; its usage errors are these.
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

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
        if not _missing_table(exc):
            raise
        error(
            "teamflow's database has no tables for this yet: run `teamflow db upgrade`",
            kind="DatabaseNotUpgraded",
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _missing_table(exc: Exception) -> bool:
    """Whether `exc` is the database saying a table is missing (SQLite's `no such table`,
    PostgreSQL's undefined table): a database that `teamflow db upgrade` has not set up."""
    if not type(exc).__module__.startswith("sqlalchemy"):
        return False
    text = str(exc)
    return "no such table" in text or "UndefinedTable" in text
