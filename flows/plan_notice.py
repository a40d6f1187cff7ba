"""Telling the deciders that a plan waits: a JSON notice with each decider's signed
approval link, posted to the team's webhook (`teamflow team settings TEAM
--notify-webhook URL`), and the same as text through a Prefect notification block
(`--notify-block TYPE/NAME`: Slack, Microsoft Teams, e-mail, a custom webhook, any block
Prefect sends notifications with).

Why a block and not a Prefect automation on the paused run: an automation's message is a
template of the run, and the links are signed per decider by teamflow; the block is
Prefect's own delivery, called with the links in hand.

The plan-approval run posts it once, when the plan starts waiting. A receiver that fails
(refuses, errors, times out) is tried again a few times; the notice never fails or holds
the run for long: at most `ATTEMPTS` tries of `TIMEOUT_S` each.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

from models import approval
from models import team as teams
from models.approval_links import links_for
from models.team_settings import ApprovalSettings

ATTEMPTS = 3
TIMEOUT_S = 3.0
BACKOFF_S = 0.5


def notice(request_id: str) -> tuple[str | None, dict[str, Any]]:
    """The team's webhook URL (None: none set) and the notice for plan `request_id`: the
    plan, its summary, and a link per decider (the lead and the approvers, not the member)."""
    from models.db import session_scope

    with session_scope() as s:
        request = approval.get_request(request_id, session=s)
        row = teams.get_team(request.team, session=s)
        url = (row.settings or {}).get("notify_webhook")
        block = (row.settings or {}).get("notify_block")
        deciders = [d for d in ApprovalSettings.of(row).deciders if d != request.member]
        body = {
            "event": "plan_waiting",
            "team": request.team,
            "member": request.member,
            "summary": request.summary,
            "plan": request.to_json(),
            "links": links_for(request_id, deciders, request.deadline),
        }
        if block:
            body["block"] = block
    return url, body


def as_text(body: dict[str, Any]) -> tuple[str, str]:
    """The notice as a person reads it in a chat or a mail: (subject, body)."""
    subject = f"Plan of {body['member']} ({body['team']}) waits for a decision"
    lines = [f"{body['summary']}", "", "Decide (each link is yours, once):"]
    lines += [f"- {name}: {link}" for name, link in body["links"].items()]
    return subject, "\n".join(lines)


def send_through_block(slug: str, body: dict[str, Any]) -> str:
    """Sends the notice through the Prefect notification block `slug`, retried; one line
    saying what happened (never raises)."""
    from prefect.blocks.abstract import NotificationBlock
    from prefect.blocks.core import Block

    try:
        block = Block.load(slug)
    except Exception as exc:  # a missing block, or no Prefect server: said, never raised
        return f"notice not sent through block {slug}: {' '.join(str(exc).split())[:200]}"
    if not isinstance(block, NotificationBlock):
        return f"notice not sent: block {slug} is not a notification block"
    subject, text = as_text(body)
    last = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            # Prefect's blocks notify synchronously outside an event loop (this runs in a
            # thread of its own); one that answers a coroutine anyway is run to its end.
            sent = block.notify(text, subject=subject)
            if inspect.isawaitable(sent):
                asyncio.run(sent)
            return f"notice sent through block {slug} ({len(body['links'])} link(s))"
        except Exception as exc:  # the block's service refused or was away: tried again
            last = type(exc).__name__
        if attempt < ATTEMPTS:
            time.sleep(BACKOFF_S * attempt)
    return f"notice not sent through block {slug} after {ATTEMPTS} tries ({last})"


def notify_deciders(request_id: str) -> str:
    """Posts the notice to the team's webhook and sends it through its notification block,
    each retried; returns what happened, one line (never raises: a notice that cannot be
    delivered is said so in the run's log)."""
    try:
        url, body = notice(request_id)
    except ValueError as exc:
        return f"no notice: {exc}"
    said = []
    if url:
        said.append(post_to_webhook(url, body))
    if body.get("block"):
        said.append(send_through_block(body.pop("block"), body))
    if not said:
        return (
            "no notice: the team has no webhook or notification block "
            "(teamflow team settings TEAM --notify-webhook URL | --notify-block TYPE/NAME)"
        )
    return "; ".join(said)


def post_to_webhook(url: str, body: dict[str, Any]) -> str:
    """Posts the JSON notice to `url`, retried; one line saying what happened."""
    import httpx

    body = {k: v for k, v in body.items() if k != "block"}
    last = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            answer = httpx.post(url, json=body, timeout=TIMEOUT_S)
            if answer.status_code < 300:
                return f"notice posted to {url} ({len(body['links'])} link(s))"
            last = f"answered {answer.status_code}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}"
        if attempt < ATTEMPTS:
            time.sleep(BACKOFF_S * attempt)
    return f"notice not delivered to {url} after {ATTEMPTS} tries ({last})"
