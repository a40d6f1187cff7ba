"""Which tool calls need a person, and how many tokens a member may spend: per team, per member.

Pure rules plus one small store for a member's own policy. A team's settings
(`Team.settings`, `teamflow team settings`) and a member's metadata (`Member.meta`,
`teamflow member set`) carry them; a member's value of a key wins over its team's:

| key | meaning | default |
|---|---|---|
| `approve_tools` | tool ids whose every call needs a person | `[]` |
| `approve_writes` | calls of tools that write (`x-teamflow-writes` params) need a person | false |
| `approve_below_confidence` | a call whose `confidence` is below this needs a person | none |
| `approve_warnings` | a call whose action carries `warnings` needs a person | false |
| `approve_security_level` | calls of steps whose context claims this level or above | none |
| `tool_timeout_seconds` | how long a tool approval waits for a decision | 3600 |
| `tool_timeout_policy` | `deny`, `approve` or `escalate` when nobody decided | `deny` |
| `budget_tokens` | model tokens a member may spend on one task (`004` budget_tokens) | none |
| `budget_seconds` | seconds a member may work on one task (decision waits not counted) | none |

A member keeps its own policy keys under `metadata.tool_policy` and its budget in
`metadata.budget_tokens`, where the `004` example member has it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from models.team_settings import (
    DEFAULT_PLAN_TIMEOUT_S,
    SECONDS_RANGE,
    ApprovalError,
    TimeoutPolicy,
    is_seconds,
)

TOOL_SETTINGS = {
    "approve_tools": "tool ids whose every call needs a person's decision",
    "approve_writes": "calls of tools that write somewhere need a decision (true/false)",
    "approve_below_confidence": "calls whose confidence is below this (0-1) need a decision",
    "approve_warnings": "calls that carry warnings need a decision (true/false)",
    "approve_security_level": "calls of steps at this security level or above need a decision",
    "tool_timeout_seconds": "how long a tool approval waits for a decision (default 3600)",
    "tool_timeout_policy": "deny, approve or escalate when nobody decided (default deny)",
    "budget_tokens": "model tokens a member may spend on one task",
    "budget_seconds": "seconds a member may work on one task (waits for decisions not counted)",
}
"""The tool-approval and budget keys of a team's settings (and of a member's metadata)."""

POLICY_KEY = "tool_policy"
"""Where a member's own policy keys live in its metadata."""
BUDGET_KEY = "budget_tokens"
"""Where a member's budget lives in its metadata (as in the `004` example member)."""
SECONDS_KEY = "budget_seconds"
"""A member's time budget per task (among its own policy keys)."""
LEVELS = ("public", "user", "admin")
ALARM_AT = 0.8
"""The share of the budget at which the lead gets one ALARM."""
MAX_BUDGET = 10**12


def check_tool_setting(key: str, value: Any) -> None:
    """Refuses (`ApprovalError`, one line naming `key`) a malformed tool or budget setting."""
    if value is None:
        return
    if key == "approve_tools":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ApprovalError(f"setting {key} must be a list of tool ids, not {value!r}")
    elif key in ("approve_writes", "approve_warnings"):
        if not isinstance(value, bool):
            raise ApprovalError(f"setting {key} must be true or false, not {value!r}")
    elif key == "approve_below_confidence":
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= 1
        ):
            raise ApprovalError(f"setting {key} must be a number from 0 to 1, not {value!r}")
    elif key == "approve_security_level":
        if value not in LEVELS:
            raise ApprovalError(f"setting {key} must be one of {', '.join(LEVELS)}, not {value!r}")
    elif key == "tool_timeout_seconds":
        if not is_seconds(value):
            raise ApprovalError(f"setting {key} must be {SECONDS_RANGE}, not {value!r}")
    elif key == "tool_timeout_policy":
        if value not in {p.value for p in TimeoutPolicy}:
            choices = ", ".join(p.value for p in TimeoutPolicy)
            raise ApprovalError(f"setting {key} {value!r} is not one of {choices}")
    elif key in (BUDGET_KEY, SECONDS_KEY) and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BUDGET
    ):
        raise ApprovalError(
            f"setting {key} must be a whole number from 1 to {MAX_BUDGET}, not {value!r}"
        )


