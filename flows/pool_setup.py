"""What `teamflow up` sets up in Prefect: the `teamflow` work pool, the deployments of
`prefect.yaml`, and the automation that marks runs Crashed when their heartbeats stop.

Each step may be run again: it leaves what exists as it is, or updates it in place.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flows.up_processes import POOL, PROJECT_ROOT, UpError, child_env, last_error, log_path
from models.retry import GaveUp, is_transient, retrying, transient_text
from models.settings import get_settings

CRASH_AUTOMATION = "teamflow: crash runs without heartbeats"
"""A run whose heartbeats stop for this long is marked Crashed (three missed heartbeats)."""
EXPECTED_AFTER_A_HEARTBEAT = {
    f"prefect.flow-run.{name}"
    for name in (
        "heartbeat", "Running", "Retrying", "AwaitingRetry", "Paused", "Suspended",
        "Cancelling", "Completed", "Failed", "Cancelled", "Crashed",
    )
}  # fmt: skip
"""What shows a run is alive (or ended, or let its process go) after a heartbeat."""


def ensure_pool(name: str = POOL) -> bool:
    """Creates the `process` work pool `name` unless it exists; True if it was created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            pass
        try:
            client.create_work_pool(
                WorkPoolCreate(
                    name=name,
                    type=ProcessWorker.type,
                    base_job_template=ProcessWorker.get_default_base_job_template(),
                    description="teamflow: every team task, approval, shutdown and alert",
                )
            )
        except ObjectAlreadyExists:
            return False
        return True


DEPLOYED_VARIABLE = "teamflow_deployments"
"""The Prefect variable in which `deploy` leaves what it registered, and from which sources."""


def deploy(api: str, home: Path) -> tuple[list[str], bool]:
    """Registers every deployment of `prefect.yaml` (`prefect deploy --all`) unless the
    server holds them from this very `prefect.yaml` and teamflow source already; returns
    them, and whether they were registered now.

    `prefect deploy` costs a process of its own, about 7 s of CPU and wall time on a 2-core
    machine, at every start of `teamflow up`. What it registers depends only on
    `prefect.yaml`, the flows' source (their parameters) and where teamflow is checked out
    (the runs' working directory): their fingerprint is kept in the server's variable
    `teamflow_deployments` beside the names registered. A deployment deleted since, or any
    change to those files, registers them all again.
    """
    prefect_file = PROJECT_ROOT / "prefect.yaml"
    if not prefect_file.exists():
        raise UpError(
            f"no prefect.yaml in {PROJECT_ROOT}; install teamflow from its source tree "
            "(pip install -e .) so its deployments can be registered"
        )
    stamp = sources_fingerprint(prefect_file)
    registered = _registered(stamp)
    if registered is not None:
        return registered, False
    log = log_path(home, "deploy.log")

    def once() -> list[str]:
        with log.open("ab") as out:
            result = subprocess.run(
                [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all",
                 "--prefect-file", str(prefect_file)],
                cwd=PROJECT_ROOT, env=child_env(api), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, timeout=300, check=False,
            )  # fmt: skip
        if result.returncode != 0:
            raise _DeployFailed(last_error(log))
        return pool_deployments()

    # A busy server on SQLite answers 503 now and then; deploying again is harmless: it
    # updates in place. The subprocess's error is text: `transient_text` reads it.
    try:
        names = retrying(
            "`prefect deploy --all`",
            once,
            transient=lambda exc: (
                (isinstance(exc, _DeployFailed) and transient_text(str(exc))) or is_transient(exc)
            ),
            on_retry=lambda line: print(line, flush=True),
        )
    except GaveUp as exc:
        raise UpError(f"{exc}; see {log}") from None
    except _DeployFailed as exc:
        raise UpError(f"`prefect deploy --all` failed: {exc}; see {log}") from None
    _remember(stamp, names)
    return names, True


