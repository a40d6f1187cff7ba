"""Plan approvals and shutdowns: the records that outlive their flow runs, and their stores.

A request, its decision and who made it stay here even if the Prefect flow run is deleted.
Every decision is guarded by the database, not by memory: a conditional
`UPDATE ... WHERE status = 'pending'` lets exactly one decision win, and the response to the
member is sent in the same transaction, guarded by `responded_at`, so it goes out once, from
whichever process (CLI, flow run, Prefect UI resume) decided first.

Team settings (`Team.settings`) that shape approvals and shutdowns, all optional:

| key | meaning | default |
|---|---|---|
| `approvers` | who may decide plans besides the lead | `[]` |
| `plan_timeout_seconds` | how long a plan waits for a decision | 3600 |
| `plan_timeout_policy` | `deny`, `approve` or `escalate` when nobody decided | `deny` |
| `plan_escalation_seconds` | after an escalation, how long until a denial | the timeout |
| `plan_max_revisions` | how many times a member may ask (first plan included) | 3 |
| `shutdown_timeout_seconds` | how long a shutdown waits for the member's answer | 300 |
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, Session, SQLModel, select

from models.base import format_timestamp, utc_column, utcnow
from models.db import session_scope

SYSTEM = "system"
"""Who decides when nobody did: timeouts and policies, and the sender of their messages."""

DEFAULT_PLAN_TIMEOUT_S = 3600.0
DEFAULT_MAX_REVISIONS = 3
DEFAULT_SHUTDOWN_TIMEOUT_S = 300.0


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


class TimeoutPolicy(StrEnum):
    """What happens to a plan nobody decided on in time."""

    DENY = "deny"
    APPROVE = "approve"
    ESCALATE = "escalate"  # an ALARM to the lead, then wait up to a hard limit, then deny


class PlanApproval(SQLModel, table=True):
    """One plan approval request (`004` plan_approval_request) and its decision."""

    __tablename__ = "plan_approvals"
    __table_args__ = (
        sa.Index("ix_plan_approvals_team_status", "team", "status"),
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
            "feedback": self.feedback,
            "cause": self.cause,
            "respondedAt": _iso(self.responded_at),
        }


class ShutdownStatus(StrEnum):
    """Where a shutdown handshake stands; `completed_at` says the member is inactive."""

    REQUESTED = "requested"
    REFUSED = "refused"  # the member is busy; the flow waits for its task or the timeout
    APPROVED = "approved"
    FORCED = "forced"  # no answer (or no approval) by the timeout

    @classmethod
    def open(cls) -> frozenset[ShutdownStatus]:
        return frozenset({cls.REQUESTED, cls.REFUSED})

    @classmethod
    def done(cls) -> frozenset[ShutdownStatus]:
        return frozenset({cls.APPROVED, cls.FORCED})


class Shutdown(SQLModel, table=True):
    """One shutdown handshake (`004` shutdown_request / shutdown_approved)."""

    __tablename__ = "shutdowns"
    __table_args__ = (sa.Index("ix_shutdowns_team_member", "team", "member"),)

    request_id: str = Field(primary_key=True, max_length=255)
    team: str = Field(max_length=64)
    member: str = Field(max_length=64)
    requested_by: str | None = Field(default=None, max_length=64)
    reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    status: str = Field(default=ShutdownStatus.REQUESTED.value, max_length=16)
    flow_run_id: str | None = Field(default=None, max_length=64)
    requested_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    deadline: Any = Field(default=None, sa_column=utc_column())
    asks: int = Field(
        default=1,
        sa_column=sa.Column(sa.Integer, nullable=False, server_default="1"),
        description="How many times the request was sent (again after a busy member's task)",
    )
    last_asked_at: Any = Field(default=None, sa_column=utc_column())
    refused_at: Any = Field(default=None, sa_column=utc_column())
    answered_at: Any = Field(default=None, sa_column=utc_column())
    refusal_reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    backend_type: str | None = Field(default=None, max_length=32)
    pane_id: str | None = Field(default=None, max_length=32)
    pane_closed_at: Any = Field(default=None, sa_column=utc_column())
    completed_at: Any = Field(default=None, sa_column=utc_column())
    cause: str | None = Field(default=None, max_length=255)

    @property
    def is_open(self) -> bool:
        return ShutdownStatus(self.status) in ShutdownStatus.open()

    def to_json(self) -> dict[str, Any]:
        return {
            "requestId": self.request_id,
            "team": self.team,
            "member": self.member,
            "reason": self.reason,
            "status": self.status,
            "forced": self.status == ShutdownStatus.FORCED,
            "flowRunId": self.flow_run_id,
            "requestedAt": _iso(self.requested_at),
            "deadline": _iso(self.deadline),
            "asks": self.asks,
            "refusalReason": self.refusal_reason,
            "answeredAt": _iso(self.answered_at),
            "paneId": self.pane_id,
            "paneClosedAt": _iso(self.pane_closed_at),
            "completedAt": _iso(self.completed_at),
            "cause": self.cause,
        }


def _iso(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


# --- errors and settings -------------------------------------------------------------------


class ApprovalError(ValueError):
    """A refused approval operation; the message is one line for the user."""


class NotAllowed(ApprovalError):
    """The decider may not decide this plan."""


class AlreadyDecided(ApprovalError):
    """The plan was decided before; `request` is the decision that stands."""

    def __init__(self, request: PlanApproval) -> None:
        super().__init__(already_decided(request))
        # A copy: the session that loaded `request` rolls back (and expires it) on the way out.
        self.request = PlanApproval.model_validate(request.model_dump())


class ShutdownError(ValueError):
    """A refused shutdown operation; the message is one line for the user."""


def already_decided(request: PlanApproval) -> str:
    """`plan X was already approved by Y at T` (with the cause when it was no person)."""
    line = (
        f"plan {request.request_id} was already {request.status} by {request.decided_by} "
        f"at {_iso(request.decided_at)}"
    )
    if request.decided_by == SYSTEM and request.cause:
        line += f" ({request.cause})"
    return line


@dataclass(frozen=True)
class ApprovalSettings:
    """A team's approval settings (`Team.settings`), with their defaults."""

    lead: str
    approvers: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_PLAN_TIMEOUT_S
    policy: TimeoutPolicy = TimeoutPolicy.DENY
    escalation_s: float | None = None
    max_revisions: int = DEFAULT_MAX_REVISIONS
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S

    @classmethod
    def of(cls, team: Any) -> ApprovalSettings:
        """The settings of a `models.team.Team` row; a malformed setting is refused by name."""
        raw = team.settings or {}
        approvers = raw.get("approvers") or []
        if not isinstance(approvers, list) or not all(isinstance(a, str) for a in approvers):
            raise ApprovalError(f"team {team.name}: setting approvers must be a list of names")
        policy = raw.get("plan_timeout_policy", TimeoutPolicy.DENY.value)
        try:
            policy = TimeoutPolicy(policy)
        except ValueError:
            choices = ", ".join(p.value for p in TimeoutPolicy)
            raise ApprovalError(
                f"team {team.name}: setting plan_timeout_policy {policy!r} is not one of {choices}"
            ) from None
        return cls(
            lead=team.lead,
            approvers=tuple(approvers),
            timeout_s=_positive(team.name, raw, "plan_timeout_seconds", DEFAULT_PLAN_TIMEOUT_S),
            policy=policy,
            escalation_s=_positive(team.name, raw, "plan_escalation_seconds", None),
            max_revisions=int(
                _positive(team.name, raw, "plan_max_revisions", DEFAULT_MAX_REVISIONS)
            ),
            shutdown_timeout_s=_positive(
                team.name, raw, "shutdown_timeout_seconds", DEFAULT_SHUTDOWN_TIMEOUT_S
            ),
        )

    @property
    def deciders(self) -> tuple[str, ...]:
        """Who may decide a plan: the lead, then the configured approvers."""
        return (self.lead, *(a for a in self.approvers if a != self.lead))


