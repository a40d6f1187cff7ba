"""teamflow on Prefect's distributed setup, on this machine (`tests/scale_out.py`): Prefect
on PostgreSQL with Redis messaging, migrated once, two API replicas behind HAProxy, one
services process; teamflow's database on PostgreSQL; two workers, each with its own
`TEAMFLOW_HOME` and process group, as two machines would have. 30 team tasks (plain, chained
with blockers, and with plans the lead approves from the CLI while their runs wait) and 10
timers run through it. One API replica is killed with -9 after a third of the tasks are
done, and the worker machine that holds a plan waiting in process is killed with -9 after
two thirds: its runs are marked Crashed and resumed on the other machine, where the waiting
plan, decided from the CLI, goes on. Every task is closed by exactly one run,
every timer is delivered once, every decision reaches its run, no run is left running, and
no surviving server process logged an error.

The windows are short (`WORKER_ENV`): Prefect's shortest heartbeat (30 s) and a crash
automation 40 s after a silent heartbeat are what the machine's death costs in wall time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect_server import assert_clean_log, kill_group, talk_to, teamflow, wait_until
from teamflow_workers import Worker, register_deployments, teamflow_workers

from models import db, membership, mirror
from models.db import session_scope
from models.dependencies import add_blockers
from models.task import create_task, get_task

pytestmark = pytest.mark.system

POSTGRES = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")
if not POSTGRES:
    pytest.skip("the distributed setup needs TEAMFLOW_TEST_POSTGRES_URL", allow_module_level=True)
if shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists():
    pytest.skip("the distributed setup needs HAProxy (apt-get install haproxy)",
                allow_module_level=True)  # fmt: skip

TEAM = "scale-team"
HOLDER = "holder"
"""The plan-mode member whose plan is left waiting until its worker machine is killed."""
CRASH_AFTER_S = 40
"""The crash automation's window: above Prefect's shortest heartbeat interval (30 s)."""
WORKER_ENV = {
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
    "TEAMFLOW_WATCHDOG_EVERY": "2s",
    "TEAMFLOW_WORKER_BEAT_SECONDS": "1",
    "TEAMFLOW_WORKER_ALIVE_SECONDS": "5",
    "TEAMFLOW_RESUME_BACKOFF_SECONDS": "1",
    "TEAMFLOW_SUSPEND_AFTER_SECONDS": "900",  # plans wait in process, as the test wants
    "TEAMFLOW_PAUSE_CHECK_SECONDS": "0.5",
}
DONE = [{"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "done"}]
PLANNED = [
    {"status": "EXECUTING", "thoughts": [], "stop": False, "response": None,
     "actions": [{"action": "request_plan_approval", "type": "internal",
                  "params": {"plan": "1. do it", "summary": "my plan"}}]},
    *DONE,
]  # fmt: skip


@dataclass
class Distributed:
    cluster: Any
    workers: list[Worker]
    cli_env: dict[str, str]
    homes: list[Path]
    """The TEAMFLOW_HOME of each worker machine: the first mirrors the team files."""
    held: str
    """The task whose plan waits in process on the second machine until it is killed."""


@pytest.fixture(scope="module")
def distributed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Distributed]:
    """The cluster, teamflow's schema and team, the deployments (with the crash automation
    and the watchdog's schedule, as `teamflow up` sets them), and two worker machines."""
    from scale_out import cluster

    from flows import runner
    from flows.pool_setup import ensure_crash_automation
    from flows.watchdog_schedule import schedule_watchdog
    from models import approval

    tmp = tmp_path_factory.mktemp("scale-out")
    home = tmp / "lead-home"
    with cluster(tmp, POSTGRES) as c, pytest.MonkeyPatch.context() as mp:  # type: ignore[arg-type]
        mp.setenv("TEAMFLOW_DATABASE_URL", c.teamflow_url)
        mp.setenv("TEAMFLOW_HOME", str(home))
        mp.setenv("TEAMFLOW_MIRROR", "off")  # the lead's machine: the mirror is host 1's
        db.dispose_engines()
        db.upgrade(c.teamflow_url)
        membership.create_team(TEAM, description="scale out", lead="lead")
        for n in range(1, 5):
            membership.add_member(TEAM, f"m{n}", model="haiku", prompt="p",
                                  runtime={"kind": "scripted", "playbook": DONE})  # fmt: skip
        for name in ("planner", HOLDER):
            membership.add_member(TEAM, name, model="haiku", prompt="p", plan_mode_required=True,
                                  runtime={"kind": "scripted", "playbook": PLANNED})  # fmt: skip
        register_deployments(c.server, tmp / "deploy.log")
        with talk_to(c.server.api):
            ensure_crash_automation(within_seconds=CRASH_AFTER_S)
            schedule_watchdog(every=2)
        hosts = [
            {**WORKER_ENV, "TEAMFLOW_DATABASE_URL": c.teamflow_url,
             "TEAMFLOW_HOME": str(tmp / f"host-{n}" / "home"), "TEAMFLOW_MIRROR": mirrors}
            for n, mirrors in ((1, "on"), (2, "off"))
        ]  # fmt: skip
        cli_env = {**c.server.env, "TEAMFLOW_HOME": str(home), "TEAMFLOW_MIRROR": "off"}
        homes = [Path(h["TEAMFLOW_HOME"]) for h in hosts]
        with (
            teamflow_workers(c.server, tmp / "host-2", 1, env=hosts[1]) as two,
            talk_to(c.server.api),
        ):
            # The held task first, on host 2 alone: the machine killed later is then never
            # the mirror host, whose files the test reads at the end.
            held = _task("held plan", HOLDER)
            runner.start("team-task/team-task", {"task_id": held, "team": TEAM},
                         idempotency_key=f"team-task-{held}")  # fmt: skip
            wait_until(
                lambda: approval.list_requests(TEAM, member=HOLDER, pending=True)
                and get_task(held).worker == two[0].name,
                120, "the held task's plan to wait on host 2", 0.5,
            )  # fmt: skip
            with teamflow_workers(c.server, tmp / "host-1", 1, env=hosts[0]) as one:
                yield Distributed(c, [*one, *two], cli_env, homes, held)
        db.dispose_engines()


