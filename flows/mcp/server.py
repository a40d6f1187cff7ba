"""The teamflow MCP server: who is calling, refusals as `001` envelopes, resources, transports.

Built on the official MCP Python SDK (`mcp.server.mcpserver.MCPServer`). Each tool (see
`flows.mcp.team_tools`, `task_tools`, `own_tools`) is a thin adapter: it names its caller
with `caller(ctx)`, asks `models.identity.authorize`, and calls the same store or flow
function as the CLI. Inside `refusals(ctx)`, a refused or failed call becomes an MCP tool
error whose text is the `001` error envelope, one line:
`{"status": "error", "error": KIND, "message": LINE, "details": {...}}`; arguments that do
not fit a tool's schema (a missing argument, an unknown enum value) come back the same way.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from pydantic import ValidationError

from models.identity import Door, Forbidden, Principal, PrincipalKind, Unauthorized
from models.users import principal_of_bearer

MAX_BODY_BYTES = 16 * 1024 * 1024
"""HTTP request bodies up to this reach the tools, whose stores refuse oversized text with
one line (the SDK's 4 MB default would answer a bare HTTP 413 instead)."""

MAX_LINE = 500
"""An error message is cut to this many characters (one line for an agent to read)."""

INSTRUCTIONS = """\
teamflow: teams of AI agents with durable inboxes, tasks with dependencies, plan approvals,
shutdown handshakes and alarms; every step a Prefect run. A session without a token is the
local user (the team's lead); a session with a member token (teamflow member token TEAM NAME)
is that member: it reads only its own inbox, sends only as itself, claims and reports its own
tasks, asks for plan approval with plan_request. The lead (or a listed approver) decides
members' tool calls that wait for a person with action_list and action_decide. Tool results
are JSON; a refusal is a tool error whose text is {"status": "error", "error": KIND,
"message": ..., "details": ...}."""


class EnvelopeError(ToolError):
    """A tool's refusal, carrying the `001` error envelope as its text."""


def envelope(kind: str, message: str, details: dict[str, Any] | None = None) -> str:
    """The `001` error envelope, as one line of JSON."""
    from models.api import ErrorResponse

    line = " ".join(str(message).split()) or kind
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 3] + "..."
    body = ErrorResponse(error=kind, message=line, details=details or {})
    return json.dumps(body.to_wire(), ensure_ascii=False, default=str)


def refusal(exc: BaseException) -> EnvelopeError:
    """The tool error for a store's or the rule table's refusal."""
    kind = getattr(exc, "kind", None) or type(exc).__name__
    details = dict(getattr(exc, "details", None) or {})
    if isinstance(exc, ValidationError):
        message = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
        )
        return EnvelopeError(envelope("ValidationError", message, details))
    return EnvelopeError(envelope(kind, str(exc) or kind, details))


class TeamflowMCP(MCPServer):
    """`MCPServer`, with the identity of its sessions and envelopes for every tool error."""

    def __init__(self, *, token: str | None = None, allow_local_http: bool = False) -> None:
        super().__init__(
            name="teamflow",
            instructions=INSTRUCTIONS,
            version=_version(),
            log_level="WARNING",
        )
        self.stdio_token = token
        self.allow_local_http = allow_local_http

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            raise ToolError(_as_envelope(name, exc)) from exc


