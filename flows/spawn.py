"""Spawning a member's own agent program in a tmux pane (seed `004`: `backendType: tmux`,
`tmuxPaneId`), and looking at or closing that pane.

`teamflow member spawn TEAM NAME --command CMD` and MCP's `spawn_teammate(backend_type=
"tmux")` call `spawn_member`: a new token for the member, an MCP config file it can be
pointed at (`{mcp_config}`: `teamflow mcp` with its token), and its program (for example
`claude --mcp-config {mcp_config} -p {prompt}`, or `python3 examples/mcp_agent.py --team
{team} --name {name}`) in a new window of the `teamflow` tmux session, with `TEAMFLOW_TOKEN`
in its environment and a first prompt (`{prompt}`) telling it its team, its name and how to
work. The pane's id is recorded as the member's `tmuxPaneId`.

The tmux server is the default one, or the one `TEAMFLOW_TMUX_SOCKET` names (a socket name
for `tmux -L`, or a path for `tmux -S`), as the shutdown flow closes panes.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from models.settings import get_settings

SESSION = "teamflow"
PANE_KEY = "tmuxServer"
"""The member's metadata key naming the machine and tmux socket of its pane."""
COMMAND_ENV = "TEAMFLOW_AGENT_COMMAND"  # named in messages; read as settings.agent_command
"""The agent program `spawn_teammate` starts when the call names none."""


def _passed_env() -> dict[str, str]:
    """What the member's MCP server and pane get from this process (besides its token): the
    same teamflow home and database, and the same Prefect server."""
    settings = get_settings()
    env = {"TEAMFLOW_HOME": str(settings.home)}
    if settings.database_url:
        env["TEAMFLOW_DATABASE_URL"] = settings.database_url
    if os.environ.get("PREFECT_API_URL"):
        env["PREFECT_API_URL"] = os.environ["PREFECT_API_URL"]
    return env


class SpawnError(ValueError):
    """A member's agent could not be started; one line for the user."""


FIRST_PROMPT = """\
You are {name}, a member of the teamflow team {team}. Your MCP server "teamflow" knows you by \
your token: you act as {name} only. Work like this: call read_inbox(team_name="{team}", \
agent_name="{name}") for your messages; take your task (a task_assignment, or a pending task \
you own in task_list; claim an unassigned one with task_update(owner="{name}")); set it \
in_progress; if your plans need approval, call plan_request and act only once plan_status \
says approved; do the work; report with task_update(status="completed", result=...) or \
status="failed"; call heartbeat while you work; answer a shutdown_request with \
send_message(type="shutdown_response", request_id=..., approve=true)."""


def tmux(socket: str | None = None) -> list[str]:
    """`tmux`, pointed at the members' tmux server when it is not the default one."""
    socket = socket if socket is not None else get_settings().tmux_socket
    if not socket:
        return ["tmux"]
    return ["tmux", "-S" if "/" in socket else "-L", socket]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise SpawnError("tmux is not installed (the tmux backend needs it)") from None


@dataclass
class Spawned:
    """A member's agent, started in its pane."""

    agent_id: str
    pane_id: str
    mcp_config: Path
    argv: list[str]


