"""A team's approval and shutdown settings (`Team.settings`), read and checked.

Pure: no database. `models.team.settings_of` reads them for a team by name;
`models.approval` and `models.shutdown` act on them.

Team settings (`Team.settings`) that shape approvals and shutdowns, all optional:

| key | meaning | default |
|---|---|---|
| `approvers` | who may decide plans besides the lead | `[]` |
| `plan_timeout_seconds` | how long a plan waits for a decision | 3600 |
| `plan_timeout_policy` | `deny`, `approve` or `escalate` when nobody decided | `deny` |
| `plan_escalation_seconds` | after an escalation, how long until a denial | the timeout |
| `plan_max_revisions` | how many times a member may ask (first plan included) | 3 |
| `shutdown_timeout_seconds` | how long a shutdown waits for the member's answer | 300 |
| `offline_after_seconds` | how old a heartbeat gets before the member is offline | 300 |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from models import durations

DEFAULT_PLAN_TIMEOUT_S = 3600.0
DEFAULT_MAX_REVISIONS = 3
DEFAULT_SHUTDOWN_TIMEOUT_S = 300.0
DEFAULT_OFFLINE_AFTER_S = 300.0
MAX_OFFLINE_AFTER_S = 7 * 24 * 3600.0
"""The longest `offline_after_seconds` teamflow accepts: a week."""

MAX_SECONDS = 366 * 24 * 3600.0
"""The longest timeout teamflow takes (a year and a day): beyond it a deadline is no deadline."""
MAX_COUNT = 1000
"""The largest count setting (`concurrency`, `plan_max_revisions`, a worker's `--limit`)."""

SECONDS_RANGE = f"a finite number of seconds greater than 0 and at most {MAX_SECONDS:g}"
COUNT_RANGE = f"a whole number from 1 to {MAX_COUNT}"

SECONDS_SETTINGS = ("plan_timeout_seconds", "plan_escalation_seconds", "shutdown_timeout_seconds")
COUNT_SETTINGS = ("concurrency", "plan_max_revisions")


def is_seconds(value: Any) -> bool:
    """True for a number of seconds teamflow takes: finite, > 0, at most `MAX_SECONDS`."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 < value <= MAX_SECONDS
    )


def is_count(value: Any) -> bool:
    """True for a count teamflow takes: a whole number from 1 to `MAX_COUNT`."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value == int(value)
        and 1 <= value <= MAX_COUNT
    )


def check_setting(key: str, value: Any) -> None:
    """Refuses (`ApprovalError`, one line naming `key`) a numeric setting out of its range."""
    if value is None:
        return
    if key in SECONDS_SETTINGS and not is_seconds(value):
        raise ApprovalError(f"setting {key} must be {SECONDS_RANGE}, not {value!r}")
    if key in COUNT_SETTINGS and not is_count(value):
        raise ApprovalError(f"setting {key} must be {COUNT_RANGE}, not {value!r}")


class ApprovalError(ValueError):
    """A refused approval operation; the message is one line for the user."""


class TimeoutPolicy(StrEnum):
    """What happens to a plan nobody decided on in time."""

    DENY = "deny"
    APPROVE = "approve"
    ESCALATE = "escalate"  # an ALARM to the lead, then wait up to a hard limit, then deny


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
    offline_after_s: float = DEFAULT_OFFLINE_AFTER_S
    ui_decisions: bool = True
    """Whether the Prefect UI's form may decide plans (`allow`, recorded as `ui`,
    unverified: the form cannot prove who submits it) or not (`deny`)."""

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
        ui = raw.get("ui_decisions", "allow")
        if ui not in ("allow", "deny"):
            raise ApprovalError(
                f"team {team.name}: setting ui_decisions {ui!r} is not one of allow, deny"
            )
        return cls(
            lead=team.lead,
            ui_decisions=ui == "allow",
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
            offline_after_s=_offline_after(team.name, raw),
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
    try:
        check_setting(key, value)
    except ApprovalError as exc:
        raise ApprovalError(f"team {team}: {exc}") from None
    return float(value)


def parse_duration(
    text: str, *, what: str = "duration", most: float = MAX_OFFLINE_AFTER_S
) -> float:
    """Seconds in `90s`, `5m`, `1h` or `300` (seconds): finite, above 0, at most `most`.

    Raises `ApprovalError` with one line naming `what` and the text when it is none of these.
    """
    try:
        return durations.parse_duration(text, what=what, most=most).total_seconds()
    except durations.DurationError as exc:
        raise ApprovalError(str(exc)) from None


def _offline_after(team: str, raw: dict[str, Any]) -> float:
    value = _positive(team, raw, "offline_after_seconds", DEFAULT_OFFLINE_AFTER_S)
    if not math.isfinite(value) or value > MAX_OFFLINE_AFTER_S:
        raise ApprovalError(
            f"team {team}: setting offline_after_seconds must be at most "
            f"{MAX_OFFLINE_AFTER_S:g}, not {value!r}"
        )
    return value
