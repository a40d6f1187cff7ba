"""`/api/v1/teams/{team}/actions` and `/api/v1/actions/{id}`: tool calls that wait for a person.

A call the member's tool policy names (`models.tool_policy`), or a member's request for a
budget extension (tool `budget`), waits in a `tool-approval` run. A decision goes through
`flows.decisions.decide_action`, as `teamflow action approve|edit|reject` and MCP's
`action_decide` do: the rule table says who may decide (a lead user as the team's lead, an
approver user as itself when the team lists it, a member that is the lead or a listed
approver, never the member whose call it is). A second decision is a 409 `Conflict` whose
details carry the decision that stands."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field

from flows.api.auth import Caller
from flows.api.envelopes import SUCCESS_SCHEMA, ok
from flows.api.paths import CallIdPath, TeamPath
from flows.api.teams import Body
from models.identity import Action, authorize

router = APIRouter(tags=["actions"])


class ActionDecisionIn(Body):
    """A decision on one tool call: approve it, edit its params, or reject it with feedback.
    A budget request is approved with its new budget as params, e.g. `{"budget_tokens": N}`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={  # what each decision needs: the schema says so, as the route does
            "allOf": [
                {"if": {"properties": {"decision": {"const": "reject"}}},
                 "then": {"required": ["feedback"],
                          "properties": {"feedback": {"type": "string", "pattern": r"\S"}}}},
                {"if": {"properties": {"decision": {"const": "edit"}}},
                 "then": {"required": ["params"], "properties": {"params": {"type": "object"}}}},
            ]
        },
    )  # fmt: skip

    decision: Literal["approve", "edit", "reject"] = Field(description="approve, edit or reject")
    params: dict[str, Any] | None = Field(
        default=None, description="edit: the new params; a budget request: the new budget"
    )
    feedback: str | None = Field(default=None, max_length=20000, description="Why (reject)")


@router.get("/teams/{team}/actions", response_model=SUCCESS_SCHEMA, summary="A team's actions")
def list_actions(
    team: TeamPath, who: Caller, pending: bool = Query(default=False, description="Undecided only")
) -> JSONResponse:
    from models import tool_approval
    from models.db import session_scope

    with session_scope() as s:
        authorize(who, Action.TOOL_READ, team, session=s)
        rows = tool_approval.list_calls(team, pending=pending, session=s)
        return ok([r.to_json() for r in rows], f"{len(rows)} action(s)")


@router.get("/actions/{call_id}", response_model=SUCCESS_SCHEMA, summary="One action")
def get_action(call_id: CallIdPath, who: Caller) -> JSONResponse:
    from models import tool_approval
    from models.db import session_scope

    with session_scope() as s:
        row = tool_approval.get_call(call_id, session=s)
        authorize(who, Action.TOOL_READ, row.team, row.member, session=s)
        return ok(row.to_json())


@router.post("/actions/{call_id}/decision", response_model=SUCCESS_SCHEMA, summary="Decide")
def decide(call_id: CallIdPath, body: ActionDecisionIn, who: Caller) -> JSONResponse:
    """Approves, edits or rejects the call, once, and resumes the run that waits for it."""
    from flows.decisions import decide_action

    if body.decision == "reject" and not (body.feedback or "").strip():
        raise _FieldNeeded(
            "a rejection needs feedback: say why, so the member can revise", "feedback"
        )
    if body.decision == "edit" and body.params is None:
        raise _FieldNeeded("an edit needs the new params, a JSON object", "params")
    decided = decide_action(
        call_id, body.decision, who=who, params=body.params, feedback=body.feedback
    )
    row = decided.call
    data = row.to_json()
    if decided.note:
        data["note"] = decided.note
    return ok(data, f"call {row.call_id} of {row.member} {row.status} by {decided.decider}")


class _FieldNeeded(ValueError):
    """A decision without what it needs."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.details = {"fields": [field]}
