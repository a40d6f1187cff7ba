"""The whole teamflow MCP server (`build`), and the two ways `teamflow mcp` serves it."""

from flows.mcp import action_tools, own_tools, task_tools, team_tools
from flows.mcp.server import MAX_BODY_BYTES, TeamflowMCP, resources
from models.settings import get_settings


def build(*, token: str | None = None, allow_local_http: bool = False) -> TeamflowMCP:
    """The server with every tool and resource."""
    server = TeamflowMCP(token=token, allow_local_http=allow_local_http)
    team_tools.register(server)
    task_tools.register(server)
    own_tools.register(server)
    action_tools.register(server)
    resources(server)
    return server


def serve_stdio() -> None:
    """Serves MCP over stdin/stdout, as the session `TEAMFLOW_TOKEN` names (none: the local
    user)."""
    build(token=get_settings().token or None).run("stdio")


def serve_http(host: str, port: int, *, allow_local_user: bool = False) -> None:
    """Serves MCP over streamable HTTP at `http://HOST:PORT/mcp`; each request's Bearer token
    names its member."""
    import anyio

    from flows.compat.uvicorn_server import quieter_ticks

    quieter_ticks()
    server = build(allow_local_http=allow_local_user)
    anyio.run(
        lambda: server.run_streamable_http_async(
            host=host, port=port, max_request_body_size=MAX_BODY_BYTES
        )
    )
