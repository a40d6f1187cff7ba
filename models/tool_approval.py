"""Tool approvals: each tool call a person must decide on, its decision, and its store.

A member's step whose calls need a person (`models.tool_policy`) asks for them together:
one batch (`batch_id`), one `tool-approval` flow run, one row per call. Each call is
decided on its own: approved (it runs with its params), edited (it runs with new params,
checked against the tool's `input_schema` before they are accepted) or rejected (it does not
run; the member gets a FAILURE result carrying the feedback). As for plans, a conditional
`UPDATE ... WHERE status = 'pending'` lets exactly one decision win, whoever decides first
(the CLI, the Prefect UI form, the timeout policy); a second one is a `Conflict`. A call
runs at most once: `claim_run` sets `executed_at` under the same kind of guard.

A member over its budget asks the same way: one call of the pseudo tool `budget` (`BUDGET_TOOL`),
its params what was spent of which budget. Approving it needs the new budget
(`{"budget_tokens": N}` or `{"budget_seconds": N}`, above what was spent) and lets the member go
on; rejecting it stops the member's part with the feedback as the reason.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import format_timestamp, json_column, rowcount, table_of, utc_column, utcnow
from models.db import session_scope
from models.team import get_team
from models.team_settings import ApprovalError, ApprovalSettings, TimeoutPolicy

SYSTEM = "system"
BUDGET_TOOL = "budget"
"""The pseudo tool of a budget-extension request: no tool of the registry, never run."""
BUDGET_KINDS = {"tokens": "budget_tokens", "seconds": "budget_seconds"}
"""A budget request's `params.kind`, and the key its new budget is given under."""


class CallStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EDITED = "edited"
    REJECTED = "rejected"


DECISIONS = {
    "approve": CallStatus.APPROVED,
    "edit": CallStatus.EDITED,
    "reject": CallStatus.REJECTED,
}


