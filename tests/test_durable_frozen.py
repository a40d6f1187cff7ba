"""A worker frozen (SIGSTOP) past the window while its task is resumed elsewhere, then
thawed (moved from test_durable_system.py, to run beside it): the thawed run finds its
attempt superseded and stops before it acts again."""

from __future__ import annotations

import fcntl
import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from factories import research_team
from prefect.client.orchestration import get_client
from prefect_server import (
    kill_pids,
    pid_alive,
    start,
    started_pids,
    stop,
    talk_to,
    wait_for_up,
    wait_until,
)
from test_durable_system import (  # noqa: F401 (up_env: a fixture)
    MEMBER,
    TEAM,
    append_tool,
    async_result_arrived,
    held_agents,
    line_member,
    start_line_task,
    up_env,
)

from models import db, inbox, mirror
from models.db import session_scope
from models.task import get_task

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


def superseded_said(api: str, run_id: str) -> bool:
    """Whether the run logged that its lease was taken (it stopped before acting)."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with talk_to(api), get_client(sync_client=True) as c:
        logs = c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    return any("was taken by a resumed run" in log.message for log in logs)


def result_written_and_lock_free() -> bool:
    """Whether the member's inbox file holds every message of the database (step 2's ASYNC
    result among them) and nobody holds the inbox lock. The file is written after the
    commit `async_result_arrived` sees, under `inboxes/.lock`: a worker frozen in that
    write would hold the lock, and every inbox write on the machine (the resumed run's, the
    alarm's) would wait for its thaw."""
    path = mirror.inbox_path(TEAM, MEMBER)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if len(entries) != len(inbox.messages(TEAM, MEMBER)):  # the file behind the database
        return False
    fd = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # releases the lock if it was taken
    return True


def test_a_frozen_worker_thawed_after_its_task_was_resumed_stops_before_acting(
    up_env: dict[str, str],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    """The worker running the task is frozen (SIGSTOP) while its member's agent thinks about
    step 3; the agent answers meanwhile. Past the window its own heartbeat in teamflow's
    database goes stale, the run is declared dead, and the task is resumed on the other
    worker, which completes it. Then SIGCONT: the thawed run finds its lease superseded when
    it records step 3 and stops; each step's line is in the file exactly once."""
    from models.worker_beat import WorkerBeat

    env, api = up_env | {"TEAMFLOW_WORKER_BEAT_SECONDS": "1"}, up_env["PREFECT_API_URL"]
    log = tmp_path / "up.log"
    process = start(["up"], env, log)
    pids: list[int] = []
    marks = tmp_path / "marks"
    extra = None
    frozen = None
    try:
        output = wait_for_up(process, log)
        pids = started_pids(output)
        db.upgrade()
        research_team()
        lines = tmp_path / "lines.txt"
        append_tool(lines)
        marks = line_member(tmp_path, hold=3)
        extra_env = env | {"PREFECT_HOME": str(tmp_path / "extra-prefect-home")}
        extra = start(["worker", "--name", "extra"], extra_env, tmp_path / "extra.log")
        wait_until(lambda: "Worker 'extra' started!" in (tmp_path / "extra.log").read_text(),
                   120, "the extra worker")  # fmt: skip
        task_id, run_id = start_line_task(env)
        wait_until(lambda: held_agents(marks), 180, "the agent to hold at step 3")
        wait_until(async_result_arrived, 60, "step 2's ASYNC result")
        wait_until(result_written_and_lock_free, 60, "step 2's result in the inbox file")
        holder = get_task(task_id).worker
        with session_scope() as s:
            beat = s.get(WorkerBeat, holder)
            assert beat is not None and run_id in beat.runs, (holder, beat)
            frozen = beat.pid

        os.kill(frozen, signal.SIGSTOP)
        (marks / "go").write_text("")  # the agent answers step 3 to a frozen worker
        task = wait_until(
            lambda: (t := get_task(task_id)).status in ("completed", "archived") and t,
            400, "the task to be resumed on the other worker and to complete", interval=1,
        )  # fmt: skip
        assert task.status == "completed", task.reason
        assert task.resumes == 1 and task.worker != holder, (task.worker, holder)
        os.kill(frozen, signal.SIGCONT)
        wait_until(lambda: superseded_said(api, run_id), 180, "the thawed run to stop")
        assert Counter(lines.read_text().split()) == {f"step-{n}": 1 for n in range(1, 5)}
        assert get_task(task_id).status == "completed"
    finally:
        if frozen is not None and pid_alive(frozen):
            os.kill(frozen, signal.SIGCONT)
        if extra is not None:
            stop(extra)
        stop(process)
        kill_pids(pids)
        for pid in held_agents(marks):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
