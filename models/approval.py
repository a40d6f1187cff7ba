"""Plan approvals and shutdowns: the records that outlive their flow runs.

A request, its decision and who made it stay here even if the Prefect flow run is deleted.
Decisions are guarded by the database (a conditional update on `status`), not by memory.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from models.base import utc_column, utcnow


class ApprovalStatus(StrEnum):
    """Where a plan approval request stands."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    REJECTED = "rejected"  # denied too often: the revision limit was reached
    EXPIRED = "expired"  # no decision by the deadline; see `cause`

    @classmethod
    def open(cls) -> frozenset[ApprovalStatus]:
        return frozenset({cls.PENDING})

    @classmethod
    def decided(cls) -> frozenset[ApprovalStatus]:
        return frozenset({cls.APPROVED, cls.DENIED, cls.REJECTED, cls.EXPIRED})


class TimeoutPolicy(StrEnum):
    """What happens to a plan nobody decided on in time."""

    DENY = "deny"
    APPROVE = "approve"
    ESCALATE = "escalate"


class PlanApproval(SQLModel, table=True):
    """One plan approval request (`004` plan_approval_request) and its decision."""

    __tablename__ = "plan_approvals"
    __table_args__ = (sa.Index("ix_plan_approvals_team_status", "team", "status"),)

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
    decided_at: Any = Field(default=None, sa_column=utc_column())
    decided_by: str | None = Field(default=None, max_length=64)
    feedback: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    cause: str | None = Field(
        default=None, max_length=255, description="Why it ended as it did (decision, timeout...)"
    )


class ShutdownStatus(StrEnum):
    """Where a shutdown handshake stands."""

    REQUESTED = "requested"
    REFUSED = "refused"  # the member is busy; the flow waits for its task or the timeout
    APPROVED = "approved"
    FORCED = "forced"  # no answer by the timeout

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
    reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    status: str = Field(default=ShutdownStatus.REQUESTED.value, max_length=16)
    flow_run_id: str | None = Field(default=None, max_length=64)
    requested_at: Any = Field(default_factory=utcnow, sa_column=utc_column(nullable=False))
    deadline: Any = Field(default=None, sa_column=utc_column())
    answered_at: Any = Field(default=None, sa_column=utc_column())
    refusal_reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text))
    completed_at: Any = Field(default=None, sa_column=utc_column())
