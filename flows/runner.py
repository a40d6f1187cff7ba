"""Starting flow runs: the one helper every CLI command that starts a flow goes through.

`start("system-alert/system-alert", {...}, idempotency_key=...)` creates a run of a
deployment on the Prefect server at `PREFECT_API_URL` (default `http://127.0.0.1:4200/api`,
where `teamflow up` starts one) and returns its id and UI address. When it cannot, it
raises a `RunnerError` whose message is one line saying what is wrong and what to do:
no server answers, the deployment does not exist, or no worker pulls from its pool.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID, uuid4

from models.retry import GaveUp, retrying

DEFAULT_API_URL = "http://127.0.0.1:4200/api"
START_HINT = "start one with `teamflow up`"


class RunnerError(ValueError):
    """A run could not be started; the message is one line for the user."""


class NoServer(RunnerError):
    """No Prefect server answers at the API address."""


class NotPrefect(RunnerError):
    """Something answers at the API address, but it is not a Prefect server."""


class NoDeployment(RunnerError):
    """The deployment named does not exist on the server."""


class NoWorker(RunnerError):
    """No worker pulls from the deployment's work pool, so the run would never start."""


@dataclass(frozen=True)
class StartedRun:
    """A flow run that was created: where to find it."""

    id: UUID
    name: str
    deployment: str
    url: str
    created: datetime | None = None
    """When the server created it: before the start, if its idempotency key found it."""


def user_setting(*names: str) -> str | None:
    """A Prefect setting the user chose, from the environment or the active Prefect profile.

    Reads the profile file itself, without importing Prefect: callers decide the environment
    of processes (or of Prefect's own import) from the answer.
    """
    import tomllib
    from pathlib import Path

    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or data.get("active") or "ephemeral"
    profile = data.get("profiles", {}).get(active, {})
    for name in names:
        if profile.get(name) not in (None, ""):
            return str(profile[name])
    return None


def api_url() -> str:
    """The Prefect API address in force: `PREFECT_API_URL` (env or profile), else the default."""
    from prefect.settings import get_current_settings

    return (get_current_settings().api.url or DEFAULT_API_URL).rstrip("/")


def ui_url(api: str) -> str:
    """The Prefect UI address for an API address: `PREFECT_UI_URL`, else the API's root."""
    return (os.environ.get("PREFECT_UI_URL") or api.removesuffix("/api")).rstrip("/")


def user_ui_url() -> str:
    """The Prefect UI address the user's settings point at (environment or profile), found
    without importing Prefect: for commands that only print where to look."""
    ui = user_setting("PREFECT_UI_URL")
    return (ui or "").rstrip("/") or ui_url(user_setting("PREFECT_API_URL") or DEFAULT_API_URL)


def run_url(run_id: str | UUID, ui: str | None = None) -> str:
    """Where the Prefect UI shows a flow run."""
    return f"{(ui or user_ui_url()).rstrip('/')}/runs/flow-run/{run_id}"


def team_runs_url(team: str, ui: str | None = None) -> str:
    """The Prefect UI's run list filtered by the team's tag (`team:{team}`): the team's task,
    plan, shutdown and alert runs, without the watchdog's."""
    from urllib.parse import urlencode

    return f"{(ui or user_ui_url()).rstrip('/')}/runs?{urlencode({'tag': f'team:{team}'})}"


@contextmanager
def connected(api: str | None = None) -> Iterator[str]:
    """Prefect settings pointing at `api` (default: `api_url()`), so no ephemeral server starts.

    Yields the API address. The auth string for the server is taken from
    `PREFECT_API_AUTH_STRING`, or else from `PREFECT_SERVER_API_AUTH_STRING` (the same
    machine's server), so a server started with an auth string keeps working for the CLI.
    """
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    # Prefect's SDK sends usage telemetry unless DO_NOT_TRACK is set (or the server's
    # analytics are off); teamflow sends none.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    api = (api or api_url()).rstrip("/")
    updates: dict[Any, Any] = {PREFECT_API_URL: api}
    auth = os.environ.get("PREFECT_API_AUTH_STRING") or os.environ.get(
        "PREFECT_SERVER_API_AUTH_STRING"
    )
    if auth:
        updates[PREFECT_API_AUTH_STRING] = auth
    with temporary_settings(updates=updates):
        yield api