def _positive(team: str, raw: dict[str, Any], key: str, default: Any) -> Any:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ApprovalError(f"team {team}: setting {key} must be a positive number, not {value!r}")
    return float(value)


def settings_of(team: str, *, session: Session | None = None) -> ApprovalSettings:
    """The approval settings of `team`."""
    from models.team import get_team

    with session_scope(session) as s:
        return ApprovalSettings.of(get_team(s, team))


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
    from models.inbox import PlanApprovalRequest, send_payload

    if not plan.strip():
        raise ApprovalError("a plan must not be empty")
    with session_scope(session) as s:
        if request_id is not None:
            existing = s.get(PlanApproval, request_id)
            if existing is not None:
                if (existing.team, existing.member) != (team, member):
                    raise ApprovalError(f"request id {request_id} is taken")
                if flow_run_id and not existing.flow_run_id:
                    existing.flow_run_id = flow_run_id
                    s.add(existing)
                return existing
        team_row, config, revision, chosen = _checked_request(
            s, team, member, previous_request_id, policy
        )
        now = utcnow()
        timeout_s = config.timeout_s if timeout is None else float(timeout)
        if timeout_s <= 0:
            raise ApprovalError(f"timeout must be positive, not {timeout_s:g}")
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
    from models.team import get_member, get_team

    team_row = get_team(session, team)
    config = ApprovalSettings.of(team_row)
    get_member(session, team, member, active=True)
    if member == team_row.lead:
        raise ApprovalError(f"{member} leads team {team}: its plans need nobody's approval")
    try:
        chosen = TimeoutPolicy(policy) if policy is not None else config.policy
    except ValueError:
        choices = ", ".join(p.value for p in TimeoutPolicy)
        raise ApprovalError(f"timeout policy {policy!r} is not one of {choices}") from None
    revision = 1
    if previous_request_id is not None:
        previous = _get_plan(session, previous_request_id)
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
        return _get_plan(s, request_id)


