"""Resuming the suspended `team-task` runs whose outside member reported or stopped, from
code that does not import Prefect: MCP's tools (`task_update`, a member's stop).

An outside member's run suspends while it waits for the member's report (`flows.outside`).
Once the task is closed or freed, or a member of it stopped, the run has nothing left to
wait for: rescheduled ("Resuming", what Prefect's resume proposes), it finds why in
teamflow's database and ends. teamflow's clock resumes such runs too (every 15 s), so this
only makes it sooner, and a failure here is a warning, never an error.

It speaks Prefect's REST API with plain httpx (`flows.runner.PrefectApi`): an MCP server
process that imported Prefect's client for it spent about a second of CPU on the import, on
a member's first report. The flows' own path (`flows.outside.resume_reported_runs`) uses
Prefect's client, which they have loaded anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

TEAM_TASK = "team-task"
"""The flow whose suspended runs wait for a report (`flows.team_task.FLOW_NAME`)."""

PAGE = 200
"""Suspended runs read a request at a time."""

BULK = 50
"""Runs rescheduled a request at a time (`POST /flow_runs/bulk_set_state`)."""


def waits_over(pairs: list[tuple[str, str]]) -> list[str]:
    """Those of the (run id, task id) pairs whose task no longer waits for an outside
    member's report: closed, freed, or a member of it stopped."""
    from models import team as teams
    from models.db import session_scope
    from models.task import get_task

    over = []
    with session_scope() as s:
        for run_id, task_id in pairs:
            try:
                row = get_task(task_id, session=s)
            except ValueError:
                over.append(run_id)  # the task is gone: the run ends saying so
                continue
            names = [a.assignee_id for a in row.assignees]
            members = {m.name: m for m in teams.list_members(row.team or "", session=s)}
            stopped = any(n not in members or not members[n].is_active for n in names)
            if row.status != "in_progress" or not names or stopped:
                over.append(run_id)
    return over


def suspended_runs(prefect: Any, team: str | None) -> list[tuple[str, str]]:
    """(run id, task id) of every suspended `team-task` run (of `team`, else of every team)."""
    runs: list[dict[str, Any]] = []
    flow_runs: dict[str, Any] = {"state": {"name": {"any_": ["Suspended"]}}}
    if team:
        flow_runs["tags"] = {"all_": [f"team:{team}"]}
    while True:  # page by page: every suspended run, not just the first page
        page = prefect.call(
            "POST",
            "/flow_runs/filter",
            {
                "flows": {"name": {"any_": [TEAM_TASK]}},
                "flow_runs": flow_runs,
                "sort": "ID_DESC",
                "limit": PAGE,
                "offset": len(runs),
            },
        )
        runs += page
        if len(page) < PAGE:
            break
    return [(r["id"], str((r.get("parameters") or {}).get("task_id"))) for r in runs]


def reschedule_suspended(prefect: Any, run_ids: list[str]) -> int:
    """Reschedules (`Scheduled`, named "Resuming", as Prefect's resume proposes) those of
    `run_ids` still suspended, `BULK` a request; how many the server accepted."""
    resumed = 0
    for start in range(0, len(run_ids), BULK):
        ids = run_ids[start : start + BULK]
        answer = prefect.call(
            "POST",
            "/flow_runs/bulk_set_state",
            {
                "flow_runs": {"id": {"any_": ids}, "state": {"name": {"any_": ["Suspended"]}}},
                "state": {
                    "type": "SCHEDULED",
                    "name": "Resuming",
                    "state_details": {"scheduled_time": datetime.now(UTC).isoformat()},
                },
                "limit": len(ids),
            },
        )
        resumed += sum(
            r["status"] == "ACCEPT" and (r.get("state") or {}).get("type") == "SCHEDULED"
            for r in answer["results"]
        )
    return resumed


def resume_reported(task_ids: Collection[str] | None, team: str | None = None) -> int | None:
    """Resumes the suspended `team-task` runs (of `task_ids`, else all; of `team`, else of
    every team) whose outside member reported or stopped; how many. None when no Prefect
    server answers: teamflow's clock (`flows.timers`) resumes them later."""
    from flows import runner

    wanted = set(task_ids) if task_ids is not None else None
    if wanted is not None and not wanted:
        return 0
    try:
        api = runner.api_url()
        if runner.probe(api) != "prefect":  # nothing there: fails at once; a slow server: 3 s
            return None
        with runner.PrefectApi(api) as prefect:
            pairs = suspended_runs(prefect, team)
            if wanted is not None:
                pairs = [p for p in pairs if p[1] in wanted]
            over = waits_over(pairs) if pairs else []
            return reschedule_suspended(prefect, over) if over else 0
    except Exception as exc:  # the report is recorded; resuming is only sooner this way
        logging.getLogger(__name__).warning("resuming runs of %s: %s", task_ids, exc)
        return None