def probe(api: str, timeout: float = 3.0) -> str:
    """What answers at `api`: `"prefect"`, `"none"` (nothing listens) or a description.

    A Prefect server answers `GET {api}/health` with `true` (without credentials, even when
    it requires an auth string).
    """
    import httpx

    try:
        response = httpx.get(f"{api}/health", timeout=timeout)
    except httpx.ConnectError:
        return "none"
    except httpx.TimeoutException:
        return f"no answer to GET {urlsplit(api).path}/health within {timeout:g} s"
    except httpx.HTTPError as exc:
        return f"not HTTP ({type(exc).__name__})"
    if response.status_code == 200 and response.text.strip() == "true":
        return "prefect"
    return f"GET {urlsplit(api).path}/health answered {response.status_code}"


def check_server(api: str) -> None:
    """Raises `NoServer` or `NotPrefect` unless a Prefect server answers at `api`.

    A busy server (a 5xx, no answer in time) is asked again for `TEAMFLOW_RETRY_SECONDS`;
    nothing listening is said at once."""

    def once() -> str:
        answer = probe(api)
        if answer.startswith("no answer") or _SERVER_ERROR.search(answer):
            raise _Busy(answer)
        return answer

    try:
        answer = retrying(f"asking the Prefect server at {api}", once, transient=_is_busy)
    except GaveUp as exc:
        raise NoServer(str(exc)) from None
    if answer == "none":
        raise NoServer(f"no Prefect server answers at {api}; {START_HINT}")
    if answer != "prefect":
        raise NotPrefect(
            f"{_host_port(api)} is taken by something that is not a Prefect server "
            f"({answer}); stop it or point PREFECT_API_URL at another port"
        )


_SERVER_ERROR = re.compile(r"answered 5\d\d$")


class _Busy(RuntimeError):
    """A server that answered its health check with a 5xx, or not in time."""


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, _Busy)