@dataclass(frozen=True)
class ToolPolicy:
    """Which calls of one member need a person, and its token budget."""

    approve_tools: tuple[str, ...] = ()
    approve_writes: bool = False
    approve_below_confidence: float | None = None
    approve_warnings: bool = False
    approve_security_level: str | None = None
    timeout_s: float = DEFAULT_PLAN_TIMEOUT_S
    policy: TimeoutPolicy = TimeoutPolicy.DENY
    budget_tokens: int | None = None
    budget_seconds: int | None = None

    @classmethod
    def of(cls, team_settings: dict[str, Any] | None, member_meta: dict[str, Any] | None = None):
        """The policy of a member: its team's settings, each key the member sets overriding."""
        raw = {k: v for k, v in (team_settings or {}).items() if k in TOOL_SETTINGS}
        meta = member_meta or {}
        own = meta.get(POLICY_KEY)
        if isinstance(own, dict):
            raw.update({k: v for k, v in own.items() if k in TOOL_SETTINGS and v is not None})
        if meta.get(BUDGET_KEY) is not None:
            raw[BUDGET_KEY] = meta[BUDGET_KEY]
        for key, value in raw.items():
            check_tool_setting(key, value)
        return cls(
            approve_tools=tuple(raw.get("approve_tools") or ()),
            approve_writes=bool(raw.get("approve_writes", False)),
            approve_below_confidence=raw.get("approve_below_confidence"),
            approve_warnings=bool(raw.get("approve_warnings", False)),
            approve_security_level=raw.get("approve_security_level"),
            timeout_s=float(raw.get("tool_timeout_seconds", DEFAULT_PLAN_TIMEOUT_S)),
            policy=TimeoutPolicy(raw.get("tool_timeout_policy", TimeoutPolicy.DENY.value)),
            budget_tokens=raw.get(BUDGET_KEY),
            budget_seconds=raw.get(SECONDS_KEY),
        )

    def reasons(
        self,
        tool_id: str,
        *,
        writes: bool = False,
        confidence: float | None = None,
        warnings: list[str] | None = None,
        security_level: str | None = None,
    ) -> list[str]:
        """Why a call needs a person (empty: it runs without asking)."""
        why = []
        if tool_id in self.approve_tools:
            why.append(f"tool {tool_id} needs approval")
        if self.approve_writes and writes:
            why.append(f"tool {tool_id} writes")
        if self.approve_below_confidence is not None and (
            confidence is not None and confidence < self.approve_below_confidence
        ):
            why.append(f"confidence {confidence:g} is below {self.approve_below_confidence:g}")
        if self.approve_warnings and warnings:
            why.append("warnings: " + "; ".join(warnings))
        if (
            self.approve_security_level is not None
            and security_level in LEVELS
            and LEVELS.index(security_level) >= LEVELS.index(self.approve_security_level)
        ):
            why.append(f"the step runs at security level {security_level}")
        return why

    @property
    def asks(self) -> bool:
        """Whether any call could need a person under this policy."""
        return bool(
            self.approve_tools
            or self.approve_writes
            or self.approve_below_confidence is not None
            or self.approve_warnings
            or self.approve_security_level
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "approve_tools": list(self.approve_tools),
            "approve_writes": self.approve_writes,
            "approve_below_confidence": self.approve_below_confidence,
            "approve_warnings": self.approve_warnings,
            "approve_security_level": self.approve_security_level,
            "tool_timeout_seconds": self.timeout_s,
            "tool_timeout_policy": self.policy.value,
            "budget_tokens": self.budget_tokens,
            "budget_seconds": self.budget_seconds,
        }