class ToolApproval(SQLModel, table=True):
    """One tool call that waits (or waited) for a person's decision."""

    __tablename__ = "tool_approvals"
    __table_args__ = (sa.Index("ix_tool_approvals_team_status", "team", "status"),)

    call_id: str = Field(primary_key=True, max_length=255)
    batch_id: str = Field(max_length=255, index=True)
    team: str = Field(max_length=64)
    member: str = Field(max_length=64)
    task_id: str | None = Field(default=None, max_length=64)
    task_title: str | None = Field(default=None, max_length=500)
    step: int = Field(default=0)
    position: int = Field(default=0, description="The call's place among the step's actions")
    tool_id: str = Field(max_length=255)
    description: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))
    params: dict = Field(default_factory=dict, sa_column=json_column(nullable=False))
    thoughts: str = Field(default="", sa_column=sa.Column(sa.Text, nullable=False))
    reasons: list = Field(default_factory=list, sa_column=json_column(nullable=False))
    confidence: float | None = Field(default=None)
    warnings: list | None = Field(default=None, sa_column=json_column())
    status: str = Field(default=CallStatus.PENDING.value, max_length=16)
    new_params: dict | None = Field(default=None, sa_column=json_column())
    feedback: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    decided_by: str | None = Field(default=None, max_length=64)
    door: str | None = Field(default=None, max_length=16)
    decided_at: Any = Field(default=None, sa_column=utc_column())
    cause: str | None = Field(default=None, max_length=255)
    flow_run_id: str | None = Field(default=None, max_length=64, index=True)
    requested_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    deadline: Any = Field(default=None, sa_column=utc_column())
    timeout_policy: str = Field(default=TimeoutPolicy.DENY.value, max_length=16)
    escalated_at: Any = Field(default=None, sa_column=utc_column())
    hard_deadline: Any = Field(default=None, sa_column=utc_column())
    executed_at: Any = Field(default=None, sa_column=utc_column())
    result: dict | None = Field(default=None, sa_column=json_column())
    held_step: dict | None = Field(
        default=None,
        sa_column=json_column(),
        description="The step's Chimera response, kept for a run that suspends meanwhile",
    )
    held_tokens: int | None = Field(default=None, description="Tokens spent up to the step")

    @property
    def is_open(self) -> bool:
        return self.status == CallStatus.PENDING.value

    @property
    def runs(self) -> bool:
        """Whether the decision lets the call run."""
        return self.status in (CallStatus.APPROVED.value, CallStatus.EDITED.value)

    @property
    def params_to_run(self) -> dict[str, Any]:
        chosen = self.new_params if self.status == CallStatus.EDITED.value else self.params
        return dict(chosen or {})

    def due_at(self) -> datetime | None:
        return self.hard_deadline if self.escalated_at is not None else self.deadline

    def to_json(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return format_timestamp(value) if value is not None else None

        return {
            "callId": self.call_id,
            "batchId": self.batch_id,
            "team": self.team,
            "member": self.member,
            "taskId": self.task_id,
            "taskTitle": self.task_title,
            "step": self.step,
            "toolId": self.tool_id,
            "description": self.description,
            "params": self.params,
            "thoughts": self.thoughts,
            "reasons": self.reasons,
            "confidence": self.confidence,
            "warnings": self.warnings,
            "status": self.status,
            "newParams": self.new_params,
            "feedback": self.feedback,
            "decidedBy": self.decided_by,
            "door": self.door,
            "decidedAt": iso(self.decided_at),
            "cause": self.cause,
            "flowRunId": self.flow_run_id,
            "requestedAt": iso(self.requested_at),
            "deadline": iso(self.deadline),
            "timeoutPolicy": self.timeout_policy,
            "executedAt": iso(self.executed_at),
            "result": self.result,
        }


class Conflict(ApprovalError):
    """A second decision on a call: the first one stands; the message says whose, when."""

    kind = "Conflict"

    def __init__(self, call: ToolApproval) -> None:
        when = format_timestamp(call.decided_at) if call.decided_at else "?"
        super().__init__(
            f"call {call.call_id} was already {call.status} by {call.decided_by} at {when}"
        )
        self.call = call
        self.stands = call.to_json()  # read now: the row is detached once its session ends


class NotAllowed(ApprovalError):
    """The decider may not decide this call."""


def new_batch_id() -> str:
    return f"calls-{uuid.uuid4().hex[:12]}"


def call_id_of(batch_id: str, position: int) -> str:
    """The id of the call at `position` of its step's actions: the same on every retry."""
    return f"{batch_id}-{position}"


def request_calls(
    team: str,
    member: str,
    batch_id: str,
    calls: list[dict[str, Any]],
    *,
    task_id: str | None = None,
    task_title: str | None = None,
    step: int = 0,
    timeout: float | None = None,
    policy: str | None = None,
    flow_run_id: str | None = None,
    held_step: dict[str, Any] | None = None,
    held_tokens: int | None = None,
    session: Session | None = None,
) -> list[ToolApproval]:
    """Records the calls of one step that need a decision (once: a call already recorded is
    kept as it is). Each of `calls`: `position`, `tool_id`, `description`, `params`,
    `thoughts`, `reasons`, `confidence`, `warnings`. Returns the batch's rows."""
    with session_scope(session) as s:
        now = utcnow()
        for call in calls:
            key = call_id_of(batch_id, call["position"])
            if s.get(ToolApproval, key) is not None:
                continue
            s.add(
                ToolApproval(
                    call_id=key, batch_id=batch_id, team=team, member=member,
                    task_id=task_id, task_title=(task_title or "")[:500] or None, step=step,
                    position=call["position"], tool_id=call["tool_id"],
                    description=call.get("description") or "", params=dict(call["params"]),
                    thoughts=call.get("thoughts") or "", reasons=list(call.get("reasons") or []),
                    confidence=call.get("confidence"), warnings=call.get("warnings"),
                    flow_run_id=flow_run_id, requested_at=now,
                    deadline=now + timedelta(seconds=timeout) if timeout else None,
                    timeout_policy=TimeoutPolicy(policy or TimeoutPolicy.DENY.value).value,
                    held_step=held_step, held_tokens=held_tokens,
                )
            )  # fmt: skip
        s.flush()
        return batch(batch_id, session=s)


def set_run(batch_id: str, flow_run_id: str, *, session: Session | None = None) -> None:
    """Notes the run that waits for the batch's decisions."""
    with session_scope(session) as s:
        table = table_of(ToolApproval)
        s.execute(
            sa.update(table).where(table.c.batch_id == batch_id).values(flow_run_id=flow_run_id)
        )


def batch(batch_id: str, *, session: Session | None = None) -> list[ToolApproval]:
    """The calls of one batch, in the order of the step's actions."""
    with session_scope(session) as s:
        query = select(ToolApproval).where(ToolApproval.batch_id == batch_id)
        return list(s.exec(query.order_by(col(ToolApproval.position))).all())


def get_call(call_id: str, *, session: Session | None = None) -> ToolApproval:
    with session_scope(session) as s:
        row = s.get(ToolApproval, call_id)
        if row is None:
            raise ApprovalError(f"no tool call {call_id!r}")
        s.refresh(row)
        return row


def list_calls(
    team: str, *, pending: bool = False, session: Session | None = None
) -> list[ToolApproval]:
    """A team's tool calls that needed a decision, oldest first."""
    with session_scope(session) as s:
        get_team(team, session=s)
        query = select(ToolApproval).where(ToolApproval.team == team)
        if pending:
            query = query.where(ToolApproval.status == CallStatus.PENDING.value)
        query = query.order_by(col(ToolApproval.requested_at), col(ToolApproval.call_id))
        return list(s.exec(query).all())


def check_decider(call: ToolApproval, decider: str, config: ApprovalSettings) -> None:
    if decider == call.member:
        raise NotAllowed(f"{decider} may not decide its own call {call.call_id}")
    if decider not in config.deciders:
        raise NotAllowed(
            f"{decider} may not decide tool calls of team {call.team} "
            f"(allowed: {', '.join(config.deciders)})"
        )


def check_edit(call: ToolApproval, params: Any, *, session: Session) -> dict[str, Any]:
    """The new params of an edit, refused (one line) unless the tool's input_schema takes them."""
    from models.tool import get_tool

    if not isinstance(params, dict):
        raise ApprovalError(f"the new params of call {call.call_id} must be a JSON object")
    try:
        definition = get_tool(call.tool_id, session=session)
    except ValueError as exc:
        raise ApprovalError(str(exc)) from None
    errors = definition.input_errors(params)
    if errors:
        raise ApprovalError(f"the new params do not fit tool {call.tool_id}: {errors[0]}")
    return params


def check_budget(call: ToolApproval, decision: str, params: Any) -> dict[str, Any] | None:
    """The new budget of an approved budget request (`{"budget_tokens": N}` or
    `{"budget_seconds": N}`, N above what was spent), refused in one line otherwise."""
    if decision == "reject":
        return None
    key = BUDGET_KINDS.get(str(call.params.get("kind")), "budget_tokens")
    spent = call.params.get("spent", 0)
    value = params.get(key) if isinstance(params, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= spent:
        raise ApprovalError(
            f"approving budget request {call.call_id} needs a new {key} above the {spent} "
            f"spent (teamflow action approve {call.call_id} --{key.replace('_', '-')} N)"
        )
    if value > 10**12:
        raise ApprovalError(f"the new {key} {value} is above the most, {10**12}")
    return {key: value}


def decide_call(
    call_id: str,
    decision: str,
    *,
    decider: str,
    params: Any = None,
    feedback: str | None = None,
    door: str = "cli",
    session: Session | None = None,
) -> ToolApproval:
    """Records the decision on one call (`approve`, `edit` with `params`, `reject` with
    `feedback`), once. Raises `NotAllowed`, `ApprovalError` (bad input: nothing written) or
    `Conflict` (decided before)."""
    if decision not in DECISIONS:
        raise ApprovalError(f"decision {decision!r} is not one of {', '.join(DECISIONS)}")
    feedback = (feedback or "").strip() or None
    if decision == "reject" and not feedback:
        raise ApprovalError("a rejection needs feedback: say why, so the member can revise")
    with session_scope(session) as s:
        call = get_call(call_id, session=s)
        if not call.is_open:
            raise Conflict(call)
        check_decider(call, decider, ApprovalSettings.of(get_team(call.team, session=s)))
        if call.tool_id == BUDGET_TOOL:
            new_params = check_budget(call, decision, params)
            decision = "approve" if decision == "edit" else decision
        elif decision == "edit":
            new_params = check_edit(call, params, session=s)
        else:
            new_params = None
        cause = f"{DECISIONS[decision].value} by {decider}"
        return _close(call, DECISIONS[decision], decider, feedback, cause, door, new_params, s)


def _close(
    call: ToolApproval,
    status: CallStatus,
    decider: str,
    feedback: str | None,
    cause: str,
    door: str | None,
    new_params: dict[str, Any] | None,
    session: Session,
) -> ToolApproval:
    table = table_of(ToolApproval)
    won = rowcount(
        session.execute(
            sa.update(table)
            .where(table.c.call_id == call.call_id, table.c.status == CallStatus.PENDING.value)
            .values(
                status=status.value, decided_by=decider, decided_at=utcnow(), feedback=feedback,
                cause=cause[:255], door=door, new_params=new_params,
            )
        )
    )  # fmt: skip
    session.refresh(call)
    if not won:
        raise Conflict(call)
    return call


def apply_timeout(batch_id: str, *, session: Session | None = None) -> str:
    """No decision in time on the batch's open calls: the policy decides (deny, approve),
    or escalates (one ALARM to the lead, then a denial at the hard deadline). Returns what
    it did: `deny`, `approve`, `escalate` or `none`."""
    now = utcnow()
    done = "none"
    with session_scope(session) as s:
        for call in batch(batch_id, session=s):
            due = call.due_at()
            if not call.is_open or due is None or now < due:
                continue
            policy = TimeoutPolicy(call.timeout_policy)
            try:
                if policy is TimeoutPolicy.APPROVE:
                    _close(call, CallStatus.APPROVED, SYSTEM, None,
                           "approved by the timeout policy", None, None, s)  # fmt: skip
                    done = "approve"
                elif policy is TimeoutPolicy.ESCALATE and call.escalated_at is None:
                    _escalate(call, s)
                    done = "escalate"
                else:
                    _close(call, CallStatus.REJECTED, SYSTEM,
                           "nobody decided in time: the call was not run",
                           "denied by the timeout policy", None, None, s)  # fmt: skip
                    done = "deny"
            except Conflict:
                continue
    return done


def _escalate(call: ToolApproval, session: Session) -> None:
    from models.inbox import send

    table = table_of(ToolApproval)
    waited = (call.deadline - call.requested_at) if call.deadline else timedelta(0)
    hard = utcnow() + waited
    won = rowcount(
        session.execute(
            sa.update(table)
            .where(table.c.call_id == call.call_id, table.c.escalated_at.is_(None))
            .values(escalated_at=utcnow(), hard_deadline=hard)
        )
    )
    session.refresh(call)
    if not won:
        return
    lead = get_team(call.team, session=session).lead
    message = (
        f"Tool call {call.call_id} of {call.member} ({call.tool_id}) waits for a decision. "
        f"Decide with `teamflow action approve|edit|reject {call.call_id}`; it is rejected "
        f"at {format_timestamp(hard)}."
    )
    send(
        call.team, to=lead, sender=SYSTEM, text=message,
        summary=f"ALARM: a tool call of {call.member} waits for a decision",
        type="system_alert",
        payload={"alert_type": "ALARM", "alert_name": "tool-approval-overdue", "message": message},
        metadata={"call_id": call.call_id}, session=session,
    )  # fmt: skip


def claim_run(call_id: str, *, session: Session | None = None) -> bool:
    """True once per call: the caller runs it now. Nothing runs twice."""
    with session_scope(session) as s:
        table = table_of(ToolApproval)
        return bool(
            rowcount(
                s.execute(
                    sa.update(table)
                    .where(table.c.call_id == call_id, table.c.executed_at.is_(None))
                    .values(executed_at=utcnow())
                )
            )
        )


def record_result(call_id: str, result: dict[str, Any], *, session: Session | None = None) -> None:
    with session_scope(session) as s:
        table = table_of(ToolApproval)
        s.execute(sa.update(table).where(table.c.call_id == call_id).values(result=result))


def open_calls(batch_id: str, *, session: Session | None = None) -> int:
    """How many calls of the batch still wait for a decision."""
    with session_scope(session) as s:
        query = select(sa.func.count()).where(
            col(ToolApproval.batch_id) == batch_id,
            col(ToolApproval.status) == CallStatus.PENDING.value,
        )
        return int(s.exec(query).one())


# --- runs that suspended while their step waits (flows.tool_gate, flows.timers) ---------------


def held_step(
    task_id: str, member: str, run_id: str, step: int, *, session: Session | None = None
) -> ToolApproval | None:
    """The call (with its step's response) of step `step` of `member` on the task that the
    run `run_id` suspended for; None when it did not."""
    with session_scope(session) as s:
        query = select(ToolApproval).where(
            ToolApproval.task_id == task_id, ToolApproval.member == member,
            ToolApproval.flow_run_id == run_id, ToolApproval.step == step,
            col(ToolApproval.held_step).is_not(None),
        )  # fmt: skip
        return s.exec(query.order_by(col(ToolApproval.requested_at).desc())).first()


def held_by(task_id: str, run_id: str, *, session: Session | None = None) -> bool:
    """Whether the run `run_id` suspended while a step of the task waited for decisions."""
    with session_scope(session) as s:
        query = select(ToolApproval.call_id).where(
            ToolApproval.task_id == task_id, ToolApproval.flow_run_id == run_id
        )
        return s.exec(query.limit(1)).first() is not None


def decided_runs(run_ids: list[str], *, session: Session | None = None) -> list[str]:
    """Those of `run_ids` that wait for tool calls all decided now (resume them)."""
    if not run_ids:
        return []
    with session_scope(session) as s:
        query = select(ToolApproval.flow_run_id, ToolApproval.status).where(
            col(ToolApproval.flow_run_id).in_(run_ids)
        )
        open_runs: dict[str, bool] = {}
        for run_id, status in s.exec(query).all():
            if run_id is None:
                continue
            open_runs[run_id] = open_runs.get(run_id, False) or status == CallStatus.PENDING.value
        return [r for r, still in open_runs.items() if not still]


def _due_clause(now: datetime) -> Any:
    table = table_of(ToolApproval)
    return sa.and_(
        table.c.status == CallStatus.PENDING.value,
        sa.or_(
            sa.and_(table.c.escalated_at.is_(None), table.c.deadline <= now),
            sa.and_(table.c.escalated_at.is_not(None), table.c.hard_deadline <= now),
        ),
    )


def expire_due(*, session: Session | None = None) -> list[str]:
    """Applies the timeout policy to every batch with a call past its deadline (teamflow's
    clock does, for runs that suspended and so hold no process to do it); returns the runs
    of the batches it acted on, to resume."""
    table = table_of(ToolApproval)
    with session_scope(session) as s:
        rows = s.execute(
            sa.select(table.c.batch_id, table.c.flow_run_id).where(_due_clause(utcnow())).distinct()
        ).all()
    runs = []
    for batch_id, run_id in rows:
        if apply_timeout(batch_id, session=session) != "none" and run_id:
            runs.append(run_id)
    return sorted(set(runs))


def next_due(*, session: Session | None = None) -> datetime | None:
    """The earliest deadline of a call still waiting, if any."""
    pending = col(ToolApproval.status) == CallStatus.PENDING.value
    with session_scope(session) as s:
        first = s.exec(
            select(sa.func.min(ToolApproval.deadline)).where(
                pending, col(ToolApproval.escalated_at).is_(None)
            )
        ).one()
        hard = s.exec(
            select(sa.func.min(ToolApproval.hard_deadline)).where(
                pending, col(ToolApproval.escalated_at).is_not(None)
            )
        ).one()
    dues = [d for d in (first, hard) if d is not None]
    return min(dues) if dues else None
