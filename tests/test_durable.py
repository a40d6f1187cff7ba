"""Durable members (issue 31, item 1): the step journal, task leases, and resuming a task.

On SQLite and PostgreSQL. The store tests work on the tables; the flow tests run the
`team-task` flow here (a real Prefect server) on what a run that died left behind: its
records written by the same store functions a run writes them with, then `task resume`'s
store call and the resume's run.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from factories import TEAM, research_team
from sqlmodel import select

from flows.team_task import run_team_task
from models import approval, journal, membership, watchdog
from models.base import utcnow
from models.conversation import MessageRow
from models.db import session_scope
from models.task import TaskState, create_task, get_task, move_task
from models.task_lease import (
    Superseded,
    claim_lease,
    due_resumes,
    resume_started,
    resume_task,
)
from models.tool import ToolDefinition, add_tool
from models.watchdog import DeadRun

MEMBER = "analyst-1"


def _in_progress(title: str = "Lines") -> str:
    row = create_task(TEAM, title=title, assignees=[MEMBER])
    move_task(row.id, to=TaskState.IN_PROGRESS)
    with session_scope() as s:
        assert claim_lease(row.id, "run-1", None, session=s) == 1
    return str(row.id)


def test_a_superseded_run_can_write_no_step(db_url: str, home: Path) -> None:
    research_team()
    task_id = _in_progress()
    journal.write(task_id, 0, 1, MEMBER, 1, journal.RESPONSE, journal.DONE, {"n": 1})
    resumed = resume_task(task_id)
    assert (resumed.lease, resumed.resumes, resumed.run_id) == (2, 1, None)
    with pytest.raises(Superseded, match=r"lease 1 .* was taken by a resumed run"):
        journal.write(task_id, 0, 1, MEMBER, 2, journal.RESPONSE, journal.DONE, {"n": 2})
    assert journal.load(task_id, 0, MEMBER) == {(1, "response"): ("done", {"n": 1})}
    journal.write(task_id, 0, 2, MEMBER, 2, journal.RESPONSE, journal.DONE, {"n": 2})
    assert set(journal.load(task_id, 0, MEMBER)) == {(1, "response"), (2, "response")}
    assert journal.load(task_id, 1, MEMBER) == {}  # another attempt starts afresh


def test_a_dead_task_run_is_resumed_with_backoff_until_its_resumes_are_spent(
    db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMFLOW_RESUME_ATTEMPTS", "2")
    monkeypatch.setenv("TEAMFLOW_RESUME_BACKOFF_SECONDS", "10")
    research_team()
    task_id = _in_progress()
    first = DeadRun(
        id="run-1", flow="team-task", state="Crashed", message="its heartbeats stopped.",
        task_id=task_id, idempotency_key=watchdog.task_run_key(task_id, 0),
    )  # fmt: skip
    now = utcnow()
    assert watchdog.scan(now=now, dead_runs=[first])[0].key == "crashed:run-1"
    task = get_task(task_id)
    assert (task.status, task.lease, task.resumes) == ("in_progress", 2, 1)
    assert task.resume_at == now + timedelta(seconds=10)
    assert "resumed (1 of 2) after its team-task run run-1 ended Crashed" in task.reason
    [due] = due_resumes()
    assert (due.task_id, due.lease, due.resumes, due.assignees) == (task_id, 2, 1, [MEMBER])
    resume_started(task_id, 2)
    assert due_resumes() == []

    # The resume's run dies too (before it took the lease): resumed again, twice the wait.
    second = DeadRun(id="run-2", flow="team-task", state="Crashed", task_id=task_id, lease=2)
    stale = DeadRun(id="run-0", flow="team-task", state="Crashed", task_id=task_id, lease=1)
    watchdog.scan(now=now, dead_runs=[first, stale, second])
    task = get_task(task_id)
    assert (task.lease, task.resumes, task.resume_at) == (3, 2, now + timedelta(seconds=20))
    # Its resumes spent, the next death closes the task as failed.
    third = DeadRun(id="run-3", flow="team-task", state="Crashed", task_id=task_id, lease=3)
    watchdog.scan(now=now, dead_runs=[third])
    task = get_task(task_id)
    assert task.status == "archived" and task.reason.startswith("failed: its team-task run run-3")
    assert [a.key for a in watchdog.alarms(TEAM)] == [
        "crashed:run-1", "crashed:run-2", "crashed:run-3",
    ]  # fmt: skip
    # By hand, a failed task is resumed all the same; a completed one is refused.
    assert resume_task(task_id).status == "in_progress"
    move_task(uuid.UUID(task_id), to=TaskState.COMPLETED)
    with pytest.raises(ValueError, match="is completed: only a task in progress"):
        resume_task(task_id)


# --- the flow, resumed ---------------------------------------------------------------------


def _line_tool(tool_id: str, lines: Path, *, once: bool = False) -> None:
    code = (
        "import json, sys; p = json.load(sys.stdin); "
        f"open({str(lines)!r}, 'a').write(p['line'] + chr(10)); print('{{}}')"
    )
    schema: dict = {"type": "object", "properties": {"line": {"type": "string"}}}
    if once:
        schema["x-teamflow-once"] = True
    add_tool(
        ToolDefinition.model_validate(
            {
                "tool_id": tool_id, "type": "script", "description": "Appends a line",
                "command": f'{sys.executable} -c "{code}"', "input_schema": schema,
                "output_schema": {"type": "object"},
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            }
        )
    )  # fmt: skip


def _step(*actions: dict, stop: bool = False) -> dict:
    return {
        "status": "SUCCESS" if stop else "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "next"}],
        "actions": list(actions),
        "stop": stop,
        "response": "done" if stop else None,
    }


def _call(tool: str, line: str) -> dict:
    return {"action": tool, "type": "tool", "params": {"line": line}, "execution": "SYNC"}


def _assistant_texts(task_id: str) -> list[str]:
    with session_scope() as s:
        rows = s.exec(
            select(MessageRow).where(MessageRow.conversation_id == f"task-{task_id}")
        ).all()
        return [r.content or "" for r in rows]


@pytest.fixture
def lines(prefect_api: str, home: Path, db_url: str, tmp_path: Path) -> Path:
    research_team()
    path = tmp_path / "lines.txt"
    _line_tool("append_line", path)
    _line_tool("append_once", path, once=True)
    return path


def test_a_resumed_task_goes_on_from_its_last_completed_step(lines: Path) -> None:
    """A run did step 1, then died in step 2 while both its tool calls ran (recorded
    `started`). The resume does not redo step 1, takes step 2's recorded response (not the
    playbook's), runs the safe call again, tells the member the once-only call may have
    run, and goes on with step 3."""
    playbook = [
        _step(_call("append_line", "step-1")),
        _step(_call("append_once", "playbook-2")),
        _step(_call("append_line", "step-3")),
        _step(stop=True),
    ]
    membership.update_member(TEAM, MEMBER, runtime={"kind": "scripted", "playbook": playbook})
    task = create_task(TEAM, title="Lines", assignees=[MEMBER])
    task_id = str(task.id)
    # The first run stops after step 1 (as one that died there would have left it).
    first = asyncio.run(run_team_task(task_id, max_steps=1))
    assert first["status"] == "archived"
    assert lines.read_text().split() == ["step-1"]
    lease = get_task(task_id).lease
    recorded = _step(_call("append_once", "recorded-2a"), _call("append_line", "recorded-2b"))
    write = journal.write
    write(task_id, 0, lease, MEMBER, 2, "response", "done", {"response": recorded, "tokens": 0})
    write(task_id, 0, lease, MEMBER, 2, "action-0", "started", {"tool": "append_once"})
    write(task_id, 0, lease, MEMBER, 2, "action-1", "started", {"tool": "append_line"})

    resumed = resume_task(task_id)
    outcome = asyncio.run(run_team_task(task_id, lease=resumed.lease))
    assert outcome["status"] == "completed", outcome
    assert lines.read_text().split() == ["step-1", "recorded-2b", "step-3"]
    texts = "\n".join(_assistant_texts(task_id))
    assert "recorded-2a" in texts and "playbook-2" not in texts
    assert "append_once may have run: its worker died while it ran" in texts
    assert outcome["members"][MEMBER]["steps"] == 4


def test_a_member_that_had_stopped_is_not_asked_again_after_a_resume(lines: Path) -> None:
    """A run recorded the member's last step (it stopped) and died before it closed the
    task. The resume finds the member done: it asks for no more steps and closes the task
    (a resume that asked again ran a scripted agent past its playbook)."""
    playbook = [_step(_call("append_line", "step-1")), _step(stop=True)]
    membership.update_member(TEAM, MEMBER, runtime={"kind": "scripted", "playbook": playbook})
    task = create_task(TEAM, title="Lines", assignees=[MEMBER])
    task_id = str(task.id)
    first = asyncio.run(run_team_task(task_id, max_steps=1))
    assert first["status"] == "archived"
    lease = get_task(task_id).lease
    write = journal.write
    write(task_id, 0, lease, MEMBER, 2, "response", "done",
          {"response": _step(stop=True), "tokens": 0})  # fmt: skip
    after = {
        "steps": 2, "tokens": 0, "tool_calls": 1, "tool_failures": 0, "approval_wait_s": 0.0,
        "response": "done", "plan_approved": False, "denied_request": None,
        "feedback_id": None, "stopped": True,
    }  # fmt: skip
    write(task_id, 0, lease, MEMBER, 2, "step", "done", after)

    resumed = resume_task(task_id)
    outcome = asyncio.run(run_team_task(task_id, lease=resumed.lease))
    assert outcome["status"] == "completed", outcome
    assert lines.read_text().split() == ["step-1"]
    assert outcome["members"][MEMBER]["steps"] == 2


def test_a_decided_plan_is_not_asked_again_after_a_resume(lines: Path) -> None:
    """A run asked for plan approval and died while it waited; the plan was approved
    meanwhile. The resume takes the decision: no second request, and the plan-mode
    member's tools run."""
    plan = {"action": "request_plan_approval", "type": "internal",
            "params": {"plan": "## Plan\n1. Append", "summary": "lines"}}  # fmt: skip
    playbook = [_step(plan), _step(_call("append_line", "after-plan")), _step(stop=True)]
    membership.update_member(
        TEAM, MEMBER, runtime={"kind": "scripted", "playbook": playbook}, plan_mode_required=True
    )
    task_id = _in_progress("Planned")
    request_id = "plan-0123456789ab"
    journal.write(
        task_id, 0, 1, MEMBER, 1, "response", "done", {"response": _step(plan), "tokens": 0}
    )
    journal.write(task_id, 0, 1, MEMBER, 1, "action-0", "started", {"request_id": request_id})
    approval.request_plan(TEAM, MEMBER, "## Plan\n1. Append", "lines", request_id=request_id)
    approval.decide(request_id, approve=True, decider="coordinator", feedback="Go")

    resumed = resume_task(task_id)
    outcome = asyncio.run(run_team_task(task_id, lease=resumed.lease))
    assert outcome["status"] == "completed", outcome
    assert lines.read_text().split() == ["after-plan"]
    assert [r.request_id for r in approval.list_requests(TEAM)] == [request_id]
    assert '\\"status\\":\\"approved\\"' in "\n".join(_assistant_texts(task_id))