def all_runs(client: Any) -> list[Any]:
    """Every flow run of the server, a page (Prefect's largest, 200) at a time."""
    runs: list[Any] = []
    while page := client.read_flow_runs(limit=200, offset=len(runs)):
        runs += page
    return runs


def settled(client: Any, but: Any = None) -> list[Any] | None:
    """Every run, once each has ended (or is scheduled, and not due yet), the runs of the
    flow `but` left aside; None while one has not."""
    runs = all_runs(client)
    waiting = [
        r for r in runs
        if r.flow_id != but and not (r.state.is_final() or r.state.is_scheduled())
    ]  # fmt: skip
    return None if waiting else runs


def _cluster_state(c: Any, workers: list[Worker], runs: list[Any]) -> list[str]:
    """What a stalled run of this test needs explained: the runs of the other flows that
    have not ended, each worker process and its log's last lines, each replica's state."""
    lines = [
        f"run {r.name} of flow {r.flow_id}: {r.state.type.value} {r.state.name}"
        for r in runs
        if "task_id" not in (r.parameters or {}) and not r.state.is_final()
    ]
    for w in workers:
        tail = w.log.read_text(errors="replace").splitlines()[-15:]
        lines.append(f"{w.name}: exit code {w.process.poll()}; its log ends:")
        lines += [f"  {line}" for line in tail]
    lines += [f"replica {n}: exit code {p.poll()}" for n, p in enumerate(c.replicas, 1)]
    return lines


def _task(title: str, assignee: str, blocked_by: tuple[str, ...] = ()) -> str:
    with session_scope() as s:
        row = create_task(TEAM, title=title, assignees=[assignee], session=s)
        add_blockers(row, list(blocked_by), session=s)
        return str(row.id)


