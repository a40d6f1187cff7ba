"""`empty`: a flow that does nothing, Prefect's floor through teamflow's worker.

`benchmarks/team_task.py` runs it through the same two `teamflow worker`s as its team
tasks, from a deployment it makes for the measurement (not in `prefect.yaml`), so that what
a team task costs the server and the workers stands beside what any run costs them: the
run's states, the worker's Pending and labels, its events and polls.
"""

from __future__ import annotations

from prefect import flow


@flow(name="empty", persist_result=False)
async def empty() -> None:
    """Does nothing."""
