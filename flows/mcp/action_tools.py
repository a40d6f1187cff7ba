"""MCP tools for tool calls that wait for a person: list, read and decide them.

`action_list`, `action_status` and `action_decide` are `teamflow action list`, the REST API's
`GET /actions/{id}` and `teamflow action approve|edit|reject` (and a budget request's
approval with its new budget): a lead session (the local user) decides as the team's lead,
a member session as itself, only when it is the lead or a listed approver of its team and
never on its own calls (`models.identity.RULES`, as for plans).
"""

from typing import Any, Literal

from mcp.server.mcpserver import Context

from flows.mcp.server import TeamflowMCP, refusals
from models.identity import Action, authorize


def action_list(team_name: str, ctx: Context, pending: bool = False) -> list[dict[str, Any]]:
    """A team's tool calls that needed a person's decision (and members' budget requests,
    tool `budget`), oldest first; `pending`: only those still waiting."""
    from models import tool_approval

    with refusals(ctx) as who:
        authorize(who, Action.TOOL_READ, team_name)
        return [r.to_json() for r in tool_approval.list_calls(team_name, pending=pending)]


def action_status(call_id: str, ctx: Context) -> dict[str, Any]:
    """One tool call: its params, why it asks, and its decision once there is one."""
    from models import tool_approval

    with refusals(ctx) as who:
        row = tool_approval.get_call(call_id)
        authorize(who, Action.TOOL_READ, row.team, row.member)
        return row.to_json()


def action_decide(
    call_id: str,
    decision: Literal["approve", "edit", "reject"],
    ctx: Context,
    params: dict[str, Any] | None = None,
    feedback: str = "",
) -> dict[str, Any]:
    """Decides one tool call, once, and resumes the run that waits for it.

    Args:
        call_id: The call's id (action_list).
        decision: approve (it runs as asked), edit (it runs with `params`, checked against
            the tool's input_schema) or reject (it does not run; `feedback` says why and
            the member reads it).
        params: edit: the new params. A budget request (tool `budget`): approve with the
            new budget, {"budget_tokens": N} or {"budget_seconds": N}.
        feedback: Why (needed to reject).
    """
    from flows.decisions import decide_action

    with refusals(ctx) as who:
        if decision == "edit" and params is None:
            raise ValueError("an edit needs the new params, a JSON object")
        decided = decide_action(
            call_id, decision, who=who, params=params, feedback=feedback or None
        )
        row = decided.call
        return {
            **row.to_json(),
            "message": f"call {row.call_id} of {row.member} {row.status} by {decided.decider}",
            "note": decided.note or None,
        }


TOOLS = (action_list, action_status, action_decide)


def register(server: TeamflowMCP) -> None:
    """Adds these tools to `server`."""
    for fn in TOOLS:
        server.add_tool(fn)