def _as_envelope(tool: str, exc: ToolError) -> str:
    """The envelope of a tool error: the tool's own, or one for the SDK's refusal (arguments
    that do not fit the schema, an unknown tool)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, EnvelopeError):
            return str(cause)
        if isinstance(cause, ValidationError):
            errors = cause.errors()
            parts = []
            for e in errors:
                where = ".".join(str(p) for p in e["loc"] if p != "data") or "arguments"
                parts.append(f"{where}: {e['msg']}")
            return envelope(
                "ValidationError",
                f"{tool}: " + "; ".join(parts),
                {"tool": tool, "fields": sorted({str(e["loc"][-1]) for e in errors if e["loc"]})},
            )
        cause = cause.__cause__
    text = str(exc)
    kind = "UnknownTool" if text.startswith("Unknown tool") else "ToolError"
    return envelope(kind, text, {"tool": tool})


def caller(ctx: Context) -> Principal:
    """Who calls: the member or the person (user) of the session's token, or the local user.

    Over HTTP the token is the request's `Authorization: Bearer`, a member's (`tft_...`) or
    a user's (`tfu_...`, `teamflow user add`); without one the caller is
    the local user only when the server allows it (`--allow-local-user`), otherwise refused.
    Over stdio it is the server's `TEAMFLOW_TOKEN`; without one, the local user. The token
    is checked on every call, so a revoked token stops working at once.
    """
    server: TeamflowMCP = ctx.mcp_server  # type: ignore[assignment]  # the SDK types its base class
    headers = ctx.headers
    if headers is not None:
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        scheme, _, token = auth.strip().partition(" ")
        if token and scheme.lower() == "bearer":
            return principal_of_bearer(token, Door.MCP_HTTP)
        if auth:
            raise Unauthorized("the Authorization header must be: Bearer TOKEN")
        if server.allow_local_http:
            return Principal.local(Door.MCP_HTTP)
        raise Unauthorized(
            "this server needs a token: send Authorization: Bearer TOKEN "
            "(teamflow member token TEAM NAME, or teamflow user add NAME --role ROLE)"
        )
    if server.stdio_token:
        return principal_of_bearer(server.stdio_token, Door.MCP)
    return Principal.local(Door.MCP)


@contextmanager
def refusals(ctx: Context) -> Iterator[Principal]:
    """Runs a tool's body: yields its caller and turns a refusal
    (`Forbidden`, a store's `ValueError`, a file error) into the envelope tool error.

    A member's call that went through is also its heartbeat (`alive`); a refused one writes
    nothing, not even that."""
    try:
        who = caller(ctx)
        yield who
        if who.kind is PrincipalKind.MEMBER:
            # The call went through; a heartbeat it could not record changes nothing.
            with suppress(ValueError):
                alive(who)
    except EnvelopeError:
        raise
    except (Forbidden, ValueError, LookupError, OSError) as exc:
        raise refusal(exc) from None
    except Exception as exc:
        if _missing_table(exc):
            raise EnvelopeError(
                envelope(
                    "DatabaseNotUpgraded",
                    "teamflow's database has no tables for this yet: run `teamflow db upgrade`",
                )
            ) from None
        raise


def alive(who: Principal) -> None:
    """A member's MCP call is a sign of life: its `agent_state` heartbeat, keeping the status
    it reported (a member the watchdog marked offline is back, idle), so the watchdog's
    offline alarm works for outside members as for any other."""
    from models import presence
    from models.agent import AgentStateRow
    from models.db import session_scope
    from models.team import agent_id

    assert who.team is not None and who.name is not None, "a member names its team and itself"
    with session_scope() as s:
        state = s.get(AgentStateRow, agent_id(who.name, who.team))
        status = state.status if state is not None and state.status != "offline" else "idle"
        presence.heartbeat(who.team, who.name, status=status, session=s)


def _missing_table(exc: Exception) -> bool:
    text = str(exc)
    return type(exc).__module__.startswith("sqlalchemy") and (
        "no such table" in text or "UndefinedTable" in text
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("teamflow")
    except PackageNotFoundError:
        return "0"


@contextmanager
def resource_refusals() -> Iterator[None]:
    """A resource read refused: the SDK's anticipated resource error, carrying the envelope
    (any other exception would reach the client as a bare "error reading" line)."""
    try:
        yield
    except EnvelopeError as exc:
        raise ResourceError(str(exc)) from None


def resources(server: TeamflowMCP) -> None:
    """The team's config and each inbox as MCP resources (read-only; reading an inbox here
    does not mark anything read)."""
    from models import inbox
    from models.db import session_scope
    from models.identity import Action, authorize

    @server.resource(
        "teamflow://teams/{team_name}/config",
        name="team-config",
        description="A team's config.json (the 004 format), members' prompts left out.",
        mime_type="application/json",
    )
    def team_config(team_name: str, ctx: Context) -> str:
        with resource_refusals(), refusals(ctx) as who:
            authorize(who, Action.TEAM_READ, team_name)
            with session_scope() as s:
                return json.dumps(config_json(s, team_name), ensure_ascii=False)

    @server.resource(
        "teamflow://teams/{team_name}/inboxes/{agent_name}",
        name="inbox",
        description="A member's inbox (004 entries, oldest first); a member reads only its own.",
        mime_type="application/json",
    )
    def member_inbox(team_name: str, agent_name: str, ctx: Context) -> str:
        with resource_refusals(), refusals(ctx) as who:
            rows = inbox.messages(team_name, agent_name, who=who)
            return json.dumps([r.entry_dict() for r in rows], ensure_ascii=False, default=str)


def config_json(session: Any, team_name: str) -> dict[str, Any]:
    """The team's `004` config, without the members' prompts (they are each member's own)."""
    from models import team as teams

    row = teams.get_team(team_name, session=session)
    data = teams.config_of(row, session=session).to_wire()
    data.setdefault("leadAgentId", f"{row.lead}@{row.name}")
    for member in data.get("members", []):
        member.pop("prompt", None)
    return data
