"""`/api/v1/teams/{team}/plans` and `/api/v1/plans/{id}`: plan approvals, and deciding one.

A decision goes through `flows.decisions.decide_plan`, as `teamflow plan approve|deny` and
MCP's `plan_approval_response` do: the rule table says who may decide (a lead user as the
team's lead, an approver user as itself when the team lists it, a member that is the lead
or a listed approver), and the record keeps how (`api`) and who, as the token proved it.
A second decision is a 409 `Conflict` whose details carry the decision that stands."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field

from flows.api.auth import Caller
from flows.api.envelopes import SUCCESS_SCHEMA, ok
from flows.api.paths import RequestIdPath, TeamPath
from flows.api.teams import Body
from models.identity import Action, authorize

router = APIRouter(tags=["plans"])


class DecisionIn(Body):
    """A decision on a plan: approve it, or deny it with feedback saying what to change."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={  # a denial needs feedback: the schema says so, as the route does
            "if": {"properties": {"approve": {"const": False}}},
            "then": {"required": ["feedback"],
                     "properties": {"feedback": {"type": "string", "pattern": r"\S"}}},
        },
    )  # fmt: skip

    approve: bool = Field(description="true: approve; false: deny (feedback needed)")
    feedback: str | None = Field(default=None, max_length=20000, description="Remarks")


@router.get("/teams/{team}/plans", response_model=SUCCESS_SCHEMA, summary="A team's plans")
def list_plans(
    team: TeamPath, who: Caller, pending: bool = Query(default=False, description="Undecided only")
) -> JSONResponse:
    from models import approval
    from models.db import session_scope

    with session_scope() as s:
        authorize(who, Action.PLAN_READ, team, session=s)
        rows = approval.list_requests(team, pending=pending, session=s)
        return ok([r.to_json() for r in rows], f"{len(rows)} plan(s)")


@router.get("/plans/{request_id}", response_model=SUCCESS_SCHEMA, summary="One plan")
def get_plan(request_id: RequestIdPath, who: Caller) -> JSONResponse:
    from models import approval
    from models.db import session_scope

    with session_scope() as s:
        row = approval.get_request(request_id, session=s)
        authorize(who, Action.PLAN_READ, row.team, row.member, session=s)
        return ok(row.to_json())


@router.post("/plans/{request_id}/decision", response_model=SUCCESS_SCHEMA, summary="Decide")
def decide(request_id: RequestIdPath, body: DecisionIn, who: Caller) -> JSONResponse:
    """Approves or denies the plan, once, and resumes the run that waits for it."""
    from flows.decisions import decide_plan

    if not body.approve and not (body.feedback or "").strip():
        raise _FeedbackNeeded("a denial needs feedback: say what to change")
    decided = decide_plan(request_id, who=who, approve=body.approve, feedback=body.feedback)
    row = decided.request
    data = row.to_json()
    if decided.note:
        data["note"] = decided.note
    return ok(data, f"plan {row.request_id} of {row.member} {row.status} by {decided.decider}")


class _FeedbackNeeded(ValueError):
    """A denial without feedback."""

    details = {"fields": ["feedback"]}
