"""Team tasks on the real thing: a Prefect server and teamflow's database on PostgreSQL, two
`teamflow worker` processes, twenty tasks started through the `team-task` deployment.

Each task's run is started twice, as two people (or a retry) might: exactly one of the two
works the task, on whichever worker; the other finds it taken and does nothing.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect_server import prefect_server, talk_to, wait_until
from sqlmodel import select
from teamflow_workers import ended_runs, postgres_databases, register_deployments, teamflow_workers

from flows import runner
from flows.demo_data import write_all
from flows.tools import install_builtin_tools
from models import db, inbox, membership
from models.agent import ExperienceLogRow
from models.db import session_scope
from models.task import TaskMetricsRow, create_task, get_task

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

POSTGRES_URL = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")
TEAM = "q4-team"
LEAD = "coordinator"
MEMBERS = ("analyst-1", "analyst-2")
TASKS = 20
DEPLOYMENT = "team-task/team-task"

# Real work with real tools: analyse the sales file, write a report into the task folder.
PLAYBOOK = [
    {
        "status": "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "Compute the trends."}],
        "actions": [
            {"action": "analyze_sales", "type": "tool", "params": {"sales_path": "{sales_path}"}}
        ],
        "stop": False,
        "response": None,
    },
    {
        "status": "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "Write the report."}],
        "actions": [
            {
                "action": "write_file",
                "type": "tool",
                "params": {
                    "path": "artifacts/{task.id}.md",
                    "content": "# {task.title}\n\n{result.analyze_sales.summary}\n",
                },
            }
        ],
        "stop": False,
        "response": None,
    },
    {
        "status": "SUCCESS",
        "thoughts": [{"type": "OBSERVATION", "content": "Report written."}],
        "actions": [],
        "stop": True,
        "response": "{result.analyze_sales.top_trends.0.summary}",
    },
]


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="TEAMFLOW_TEST_POSTGRES_URL is not set")
def test_twenty_team_tasks_on_two_workers_each_complete_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "teamflow-home"
    with postgres_databases(POSTGRES_URL) as (prefect_url, teamflow_url):
        monkeypatch.setenv("TEAMFLOW_DATABASE_URL", teamflow_url)
        monkeypatch.setenv("TEAMFLOW_HOME", str(home))
        db.upgrade(teamflow_url)
        install_builtin_tools()
        sales, _ = write_all(tmp_path / "data")
        membership.create_team(TEAM, description="Q4 sales analysis team", lead=LEAD)
        for name in MEMBERS:
            membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.",
                                  runtime={"kind": "scripted", "playbook": PLAYBOOK})  # fmt: skip
        tasks = [
            create_task(TEAM, title=f"Q4 region report {n}", creator=LEAD,
                        assignees=list(MEMBERS), params={"sales_path": str(sales)})
            for n in range(1, TASKS + 1)
        ]  # fmt: skip
        task_ids = [str(t.id) for t in tasks]
        titles = {str(t.id): t.title for t in tasks}

        shared = {"TEAMFLOW_DATABASE_URL": teamflow_url, "TEAMFLOW_HOME": str(home)}
        with prefect_server(tmp_path, prefect_url) as server:
            register_deployments(server, tmp_path / "deploy.log")
            with (
                teamflow_workers(server, tmp_path, 2, env=shared) as workers,
                talk_to(server.api),
            ):
                # Every task's run is started twice, one right after the other, as
                # `teamflow task run` starts it (the second as a retry would: another key).
                runs: dict[str, list] = {task_id: [] for task_id in task_ids}
                for task_id in task_ids:
                    parameters = {"task_id": task_id, "team": TEAM}
                    for key in (f"team-task-{task_id}", f"team-task-{task_id}-again"):
                        started = runner.start(
                            DEPLOYMENT, parameters, idempotency_key=key, tags=[f"team:{TEAM}"]
                        )
                        runs[task_id].append(started.id)
                all_ids = [run_id for ids in runs.values() for run_id in ids]

                with get_client(sync_client=True) as client:
                    # A bound against hanging, not a speed target.
                    flow_runs = wait_until(
                        lambda: ended_runs(client, all_ids), 600, "every team-task run to end", 1
                    )
                    # Each run started in its worker's own process: Pending, then Running,
                    # no Submitting state between (`flows.compat.prefect_worker`).
                    for run_id in all_ids:
                        names = [state.name for state in client.read_flow_run_states(run_id)]
                        assert "Pending" in names and "Submitting" not in names, names
                    artifacts = client.read_artifacts(
                        artifact_filter=ArtifactFilter(
                            key=ArtifactFilterKey(any_=[f"task-{t}" for t in task_ids])
                        ),
                        limit=200,
                    )

        by_id = {r.id: r for r in flow_runs}
        assert all(r.state.is_completed() for r in flow_runs), [
            (r.name, r.state.name, r.state.message) for r in flow_runs if not r.state.is_completed()
        ]
        # Both workers ran some of the runs (a run records the pid of the process it ran in).
        ran_in = Counter(r.infrastructure_pid for r in flow_runs)
        assert set(ran_in) == {str(w.process.pid) for w in workers}, ran_in

        # Exactly one run per task worked it: the task's report artifact comes from one of
        # its two runs, and only that run carries the members' tags.
        reports = Counter(a.key for a in artifacts)
        assert reports == {f"task-{t}": 1 for t in task_ids}
        for artifact in artifacts:
            task_id = artifact.key.removeprefix("task-")
            assert artifact.flow_run_id in runs[task_id]
            worked = [by_id[i] for i in runs[task_id] if "member:analyst-1" in by_id[i].tags]
            assert [r.id for r in worked] == [artifact.flow_run_id]

        for task_id in task_ids:
            assert get_task(task_id).status == "completed"

        with session_scope() as s:
            metrics = s.exec(select(TaskMetricsRow).where(TaskMetricsRow.team == TEAM)).all()
            logs = s.exec(select(ExperienceLogRow)).all()
        # One metrics row and one experience log per assignee per task, all filled in.
        assert Counter((m.task_id, m.member) for m in metrics) == {
            (t, m): 1 for t in task_ids for m in MEMBERS
        }
        for row in metrics:
            assert (row.steps, row.tool_calls) == (3, 2)
            assert row.duration_s is not None and row.duration_s > 0
            assert row.started_at is not None and row.ended_at >= row.started_at
        assert Counter((log.task_id, log.agent_id) for log in logs) == {
            (t, f"{m}@{TEAM}"): 1 for t in task_ids for m in MEMBERS
        }
        assert {log.status for log in logs} == {"success"}

        # Each assignee was told of each task once; the lead heard once per task from each.
        for name in MEMBERS:
            assigned = Counter(
                str(m.payload["task_id"])
                for m in inbox.messages(TEAM, name)
                if m.type == "task_assignment"
            )
            assert assigned == {t: 1 for t in task_ids}
        idle = Counter(
            m.sender for m in inbox.messages(TEAM, LEAD) if m.type == "idle_notification"
        )
        assert idle == {name: TASKS for name in MEMBERS}

        # The team files: each member's task status, and a report per task it worked on.
        for name in MEMBERS:
            folder = home / "tasks" / TEAM / name
            status = json.loads((folder / "task-status.json").read_text())
            assert status["status"] == "complete"
            assert status["metrics"]["tasks_completed"] == TASKS
            for task_id in task_ids:
                report = (folder / "artifacts" / f"{task_id}.md").read_text()
                assert report.startswith(f"# {titles[task_id]}\n")
