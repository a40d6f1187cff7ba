"""Plan approvals: the record of each plan a member asks approval for, and its store.

A request, its decision and who made it stay here even if the Prefect flow run is deleted.
Every decision is guarded by the database, not by memory: a conditional
`UPDATE ... WHERE status = 'pending'` lets exactly one decision win, and the response to the
member is sent in the same transaction, guarded by `responded_at`, so it goes out once, from
whichever process (CLI, flow run, Prefect UI resume) decided first.

The team settings that shape approvals (approvers, timeouts, policy, revisions) are read by
`models.team_settings`. Shutdowns are `models.shutdown`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, col, select

from models.base import format_timestamp, rowcount, table_of, utc_column, utcnow
from models.db import session_scope
from models.inbox import send_payload
from models.inbox_message import PlanApprovalRequest, PlanApprovalResponse
from models.team import Member, get_member, get_team
from models.team_settings import (
    SECONDS_RANGE,
    ApprovalError,
    ApprovalSettings,
    TimeoutPolicy,
    is_seconds,
)

SYSTEM = "system"
"""Who decides when nobody did: timeouts and policies, and the sender of their messages."""


class ApprovalStatus(StrEnum):
    """Where a plan approval request stands; `cause` says why a decided one ended so."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"  # the member may revise and ask again
    REJECTED = "rejected"  # denied at the revision limit: no more asking

    @classmethod
    def open(cls) -> frozenset[ApprovalStatus]:
        return frozenset({cls.PENDING})

    @classmethod
    def decided(cls) -> frozenset[ApprovalStatus]:
        return frozenset({cls.APPROVED, cls.DENIED, cls.REJECTED})


class PlanApproval(SQLModel, table=True):
    """One plan approval request (`004` plan_approval_request) and its decision."""

    __tablename__ = "plan_approvals"
    __table_args__ = (
        sa.Index("ix_plan_approvals_team_status", "team", "status"),
        sa.Index("ix_plan_approvals_team_requested_at", "team", "requested_at"),  # metrics
        # One revision per denied plan: the database refuses a second one.
        sa.UniqueConstraint("previous_request_id", name="uq_plan_approvals_previous_request_id"),
    )

    request_id: str = Field(primary_key=True, max_length=255)
    team: str = Field(max_length=64)
    member: str = Field(max_length=64)
    plan: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    summary: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    status: str = Field(default=ApprovalStatus.PENDING.value, max_length=16)
    revision: int = Field(default=1, description="1 for the first plan, +1 per revision")
    previous_request_id: str | None = Field(default=None, max_length=255)
    flow_run_id: str | None = Field(default=None, max_length=64, index=True)
    requested_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    deadline: Any = Field(default=None, sa_column=utc_column(index=True))
    timeout_policy: str = Field(default=TimeoutPolicy.DENY.value, max_length=16)
    hard_deadline: Any = Field(
        default=None, sa_column=utc_column(), description="escalate: when waiting ends in a denial"
    )
    escalated_at: Any = Field(default=None, sa_column=utc_column())
    decided_at: Any = Field(default=None, sa_column=utc_column())
    decided_by: str | None = Field(default=None, max_length=64)
    decided_via: str | None = Field(
        default=None, max_length=16, description="How: api, mcp, link, cli, ui or system"
    )
    decided_identity: str | None = Field(
        default=None,
        max_length=128,
        description="Who, as the door verified it: user:NAME, member:NAME, local (cli: as "
        "declared), ui (the Prefect form: unverified)",
    )
    feedback: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    cause: str | None = Field(
        default=None, max_length=255, description="Why it ended as it did (decision, timeout...)"
    )
    responded_at: Any = Field(
        default=None, sa_column=utc_column(), description="When the response reached the member"
    )
    response_message_id: str | None = Field(default=None, max_length=255)

    @property
    def is_open(self) -> bool:
        return ApprovalStatus(self.status) in ApprovalStatus.open()

    @property
    def approved(self) -> bool:
        return self.status == ApprovalStatus.APPROVED

    def due_at(self) -> datetime | None:
        """When the timeout policy acts next on this request (None: never, or decided)."""
        if not self.is_open:
            return None
        if self.escalated_at is not None:
            return self.hard_deadline
        return self.deadline

    def to_json(self) -> dict[str, Any]:
        """The request as `teamflow plan list --json` prints it."""
        return {
            "requestId": self.request_id,
            "team": self.team,
            "member": self.member,
            "summary": self.summary,
            "plan": self.plan,
            "status": self.status,
            "revision": self.revision,
            "previousRequestId": self.previous_request_id,
            "flowRunId": self.flow_run_id,
            "requestedAt": _iso(self.requested_at),
            "deadline": _iso(self.deadline),
            "timeoutPolicy": self.timeout_policy,
            "hardDeadline": _iso(self.hard_deadline),
            "escalatedAt": _iso(self.escalated_at),
            "decidedAt": _iso(self.decided_at),
            "decidedBy": self.decided_by,
            "decidedVia": self.decided_via,
            "decidedIdentity": self.decided_identity,
            "feedback": self.feedback,
            "cause": self.cause,
            "respondedAt": _iso(self.responded_at),
        }