def _get_plan(session: Session, request_id: str) -> PlanApproval:
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
    from models.team import get_team

    with session_scope(session) as s:
        get_team(s, team)
        query = select(PlanApproval).where(PlanApproval.team == team)
        if pending:
            query = query.where(PlanApproval.status.in_([x.value for x in ApprovalStatus.open()]))
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
    session: Session | None = None,
) -> PlanApproval:
    """Records the decision on a plan, once, and sends the member its response.

    A denial at the team's revision limit ends the request `rejected`. The decision and the
    `plan_approval_response` are written in one transaction, so the response goes out
    exactly once, whoever decides first.

    Raises:
        NotAllowed: the decider is neither the lead nor an approver, or it is the member.
        AlreadyDecided: someone (or the timeout) decided first; the message says who, when.
    """
    from models.team import get_team

    with session_scope(session) as s:
        request = _get_plan(s, request_id)
        config = ApprovalSettings.of(get_team(s, request.team))
        check_decider(request, decider, config)
        if approve:
            return _close(s, request, ApprovalStatus.APPROVED, decider, feedback,
                          f"approved by {decider}")  # fmt: skip
        status, cause = _denial(request, config, f"denied by {decider}")
        return _close(s, request, status, decider, feedback, cause)


def _denial(
    request: PlanApproval, config: ApprovalSettings, cause: str
) -> tuple[ApprovalStatus, str]:
    """A denial: `denied` (the member may revise), or `rejected` at the revision limit."""
    if request.revision < config.max_revisions:
        return ApprovalStatus.DENIED, cause
    return ApprovalStatus.REJECTED, (
        f"{cause} at revision {request.revision}: the revision limit "
        f"({config.max_revisions}) is reached"
    )