def start(
    deployment: str,
    parameters: dict[str, Any] | None = None,
    *,
    idempotency_key: str | None = None,
    tags: list[str] | None = None,
    scheduled_time: datetime | None = None,
    flow_run_name: str | None = None,
    require_worker: bool = True,
) -> StartedRun:
    """Creates a run of `deployment` (`flow-name/deployment-name`) and returns where it is.

    Args:
        deployment: The deployment, e.g. `system-alert/system-alert`.
        parameters: The run's parameters (merged with the deployment's defaults).
        idempotency_key: Starting twice with the same key returns the first run.
        tags: Tags the run carries in the UI (e.g. `team:research-team`).
        scheduled_time: When the run should start (default: now).
        flow_run_name: A name for the run (default: the flow's own naming).
        require_worker: Refuse when no worker pulls from the deployment's pool (a run
            that nobody picks up is worse than a clear error).

    Raises:
        RunnerError: one line saying what is missing and how to get it.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkPoolStatus
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
    from prefect.states import Scheduled

    if deployment.count("/") != 1:
        raise NoDeployment(
            f"deployment name {deployment!r} must be 'flow-name/deployment-name', "
            "e.g. 'system-alert/system-alert'"
        )
    with connected() as api:
        check_server(api)
        # A key of its own, so a start tried again (its answer lost) makes no second run.
        key = idempotency_key or f"teamflow-start-{uuid4()}"

        def attempt() -> Any:
            with get_client(sync_client=True) as client:
                try:
                    found = client.read_deployment_by_name(deployment)
                except ObjectNotFound:
                    known = sorted(
                        f"{_flow_name(client, d.flow_id)}/{d.name}"
                        for d in client.read_deployments(limit=50)
                    )
                    raise NoDeployment(
                        f"no deployment named {deployment!r} on the Prefect server at {api} "
                        f"(it has: {', '.join(known) or 'none'}); `teamflow up` registers "
                        "teamflow's deployments"
                    ) from None
                if require_worker and found.work_pool_name:
                    pool = client.read_work_pool(found.work_pool_name)
                    if pool.status == WorkPoolStatus.PAUSED:
                        raise NoWorker(
                            f"work pool {pool.name!r} is paused; resume it with "
                            f"`prefect work-pool resume {pool.name}`"
                        )
                    if pool.status != WorkPoolStatus.READY:
                        raise NoWorker(
                            f"no worker is pulling from work pool {pool.name!r} at {api}; "
                            f"{START_HINT} (or `teamflow worker` on any machine)"
                        )
                # Given tags add to the deployment's (`teamflow`), as Prefect's UI does.
                return client.create_flow_run_from_deployment(
                    found.id,
                    parameters=parameters or {},
                    state=Scheduled(scheduled_time=scheduled_time or datetime.now(UTC)),
                    name=flow_run_name,
                    tags=sorted(set(found.tags) | set(tags)) if tags else None,
                    idempotency_key=key,
                )

        try:
            run = retrying(f"starting a run of {deployment}", attempt)
        except GaveUp as exc:
            raise RunnerError(str(exc)) from None
        except PrefectHTTPStatusError as exc:
            raise RunnerError(_http_reason(exc, api)) from None
    return StartedRun(
        id=run.id,
        name=run.name,
        deployment=deployment,
        url=run_url(run.id, ui_url(api)),
        created=run.created,
    )


def _flow_name(client: Any, flow_id: UUID) -> str:
    try:
        return client.read_flow(flow_id).name
    except Exception:
        return str(flow_id)


def _http_reason(exc: Any, api: str) -> str:
    status = exc.response.status_code
    if status == 401:
        return (
            f"the Prefect server at {api} refused teamflow's credentials; "
            "set PREFECT_API_AUTH_STRING to its auth string"
        )
    try:
        detail = str(exc.response.json().get("detail") or exc.response.text)
    except ValueError:
        detail = exc.response.text
    return f"the Prefect server at {api} refused the run ({status}): {' '.join(detail.split())}"


def _host_port(api: str) -> str:
    parts = urlsplit(api)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"port {port} on {parts.hostname}"


def start_task(task_id: str, *, require_worker: bool = True) -> StartedRun:
    """Starts a team task's `team-task` run (what `teamflow task run ID` does).

    A task the watchdog closed as failed (its run died) is made pending again first, as its
    next attempt: the run gets a new idempotency key, so a new run starts instead of the
    dead one being handed back. Starting a task twice otherwise returns the first run.
    The run is created with its name and tags, so it does not have to add its tags itself.
    """
    from models.task import get_task
    from models.watchdog import reopen_task, task_run_key

    row = reopen_task(task_id)
    task = get_task(str(row.id))
    assert task.team is not None, "a task with runs belongs to a team"
    assignees = [a.assignee_id for a in task.assignees]
    return start(
        "team-task/team-task",
        {"task_id": str(row.id), "team": row.team},
        idempotency_key=task_run_key(row.id, row.attempt),
        tags=task_run_tags(task.team, assignees),
        flow_run_name=task_run_name(task.team, task.title, assignees),
        require_worker=require_worker,
    )


def start_resume(due: Any) -> StartedRun:
    """Starts the run of a decided resume (a `models.task_lease.DueResume`): the task's
    `team-task` run with the lease decided for it, at its time; one run per lease."""
    from models.task_lease import resume_run_key

    return start(
        "team-task/team-task",
        {"task_id": due.task_id, "team": due.team, "lease": due.lease},
        idempotency_key=resume_run_key(due.task_id, due.attempt, due.lease),
        tags=[*task_run_tags(due.team, due.assignees), "resume"],
        scheduled_time=due.at,
        flow_run_name=f"{task_run_name(due.team, due.title, due.assignees)} resume {due.resumes}",
        require_worker=False,
    )


def task_run_tags(team: str, assignees: list[str]) -> list[str]:
    """The tags of a team task's run: `team:{team}` and `member:{name}` per assignee."""
    return [f"team:{team}", *(f"member:{m}" for m in assignees)]


def task_run_name(team: str, title: str, assignees: list[str]) -> str:
    """`research-team: Q4 sales analysis (analyst-1, analyst-2)`: the name of a team task's
    run, the same when the CLI starts it (and prints it) as when the run names itself."""
    return f"{team}: {title[:60]} ({', '.join(assignees)})"
