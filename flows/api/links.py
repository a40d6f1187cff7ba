"""`/api/v1/links/{token}`: the decision page a signed approval link opens (the plan as
Markdown, approve, deny with feedback), and the decision it posts.

The holder of a valid link is `Principal.link(team, decider)`: the rule table lets it decide
its one plan as that decider (recorded via `link`, identity `link:NAME`); an altered or
expired link is a 403, a used one (the plan already decided) a 409."""

from __future__ import annotations

import html

from fastapi import APIRouter, Form
from fastapi.responses import HTMLResponse

from models.identity import Action, Principal, authorize

LINK_ERRORS: dict[int | str, dict] = {
    code: {"description": text, "content": {"text/html": {"schema": {"type": "string"}}}}
    for code, text in (
        (403, "The link is altered, expired, or its holder no longer decides (a page)"),
        (404, "The plan is gone (a page)"),
        (409, "The plan was decided already (a page)"),
        (422, "A denial without feedback, or an unknown decision (a page)"),
        (503, "No Prefect server to resume the waiting run on (a page)"),
    )
}
"""A person opens a link in a browser: its refusals are pages too, saying why."""

router = APIRouter(prefix="/links", tags=["approval links"], responses=LINK_ERRORS)

REFUSED = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Not decided</title></head>
<body style="font-family: sans-serif; max-width: 48rem; margin: 2rem auto">
<h1>Not decided</h1><p id="refused">{message}</p></body></html>
"""


def _refused(exc: Exception) -> HTMLResponse:
    from flows.api.envelopes import error_of

    status, _kind, message, _details = error_of(exc)
    return HTMLResponse(REFUSED.format(message=html.escape(message)), status_code=status)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: sans-serif; max-width: 48rem; margin: 2rem auto">
<h1>{title}</h1>
<p><strong>Summary:</strong> {summary}</p>
<div id="plan">{plan}</div>
<hr>
{body}
</body></html>
"""

FORM = """<form method="post">
<p>You decide as <strong>{decider}</strong>.</p>
<p><label for="feedback">Feedback (needed to deny)</label><br>
<textarea id="feedback" name="feedback" rows="4" cols="60"></textarea></p>
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form>"""


def _render(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).render(markdown)


def _claimed(token: str):
    from models import approval
    from models.approval_links import verify

    claim = verify(token)
    row = approval.get_request(claim.request_id)
    who = Principal.link(row.team, claim.decider)
    authorize(who, Action.PLAN_READ, row.team, row.member)
    return claim, row, who


def _page(row, body: str) -> HTMLResponse:
    title = f"Plan of {row.member} ({row.team})"
    return HTMLResponse(
        PAGE.format(
            title=html.escape(title),
            summary=html.escape(row.summary),
            plan=_render(row.plan),
            body=body,
        )
    )


@router.get("/{token}", response_class=HTMLResponse, summary="The decision page of a link")
def decision_page(token: str) -> HTMLResponse:
    from models.approval import already_decided

    try:
        claim, row, _who = _claimed(token)
    except (ValueError, LookupError) as exc:
        return _refused(exc)
    if not row.is_open:
        return _page(row, f"<p id='outcome'>{html.escape(already_decided(row))}</p>")
    return _page(row, FORM.format(decider=html.escape(claim.decider)))


@router.post("/{token}", response_class=HTMLResponse, summary="Decide with a link")
def decide_with_link(
    token: str,
    decision: str = Form("", description="approve or deny"),
    feedback: str = Form("", description="Needed to deny"),
) -> HTMLResponse:
    from flows.decisions import decide_plan

    try:
        claim, row, who = _claimed(token)
        if decision not in ("approve", "deny"):
            raise ValueError(f"the decision must be approve or deny, not {decision[:40]!r}")
        if decision == "deny" and not feedback.strip():
            raise ValueError("a denial needs feedback: say what to change")
        decided = decide_plan(
            row.request_id, who=who, approve=decision == "approve", feedback=feedback or None,
            decider=claim.decider,
        )  # fmt: skip
    except (ValueError, LookupError) as exc:
        return _refused(exc)
    done = decided.request
    line = f"Plan {done.request_id} {done.status} by {decided.decider}."
    return _page(done, f"<p id='outcome'>{html.escape(line)}</p>")
