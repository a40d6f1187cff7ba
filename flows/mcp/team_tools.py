"""MCP tools for teams, members and messages, with claude-teams' names and arguments.

`team_create`, `team_delete`, `spawn_teammate`, `send_message`, `read_inbox`, `read_config`,
`force_kill_teammate`, `process_shutdown_approved`, `check_teammate`: each checks its caller
against `models.identity` and calls the store or flow function the CLI calls.
"""

from typing import Any, Literal

from mcp.server.mcpserver import Context

from flows.mcp.server import TeamflowMCP, config_json, refusals
from models.identity import Action, authorize
from models.settings import get_settings

MessageKind = Literal[
    "message", "broadcast", "shutdown_request", "shutdown_response", "plan_approval_response"
]


def _me(who, team_name: str, given: str) -> str:
    """The name the caller acts as: `given`, else itself (a member, an approver user) or the
    team's lead (the local user, a lead user)."""
    from models.identity import PrincipalKind

    if given:
        return given
    if who.kind in (PrincipalKind.MEMBER, PrincipalKind.APPROVER):
        return who.name
    from models import team as teams

    return teams.settings_of(team_name).lead


def team_create(team_name: str, ctx: Context, description: str = "") -> dict[str, Any]:
    """Create a team (you become its lead, `team-lead`). Only the local user may.

    Args:
        team_name: kebab-case, 3-64 characters, e.g. "research-team".
        description: what the team is for (1-500 characters; default: the team's name).

    Returns {"team_name", "lead", "lead_agent_id"}. Then add teammates with spawn_teammate
    and give them work with task_create + task_update(owner=...).
    """
    from models import membership

    with refusals(ctx) as who:
        authorize(who, Action.TEAM_CREATE, team_name)
        row = membership.create_team(team_name, description=description or team_name)
        return {"team_name": row.name, "lead": row.lead, "lead_agent_id": f"{row.lead}@{row.name}"}


def team_delete(team_name: str, ctx: Context) -> dict[str, Any]:
    """Delete a team with all its members, messages, tasks and files. Only the local user may."""
    from models import membership

    with refusals(ctx) as who:
        authorize(who, Action.TEAM_DELETE, team_name)
        membership.delete_team(team_name)
        return {"success": True, "message": f"deleted team {team_name}"}


def spawn_teammate(
    team_name: str,
    name: str,
    prompt: str,
    ctx: Context,
    model: str = "sonnet",
    subagent_type: str = "general-purpose",
    cwd: str = "",
    plan_mode_required: bool = False,
    backend_type: str = "",
    command: str = "",
) -> dict[str, Any]:
    """Add a teammate to a team. Only the local user (the lead's session) may.

    Args:
        team_name: the team.
        name: the teammate's name, unique in the team (letters, digits, - and _).
        prompt: its system prompt: who it is and how it works.
        model: haiku, sonnet or opus (or one the team allows).
        subagent_type: general-purpose or specialized.
        cwd: the folder its agent works in (kept in its config).
        plan_mode_required: true: its plans need approval (plan_request) before it acts.
        backend_type: in-process (default), tmux, docker or k8s. tmux: its agent program
            starts now in a pane of the `teamflow` tmux session, with its own token.
        command: tmux: the agent program, e.g. "claude --mcp-config {mcp_config} -p {prompt}"
            (default: TEAMFLOW_AGENT_COMMAND); {prompt} is a first prompt telling it its team,
            its name and how to work.

    Otherwise its agent joins with a token: `teamflow member token TEAM NAME`, given to the
    agent's MCP config as TEAMFLOW_TOKEN. Returns {"agent_id", "name", "team_name",
    "color"} and, for tmux, "tmux_pane_id".
    """

    from flows.spawn import COMMAND_ENV, SpawnError, spawn_member
    from models import membership
    from models import team as teams
    from models.db import session_scope

    with refusals(ctx) as who:
        authorize(who, Action.MEMBER_SPAWN, team_name, name)
        tmux = backend_type == "tmux"
        program = command or get_settings().agent_command or ""
        if tmux and not program.strip():
            raise SpawnError(f"a tmux teammate needs its agent program: command or {COMMAND_ENV}")
        with session_scope() as s:
            member = membership.add_member(
                team_name,
                name,
                model=model,
                prompt=prompt,
                agent_type=subagent_type,
                backend="in-process" if tmux else backend_type or "in-process",
                plan_mode_required=plan_mode_required or None,
                runtime={"kind": "mcp"},
                session=s,
            )
            if cwd:
                teams.set_member(
                    team_name, name, extra={**(member.extra or {}), "cwd": cwd}, session=s
                )
        data = {
            "agent_id": member.agent_id,
            "name": member.name,
            "team_name": team_name,
            "color": member.color,
        }
        if tmux:
            spawned = spawn_member(team_name, name, command=program, cwd=cwd or None)
            data["tmux_pane_id"] = spawned.pane_id
        return data


