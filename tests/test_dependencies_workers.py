"""Task dependencies on the real thing: a Prefect server, two `teamflow worker` processes.

Only the unblocked tasks are started (as `teamflow task run` starts them); a task blocked by
a completed one starts by itself (its blocker's run starts it through the `team-task`
deployment) and completes; a task blocked by a failed one fails with the reason, and its
own dependent too. A task without assignees is taken by an idle member.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect_server import prefect_server, talk_to, wait_until
from teamflow_workers import register_deployments, teamflow_workers

from flows import runner
from models import db, membership
from models.db import session_scope
from models.dependencies import add_blockers
from models.task import create_task, get_task

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

TEAM = "dep-team"
DONE = [{"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True, "response": "done"}]
# One step that does not stop, then nothing: the member's work fails.
FAILS = [{"status": "EXECUTING", "thoughts": [], "actions": [], "stop": False, "response": None}]


def task(title: str, assignees: list[str], blocked_by: tuple = ()) -> str:
    with session_scope() as s:
        row = create_task(TEAM, title=title, assignees=assignees, session=s)
        add_blockers(row, list(blocked_by), session=s)
        return str(row.id)


def test_blocked_tasks_start_by_themselves_or_fail_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "teamflow-home"
    url = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")
    if url:
        from teamflow_workers import postgres_databases

        databases = postgres_databases(url)
        prefect_url, teamflow_url = databases.__enter__()
    else:
        databases = None
        prefect_url, teamflow_url = None, f"sqlite:///{tmp_path / 'teamflow.db'}"
    try:
        monkeypatch.setenv("TEAMFLOW_DATABASE_URL", teamflow_url)
        monkeypatch.setenv("TEAMFLOW_HOME", str(home))
        db.upgrade(teamflow_url)
        membership.create_team(TEAM, description="dependencies", lead="lead")
        for name, playbook in (("ok-1", DONE), ("ok-2", DONE), ("bad", FAILS)):
            membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.",
                                  runtime={"kind": "scripted", "playbook": playbook})  # fmt: skip
        a = task("a", ["ok-1"])
        b = task("b after a", ["ok-2"], blocked_by=(a,))
        anyone = task("anyone after b", [], blocked_by=(b,))
        f = task("f fails", ["bad"])
        c = task("c after f", ["ok-1"], blocked_by=(f,))
        d = task("d after c", ["ok-2"], blocked_by=(c,))

        shared = {"TEAMFLOW_DATABASE_URL": teamflow_url, "TEAMFLOW_HOME": str(home)}
        with prefect_server(tmp_path, prefect_url) as server:
            register_deployments(server, tmp_path / "deploy.log")
            with (
                teamflow_workers(server, tmp_path, 2, env=shared),
                talk_to(server.api),
            ):
                for started in (a, f):
                    runner.start("team-task/team-task", {"task_id": started, "team": TEAM},
                                 idempotency_key=f"team-task-{started}")  # fmt: skip

                def settled() -> bool:
                    return get_task(anyone).status == "completed" and get_task(d).status in (
                        "archived",
                        "completed",
                    )

                # A bound against hanging, not a speed target.
                wait_until(settled, 300, "the dependent tasks to settle", 1)
                with get_client(sync_client=True) as client:
                    runs = wait_until(
                        lambda: (
                            (r := client.read_flow_runs(limit=50))
                            and all(x.state.is_final() for x in r)
                            and r
                        ),
                        120,
                        "every run to end",
                        1,
                    )
        # One run each for a, f (started here), b and the unassigned one (started by
        # their blockers' runs); none for c and d.
        assert len(runs) == 4, [r.name for r in runs]
        # The failing member's run is Failed, as the Prefect UI should show it; the rest Completed.
        states = {str(r.parameters["task_id"]): r.state.type.value for r in runs}
        assert states == {a: "COMPLETED", f: "FAILED", b: "COMPLETED", anyone: "COMPLETED"}
        assert [get_task(t).status for t in (a, b, f)] == ["completed", "completed", "archived"]
        taken = get_task(anyone)
        assert len(taken.assignees) == 1 and taken.assignees[0].assignee_id in ("ok-1", "ok-2")
        assert get_task(c).status == "archived"
        assert get_task(c).reason == f"blocked by task {f}, which failed"
        assert get_task(d).status == "archived"
        assert get_task(d).reason == f"blocked by task {c}, which failed"
    finally:
        if databases is not None:
            databases.__exit__(None, None, None)
        db.dispose_engines()