def _close(
    session: Session,
    request: PlanApproval,
    status: ApprovalStatus,
    decider: str,
    feedback: str | None,
    cause: str,
) -> PlanApproval:
    """The conditional update that lets one decision win, then the response, in one go."""
    table = PlanApproval.__table__
    won = session.execute(
        sa.update(table)
        .where(table.c.request_id == request.request_id, table.c.status == ApprovalStatus.PENDING)
        .values(
            status=status.value,
            decided_at=utcnow(),
            decided_by=decider,
            feedback=feedback,
            cause=cause[:255],
        )
    ).rowcount
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
    from models.inbox import PlanApprovalResponse, send_payload
    from models.team import Member, get_team

    with session_scope(session) as s:
        request = _get_plan(s, request_id)
        if request.is_open:
            raise ApprovalError(f"plan {request_id} is pending: there is nothing to respond yet")
        member = s.get(Member, (request.team, request.member))
        if member is None or not member.is_active:
            return None
        table = PlanApproval.__table__
        now = utcnow()
        claimed = s.execute(
            sa.update(table)
            .where(table.c.request_id == request_id, table.c.responded_at.is_(None))
            .values(responded_at=now)
        ).rowcount
        if not claimed:
            return None
        team = get_team(s, request.team)
        feedback = request.feedback
        if request.status == ApprovalStatus.REJECTED:
            note = "The revision limit is reached: this plan is rejected; do not ask again."
            feedback = f"{feedback}\n\n{note}" if feedback else note
        elif request.decided_by == SYSTEM and request.cause:
            feedback = f"{feedback}\n\n{request.cause}" if feedback else request.cause
        sender = request.decided_by
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


class TimeoutAction(StrEnum):
    """What the timeout policy does to a request at a given time."""

    NONE = "none"  # not due (or decided already)
    DENY = "deny"
    APPROVE = "approve"
    ESCALATE = "escalate"
    DENY_AFTER_ESCALATION = "deny_after_escalation"


def timeout_action(request: PlanApproval, now: datetime | None = None) -> TimeoutAction:
    """What the policy does to `request` at `now` (pure: no database, no clock but `now`)."""
    now = now or utcnow()
    due = request.due_at()
    if due is None or now < due:
        return TimeoutAction.NONE
    if request.escalated_at is not None:
        return TimeoutAction.DENY_AFTER_ESCALATION
    return {
        TimeoutPolicy.DENY: TimeoutAction.DENY,
        TimeoutPolicy.APPROVE: TimeoutAction.APPROVE,
        TimeoutPolicy.ESCALATE: TimeoutAction.ESCALATE,
    }[TimeoutPolicy(request.timeout_policy)]


def apply_timeout(
    request_id: str, *, now: datetime | None = None, session: Session | None = None
) -> TimeoutAction:
    """Applies the timeout policy to a request that is due; returns what it did.

    deny / approve: the request ends so, decided by `system`, with the cause recorded and
    the response sent. escalate: an ALARM `system_alert` goes to the lead (once) and the
    request keeps waiting until its hard deadline, where it is denied. A request decided
    meanwhile is left alone (`NONE`).
    """
    from models.team import get_team

    with session_scope(session) as s:
        request = _get_plan(s, request_id)
        action = timeout_action(request, now)
        waited = _seconds(request.deadline - request.requested_at)
        config = ApprovalSettings.of(get_team(s, request.team))
        try:
            if action is TimeoutAction.DENY:
                status, cause = _denial(
                    request, config, f"no decision within {waited}: denied by the timeout policy"
                )
                _close(s, request, status, SYSTEM, None, cause)
            elif action is TimeoutAction.APPROVE:
                _close(s, request, ApprovalStatus.APPROVED, SYSTEM, None,
                       f"no decision within {waited}: approved by the timeout policy")  # fmt: skip
            elif action is TimeoutAction.DENY_AFTER_ESCALATION:
                total = _seconds(request.hard_deadline - request.requested_at)
                status, cause = _denial(
                    request, config, f"no decision within {total}, escalated to the lead: denied"
                )
                _close(s, request, status, SYSTEM, None, cause)
            elif action is TimeoutAction.ESCALATE and not _escalate(s, request, waited):
                return TimeoutAction.NONE
        except AlreadyDecided:
            return TimeoutAction.NONE
        return action