def send_message(
    team_name: str,
    type: MessageKind,
    ctx: Context,
    recipient: str = "",
    content: str = "",
    summary: str = "",
    request_id: str = "",
    approve: bool | None = None,
    sender: str = "",
    attachments: list[str] | None = None,
) -> dict[str, Any]:
    """Send a message, or answer a protocol request.

    type:
      - "message": to `recipient` (content, summary, attachments: paths of artifacts), a
        `001` agent_message.
      - "broadcast": to every active member but you (content, summary).
      - "shutdown_request": ask `recipient` to shut down (content: the reason). Lead only;
        starts a shutdown-member run (needs `teamflow up`).
      - "shutdown_response": answer a shutdown request you received: request_id, approve
        (false needs content: why, e.g. the task you are busy with).
      - "plan_approval_response": decide the plan request `request_id` of `recipient`:
        approve, content = feedback (needed to deny). Only the lead or a listed approver.

    sender: who sends; leave it empty. A member's session always sends as itself (another
    name is refused); the local user sends as the team's lead unless it names someone.
    Returns {"success", "message", ...} with the message id or request id.
    """
    from models import inbox, notify

    with refusals(ctx) as who:
        me = _me(who, team_name, sender)
        if type == "shutdown_request":
            return _shutdown_request(who, team_name, recipient, content)
        if type == "plan_approval_response":
            return _plan_response(who, team_name, me, recipient, request_id, approve, content)
        if type == "shutdown_response":
            return _shutdown_response(who, team_name, me, request_id, approve, content)
        if type == "broadcast":
            rows = inbox.broadcast(
                team_name, sender=me, text=content, summary=summary or None, who=who
            )
            return {
                "success": True,
                "message": f"broadcast sent to {len(rows)} member(s)",
                "recipients": [r.recipient for r in rows],
            }
        if not recipient:
            raise ValueError("a message needs a recipient")
        row = notify.agent_message(
            team_name, to=recipient, sender=me, text=content, summary=summary or None,
            attachments=attachments or None, who=who,
        )  # fmt: skip
        return {
            "success": True,
            "message": f"message sent to {recipient}",
            "message_id": row.message_id,
            "routing": {"sender": me, "target": recipient},
        }


def _shutdown_request(who, team_name: str, recipient: str, reason: str) -> dict[str, Any]:
    from flows.decisions import start_shutdown

    if not recipient:
        raise ValueError("a shutdown_request needs a recipient")
    started = start_shutdown(team_name, recipient, who=who, reason=reason or None)
    return {
        "success": True,
        "message": f"shutdown request sent to {recipient}",
        "request_id": started.request_id,
        "target": recipient,
        "url": started.run.url,
    }


def _plan_response(
    who, team_name: str, me: str, recipient: str, request_id: str, approve, feedback: str
) -> dict[str, Any]:
    from flows.decisions import decide_plan
    from models import approval

    if not request_id or approve is None:
        raise ValueError("a plan_approval_response needs request_id and approve")
    request = approval.get_request(request_id)
    if request.team != team_name or (recipient and recipient != request.member):
        raise ValueError(f"plan {request_id} is not a request of {recipient or 'this team'}")
    if not approve and not feedback.strip():
        raise ValueError("a denial needs feedback in content: say what to change")
    decided = decide_plan(
        request_id, who=who, approve=bool(approve), feedback=feedback or None, decider=me
    )
    row = decided.request
    return {
        "success": True,
        "message": f"plan {row.request_id} of {row.member} {row.status}",
        "request_id": row.request_id,
        "status": row.status,
        "decided_by": decided.decider,
        "note": decided.note or None,
    }


