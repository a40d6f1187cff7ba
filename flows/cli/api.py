"""`teamflow api`: the REST API (`/api/v1/`, every answer a seed `001` envelope)."""

from __future__ import annotations

from typing import Annotated

import typer


def api(
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option(
            "--port", help="The port [default: TEAMFLOW_API_PORT, 4300].", min=1, max=65535
        ),
    ] = None,
) -> None:
    """Serves teamflow's REST API at http://HOST:PORT/api/v1/ (docs at /docs, schema at
    /openapi.json). Every request carries `Authorization: Bearer TOKEN`: a user's
    (`teamflow user add`) or a member's (`teamflow member token`)."""
    from flows.api.app import serve
    from models.settings import get_settings

    port = port or get_settings().api_port
    typer.echo(f"teamflow api: http://{host}:{port}/api/v1/ (docs: /docs)", err=True)
    serve(host, port)