def _iso(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


# --- errors ------------------------------------------------------------------------------------


class NotAllowed(ApprovalError):
    """The decider may not decide this plan."""


class AlreadyDecided(ApprovalError):
    """The plan was decided before; `request` is the decision that stands."""

    def __init__(self, request: PlanApproval) -> None:
        super().__init__(already_decided(request))
        # A copy: the session that loaded `request` rolls back (and expires it) on the way out.
        self.request = PlanApproval.model_validate(request.model_dump())


def already_decided(request: PlanApproval) -> str:
    """`plan X was already approved by Y at T` (with the cause when it was no person)."""
    line = (
        f"plan {request.request_id} was already {request.status} by {request.decided_by} "
        f"at {_iso(request.decided_at)}"
    )
    if request.decided_by == SYSTEM and request.cause:
        line += f" ({request.cause})"
    return line


# --- plan approvals ------------------------------------------------------------------------


def new_plan_id() -> str:
    """A fresh plan request id, `plan-` and 12 hex digits (the seed shows `plan-xyz789`)."""
    return f"plan-{uuid.uuid4().hex[:12]}"


def request_plan(
    team: str,
    member: str,
    plan: str,
    summary: str,
    *,
    request_id: str | None = None,
    previous_request_id: str | None = None,
    timeout: float | None = None,
    policy: TimeoutPolicy | str | None = None,
    flow_run_id: str | None = None,
    session: Session | None = None,
) -> PlanApproval:
    """Records a plan approval request and puts a `plan_approval_request` in the lead's inbox.

    Args:
        team: The team.
        member: The active member asking (not the lead: nobody would decide its plans).
        plan: The plan, Markdown.
        summary: One line for the lead.
        request_id: The id to use (default: a new `plan-...`). Asking again with the id of
            an existing request of the same member returns that request unchanged, so a
            retried flow task records nothing twice.
        previous_request_id: The denied request this one revises; the revision number
            follows it, and a member past the team's `plan_max_revisions` is refused.
        timeout: Seconds to wait for a decision (default: the team's setting).
        policy: What a timeout does (default: the team's setting).
        flow_run_id: The flow run that waits for the decision.

    Raises:
        ApprovalError: unknown or inactive member, a lead asking, a bad revision link.
    """
    if not plan.strip():
        raise ApprovalError("a plan must not be empty")
    with session_scope(session) as s:
        if request_id is not None:
            existing = s.get(PlanApproval, request_id)
            if existing is not None:
                if (existing.team, existing.member) != (team, member):
                    raise ApprovalError(f"request id {request_id} is taken")
                # A resumed team task asks again with the id it recorded: the new run waits.
                if flow_run_id and existing.flow_run_id != flow_run_id and existing.is_open:
                    existing.flow_run_id = flow_run_id
                    s.add(existing)
                return existing
        team_row, config, revision, chosen = _checked_request(
            s, team, member, previous_request_id, policy
        )
        now = utcnow()
        timeout_s = config.timeout_s if timeout is None else float(timeout)
        if not is_seconds(timeout_s):
            raise ApprovalError(f"timeout must be {SECONDS_RANGE}, not {timeout_s:g}")
        deadline = now + timedelta(seconds=timeout_s)
        hard_deadline = None
        if chosen is TimeoutPolicy.ESCALATE:
            hard_deadline = deadline + timedelta(seconds=config.escalation_s or timeout_s)
        row = PlanApproval(
            request_id=request_id or new_plan_id(),
            team=team,
            member=member,
            plan=plan,
            summary=summary,
            revision=revision,
            previous_request_id=previous_request_id,
            flow_run_id=flow_run_id,
            requested_at=now,
            deadline=deadline,
            timeout_policy=chosen.value,
            hard_deadline=hard_deadline,
        )
        s.add(row)
        try:
            s.flush()
        except sa.exc.IntegrityError:
            # Two revisions of one denial at once: the unique constraint lets one in.
            raise ApprovalError(
                f"plan {previous_request_id} was revised already"
                if previous_request_id
                else f"request id {row.request_id} is taken"
            ) from None
        send_payload(
            team,
            to=team_row.lead,
            sender=member,
            payload=PlanApprovalRequest(
                from_=member, plan=plan, summary=summary, timestamp=now, request_id=row.request_id
            ),
            summary=summary,
            metadata={"request_id": row.request_id, "revision": revision},
            session=s,
        )
        return row


def check_request(
    team: str,
    member: str,
    *,
    previous_request_id: str | None = None,
    policy: TimeoutPolicy | str | None = None,
    session: Session | None = None,
) -> int:
    """Checks that `member` may ask for approval now; returns the revision it would be.

    Raises the `ApprovalError` that `request_plan` would, without writing anything (the CLI
    checks before it starts a run).
    """
    with session_scope(session) as s:
        return _checked_request(s, team, member, previous_request_id, policy)[2]


def _checked_request(
    session: Session,
    team: str,
    member: str,
    previous_request_id: str | None,
    policy: TimeoutPolicy | str | None,
) -> tuple[Any, ApprovalSettings, int, TimeoutPolicy]:

    team_row = get_team(team, session=session)
    config = ApprovalSettings.of(team_row)
    get_member(team, member, active=True, session=session)
    if member == team_row.lead:
        raise ApprovalError(f"{member} leads team {team}: its plans need nobody's approval")
    try:
        chosen = TimeoutPolicy(policy) if policy is not None else config.policy
    except ValueError:
        choices = ", ".join(p.value for p in TimeoutPolicy)
        raise ApprovalError(f"timeout policy {policy!r} is not one of {choices}") from None
    revision = 1
    if previous_request_id is not None:
        previous = load_plan(previous_request_id, session=session)
        if (previous.team, previous.member) != (team, member):
            raise ApprovalError(
                f"plan {previous_request_id} is not one of {member}'s plans in team {team}"
            )
        if previous.status == ApprovalStatus.REJECTED:
            raise ApprovalError(f"plan {previous_request_id} was rejected: {previous.cause}")
        if previous.status != ApprovalStatus.DENIED:
            raise ApprovalError(
                f"plan {previous_request_id} is {previous.status}: only a denied plan "
                "can be revised"
            )
        revised = session.exec(
            select(PlanApproval.request_id).where(
                PlanApproval.previous_request_id == previous_request_id
            )
        ).first()
        if revised is not None:
            raise ApprovalError(f"plan {previous_request_id} was revised already by {revised}")
        revision = previous.revision + 1
        if revision > config.max_revisions:
            raise ApprovalError(
                f"{member} asked {previous.revision} times for this plan: the team allows "
                f"{config.max_revisions} (setting plan_max_revisions)"
            )
    return team_row, config, revision, chosen


def get_request(request_id: str, *, session: Session | None = None) -> PlanApproval:
    """One plan approval request; `ApprovalError` if there is none."""
    with session_scope(session) as s:
        return load_plan(request_id, session=s)


def load_plan(request_id: str, *, session: Session) -> PlanApproval:
    row = session.get(PlanApproval, request_id)
    if row is None:
        raise ApprovalError(f"no plan approval request {request_id!r}")
    return row


def list_requests(
    team: str,
    *,
    pending: bool = False,
    member: str | None = None,
    session: Session | None = None,
) -> list[PlanApproval]:
    """A team's plan approval requests, oldest first; `pending` keeps the undecided ones."""
    with session_scope(session) as s:
        get_team(team, session=s)
        query = select(PlanApproval).where(PlanApproval.team == team)
        if pending:
            query = query.where(
                col(PlanApproval.status).in_([x.value for x in ApprovalStatus.open()])
            )
        if member is not None:
            query = query.where(PlanApproval.member == member)
        return list(s.exec(query.order_by(PlanApproval.requested_at, PlanApproval.request_id)))


def check_decider(request: PlanApproval, decider: str, config: ApprovalSettings) -> None:
    """Raises `NotAllowed` unless `decider` may decide `request`."""
    if decider == request.member:
        raise NotAllowed(f"{decider} may not decide its own plan {request.request_id}")
    if decider not in config.deciders:
        raise NotAllowed(
            f"{decider} may not decide plans of team {request.team} "
            f"(allowed: {', '.join(config.deciders)})"
        )


def decide(
    request_id: str,
    *,
    approve: bool,
    decider: str,
    feedback: str | None = None,
    via: str | None = None,
    identity: str | None = None,
    session: Session | None = None,
) -> PlanApproval:
    """Records the decision on a plan, once, and sends the member its response.

    `via` says how it came in (api, mcp, link, cli, ui) and `identity` who made it as the
    door verified it (`user:NAME`, `member:NAME`, `local`); both are kept with it.

    A denial at the team's revision limit ends the request `rejected`. The decision and the
    `plan_approval_response` are written in one transaction, so the response goes out
    exactly once, whoever decides first.

    Raises:
        NotAllowed: the decider is neither the lead nor an approver, or it is the member.
        AlreadyDecided: someone (or the timeout) decided first; the message says who, when.
    """
    with session_scope(session) as s:
        request = load_plan(request_id, session=s)
        config = ApprovalSettings.of(get_team(request.team, session=s))
        check_decider(request, decider, config)
        if approve:
            return close_request(request, ApprovalStatus.APPROVED, decider, feedback,
                          f"approved by {decider}", via=via, identity=identity,
                          session=s)  # fmt: skip
        status, cause = denial(request, config, f"denied by {decider}")
        return close_request(request, status, decider, feedback, cause, via=via,
                             identity=identity, session=s)  # fmt: skip


def denial(
    request: PlanApproval, config: ApprovalSettings, cause: str
) -> tuple[ApprovalStatus, str]:
    """A denial: `denied` (the member may revise), or `rejected` at the revision limit."""
    if request.revision < config.max_revisions:
        return ApprovalStatus.DENIED, cause
    return ApprovalStatus.REJECTED, (
        f"{cause} at revision {request.revision}: the revision limit "
        f"({config.max_revisions}) is reached"
    )


def close_request(
    request: PlanApproval,
    status: ApprovalStatus,
    decider: str,
    feedback: str | None,
    cause: str,
    *,
    via: str | None = None,
    identity: str | None = None,
    session: Session,
) -> PlanApproval:
    """The conditional update that lets one decision win, then the response, in one go."""
    table = table_of(PlanApproval)
    won = rowcount(
        session.execute(
            sa.update(table)
            .where(
                table.c.request_id == request.request_id, table.c.status == ApprovalStatus.PENDING
            )
            .values(
                status=status.value,
                decided_at=utcnow(),
                decided_by=decider,
                feedback=feedback,
                cause=cause[:255],
                decided_via=via or ("system" if decider == SYSTEM else None),
                decided_identity=identity,
            )
        )
    )
    session.refresh(request)
    if not won:
        raise AlreadyDecided(request)
    respond(request.request_id, session=session)
    session.refresh(request)
    return request


def respond(request_id: str, *, session: Session | None = None) -> str | None:
    """Sends the member the `plan_approval_response` of a decided request, if not sent yet.

    Returns the message id when this call sent it, None when it was sent before (or the
    member is shut down and can receive nothing). Safe to call from any process any time.
    """
    with session_scope(session) as s:
        request = load_plan(request_id, session=s)
        if request.is_open:
            raise ApprovalError(f"plan {request_id} is pending: there is nothing to respond yet")
        member = s.get(Member, (request.team, request.member))
        if member is None or not member.is_active:
            return None
        table = table_of(PlanApproval)
        now = utcnow()
        claimed = rowcount(
            s.execute(
                sa.update(table)
                .where(table.c.request_id == request_id, table.c.responded_at.is_(None))
                .values(responded_at=now)
            )
        )
        if not claimed:
            return None
        team = get_team(request.team, session=s)
        feedback = request.feedback
        if request.status == ApprovalStatus.REJECTED:
            note = "The revision limit is reached: this plan is rejected; do not ask again."
            feedback = f"{feedback}\n\n{note}" if feedback else note
        elif request.decided_by == SYSTEM and request.cause:
            feedback = f"{feedback}\n\n{request.cause}" if feedback else request.cause
        sender = request.decided_by
        assert sender is not None, "a decided request names who decided it"
        if sender != SYSTEM and s.get(Member, (request.team, sender)) is None:
            sender = team.lead  # an approver who is not a member answers through the lead
        row = send_payload(
            request.team,
            to=request.member,
            sender=sender,
            payload=PlanApprovalResponse(
                request_id=request_id,
                approve=request.status == ApprovalStatus.APPROVED,
                feedback=feedback,
                timestamp=request.decided_at,
            ),
            summary=f"plan {request.status} by {request.decided_by}",
            metadata={
                "request_id": request_id,
                "status": request.status,
                "revision": request.revision,
            },
            session=s,
        )
        s.execute(
            sa.update(table)
            .where(table.c.request_id == request_id)
            .values(response_message_id=row.message_id)
        )
        return row.message_id