def _shutdown_response(
    who, team_name: str, me: str, request_id: str, approve, reason: str
) -> dict[str, Any]:
    from flows.decisions import answer_shutdown

    if not request_id or approve is None:
        raise ValueError("a shutdown_response needs request_id and approve")
    row = answer_shutdown(
        team_name, me, request_id, who=who, approve=bool(approve), reason=reason or None
    )
    verb = "approved" if approve else "refused"
    return {
        "success": True,
        "message": f"shutdown {request_id} {verb}",
        "message_id": row.message_id,
    }


def read_inbox(
    team_name: str,
    agent_name: str,
    ctx: Context,
    unread_only: bool = True,
    mark_as_read: bool = True,
) -> list[dict[str, Any]]:
    """Read an inbox, oldest first (004 entries: from, text, summary, timestamp, read,
    messageId, type, metadata). A member reads only its own (agent_name = your name).

    Typed messages carry JSON in `text`: task_assignment (a task given to you: its task_id),
    shutdown_request (answer with send_message type="shutdown_response"),
    plan_approval_response (the decision on your plan), system_alert, idle_notification.
    Each typed message also carries its fields as `payload` (a task_assignment's task_id).
    By default only unread messages, and they are marked read.
    """
    from models import inbox

    with refusals(ctx) as who:
        rows = inbox.messages(
            team_name, agent_name, unread=unread_only, mark_read=mark_as_read, who=who
        )
        return [_entry(r) for r in rows]


def _entry(row) -> dict[str, Any]:
    """An inbox entry (`004`), with its typed payload (`payload`: a task_assignment's
    task_id, a shutdown_request's requestId, ...) when it has one."""
    data = row.entry_dict()
    if row.payload is not None:
        data["payload"] = row.payload
    return data


def read_config(team_name: str, ctx: Context) -> dict[str, Any]:
    """Read a team's config (004 config.json: name, description, leadAgentId, members with
    name, agentId, model, color, isActive, backendType, ...), prompts left out."""
    from models.db import session_scope

    with refusals(ctx) as who:
        authorize(who, Action.TEAM_READ, team_name)
        with session_scope() as s:
            return config_json(s, team_name)


def force_kill_teammate(team_name: str, agent_name: str, ctx: Context) -> dict[str, Any]:
    """Stop a teammate now, without its consent: its tmux pane (if it has one) is killed, it
    becomes inactive (a forced shutdown, on record) and its open tasks are freed for others.
    Use when it does not answer a shutdown_request. Only the local user may."""
    with refusals(ctx) as who:
        authorize(who, Action.MEMBER_KILL, team_name, agent_name)
        return _stop(team_name, agent_name, forced=True)


def process_shutdown_approved(team_name: str, agent_name: str, ctx: Context) -> dict[str, Any]:
    """Finish the shutdown of a teammate that approved it (its shutdown_approved is in your
    inbox): its pane is closed, it becomes inactive and its open tasks are freed. Only the
    local user may."""
    with refusals(ctx) as who:
        authorize(who, Action.MEMBER_KILL, team_name, agent_name)
        return _stop(team_name, agent_name, forced=False)


def _stop(team_name: str, agent_name: str, *, forced: bool) -> dict[str, Any]:
    from flows.reported import resume_reported
    from flows.spawn import kill_pane
    from models import team as teams
    from models.db import session_scope

    row, freed = _shutdown_of(team_name, agent_name, forced=forced)
    with session_scope() as s:
        pane = teams.get_member(team_name, agent_name, session=s).tmux_pane_id
    closed = kill_pane(pane)
    resume_reported([str(t) for t in freed], team=team_name)  # their runs end, if suspended
    return {
        "success": True,
        "message": f"{agent_name} has been stopped" if forced else f"{agent_name} shut down",
        "shutdown_id": row.request_id,
        "pane_closed": pane if closed else None,
        "freed_tasks": [str(t) for t in freed],
    }


