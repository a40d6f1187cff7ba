"""The `001` notifications that people and members cause: who says what to whom.

- `agent_message`: one member to another (`sender_agent_id`, `content`, `attachments`: the
  paths of artifacts it points at).
- `user_message`: a person to a member (`content`, `content_type`, `session_id`).
- `idle_notification` `waiting_response` (`004`): a member tells the lead it is idle because
  it waits on someone else (an answer to its message, a decision on its plan).
- `capability_broadcast`: a member tells the lead what it can do (its tools) when it joins
  and when its tools change; `capabilities` also lets an unassigned task go to a member
  whose tools match it (`models.dependencies`).

Above `models.inbox` (which delivers them) and `models.tool` (the tool ids a member with
every tool offers). `status_update` is sent by `models.presence`; `task_assignment`,
`tool_result` and `system_alert` by the flows that assign, run tools and raise alerts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from models.db import session_scope
from models.inbox import send
from models.inbox_table import InboxRow
from models.notification import (
    AgentMessagePayload,
    CapabilityBroadcastPayload,
    ContentType,
    UserMessagePayload,
)
from models.team import Member, get_member, get_team

if TYPE_CHECKING:
    from models.identity import Principal

CAPABILITY_VERSION = "1.0.0"
"""The `version` a capability broadcast carries: the version of teamflow's tool contract."""


def agent_message(
    team: str,
    *,
    to: str,
    sender: str,
    text: str,
    attachments: list[str] | None = None,
    summary: str | None = None,
    who: Principal | None = None,
    session: Session | None = None,
) -> InboxRow:
    """One member's message to another, typed `agent_message` (the text is the content);
    `who` is the caller, checked as `inbox.send` checks it."""
    with session_scope(session) as s:
        payload = AgentMessagePayload(
            sender_agent_id=f"{sender}@{team}",
            content=text,
            attachments=[str(a) for a in attachments] if attachments else None,
        )
        return send(
            team, to=to, sender=sender, text=text, summary=summary, type="agent_message",
            payload=payload.model_dump(mode="json", exclude_none=True), who=who, session=s,
        )  # fmt: skip


def user_message(
    team: str,
    *,
    to: str,
    text: str,
    content_type: str = ContentType.TEXT.value,
    session_id: str | None = None,
    sender: str | None = None,
    session: Session | None = None,
) -> InboxRow:
    """A person's message to a member, typed `user_message`.

    The person speaks as `sender` (default: the team's lead, the local user's seat; the
    `system` when the member is the lead). `content_type` is text, voice_transcript or
    image_id; `session_id` names the person's device session.
    """
    try:
        kind = ContentType(content_type)
    except ValueError:
        choices = ", ".join(c.value for c in ContentType)
        raise ValueError(f"content type {content_type!r} is not one of {choices}") from None
    with session_scope(session) as s:
        if sender is None:
            lead = get_team(team, session=s).lead
            sender = "system" if to == lead else lead
        payload = UserMessagePayload(content=text, content_type=kind, session_id=session_id)
        return send(
            team, to=to, sender=sender, text=text, summary=f"from the user: {_short(text)}",
            type="user_message", payload=payload.model_dump(mode="json", exclude_none=True),
            session=s,
        )  # fmt: skip


def waiting_response(
    team: str, member: str, *, on: str, session: Session | None = None
) -> InboxRow | None:
    """Tells the team's lead that `member` is idle, waiting for `on` to answer (a `004`
    idle_notification, idleReason `waiting_response`); nothing when the member leads."""
    from models.base import utcnow
    from models.inbox import payload_message
    from models.inbox_message import IdleNotification

    with session_scope(session) as s:
        lead = get_team(team, session=s).lead
        if member == lead:
            return None
        note = IdleNotification.model_validate(
            {"from": member, "idleReason": "waiting_response", "timestamp": utcnow()}
        )
        message = payload_message(
            note, to=lead, sender=member, summary=f"{member} waits for {on}",
            metadata={"waitingOn": on},
        )  # fmt: skip
        return send(team, **message, session=s)


def capabilities(member: Member, *, session: Session) -> list[str]:
    """What a member can do: its tools, or every registered tool when it may use all."""
    tools = (member.runtime or {}).get("tools")
    if tools is not None:
        return list(tools)
    from models.tool import list_tools

    return [t.tool_id for t in list_tools(session=session)]


def broadcast_capabilities(
    team: str, name: str, *, session: Session | None = None
) -> InboxRow | None:
    """Tells the team's lead what member `name` can do (`capability_broadcast` from the
    member); nothing when the member is the lead or the lead is shut down."""
    with session_scope(session) as s:
        lead_name = get_team(team, session=s).lead
        member = get_member(team, name, session=s)
        lead = s.get(Member, (team, lead_name))
        if name == lead_name or lead is None or not lead.is_active or not member.is_active:
            return None
        payload = CapabilityBroadcastPayload(
            agent_id=member.agent_id,
            capabilities=capabilities(member, session=s),
            version=CAPABILITY_VERSION,
            status="available",
        )
        text = f"{name} can use: {', '.join(payload.capabilities) or 'no tools'}"
        return send(
            team, to=lead_name, sender=name, text=text, summary=f"capabilities of {name}",
            type="capability_broadcast", payload=payload.model_dump(mode="json"), session=s,
        )  # fmt: skip


def matching(needs: list[str], candidates: list[tuple[str, Any]], *, session: Session) -> list[str]:
    """`candidates` (name, runtime) ordered by how many of `needs` their tools cover, most
    first; the team's order among equals. No needs: the order as given."""
    if not needs:
        return [name for name, _ in candidates]
    wanted = set(needs)
    every: list[str] | None = None
    scores = []
    for name, runtime in candidates:
        tools = (runtime or {}).get("tools")
        if tools is None:
            if every is None:
                from models.tool import list_tools

                every = [t.tool_id for t in list_tools(session=session)]
            tools = every
        scores.append((-len(wanted & set(tools)), name))
    order = sorted(range(len(scores)), key=lambda i: scores[i][0])
    return [scores[i][1] for i in order]


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."
