"""The `shutdown-member` flow: the lead asks a member to shut down, and it goes.

The story: a `shutdown_request` (with its request id) goes to the member; the member answers
the lead with `shutdown_approved`, or `shutdown_rejected` with a reason while it is busy. A
busy member is asked again once it says its task is done (an `idle_notification`, or its
task status leaving `running`). Approved: a tmux member's pane is closed, and the member
becomes inactive with `shutdownAt` and its metadata. No approval by the timeout: the
shutdown is forced, and recorded as forced with its cause.

Members outside teamflow answer with `teamflow msg send --type shutdown_approved --text
'{"requestId": ..., "backendType": "in-process"}'`, or by appending to the lead's inbox
file; the run takes such appends in by itself (as `teamflow sync` does). The wait watches
teamflow's database (`TEAMFLOW_SHUTDOWN_CHECK_SECONDS`, default 0.25 s), which costs the
Prefect server nothing.
"""

from __future__ import annotations

import subprocess
from typing import Any

import anyio
from prefect import flow, get_run_logger, task
from prefect.context import FlowRunContext

from flows.plan_approval import tag_run
from models import inbox_files, mirror, shutdown
from models.base import utcnow
from models.settings import get_settings
from models.shutdown import Shutdown, ShutdownStatus

FLOW_NAME = "shutdown-member"
DEPLOYMENT = f"{FLOW_NAME}/{FLOW_NAME}"


# --- tasks ---------------------------------------------------------------------------------


@task(name="send-shutdown-request")
async def send_request(
    team: str,
    member: str,
    reason: str | None,
    timeout_s: float | None,
    request_id: str,
    flow_run_id: str | None,
) -> str:
    """Records the request and sends the member its `shutdown_request` (once)."""
    row = await anyio.to_thread.run_sync(
        lambda: shutdown.request_shutdown(
            team,
            member,
            reason=reason,
            timeout=timeout_s,
            request_id=request_id,
            flow_run_id=flow_run_id,
        )
    )
    return row.request_id


@task(name="ask-again")
async def ask_again(request_id: str) -> int:
    """The busy member finished its task: sends the request again; returns the ask count."""
    row = await anyio.to_thread.run_sync(lambda: shutdown.ask_again(request_id))
    return row.asks


def tmux_command(socket: str | None) -> list[str]:
    """`tmux`, pointed at the members' tmux server when it is not the default one."""
    if not socket:
        return ["tmux"]
    return ["tmux", "-S" if "/" in socket else "-L", socket]


@task(name="close-tmux-pane")
async def close_pane(request_id: str) -> str | None:
    """Kills the member's tmux pane; returns the pane closed (None if it had none)."""
    from models.db import session_scope
    from models.team import Member

    logger = get_run_logger()

    def find() -> tuple[str | None, str | None]:
        with session_scope() as s:
            row = shutdown.get_shutdown(request_id, session=s)
            member = s.get(Member, (row.team, row.member))
            if member is None or member.backend_type != "tmux":
                return None, None
            socket = (member.runtime or {}).get("tmux_socket") or get_settings().tmux_socket
            return member.tmux_pane_id or row.pane_id, socket

    pane, socket = await anyio.to_thread.run_sync(find)
    if pane is None:
        return None
    try:
        result = await anyio.run_process(
            [*tmux_command(socket), "kill-pane", "-t", pane], check=False, stderr=subprocess.PIPE
        )
    except OSError as exc:  # no tmux here: the member still goes inactive
        logger.warning("Could not close tmux pane %s: %s", pane, exc)
        return None
    error = result.stderr.decode(errors="replace").strip()
    if result.returncode != 0 and "can't find pane" not in error:
        logger.warning("Could not close tmux pane %s: %s", pane, error or result.returncode)
        return None
    await anyio.to_thread.run_sync(lambda: shutdown.pane_closed(request_id))
    logger.info("Closed tmux pane %s", pane)
    return pane


@task(name="complete-shutdown")
async def complete(request_id: str, forced: bool, cause: str | None) -> dict[str, Any]:
    """The member becomes inactive, with `shutdownAt` and its metadata."""
    row = await anyio.to_thread.run_sync(
        lambda: shutdown.complete_shutdown(request_id, forced=forced, cause=cause)
    )
    return row.to_json()


