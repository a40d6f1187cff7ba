"""The shutdown-member flow on a real Prefect server, answered the way members answer.

A member answers the lead with `teamflow msg send --type shutdown_approved ...` (a real
process), or an outside agent appends to the lead's inbox file. A tmux member's pane is a
real pane on a tmux server of the test's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team
from prefect_server import Run

from models import inbox, membership, mirror
from models import team as teams
from models.base import format_js_timestamp, utcnow

pytestmark = pytest.mark.usefixtures("db_url", "home")

# Tests of what Prefect shows or the CLI refuses run on SQLite only; the database side of
# every step is tested on both databases in test_approval_store.py.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

ROOT = Path(__file__).resolve().parent.parent
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def start(member: str = "analyst-1", **kwargs: Any) -> Run:
    from flows.shutdown import shutdown_member

    return Run(shutdown_member(team=TEAM, member=member, **kwargs))


def shutdown_requests(member: str = "analyst-1", *, count: int = 1, timeout: float = 30) -> list:
    """The `shutdown_request` messages in the member's inbox, once there are `count`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [m for m in inbox.messages(TEAM, member) if m.type == "shutdown_request"]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{member} got no shutdown request #{count} within {timeout} s")


def teamflow(*args: str, api: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return run_teamflow(args, env, cwd=ROOT, stdin_devnull=False)


def answer(kind: str, payload: dict, api: str, member: str = "analyst-1") -> None:
    """The member answers the lead as an outside agent does: `teamflow msg send`."""
    result = teamflow(
        "msg", "send", TEAM, "--to", "coordinator", "--from", member, "--type", kind,
        "--text", json.dumps(payload), api=api,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def flow_run(run_id: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(run_id))


def run_as_a_worker(flow: Any, run_id: str) -> Run:
    """Runs a deployment's flow run in a thread, as teamflow's worker does."""
    from prefect.flow_engine import run_flow

    async def execute() -> Any:
        return await run_flow(flow, flow_run=flow_run(run_id), return_type="state")

    return Run(execute())


def without_deployment(name: str) -> None:
    """Removes a deployment another test of this module may have registered."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectNotFound):
        client.delete_deployment(client.read_deployment_by_name(name).id)


def member(name: str = "analyst-1") -> teams.Member:
    return next(m for m in teams.list_members(TEAM) if m.name == name)


def test_member_approves_and_becomes_inactive(prefect_api: str) -> None:
    research_team()
    run = start(reason="tasks_complete", timeout_s=60, request_id="req-shutdown-ok1")
    request = shutdown_requests()[0]
    assert request.payload["requestId"] == "req-shutdown-ok1"
    assert request.meta == {"request_id": "req-shutdown-ok1"}
    answer(
        "shutdown_approved",
        {"requestId": "req-shutdown-ok1", "backendType": "in-process"},
        prefect_api,
    )
    outcome = run.result()
    assert (outcome["status"], outcome["forced"]) == ("approved", False)
    gone = member()
    assert gone.is_active is False
    assert gone.shutdown_at is not None
    assert gone.meta == {
        "tasks_completed": 0,
        "total_tokens": 0,
        "shutdown_reason": "tasks_complete",
    }
    config = json.loads(mirror.config_path(TEAM).read_text())
    entry = next(m for m in config["members"] if m["name"] == "analyst-1")
    assert entry["isActive"] is False and entry["shutdownAt"].endswith("Z")


def test_busy_member_refuses_finishes_its_task_then_approves(prefect_api: str) -> None:
    research_team()
    run = start(timeout_s=60, request_id="req-shutdown-busy1")
    shutdown_requests()
    answer(
        "shutdown_rejected",
        {"requestId": "req-shutdown-busy1", "reason": "busy with the Q4 report"},
        prefect_api,
    )
    # The member says it is done the way an outside agent does: appended to the lead's
    # inbox file, under the inbox lock. The waiting run takes it in by itself.
    time.sleep(0.5)
    path = mirror.inbox_path(TEAM, "coordinator")
    with mirror.inbox_lock(TEAM):
        entries = json.loads(path.read_text())
        note = {"type": "idle_notification", "from": "analyst-1", "idleReason": "task_complete"}
        entries.append(
            {
                "from": "analyst-1",
                "text": json.dumps(note),
                "summary": "task complete",
                "timestamp": format_js_timestamp(utcnow()),
                "color": "blue",
                "read": False,
                "type": "idle_notification",
            }
        )
        path.write_text(json.dumps(entries, indent=2))
    second = shutdown_requests(count=2)[1]
    assert second.payload["requestId"] == "req-shutdown-busy1"
    assert member().is_active is True
    answer(
        "shutdown_approved",
        {"requestId": "req-shutdown-busy1", "backendType": "in-process"},
        prefect_api,
    )
    outcome = run.result()
    assert (outcome["status"], outcome["asks"]) == ("approved", 2)
    assert outcome["refusalReason"] == "busy with the Q4 report"
    assert member().is_active is False


@sqlite_only
def test_no_answer_by_the_timeout_forces_the_shutdown(prefect_api: str) -> None:
    research_team()
    # A bound against a hang only: the forced shutdown itself is asserted below.
    outcome = start(member="analyst-2", reason="over budget", timeout_s=1).result(timeout=120)
    assert (outcome["status"], outcome["forced"]) == ("forced", True)
    assert outcome["cause"] == "no answer within 1 s"
    gone = member("analyst-2")
    assert gone.is_active is False
    assert gone.meta["shutdown_reason"] == "forced: no answer within 1 s"


@sqlite_only
def test_cli_starts_no_shutdown_without_teamflow_up(prefect_api: str) -> None:
    research_team()
    without_deployment("shutdown-member/shutdown-member")
    result = teamflow("member", "shutdown", TEAM, "analyst-1", "--timeout", "5", api=prefect_api)
    assert result.returncode == 1
    assert result.stderr.startswith("teamflow: error: cannot start the shutdown-member run: ")
    assert "teamflow up" in result.stderr
    assert member().is_active is True


@sqlite_only
def test_member_shutdown_starts_a_run_that_forces_a_silent_member(prefect_api: str) -> None:
    from flows.shutdown import shutdown_member

    research_team()
    shutdown_member.to_deployment(name="shutdown-member").apply()
    asked = teamflow(
        "member", "shutdown", TEAM, "analyst-2", "--reason", "budget", "--timeout", "1",
        "--json", api=prefect_api,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    started = json.loads(asked.stdout)
    assert run_as_a_worker(shutdown_member, started["flowRunId"]).result().is_completed()
    assert {"team:research-team", "member:analyst-2"} <= set(flow_run(started["flowRunId"]).tags)
    gone = member("analyst-2")
    assert gone.is_active is False
    assert gone.meta["shutdown_reason"] == "forced: no answer within 1 s"


@sqlite_only
@needs_tmux
def test_a_tmux_members_pane_is_closed_after_approval(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket = f"teamflow-test-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", socket]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "team", "sleep 600"], check=True)
        pane = subprocess.run(
            [*tmux, "split-window", "-t", "team", "-P", "-F", "#{pane_id}", "sleep 600"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        monkeypatch.setenv("TEAMFLOW_TMUX_SOCKET", socket)
        research_team()
        membership.add_member(
            TEAM, "analyst-3", model="haiku", prompt="p", backend="tmux", tmux_pane_id=pane
        )
        run = start(member="analyst-3", timeout_s=60, request_id="req-shutdown-tmux1")
        shutdown_requests("analyst-3")
        answer(
            "shutdown_approved",
            {"requestId": "req-shutdown-tmux1", "paneId": pane, "backendType": "tmux"},
            prefect_api,
            member="analyst-3",
        )
        outcome = run.result()
        assert outcome["status"] == "approved"
        assert outcome["paneId"] == pane and outcome["paneClosedAt"] is not None
        panes = subprocess.run(
            [*tmux, "list-panes", "-a", "-F", "#{pane_id}"], capture_output=True, text=True
        ).stdout.split()
        assert pane not in panes
        assert panes  # the session's other pane is still there
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