def spawn_member(team: str, name: str, *, command: str, cwd: str | None = None) -> Spawned:
    """Starts `command` for member `name` of `team` in a new window of the `teamflow` tmux
    session; records its pane as the member's `tmuxPaneId` (backend tmux).

    `command` may hold `{prompt}`, `{mcp_config}`, `{team}` and `{name}`; each stays one
    argument. Raises `SpawnError` (no tmux, an empty command), `TeamError` (unknown or
    shut-down member).
    """
    from models import identity, mirror
    from models import team as teams
    from models.db import session_scope

    if not command.strip():
        raise SpawnError(f"give the agent program to start: --command or {COMMAND_ENV}")
    with session_scope() as s:
        member = teams.get_member(team, name, active=True, session=s)
        agent_id = member.agent_id
    folder = mirror.ensure_dir(mirror.member_tasks_dir(team, name))
    token = identity.issue_token(team, name)
    config = folder / "mcp.json"
    server_env = {"TEAMFLOW_TOKEN": token, **_passed_env()}
    mcp_config = {
        "mcpServers": {
            "teamflow": {
                "command": sys.executable,
                "args": ["-m", "flows.cli", "mcp"],
                "env": server_env,
            }
        }
    }
    mirror.write_atomic(config, mirror.dump_json(mcp_config))  # 0600: it holds the token
    values = {
        "prompt": FIRST_PROMPT.format(team=team, name=name),
        "mcp_config": str(config),
        "team": team,
        "name": name,
    }
    try:
        argv = [_fill(part, values) for part in shlex.split(command)]
    except ValueError as exc:
        raise SpawnError(f"--command: {exc}") from None
    env = {**_passed_env(), **({"PATH": os.environ["PATH"]} if os.environ.get("PATH") else {})}
    env.update(TEAMFLOW_TOKEN=token, TEAMFLOW_TEAM=team, TEAMFLOW_MEMBER=name)
    where = ["-c", cwd or os.getcwd()]
    flags = [flag for key, value in env.items() for flag in ("-e", f"{key}={value}")]
    has_session = _run([*tmux(), "has-session", "-t", SESSION]).returncode == 0
    verb = (
        ["new-window", "-t", f"{SESSION}:", "-n", name]
        if has_session
        else ["new-session", "-d", "-s", SESSION, "-n", name, "-x", "200", "-y", "50"]
    )
    made = _run([*tmux(), *verb, "-P", "-F", "#{pane_id}", *where, *flags, "--", *argv])
    if made.returncode != 0:
        identity.revoke_tokens(team, name)
        raise SpawnError(f"tmux could not start {name}'s agent: {made.stderr.strip()}")
    pane = made.stdout.strip()
    with session_scope() as s:
        meta = dict(teams.get_member(team, name, session=s).meta or {})
        # Where the pane lives: a pane id means something only to its own tmux server.
        meta[PANE_KEY] = {"host": socket.gethostname(), "socket": get_settings().tmux_socket}
        teams.set_member(team, name, tmux_pane_id=pane, backend_type="tmux", meta=meta, session=s)
    return Spawned(agent_id, pane, config, argv)


def _fill(part: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        part = part.replace("{" + key + "}", value)
    return part


def pane_alive(pane: str | None) -> bool | None:
    """Whether the pane's program still runs (None: no pane, or no tmux here)."""
    if not pane:
        return None
    try:
        found = _run([*tmux(), "display-message", "-p", "-t", pane, "#{pane_dead}"])
    except SpawnError:
        return None
    return found.returncode == 0 and found.stdout.strip() == "0"


def pane_tail(pane: str | None, lines: int = 20) -> list[str] | None:
    """The pane's last `lines` non-empty lines (None: it is gone)."""
    if not pane:
        return None
    try:
        found = _run([*tmux(), "capture-pane", "-p", "-t", pane, "-S", f"-{max(1, lines) * 4}"])
    except SpawnError:
        return None
    if found.returncode != 0:
        return None
    return [line for line in found.stdout.splitlines() if line.strip()][-lines:]


def kill_pane(pane: str | None) -> bool:
    """Kills the pane; True if it was there to kill."""
    if not pane:
        return False
    try:
        return _run([*tmux(), "kill-pane", "-t", pane]).returncode == 0
    except SpawnError:
        return False


def describe(spawned: Spawned) -> dict[str, object]:
    return {
        "agent_id": spawned.agent_id,
        "tmux_pane_id": spawned.pane_id,
        "mcp_config": str(spawned.mcp_config),
        "argv": spawned.argv,
    }


def dead_panes() -> list[tuple[str, str, str]]:
    """(team, member, pane) of each active member spawned in tmux on this machine whose pane
    is gone: its program was killed or ended. Panes of other machines are not looked at."""
    from sqlmodel import col, select

    from models.db import session_scope
    from models.team import Member

    with session_scope() as s:
        rows = s.exec(
            select(Member).where(
                col(Member.is_active),
                Member.backend_type == "tmux",
                col(Member.tmux_pane_id).is_not(None),
            )
        )
        spawned = [
            (m.team, m.name, m.tmux_pane_id or "", (m.meta or {}).get(PANE_KEY)) for m in rows
        ]
    here = socket.gethostname()
    dead = []
    for team, name, pane, where in spawned:
        if not isinstance(where, dict) or where.get("host") != here:
            continue
        if _pane_state(pane, where.get("socket")) is False:
            dead.append((team, name, pane))
    return dead


def _pane_state(pane: str, socket_name: str | None) -> bool | None:
    """Whether the pane runs (None: tmux is not installed here). A tmux server that no longer
    runs (its last pane was killed) has the pane no more either."""
    try:
        found = _run([*tmux(socket_name or ""), "display-message", "-p", "-t", pane,
                      "#{pane_dead}"])  # fmt: skip
    except SpawnError:
        return None
    return found.returncode == 0 and found.stdout.strip() == "0"
