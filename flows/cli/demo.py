"""`teamflow demo`: a whole team scenario, end to end."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit


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
    """
    from flows import demo as scenario

    summary = scenario.run(
        interactive=interactive, echo=(lambda _: None) if as_json else typer.echo
    )
    if as_json:
        emit(summary)
