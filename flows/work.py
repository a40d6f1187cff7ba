"""What one member's execution of a team task did: its `Work`, step after step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Work:
    """What one member's execution of the task did."""

    member: str
    ok: bool = True
    error: str | None = None
    steps: int = 0
    tokens: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    approval_wait_s: float = 0.0
    clock: float = 0.0  # time.monotonic() when its work began (the time budget counts from it)
    extended: dict[str, int] = field(default_factory=dict)  # budgets the lead extended
    response: str | None = None
    plan_approved: bool = False
    denied_request: str | None = None
    feedback_id: str | None = None
    stopped: bool = False  # its last step stopped it: a resumed run asks for no more
    failed_step: int | None = None
    notes: list[tuple[str, str]] = field(default_factory=list)  # (userid, text) to record
    pending: set[asyncio.Task] = field(default_factory=set)
    started_at: Any = None
    ended_at: Any = None
    policy: Any = None  # the member's `ToolPolicy` as the current step read it