def test_a_run_whose_resume_moved_on_does_nothing(lines: Path) -> None:
    task_id = _in_progress()
    resume_task(task_id)
    resume_task(task_id)  # a second resume supersedes the first before its run began
    outcome = asyncio.run(run_team_task(task_id, lease=2))
    assert outcome == {"task_id": task_id, "status": "in_progress", "members": {}}
    assert get_task(task_id).run_id is None


# --- item 4: no false crash ----------------------------------------------------------------


def test_a_run_its_live_worker_still_runs_keeps_its_task(
    db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect marked the run Crashed (its heartbeats were late), but its worker beats in
    teamflow's database and lists it: no resume, no alarm. Once the worker's beat is older
    than `TEAMFLOW_WORKER_ALIVE_SECONDS`, or it no longer lists the run, the run is dead."""
    from models.worker_beat import beat

    monkeypatch.setenv("TEAMFLOW_WORKER_ALIVE_SECONDS", "30")
    research_team()
    task = create_task(TEAM, title="Slow", assignees=[MEMBER])
    move_task(task.id, to=TaskState.IN_PROGRESS)
    with session_scope() as s:
        claim_lease(task.id, "run-1", "worker-a", session=s)
    beat("worker-a", 4242, "host", ["run-1"])
    crashed = DeadRun(id="run-1", flow="team-task", state="Crashed", task_id=str(task.id))
    now = utcnow()
    assert watchdog.scan(now=now + timedelta(seconds=29), dead_runs=[crashed]) == []
    assert (get_task(task.id).lease, watchdog.alarms(TEAM)) == (1, [])
    beat("worker-a", 4242, "host", ["run-1"])
    later = utcnow() + timedelta(seconds=31)  # frozen or killed: its beats stopped
    assert [a.key for a in watchdog.scan(now=later, dead_runs=[crashed])] == ["crashed:run-1"]
    assert (get_task(task.id).lease, get_task(task.id).resumes) == (2, 1)

    other = create_task(TEAM, title="Ended there", assignees=[MEMBER])
    move_task(other.id, to=TaskState.IN_PROGRESS)
    with session_scope() as s:
        claim_lease(other.id, "run-2", "worker-a", session=s)
    beat("worker-a", 4242, "host", [])  # alive, but the run is not in it any more
    ended = DeadRun(id="run-2", flow="team-task", state="Failed", task_id=str(other.id))
    assert "crashed:run-2" in [a.key for a in watchdog.scan(dead_runs=[ended])]
    assert get_task(other.id).resumes == 1


def test_task_resume_refuses_a_task_neither_in_progress_nor_failed(db_url: str, home: Path) -> None:
    import os

    from cli_runner import teamflow

    research_team()
    row = create_task(TEAM, title="Not yet", assignees=[MEMBER])
    refused = teamflow(["task", "resume", str(row.id)], dict(os.environ))
    assert refused.returncode == 1
    assert refused.stderr == (
        f"teamflow: error: task {row.id} is pending: only a task in progress or one that "
        "failed can be resumed (`teamflow task run` starts a pending one)\n"
    )
    assert (get_task(row.id).lease, get_task(row.id).resumes) == (0, 0)


def test_a_check_that_lost_the_race_to_resume_a_task_does_not_close_it(
    db_url: str, home: Path
) -> None:
    """Two watchdog checks overlap (a window's run and the next) and both see the same dead
    run. The one that resumes it first wins; the other, which read the task before, finds
    its lease moved on and closes nothing: the resume stands."""
    from models.task import TaskRow
    from models.task_lease import decide_resume

    research_team()
    task_id = _in_progress()
    with session_scope() as s:
        stale = s.get(TaskRow, uuid.UUID(task_id))
        s.expunge(stale)
    with session_scope() as s:  # the other check resumes it
        fresh = s.get(TaskRow, uuid.UUID(task_id))
        assert decide_resume(fresh, "its run died", utcnow(), session=s) == 1
    with session_scope() as s:  # this check read it before: its resume loses, so does its close
        assert decide_resume(stale, "its run died", utcnow(), session=s) is None
        assert not watchdog.close_failed(stale, "failed: its run died", utcnow(), session=s)
    task = get_task(task_id)
    assert (task.status, task.resumes) == ("in_progress", 1)
    assert task.reason.startswith("resumed (1 of")