async def resume_freed(team: str) -> None:
    """The suspended runs of the tasks the shutdown freed end now (not at the clock's next
    look); Prefect away is no loss, the clock resumes them later."""
    from flows.outside import resume_reported_runs

    try:
        await resume_reported_runs(team=team)
    except Exception as exc:
        get_run_logger().warning("Could not resume the runs of freed tasks yet: %s", exc)


# --- waiting for the answer ----------------------------------------------------------------


def poll(request_id: str) -> tuple[Shutdown, bool, str | None]:
    """One look at the answers: (the request as it stands, whether a refusing member's task
    is done since, a problem with the lead's inbox file if any).

    Takes in first what an outside member appended to the lead's inbox file, as
    `teamflow sync` would.
    """
    row = shutdown.get_shutdown(request_id)
    assert row.requested_by is not None, "request_shutdown sets it (the team's lead)"
    refused: list[str] = []
    if mirror.changed_outside(mirror.inbox_path(row.team, row.requested_by)):
        inbox_files.refresh_file(row.team, row.requested_by, refused)
    problem = refused[0] if refused else None
    row = shutdown.take_answers(request_id)
    finished = row.status == ShutdownStatus.REFUSED and shutdown.task_finished_since(
        row.team, row.member, row.refused_at
    )
    return row, finished, problem


async def wait_for_answer(request_id: str, check_s: float | None = None) -> Shutdown:
    """Watches for the member's answer until it approves or the deadline passes.

    A refusal is remembered; once the member says its task is done, it is asked again.
    """
    logger = get_run_logger()
    check_s = check_s or get_settings().shutdown_check_seconds
    seen: tuple[str, str | None] | None = None
    while True:
        row, finished, problem = await anyio.to_thread.run_sync(poll, request_id)
        if problem and problem != (seen or ("", None))[1]:
            logger.warning("Cannot take in the lead's inbox file: %s", problem)
        if row.status == ShutdownStatus.REFUSED and (seen or ("",))[0] != row.status:
            logger.info("%s refused for now: %s", row.member, row.refusal_reason)
        seen = (row.status, problem)
        if row.status == ShutdownStatus.APPROVED or not row.is_open or utcnow() >= row.deadline:
            return row
        if finished:
            asks = await ask_again(request_id)
            logger.info("%s finished its task: asked again (ask %d)", row.member, asks)
            continue
        await anyio.sleep(min(check_s, max((row.deadline - utcnow()).total_seconds(), 0.0)))


# --- the flow ------------------------------------------------------------------------------


@flow(name=FLOW_NAME, flow_run_name="shutdown {member}@{team}", persist_result=False)
async def shutdown_member(
    team: str,
    member: str,
    reason: str | None = None,
    timeout_s: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Shuts a member down through the request/approve handshake, or forces it at the timeout.

    Args:
        team: The team.
        member: The active member to shut down.
        reason: Why (shown to the member; kept as `shutdown_reason`).
        timeout_s: Seconds to wait for approval (default: the team's
            `shutdown_timeout_seconds`, else 300).
        request_id: The request's id (the CLI makes one up front, so it can print it).

    Returns:
        The shutdown as recorded: `status` approved or forced, `forced`, `cause`,
        `paneClosedAt`, ...
    """
    logger = get_run_logger()
    await tag_run(f"team:{team}", f"member:{member}")
    context = FlowRunContext.get()
    run_id = str(context.flow_run.id) if context and context.flow_run else None
    request_id = await send_request(
        team, member, reason, timeout_s, request_id or shutdown.new_shutdown_id(), run_id
    )
    row = await wait_for_answer(request_id)
    forced = row.status != ShutdownStatus.APPROVED
    cause = None
    if forced:
        waited = (row.deadline - row.requested_at).total_seconds()
        if row.status == ShutdownStatus.REFUSED:
            cause = f"still busy at the timeout of {waited:g} s ({row.refusal_reason})"
        else:
            cause = f"no answer within {waited:g} s"
        logger.warning("Forcing the shutdown of %s: %s", member, cause)
    await close_pane(request_id)
    result = await complete(request_id, forced, cause)  # its open tasks freed, too
    await resume_freed(team)
    logger.info("%s is shut down (%s)", member, result["status"])
    return result
