"""Starting flow runs: the one helper every CLI command that starts a flow goes through.

`start("system-alert/system-alert", {...}, idempotency_key=...)` creates a run of a
deployment on the Prefect server at `PREFECT_API_URL` (default `http://127.0.0.1:4200/api`,
where `teamflow up` starts one) and returns its id and UI address. When it cannot, it
raises a `RunnerError` whose message is one line saying what is wrong and what to do:
no server answers, the deployment does not exist, or no worker pulls from its pool.
"""

from __future__ import annotations

import functools
import os
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit
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
    """The Prefect API address in force: `PREFECT_API_URL` (environment or the active
    profile), else the default. Prefect itself also reads `prefect.toml` and `.env` in the
    working directory; teamflow's commands do not, so set it in one of those two places."""
    return (user_setting("PREFECT_API_URL") or DEFAULT_API_URL).rstrip("/")


def auth_headers() -> dict[str, str]:
    """The `Authorization` header Prefect's client would send: Basic with
    `PREFECT_API_AUTH_STRING` (else `PREFECT_SERVER_API_AUTH_STRING`, the same machine's
    server), else Bearer with `PREFECT_API_KEY`; none without either."""
    import base64

    auth = user_setting("PREFECT_API_AUTH_STRING", "PREFECT_SERVER_API_AUTH_STRING")
    if auth:
        return {"Authorization": f"Basic {base64.b64encode(auth.encode()).decode()}"}
    key = user_setting("PREFECT_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class PrefectApi:
    """Prefect's REST API over plain httpx, for the commands that start, resume or change
    runs: importing Prefect's client costs a command about 1.3 s of CPU, and the two or
    three calls it makes need none of it. `call` returns the decoded JSON answer (None for
    an empty one) and raises `httpx.HTTPStatusError` for a 4xx or 5xx, which
    `models.retry.retrying` tries again when it is transient."""

    def __init__(self, api: str | None = None) -> None:
        import httpx

        self.api = (api or api_url()).rstrip("/")
        insecure = (user_setting("PREFECT_API_TLS_INSECURE_SKIP_VERIFY") or "").lower()
        verify: bool | str = user_setting("PREFECT_API_SSL_CERT_FILE") or True
        self._http = httpx.Client(
            base_url=f"{self.api}/",
            headers=auth_headers(),
            timeout=float(user_setting("PREFECT_API_REQUEST_TIMEOUT") or 60),
            verify=False if insecure in ("1", "true", "yes") else verify,
        )

    def __enter__(self) -> PrefectApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def call(self, method: str, path: str, json: Any = None) -> Any:
        response = self._http.request(method, path.lstrip("/"), json=json)
        if response.status_code == 403 and "CSRF token" in response.text and self._csrf():
            # A server with CSRF protection (`teamflow up` turns it on): with a token, once.
            response = self._http.request(method, path.lstrip("/"), json=json)
        response.raise_for_status()
        return response.json() if response.content else None

    def _csrf(self) -> bool:
        """Takes a CSRF token for this client's changes, as Prefect's client does; False
        when the server gives none (CSRF protection off, or an older server)."""
        client = str(uuid4())
        answer = self._http.get("csrf-token", params={"client": client})
        if answer.status_code != 200:
            return False
        self._http.headers.update(
            {"Prefect-Csrf-Token": answer.json()["token"], "Prefect-Csrf-Client": client}
        )
        return True


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
    """Prefect settings pointing at `api` (default: `api_url()`), so no ephemeral server starts,
    and `PREFECT_API_URL` in the environment too for the block, so the commands' own calls
    (`start`, `resume`, which read it there) go to the same server.

    Yields the API address. The auth string for the server is taken from
    `PREFECT_API_AUTH_STRING`, or else from `PREFECT_SERVER_API_AUTH_STRING` (the same
    machine's server), so a server started with an auth string keeps working for the CLI.
    """
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from flows.compat.prefect_client import share_tls_context

    share_tls_context()  # the block's clients share one TLS context
    # Prefect's SDK sends usage telemetry unless DO_NOT_TRACK is set (or the server's
    # analytics are off); teamflow sends none.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    api = (api or api_url()).rstrip("/")
    updates: dict[Any, Any] = {PREFECT_API_URL: api}
    auth = user_setting("PREFECT_API_AUTH_STRING", "PREFECT_SERVER_API_AUTH_STRING")
    if auth:
        updates[PREFECT_API_AUTH_STRING] = auth
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api
    try:
        with temporary_settings(updates=updates):
            yield api
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context for teamflow's own one-off requests (`verify=`). httpx
    makes one for every client, a one-off `httpx.get` included, reading the CA bundle each
    time: about 40 ms of CPU, paid at every poll of a server's health."""
    import httpx

    return httpx.create_ssl_context()


def probe(api: str, timeout: float = 3.0) -> str:
    """What answers at `api`: `"prefect"`, `"none"` (nothing listens) or a description.

    A Prefect server answers `GET {api}/health` with `true` (without credentials, even when
    it requires an auth string).
    """
    import httpx

    try:
        response = httpx.get(f"{api}/health", timeout=timeout, verify=tls_context())
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
    import httpx

    if deployment.count("/") != 1:
        raise NoDeployment(
            f"deployment name {deployment!r} must be 'flow-name/deployment-name', "
            "e.g. 'system-alert/system-alert'"
        )
    api = api_url()
    check_server(api)
    # A key of its own, so a start tried again (its answer lost) makes no second run.
    key = idempotency_key or f"teamflow-start-{uuid4()}"

    def attempt() -> dict[str, Any]:
        with PrefectApi(api) as prefect:
            found = find_deployment(prefect, deployment)
            pool_name = found.get("work_pool_name")
            if require_worker and pool_name:
                pool = prefect.call("GET", f"/work_pools/{quote(pool_name, safe='')}")
                if pool.get("status") == "PAUSED":
                    raise NoWorker(
                        f"work pool {pool_name!r} is paused; resume it with "
                        f"`prefect work-pool resume {pool_name}`"
                    )
                if pool.get("status") != "READY":
                    raise NoWorker(
                        f"no worker is pulling from work pool {pool_name!r} at {api}; "
                        f"{START_HINT} (or `teamflow worker` on any machine)"
                    )
            when = scheduled_time or datetime.now(UTC)
            body: dict[str, Any] = {
                "parameters": parameters or {},
                "state": {"type": "SCHEDULED", "name": "Scheduled",
                          "state_details": {"scheduled_time": when.isoformat()}},
                "idempotency_key": key,
            }  # fmt: skip
            if flow_run_name:
                body["name"] = flow_run_name
            if tags:  # given tags add to the deployment's (`teamflow`), as Prefect's UI does
                body["tags"] = sorted(set(found.get("tags") or []) | set(tags))
            return prefect.call("POST", f"/deployments/{found['id']}/create_flow_run", body)

    try:
        run = retrying(f"starting a run of {deployment}", attempt)
    except GaveUp as exc:
        raise RunnerError(str(exc)) from None
    except httpx.HTTPStatusError as exc:
        raise RunnerError(_http_reason(exc, api)) from None
    return StartedRun(
        id=UUID(run["id"]),
        name=run["name"],
        deployment=deployment,
        url=run_url(run["id"], ui_url(api)),
        created=datetime.fromisoformat(run["created"]) if run.get("created") else None,
    )


def find_deployment(prefect: PrefectApi, deployment: str) -> dict[str, Any]:
    """The deployment `flow-name/deployment-name` as the API gives it; `NoDeployment` naming
    the ones the server has when it does not exist."""
    import httpx

    flow, name = (quote(part, safe="") for part in deployment.split("/", 1))
    try:
        found: dict[str, Any] = prefect.call("GET", f"/deployments/name/{flow}/{name}")
        return found
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code != 404:
            raise
    known = []
    for each in prefect.call("POST", "/deployments/filter", {"limit": 50}):
        try:
            flow_name = prefect.call("GET", f"/flows/{each['flow_id']}")["name"]
        except httpx.HTTPError:
            flow_name = each["flow_id"]
        known.append(f"{flow_name}/{each['name']}")
    raise NoDeployment(
        f"no deployment named {deployment!r} on the Prefect server at {prefect.api} "
        f"(it has: {', '.join(sorted(known)) or 'none'}); `teamflow up` registers "
        "teamflow's deployments"
    )


_OVER = ("RUNNING", "COMPLETED", "FAILED", "CANCELLED", "CRASHED")


def resume(
    run_id: str, run_input: dict[str, Any], *, api: str | None = None, only_if_paused: bool = False
) -> str:
    """Resumes a paused run with `run_input` (what the UI's form submits). Returns "" when
    it was resumed or needs no resume (running or over: it saw the decision in teamflow's
    database first; with `only_if_paused`, in any state but paused), else one line saying
    why not. `api` is the server's (default: `api_url()`). A decision is recorded before it is
    sent and a waiting run finds it in the database by itself within seconds, so a resume
    that fails is a note, never an error."""
    not_resumed = f"run {run_id} not resumed ({{}}); it finds the decision in the database"
    api = api or api_url()
    try:
        check_server(api)
        with PrefectApi(api) as prefect:
            state = prefect.call("GET", f"/flow_runs/{UUID(run_id)}").get("state") or {}
            kind = state.get("type")
            if kind == "PAUSED":
                answer = prefect.call(
                    "POST", f"/flow_runs/{run_id}/resume", {"run_input": run_input}
                )
                if answer.get("status") in ("ACCEPT", "WAIT"):
                    return ""
                details = answer.get("details") or {}
                return not_resumed.format(details.get("reason") or answer.get("status"))
    except Exception as exc:
        return not_resumed.format(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if kind in _OVER or only_if_paused:
        return ""
    kind = (kind or "without a state").lower()
    return f"run {run_id} is {kind}; it finds the decision in the database"


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
