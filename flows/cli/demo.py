"""`teamflow demo`: a whole team scenario, end to end."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail


def demo(
    interactive: Annotated[
        bool,
        typer.Option("--interactive", help="A person decides the plan (Prefect UI or CLI)."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Runs a whole team scenario end to end (research-team, Q4 sales analysis).

    Creates research-team with analyst-1 (haiku) and analyst-2 (sonnet), writes sample Q4
    sales and satisfaction data under $TEAMFLOW_HOME/demo/data, runs their task as Prefect
    flows with one plan approval and one ASYNC action, shuts them down through the
    handshake, and prints where to look. Replaces the research-team of an earlier demo.
    Exits 1 when a task failed, naming it, the member and why (`--json`: the summary lists
    them too, under `failures`).
    """
    from flows import demo as scenario

    summary = scenario.run(
        interactive=interactive, echo=(lambda _: None) if as_json else typer.echo
    )
    failed = scenario.failures(summary)
    if as_json:
        emit({**summary, "failures": failed})
    if failed:
        line = " ".join(f"the demo did not complete: {'; '.join(failed)}".split())
        if as_json:  # stdout holds the summary (with its failures): one JSON document
            typer.echo(f"teamflow: error: {line}", err=True)
            raise typer.Exit(1)
        fail(line, kind="TaskFailed")
