"""The tool-approval and budget options of `team settings` and `member set`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from flows.cli.output import seconds_check

TP = "Tool approvals and budget"

ApproveToolsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--approve-tools",
        help="Tool ids whose calls need a person (repeat, or a,b; '' for none).",
        rich_help_panel=TP,
    ),
]
ApproveWritesOpt = Annotated[
    bool | None,
    typer.Option(
        "--approve-writes/--no-approve-writes",
        help="Calls of tools that write (x-teamflow-writes) need a person.",
        show_default=False,
        rich_help_panel=TP,
    ),
]
ApproveConfidenceOpt = Annotated[
    float | None,
    typer.Option(
        "--approve-below-confidence",
        help="Calls whose confidence is below X (0-1) need a person.",
        rich_help_panel=TP,
    ),
]
ApproveWarningsOpt = Annotated[
    bool | None,
    typer.Option(
        "--approve-warnings/--no-approve-warnings",
        help="Calls that carry warnings need a person.",
        show_default=False,
        rich_help_panel=TP,
    ),
]
ApproveLevelOpt = Annotated[
    str | None,
    typer.Option(
        "--approve-security-level",
        help="Calls of steps at this security level (public, user, admin) or above.",
        rich_help_panel=TP,
    ),
]
ToolTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--tool-timeout",
        help="Seconds a tool call waits for a decision.",
        callback=seconds_check("tool_timeout_seconds"),
        rich_help_panel=TP,
    ),
]
ToolPolicyOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-policy",
        help="When nobody decided a tool call in time: deny, approve, escalate.",
        rich_help_panel=TP,
    ),
]
BudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens",
        help="Model tokens a member may spend on one task (0: no budget).",
        rich_help_panel=TP,
    ),
]

SecondsBudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--budget-seconds",
        help="Seconds a member may work on one task, waits for decisions not counted (0: none).",
        rich_help_panel=TP,
    ),
]


def policy_changes(
    approve_tools: list[str] | None,
    approve_writes: bool | None,
    below_confidence: float | None,
    approve_warnings: bool | None,
    security_level: str | None,
    tool_timeout: float | None,
    tool_policy: str | None,
    budget_tokens: int | None,
    budget_seconds: int | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The settings the options change, and those they reset (an empty list, a 0 budget)."""
    tools = None
    if approve_tools is not None:
        tools = [t.strip() for item in approve_tools for t in item.split(",") if t.strip()]
    changes: dict[str, Any] = {
        "approve_tools": tools or None,
        "approve_writes": approve_writes,
        "approve_below_confidence": below_confidence,
        "approve_warnings": approve_warnings,
        "approve_security_level": security_level,
        "tool_timeout_seconds": tool_timeout,
        "tool_timeout_policy": tool_policy,
        "budget_tokens": budget_tokens or None,
        "budget_seconds": budget_seconds or None,
    }
    resets = []
    if approve_tools is not None and not tools:
        resets.append("approve_tools")
    if budget_tokens == 0:
        resets.append("budget_tokens")
    if budget_seconds == 0:
        resets.append("budget_seconds")
    return {k: v for k, v in changes.items() if v is not None}, resets