def _escalate(session: Session, request: PlanApproval, waited: str) -> bool:
    from models.inbox import send
    from models.team import get_team

    table = PlanApproval.__table__
    won = session.execute(
        sa.update(table)
        .where(
            table.c.request_id == request.request_id,
            table.c.status == ApprovalStatus.PENDING,
            table.c.escalated_at.is_(None),
        )
        .values(escalated_at=utcnow())
    ).rowcount
    session.refresh(request)
    if not won:
        return False
    lead = get_team(session, request.team).lead
    message = (
        f"Plan {request.request_id} of {request.member} ({request.summary}) has waited "
        f"{waited} for a decision. Decide with `teamflow plan approve|deny "
        f"{request.request_id}`; it is denied at {_iso(request.hard_deadline)}."
    )
    send(
        request.team,
        to=lead,
        sender=SYSTEM,
        text=message,
        summary=f"ALARM: plan of {request.member} waits for a decision",
        type="system_alert",
        payload={"alert_type": "ALARM", "alert_name": "plan-approval-overdue", "message": message},
        metadata={"request_id": request.request_id},
        session=session,
    )
    return True


def expire_due(
    *, now: datetime | None = None, session: Session | None = None, batch: int = 100
) -> list[str]:
    """Applies the timeout policy to every due request (teamflow's clock, `flows.deadlines`).

    Requests are decided `batch` to a transaction, so each inbox file is written once per
    batch rather than once per response: hundreds of requests due at once end within a
    second. A batch that fails is applied again one request at a time, and a request that
    still fails is left pending (its own run, or the next round, tries again).

    Returns the ids of the requests it acted on (decided, or escalated to the lead).
    """
    now = now or utcnow()
    with session_scope(session) as s:
        ids = list(
            s.exec(
                select(PlanApproval.request_id)
                .where(PlanApproval.status == ApprovalStatus.PENDING, _due_at() <= now)
                .order_by(_due_at())
            )
        )
    if session is not None:
        return [
            i for i in ids if apply_timeout(i, now=now, session=session) is not TimeoutAction.NONE
        ]
    acted: list[str] = []
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        try:
            with session_scope() as s:
                acted += [
                    i
                    for i in chunk
                    if apply_timeout(i, now=now, session=s) is not TimeoutAction.NONE
                ]
        except Exception:
            for request_id in chunk:
                with contextlib.suppress(Exception):
                    if apply_timeout(request_id, now=now) is not TimeoutAction.NONE:
                        acted.append(request_id)
    return acted


def _due_at() -> Any:
    """SQL for `PlanApproval.due_at()` of a pending request: its deadline, or its hard
    deadline once it was escalated."""
    table = PlanApproval.__table__
    due = sa.case((table.c.escalated_at.is_(None), table.c.deadline), else_=table.c.hard_deadline)
    return sa.type_coerce(due, table.c.deadline.type)


def next_due(*, session: Session | None = None) -> datetime | None:
    """When the timeout policy acts next on any pending request (None: nothing waits)."""
    with session_scope(session) as s:
        return s.exec(
            select(
                sa.type_coerce(sa.func.min(_due_at()), PlanApproval.__table__.c.deadline.type)
            ).where(PlanApproval.status == ApprovalStatus.PENDING)
        ).one()


def decided_with_runs(request_ids: list[str], *, session: Session | None = None) -> list[str]:
    """The flow run ids of those of `request_ids` that are decided and have a run."""
    return _decided(PlanApproval.request_id, request_ids, session)


