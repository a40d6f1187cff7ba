"""`teamflow mcp`: the MCP server, over stdio (what a `.mcp.json` starts) or streamable HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import fail

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def mcp(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP at http://HOST:PORT/mcp.")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="--http: the address to listen on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int | None,
        typer.Option(
            "--port", help="--http: the port [default: TEAMFLOW_MCP_PORT, 4310].", min=1, max=65535
        ),
    ] = None,
    allow_local_user: Annotated[
        bool,
        typer.Option(
            "--allow-local-user",
            help="--http: a request without a token acts as the local user (loopback only).",
        ),
    ] = False,
) -> None:
    """Serves teamflow's tools to MCP clients (Claude Code, OpenCode, ...).

    Over stdio (default) the session is the local user, or the member whose token is in
    TEAMFLOW_TOKEN. Over HTTP each request's `Authorization: Bearer TOKEN` names its member
    (`teamflow member token TEAM NAME`).
    """
    if not http:
        if allow_local_user:
            fail("--allow-local-user goes with --http")
        from flows.mcp.app import serve_stdio

        serve_stdio()
        return
    if allow_local_user and host not in LOOPBACK:
        fail(f"--allow-local-user needs a loopback --host (127.0.0.1), not {host}")
    from flows.mcp.app import serve_http
    from models.settings import get_settings

    port = port or get_settings().mcp_port
    typer.echo(f"teamflow mcp: http://{host}:{port}/mcp", err=True)
    serve_http(host, port, allow_local_user=allow_local_user)
