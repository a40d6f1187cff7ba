"""What every command shares: `--json`, one-line errors, JSON output, starting runs."""

from __future__ import annotations

import json
from typing import Annotated, NoReturn

import typer

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def fail(message: str, code: int = 1) -> NoReturn:
    """Prints `teamflow: error: message` (one line) on stderr and exits with `code`."""
    typer.echo(f"teamflow: error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code)


def emit(data: object) -> None:
    """Prints `data` as JSON on stdout."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def start_run(deployment: str, parameters: dict, *, tags: list[str], name: str):
    """Starts a run of one of teamflow's deployments; one clear line when it cannot."""
    from flows import runner

    try:
        return runner.start(deployment, parameters, tags=tags, flow_run_name=name)
    except runner.RunnerError as exc:
        fail(f"cannot start the {deployment.split('/')[0]} run: {exc}")