def decided_runs(flow_run_ids: list[str], *, session: Session | None = None) -> list[str]:
    """Those of `flow_run_ids` whose request is decided: their wait is over."""
    return _decided(PlanApproval.flow_run_id, flow_run_ids, session)


def _decided(column: Any, values: list[str], session: Session | None) -> list[str]:
    if not values:
        return []
    with session_scope(session) as s:
        return list(
            s.exec(
                select(PlanApproval.flow_run_id).where(
                    column.in_(values),
                    PlanApproval.status != ApprovalStatus.PENDING,
                    PlanApproval.flow_run_id.is_not(None),
                )
            )
        )


def _seconds(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


# --- shutdowns -----------------------------------------------------------------------------


def new_shutdown_id() -> str:
    """A fresh shutdown request id (the seed shows `req-shutdown-abc123`)."""
    return f"req-shutdown-{uuid.uuid4().hex[:12]}"


def request_shutdown(
    team: str,
    member: str,
    *,
    reason: str | None = None,
    timeout: float | None = None,
    request_id: str | None = None,
    flow_run_id: str | None = None,
    session: Session | None = None,
) -> Shutdown:
    """Records a shutdown request and sends the member a `shutdown_request` from the lead.

    Asking again with the id of an existing request returns it unchanged (retries).

    Raises:
        ShutdownError: the member is unknown, shut down already, the lead, or has a
            shutdown under way.
    """
    from models.team import get_team

    with session_scope(session) as s:
        team_row = get_team(s, team)
        if request_id is not None:
            existing = s.get(Shutdown, request_id)
            if existing is not None:
                if (existing.team, existing.member) != (team, member):
                    raise ShutdownError(f"request id {request_id} is taken")
                return existing
        _checked_shutdown(s, team_row, member)
        timeout_s = ApprovalSettings.of(team_row).shutdown_timeout_s if timeout is None else timeout
        if timeout_s <= 0:
            raise ShutdownError(f"timeout must be positive, not {timeout_s:g}")
        now = utcnow()
        row = Shutdown(
            request_id=request_id or new_shutdown_id(),
            team=team,
            member=member,
            requested_by=team_row.lead,
            reason=reason,
            flow_run_id=flow_run_id,
            requested_at=now,
            deadline=now + timedelta(seconds=timeout_s),
            last_asked_at=now,
        )
        s.add(row)
        s.flush()
        _send_shutdown_request(s, row, now)
        return row


def check_shutdown(team: str, member: str, *, session: Session | None = None) -> None:
    """Raises the `ShutdownError` that `request_shutdown` would, without writing anything."""
    from models.team import get_team

    with session_scope(session) as s:
        _checked_shutdown(s, get_team(s, team), member)


def _checked_shutdown(session: Session, team_row: Any, member: str) -> None:
    from models.team import Member, get_member

    team = team_row.name
    get_member(session, team, member)
    # Locks the member row on PostgreSQL (SQLite's BEGIN IMMEDIATE serialises anyway), so
    # two shutdowns of one member cannot both start.
    locked = session.exec(
        select(Member).where(Member.team == team, Member.name == member).with_for_update()
    ).one()
    if not locked.is_active:
        raise ShutdownError(f"member {member!r} of team {team!r} is shut down already")
    if member == team_row.lead:
        raise ShutdownError(f"{member} leads team {team}: the lead is not shut down this way")
    under_way = session.exec(
        select(Shutdown).where(
            Shutdown.team == team,
            Shutdown.member == member,
            Shutdown.status.in_([x.value for x in ShutdownStatus.open()]),
        )
    ).first()
    if under_way is not None:
        raise ShutdownError(f"a shutdown of {member} is under way already ({under_way.request_id})")


def _send_shutdown_request(session: Session, row: Shutdown, now: datetime) -> None:
    from models.inbox import ShutdownRequest, send_payload

    send_payload(
        row.team,
        to=row.member,
        sender=row.requested_by,
        payload=ShutdownRequest(
            request_id=row.request_id, from_=row.requested_by, reason=row.reason, timestamp=now
        ),
        summary="Shutdown request",
        metadata={"request_id": row.request_id},
        session=session,
    )


def get_shutdown(request_id: str, *, session: Session | None = None) -> Shutdown:
    """One shutdown request; `ShutdownError` if there is none."""
    with session_scope(session) as s:
        return _get_shutdown(s, request_id)


def _get_shutdown(session: Session, request_id: str) -> Shutdown:
    row = session.get(Shutdown, request_id)
    if row is None:
        raise ShutdownError(f"no shutdown request {request_id!r}")
    return row


def list_shutdowns(team: str, *, session: Session | None = None) -> list[Shutdown]:
    """A team's shutdown requests, oldest first."""
    with session_scope(session) as s:
        return list(
            s.exec(
                select(Shutdown)
                .where(Shutdown.team == team)
                .order_by(Shutdown.requested_at, Shutdown.request_id)
            )
        )


def answer_shutdown(
    request_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    backend_type: str | None = None,
    pane_id: str | None = None,
    at: datetime | None = None,
    session: Session | None = None,
) -> Shutdown:
    """Records the member's answer: approved (with its pane), or refused with a reason.

    An approval counts once (later answers change nothing); a refusal only counts while the
    request is open and not approved. `at` is when the member answered (default: now): a
    busy member's task counts as done when it says so after that. Returns the request as
    it stands.
    """
    if not approved and not (reason or "").strip():
        raise ShutdownError("a refusal needs a reason (e.g. the task the member is busy with)")
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        table = Shutdown.__table__
        open_states = [x.value for x in ShutdownStatus.open()]
        now = utcnow()
        if approved:
            values: dict[str, Any] = {
                "status": ShutdownStatus.APPROVED.value,
                "answered_at": now,
                "cause": "approved by the member",
            }
            if backend_type:
                values["backend_type"] = backend_type
            if pane_id:
                values["pane_id"] = pane_id
        else:
            values = {
                "status": ShutdownStatus.REFUSED.value,
                "refused_at": at or now,
                "answered_at": now,
                "refusal_reason": reason,
            }
        s.execute(
            sa.update(table)
            .where(table.c.request_id == request_id, table.c.status.in_(open_states))
            .values(**values)
        )
        s.refresh(row)
        return row


def take_answers(request_id: str, *, session: Session | None = None) -> Shutdown:
    """Records the answers the member sent to the lead's inbox for this request.

    Members answer with `shutdown_approved` or `shutdown_rejected` messages carrying the
    `requestId` (`teamflow msg send --type ...`, or appended to the lead's inbox file and
    taken in by `teamflow sync`). Returns the request as it stands.
    """
    from models.inbox import InboxRow

    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if not row.is_open:
            return row
        answers = s.exec(
            select(InboxRow)
            .where(
                InboxRow.team == row.team,
                InboxRow.recipient == row.requested_by,
                InboxRow.sender == row.member,
                InboxRow.type.in_(["shutdown_approved", "shutdown_rejected"]),
            )
            .order_by(InboxRow.seq)
        )
        for answer in answers:
            payload = answer.payload or {}
            if payload.get("requestId") != request_id:
                continue
            if answer.type == "shutdown_approved":
                return answer_shutdown(
                    request_id,
                    approved=True,
                    backend_type=payload.get("backendType"),
                    pane_id=payload.get("paneId"),
                    session=s,
                )
            if row.refused_at is None or answer.timestamp > row.refused_at:
                row = answer_shutdown(
                    request_id,
                    approved=False,
                    reason=payload.get("reason"),
                    at=answer.timestamp,
                    session=s,
                )
        return row


def task_finished_since(
    team: str, member: str, since: datetime, *, session: Session | None = None
) -> bool:
    """Whether `member` finished its work after `since`.

    Either it told the lead (`idle_notification`, available or task_complete) or its `004`
    task status left `running` after that time.
    """
    from models.inbox import InboxRow
    from models.task import TaskStatusRow
    from models.team import get_team

    with session_scope(session) as s:
        lead = get_team(s, team).lead
        notes = s.exec(
            select(InboxRow).where(
                InboxRow.team == team,
                InboxRow.recipient == lead,
                InboxRow.sender == member,
                InboxRow.type == "idle_notification",
                InboxRow.timestamp > since,
            )
        )
        if any(
            (n.payload or {}).get("idleReason") in ("available", "task_complete") for n in notes
        ):
            return True
        status = s.get(TaskStatusRow, (team, member))
        if status is None or status.status == "running":
            return False
        last = max(t for t in (status.last_active_at, status.completed_at) if t is not None)
        return last > since


def ask_again(request_id: str, *, session: Session | None = None) -> Shutdown:
    """Sends a refused shutdown request again (the member's task is done); counts the asks."""
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if row.status != ShutdownStatus.REFUSED:
            return row
        now = utcnow()
        row.status = ShutdownStatus.REQUESTED.value
        row.asks += 1
        row.last_asked_at = now
        s.add(row)
        s.flush()
        _send_shutdown_request(s, row, now)
        return row


def member_metrics(team: str, member: str, *, session: Session | None = None) -> dict[str, int]:
    """`tasks_completed` and `total_tokens` of a member.

    From its `004` task status metrics when it reports them, else summed over its task
    executions (`task_metrics`).
    """
    from models.task import TaskMetricsRow, TaskStatusRow

    with session_scope(session) as s:
        status = s.get(TaskStatusRow, (team, member))
        if status is not None and status.tokens_used is not None:
            return {
                "tasks_completed": int(status.tasks_completed or 0),
                "total_tokens": int(status.tokens_used),
            }
        count, tokens = s.execute(
            sa.select(
                sa.func.count(TaskMetricsRow.ended_at),
                sa.func.coalesce(sa.func.sum(TaskMetricsRow.tokens), 0),
            ).where(TaskMetricsRow.team == team, TaskMetricsRow.member == member)
        ).one()
        return {"tasks_completed": int(count), "total_tokens": int(tokens)}


def complete_shutdown(
    request_id: str,
    *,
    forced: bool = False,
    cause: str | None = None,
    session: Session | None = None,
) -> Shutdown:
    """Makes the member inactive: `shutdownAt`, and metadata `tasks_completed`,
    `total_tokens`, `shutdown_reason`. Once: a completed request is returned unchanged.

    `forced` records a shutdown nobody approved (the timeout), with its cause.
    """
    from models.team import get_member, set_member

    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if row.completed_at is not None:
            return row
        if not forced and row.status != ShutdownStatus.APPROVED:
            raise ShutdownError(
                f"shutdown {request_id} is {row.status}: only an approved (or forced) "
                "shutdown completes"
            )
        now = utcnow()
        table = Shutdown.__table__
        values: dict[str, Any] = {"completed_at": now}
        if forced:
            values.update(status=ShutdownStatus.FORCED.value, cause=(cause or "forced")[:255])
        won = s.execute(
            sa.update(table)
            .where(table.c.request_id == request_id, table.c.completed_at.is_(None))
            .values(**values)
        ).rowcount
        s.refresh(row)
        if not won:
            return row
        member = get_member(s, row.team, row.member)
        meta = dict(member.meta or {})
        meta.update(member_metrics(row.team, row.member, session=s))
        meta["shutdown_reason"] = (
            f"forced: {row.cause}" if forced else (row.reason or "requested by the lead")
        )
        set_member(row.team, row.member, is_active=False, shutdown_at=now, meta=meta, session=s)
        return row


def pane_closed(request_id: str, *, session: Session | None = None) -> Shutdown:
    """Records that the member's tmux pane was closed."""
    with session_scope(session) as s:
        row = _get_shutdown(s, request_id)
        if row.pane_closed_at is None:
            row.pane_closed_at = utcnow()
            s.add(row)
        return row