def sources_fingerprint(prefect_file: Path) -> str:
    """A digest of what `prefect deploy --all` registers from: Prefect's version, where
    teamflow is checked out, `prefect_file`, the source of `flows/` and `models/`, and the
    file of every entrypoint `prefect_file` names (a deployment of the user's own too)."""
    import hashlib
    import re

    import prefect

    text = prefect_file.read_bytes()
    digest = hashlib.sha256(f"{prefect.__version__}\0{PROJECT_ROOT}\0".encode())
    digest.update(text)
    named = re.findall(rb"entrypoint:\s*[\"']?([^\"'\s]+?\.py):", text)
    entrypoints = {PROJECT_ROOT / os.fsdecode(name) for name in named}
    ours = {*PROJECT_ROOT.glob("flows/**/*.py"), *PROJECT_ROOT.glob("models/**/*.py")}
    for path in sorted(ours | {p for p in entrypoints if p.is_file()}):
        digest.update(f"\0{path}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _registered(stamp: str) -> list[str] | None:
    """The deployments registered from sources of fingerprint `stamp`, if the server holds
    each of them still; None if they must be registered."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        kept = client.read_variable_by_name(DEPLOYED_VARIABLE)
    value = kept.value if kept is not None else None
    if not isinstance(value, dict) or value.get("stamp") != stamp:
        return None
    names = value.get("deployments")
    if not isinstance(names, list) or not names:
        return None
    return names if set(names) <= set(pool_deployments()) else None


def _remember(stamp: str, names: list[str]) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    value = {"stamp": stamp, "deployments": names}
    with get_client(sync_client=True) as client:
        if client.read_variable_by_name(DEPLOYED_VARIABLE) is None:
            client.create_variable(VariableCreate(name=DEPLOYED_VARIABLE, value=value))
        else:
            client.update_variable(VariableUpdate(name=DEPLOYED_VARIABLE, value=value))


class _DeployFailed(RuntimeError):
    """`prefect deploy` exited non-zero; the message is its last error line."""


def pool_deployments(pool: str = POOL) -> list[str]:
    """The deployments in `pool`, as `flow/deployment`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, WorkPoolFilter

    with get_client(sync_client=True) as client:
        found = client.read_deployments(
            work_pool_filter=WorkPoolFilter(name={"any_": [pool]}),
            deployment_filter=DeploymentFilter(),
            limit=200,
        )
        flows = {f.id: f.name for f in client.read_flows(limit=200)}
    return sorted(f"{flows.get(d.flow_id, d.flow_id)}/{d.name}" for d in found)


def ensure_crash_automation(pool: str = POOL, within_seconds: float | None = None) -> None:
    """Installs (or updates) the automation that marks silent runs of `pool` Crashed.

    Prefect's recipe for self-hosted servers: after each `prefect.flow-run.heartbeat` (and
    after `Running`), expect another flow-run event (heartbeat or state change) of the same
    run `within`; if none comes, change the run's state to Crashed. It is limited to the
    deployments of the teamflow pool: other flows on the same server may beat less often.
    """
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import WorkPoolFilter
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    if within_seconds is None:
        within_seconds = get_settings().crash_after_seconds
    with get_client(sync_client=True) as client:
        deployments = client.read_deployments(
            work_pool_filter=WorkPoolFilter(name={"any_": [pool]}), limit=200
        )
    if not deployments:
        return
    automation = Automation(
        name=CRASH_AUTOMATION,
        description=(
            f"Marks a run of the {pool!r} work pool Crashed when no heartbeat or state "
            f"change arrives for {within_seconds:g} s (its process died). Installed by "
            "`teamflow up`."
        ),
        trigger=EventTrigger(
            # Running arms it too: a process that dies before its first heartbeat is
            # caught as well.
            after={"prefect.flow-run.heartbeat", "prefect.flow-run.Running"},
            # Named, not `prefect.flow-run.*`: on SQLite every event the trigger is
            # interested in is a write, and Scheduled/Pending/Submitting/pull-step events
            # need none. teamflow's flows use Prefect's state names only.
            expect=EXPECTED_AFTER_A_HEARTBEAT,
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification(
                {
                    "prefect.resource.role": "deployment",
                    "prefect.resource.id": [f"prefect.deployment.{d.id}" for d in deployments],
                }
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=within_seconds),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message="Flow run marked as crashed: its heartbeats stopped.",
            )
        ],
    )
    try:
        existing = Automation.read(name=CRASH_AUTOMATION)
    except ValueError:
        automation.create()
        return
    automation.id = existing.id  # type: ignore[attr-defined]  # sync caller: not a coroutine
    automation.update()