def test_tasks_timers_and_decisions_survive_a_replica_and_a_worker_machine_killed(
    distributed: Distributed,
) -> None:
    from prefect.client.orchestration import get_client

    from flows import alerts, runner
    from flows.watchdog_schedule import DEPLOYMENT
    from models import approval, inbox

    c, workers, cli_env = distributed.cluster, distributed.workers, distributed.cli_env
    plain = [_task(f"plain {i}", f"m{i % 4 + 1}") for i in range(20)]
    chained = [_task("chain 1", "m1")]
    for n in range(2, 5):
        chained.append(_task(f"chain {n}", f"m{n}", (chained[-1],)))
    planned = [_task(f"planned {i}", "planner") for i in range(5)]
    held = distributed.held
    every = [*plain, *chained, *planned, held]
    assert len(every) == 30
    now = datetime.now(UTC)
    timers = [
        alerts.create_timer(TEAM, f"t{n}", f"timer {n}", member="m1",
                            due=now + timedelta(seconds=15 if n < 5 else 60))[0]
        for n in range(10)
    ]  # fmt: skip
    for task_id in [*plain, chained[0], *planned]:
        runner.start("team-task/team-task", {"task_id": task_id, "team": TEAM},
                     idempotency_key=f"team-task-{task_id}")  # fmt: skip
    replica_killed = False
    dead: Worker | None = None
    first_run: list[str | None] = []
    decided: set[str] = set()

    def approve(request_id: str) -> None:
        done = teamflow(["plan", "approve", request_id], cli_env)
        assert done.returncode == 0, done.stderr
        decided.add(request_id)

    def progress() -> bool:
        nonlocal replica_killed, dead
        for plan in approval.list_requests(TEAM, pending=True):
            if plan.member != HOLDER:
                approve(plan.request_id)
        finished = [t for t in every if get_task(t).status in ("completed", "archived")]
        if not replica_killed and len(finished) >= len(every) // 3:
            kill_group(c.replicas[0], signal.SIGKILL)  # one API replica dies
            replica_killed = True
        if dead is None and len(finished) >= 2 * len(every) // 3:
            # The machine whose worker runs the held task, its plan waiting in process.
            holder, first_run[:] = get_task(held).worker, [get_task(held).run_id]
            assert holder == workers[1].name  # host 2, its plan waiting in process
            assert [p.status for p in approval.list_requests(TEAM, member=HOLDER)] == ["pending"]
            dead = next(w for w in workers if w.name == holder)
            kill_group(dead.process, signal.SIGKILL)  # one worker machine dies
        return len(finished) == len(every) - 1  # all but the held one

    def unfinished() -> str:
        """Each task not done yet: its row, and the states of its team-task runs."""
        with get_client(sync_client=True) as client:
            runs = all_runs(client)
        lines = []
        for t in every:
            row = get_task(t)
            if t == held or row.status in ("completed", "archived"):
                continue
            states = [
                f"{r.name}={r.state.type.value}" for r in runs
                if str((r.parameters or {}).get("task_id")) == t
            ]  # fmt: skip
            lines.append(f"{row.title}: {row.status} reason={row.reason!r} worker={row.worker} "
                         f"resumes={row.resumes} runs={states}")  # fmt: skip
        return "\n".join([*lines, *_cluster_state(c, workers, runs)])

    # Bounds against a hang, not speed targets.
    wait_until(progress, 900, "every task but the held one to finish", 1, unfinished)
    assert replica_killed and dead is not None
    resumed = wait_until(
        lambda: (t := get_task(held)).resumes >= 1 and t.worker not in (None, dead.name) and t,
        300, "the held task to be resumed on the other machine", 1,
    )  # fmt: skip
    [plan] = approval.list_requests(TEAM, member=HOLDER)
    approve(plan.request_id)  # decided after its machine died: the resumed run goes on
    wait_until(lambda: get_task(held).status == "completed", 300, "the held task", 1)

    def alerted() -> list:
        return [m for m in inbox.messages(TEAM, "m1") if m.type == "system_alert"]

    wait_until(lambda: len(alerted()) >= len(timers), 300, "the timers", 1)
    with get_client(sync_client=True) as client:
        watchdog = client.read_flow_by_name("watchdog").id

        # The watchdog still checks: it ends the dead machine's in-process subflows too.
        def stalled() -> str:
            """The runs not ended yet, the workers' logs and the replicas."""
            runs = all_runs(client)
            waiting = [
                f"{r.name} {r.parameters}: {r.state.type.value} {r.state.name}" for r in runs
                if not (r.state.is_final() or r.state.is_scheduled())
            ]  # fmt: skip
            return "\n".join([*waiting, *_cluster_state(c, workers, runs)])

        wait_until(lambda: settled(client, but=watchdog), 300, "every run to end", 1, stalled)
        client.pause_deployment(client.read_deployment_by_name(DEPLOYMENT).id)
        runs = wait_until(lambda: settled(client), 300, "the watchdog's runs to end", 1, stalled)
        first = client.read_flow_run(UUID(str(first_run[0])))
        last = client.read_flow_run(UUID(get_task(held).run_id))
    not_completed = [
        f"{row.title}: {row.status} ({row.reason})"
        for row in map(get_task, every)
        if row.status != "completed"
    ]
    assert not not_completed, not_completed
    team_runs = [r for r in runs if "task_id" in (r.parameters or {})]
    # Each task was closed by one run, the one it names: Completed, or Crashed after its
    # close committed, when its machine was killed right then. No other run of it completed.
    closers = {t: next(r for r in team_runs if str(r.id) == get_task(t).run_id) for t in every}
    ended_otherwise = {
        t: r.state.type.value for t, r in closers.items()
        if not (r.state.is_completed() or r.state.is_crashed())
    }  # fmt: skip
    assert ended_otherwise == {}
    crashed = [t for t, r in closers.items() if r.state.is_crashed()]
    assert all(get_task(t).worker == dead.name for t in crashed), crashed
    assert [
        r.name for r in team_runs
        if r.state.is_completed() and r.id != closers[str(r.parameters["task_id"])].id
    ] == []  # fmt: skip
    assert all(r.state.type.value != "RUNNING" for r in runs)
    assert first.state.is_crashed(), first.state
    assert last.state.is_completed() and "resume" in last.tags, last.state
    assert get_task(held).worker == resumed.worker != dead.name
    plans = approval.list_requests(TEAM)
    assert len(plans) == len(planned) + 1 and {p.status for p in plans} == {"approved"}
    assert {p.request_id for p in plans} == decided
    assert sorted(m.payload["alert_name"] for m in alerted()) == [f"t{n}" for n in range(10)]
    # The team files: only the mirror host (host 1) writes them, current with every host.
    for home in (distributed.homes[1], Path(cli_env["TEAMFLOW_HOME"])):
        assert not (home / "teams").exists(), home
    inbox_file = mirror.inbox_path(TEAM, "m1", distributed.homes[0])
    wait_until(
        lambda: len(json.loads(inbox_file.read_text())) == len(inbox.messages(TEAM, "m1")),
        60, "the mirror host's inbox file of m1", 0.5,
    )  # fmt: skip
    for log in c.logs[1:]:  # the killed replica's own log is left out
        assert_clean_log(log)
