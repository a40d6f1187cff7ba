"""`teamflow up` and `worker`: running teamflow's server, deployments and workers."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import count_check, fail


def up(
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Address a started server listens on (default: PREFECT_API_URL's host, "
            "127.0.0.1). 0.0.0.0 opens it to the network: set an auth string.",
        ),
    ] = None,
) -> None:
    """Starts (or reuses) a Prefect server, registers teamflow's deployments, starts a worker.

    The server listens at PREFECT_API_URL (default http://127.0.0.1:4200/api) with its
    database under $TEAMFLOW_HOME; Ctrl-C or SIGTERM stops what this command started.
    The watchdog checks every 30 s, or every TEAMFLOW_WATCHDOG_EVERY (e.g. 10s, 2m).
    """
    from flows import runner
    from flows import up as bring

    try:
        bring.up(host=host, echo=typer.echo)
    except (bring.UpError, runner.RunnerError) as exc:
        fail(str(exc))


def worker(
    pool: Annotated[str, typer.Option("--pool", help="The work pool to pull from.")] = "teamflow",
    limit: Annotated[
        int, typer.Option("--limit", help="Runs at a time.", callback=count_check())
    ] = 8,
    name: Annotated[str | None, typer.Option("--name", help="The worker's name.")] = None,
) -> None:
    """Pulls runs from the teamflow work pool and runs teamflow's flows in this process.

    Runs on any machine that reaches the Prefect server (PREFECT_API_URL). The first Ctrl-C
    or SIGTERM stops taking runs and waits for running ones; a second one quits at once.
    """
    import os

    from flows import runner

    # Read by Prefect when it is imported: heartbeats for crash detection, a short poll.
    for setting, value in (
        ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "30"),
        ("PREFECT_WORKER_QUERY_SECONDS", "2"),
    ):
        if not runner.user_setting(setting):
            os.environ[setting] = value
    from flows import worker as workers

    with runner.connected() as api:
        runner.check_server(api)
        workers.run_until_signalled(pool, name=name, limit=limit)