def _shutdown_of(team_name: str, member: str, *, forced: bool):
    """The member's shutdown, completed: its latest request (approved, unless `forced`), or
    for a forced one without a request, a new request recorded and forced at once; and the
    open tasks it freed."""
    from models import shutdown
    from models.db import session_scope
    from models.task_edit import free_tasks

    with session_scope() as s:
        mine = [r for r in shutdown.list_shutdowns(team_name, session=s) if r.member == member]
        latest = mine[-1] if mine else None
        if latest is not None and latest.is_open:
            latest = shutdown.take_answers(latest.request_id, session=s)
        if not forced:
            if latest is None:
                raise ValueError(f"{member} was not asked to shut down (send a shutdown_request)")
            if latest.status != shutdown.ShutdownStatus.APPROVED:
                shutdown.complete_shutdown(latest.request_id, session=s)  # refuses, one line
            freed = free_tasks(team_name, member, session=s)
            return shutdown.complete_shutdown(latest.request_id, session=s), freed
        if latest is None or latest.completed_at is not None:
            latest = shutdown.request_shutdown(
                team_name, member, reason="force_kill_teammate", session=s
            )
        # Freed here first (the completion would free them too) to say which they were.
        freed = free_tasks(team_name, member, session=s)
        row = shutdown.complete_shutdown(
            latest.request_id,
            forced=True,
            cause="killed by the lead (force_kill_teammate)",
            session=s,
        )
        return row, freed


def check_teammate(
    team_name: str,
    agent_name: str,
    ctx: Context,
    include_output: bool = False,
    output_lines: int = 20,
    include_messages: bool = True,
    max_messages: int = 5,
) -> dict[str, Any]:
    """A teammate's state, without waiting: active or not, its last heartbeat and status,
    its unread count, its open tasks, its tmux pane (alive or not; include_output: its last
    output_lines lines), and (include_messages) its latest unread messages to you, left
    unread. Members may check teammates of their own team."""
    from models import inbox, presence
    from models import team as teams
    from models.agent import AgentStateRow
    from models.db import session_scope
    from models.task import OPEN_TASK_STATES, list_tasks

    with refusals(ctx) as who:
        authorize(who, Action.TEAM_READ, team_name)
        me = _me(who, team_name, "")
        with session_scope() as s:
            member = teams.get_member(team_name, agent_name, session=s)
            state = s.get(AgentStateRow, member.agent_id)
            tasks = [
                str(t.id)
                for t in list_tasks(team_name, session=s)
                if t.status in {st.value for st in OPEN_TASK_STATES}
                and agent_name in [a.assignee_id for a in t.assignees]
            ]
            data: dict[str, Any] = {
                "name": agent_name,
                "agent_id": member.agent_id,
                "alive": member.is_active,
                "status": state.status if state else None,
                "last_heartbeat": state.last_heartbeat.isoformat()
                if state and state.last_heartbeat
                else None,
                "unread_count": presence.team_state(team_name, session=s)["unread"].get(
                    agent_name, 0
                ),
                "open_tasks": tasks,
                "tmux_pane_id": member.tmux_pane_id,
            }
            if include_messages:
                rows = inbox.messages(team_name, me, unread=True, sender=agent_name, session=s)
                data["messages"] = [r.entry_dict() for r in rows[-max(1, min(max_messages, 50)) :]]
            if member.tmux_pane_id:
                from flows.spawn import pane_alive, pane_tail

                data["pane_alive"] = pane_alive(member.tmux_pane_id)
                if include_output:
                    data["output"] = pane_tail(member.tmux_pane_id, max(1, min(output_lines, 120)))
        return data


TOOLS = (
    team_create,
    team_delete,
    spawn_teammate,
    send_message,
    read_inbox,
    read_config,
    force_kill_teammate,
    process_shutdown_approved,
    check_teammate,
)


def register(server: TeamflowMCP) -> None:
    """Adds these tools to `server`."""
    for fn in TOOLS:
        server.add_tool(fn)
