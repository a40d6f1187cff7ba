"""`teamflow up`: a Prefect server, the `teamflow` work pool, the deployments and a worker.

If no Prefect server answers at `PREFECT_API_URL` (default `http://127.0.0.1:4200/api`),
`teamflow up` starts one on that host and port, with its database under `$TEAMFLOW_HOME`
(SQLite) unless `PREFECT_API_DATABASE_CONNECTION_URL` says otherwise. A server that answers
already is reused, so a second `teamflow up` adds a worker instead of failing on the port.
Then it creates the `teamflow` process work pool, registers every deployment of
`prefect.yaml` (`prefect deploy --all`), installs the automation that marks runs Crashed
when their heartbeats stop, schedules the `watchdog` (every 30 s, `TEAMFLOW_WATCHDOG_EVERY`),
starts a teamflow worker, and applies teamflow's own migrations.
Ctrl-C or SIGTERM stops what it started, the worker first.

A worker that dies (killed, or out of memory) is started again, after 1 s, then 2 s, 4 s ...
up to `RESTART_MAX_SECONDS` while it keeps dying; a worker that stayed up for
`STABLE_SECONDS` starts the count again. `teamflow up` says so on its output each time. The
runs the dead worker held are marked Crashed by the automation, and the watchdog closes
their tasks as failed, so `teamflow task run ID` can start them again. Stopping is clean
also while the Prefect server is away: every process `teamflow up` started is stopped.

The server it starts is safer than Prefect's defaults: it listens on 127.0.0.1 unless told
otherwise, has CSRF protection on, accepts cross-origin requests from its own UI only,
honours `PREFECT_SERVER_API_AUTH_STRING`, and sends no telemetry.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flows import runner
from models import db

PRIVATE_MODE = 0o600
PRIVATE_UMASK = 0o077  # what the server and worker create (prefect.db, logs) is theirs alone

POOL = "teamflow"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
CRASH_AUTOMATION = "teamflow: crash runs without heartbeats"
HEARTBEAT_SECONDS = 30
"""How often teamflow's runs send a heartbeat: the shortest interval Prefect accepts."""
BUSY_TRIES = 3
"""How often `up` tries a step (deploy, automation, schedule) when the server answers 503."""
DEFAULT_CRASH_AFTER_SECONDS = 90
"""A run whose heartbeats stop for this long is marked Crashed (three missed heartbeats)."""
EXPECTED_AFTER_A_HEARTBEAT = {
    f"prefect.flow-run.{name}"
    for name in (
        "heartbeat", "Running", "Retrying", "AwaitingRetry", "Paused", "Suspended",
        "Cancelling", "Completed", "Failed", "Cancelled", "Crashed",
    )
}  # fmt: skip
"""What shows a run is alive (or ended, or let its process go) after a heartbeat."""
WORKER_POLL_SECONDS = 2
"""The worker's fallback poll; new runs normally reach it at once through the event stream."""
SERVER_START_TIMEOUT = 120.0
WORKER_START_TIMEOUT = 60.0
RESTART_FIRST_SECONDS = 1.0
"""The wait before the first restart of a worker that died; doubled for each next one."""
RESTART_MAX_SECONDS = 60.0
"""The longest wait between two restarts of a worker that keeps dying."""
STABLE_SECONDS = 120.0
"""A worker that stayed up this long has its restart wait reset to the first."""
_T = TypeVar("_T")
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}


class UpError(RuntimeError):
    """`teamflow up` cannot go on; the message is one line for the user."""


@dataclass
class Child:
    """A process `teamflow up` started and stops again."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    detail: str = ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float) -> None:
        """SIGTERM to its process group, SIGKILL after `grace` seconds; then SIGKILL to what
        is left in the group (what it started and did not stop), also if it had died."""
        if self.alive():
            _signal_group(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
        self.kill()

    def kill(self) -> None:
        """SIGKILL to its whole process group, and waits for it."""
        _signal_group(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


@dataclass
class Up:
    """What `teamflow up` set up, in the order to undo it."""

    api: str
    ui: str
    children: list[Child] = field(default_factory=list)
    reused_server: bool = False

    def stop(self) -> None:
        """Stops every child (the worker first); a second Ctrl-C or SIGTERM kills at once.

        The process groups of children that died already are killed too: what they had
        started (an agent's program, a subprocess run) goes with them.
        """
        try:
            for child in reversed(self.children):
                child.stop(grace=30 if child.name == "worker" else 15)
        except (KeyboardInterrupt, _Stop):  # a second signal: no more waiting
            with _signals_held(then=False):
                for child in self.children:
                    child.kill()


@contextlib.contextmanager
def _signals_held(*, then: bool = True) -> Iterator[None]:
    """A Ctrl-C or SIGTERM during the block takes effect after it (a child started is a
    child known), or, `then=False`, not at all. Deferred by handlers, not by the signal
    mask: children inherit the mask."""
    arrived: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: arrived.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if then and signal.SIGTERM in arrived:
            raise _Stop
        if then and signal.SIGINT in arrived:
            raise KeyboardInterrupt


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# --- settings ------------------------------------------------------------------------------


def prefect_database_url(home: Path) -> str:
    """The Prefect server's database: the user's choice, else SQLite under `home`."""
    chosen = runner.user_setting(
        "PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL"
    )
    return chosen or f"sqlite+aiosqlite:///{home / 'prefect.db'}"


def child_env(api: str) -> dict[str, str]:
    """The environment of every process `teamflow up` starts."""
    env = dict(os.environ)
    env["PREFECT_API_URL"] = api
    # Telemetry off: the server's (PREFECT_SERVER_ANALYTICS_ENABLED), the SDK's (DO_NOT_TRACK).
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["DO_NOT_TRACK"] = "1"
    server_auth = env.get("PREFECT_SERVER_API_AUTH_STRING")
    if server_auth and not env.get("PREFECT_API_AUTH_STRING"):
        # The CLI and the worker authenticate to the server this machine runs.
        env["PREFECT_API_AUTH_STRING"] = server_auth
    for name, value in (
        ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", HEARTBEAT_SECONDS),
        ("PREFECT_WORKER_QUERY_SECONDS", WORKER_POLL_SECONDS),
    ):
        if not runner.user_setting(name):
            env[name] = str(value)
    env.setdefault("PREFECT_CLI_PROMPT", "false")
    return env


def server_env(api: str, bind_host: str, port: int, database_url: str) -> dict[str, str]:
    """The server's environment: teamflow's safer defaults, where the user chose nothing."""
    env = child_env(api)
    env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    env.pop("PREFECT_SERVER_DATABASE_CONNECTION_URL", None)
    if not runner.user_setting(
        "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED", "PREFECT_SERVER_CSRF_PROTECTION_ENABLED"
    ):
        env["PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED"] = "true"
    if not runner.user_setting(
        "PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS", "PREFECT_SERVER_CORS_ALLOWED_ORIGINS"
    ):
        env["PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS"] = _origin(api)
    env["PREFECT_SERVER_API_HOST"] = bind_host
    env["PREFECT_SERVER_API_PORT"] = str(port)
    return env


def _origin(api: str) -> str:
    parts = urlsplit(api)
    return f"{parts.scheme}://{parts.netloc}"


def _is_local(host: str) -> bool:
    if host in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return host in {socket.gethostname(), socket.getfqdn()}
    except OSError:
        return False


# --- checks --------------------------------------------------------------------------------


def check_database(url: str, what: str) -> None:
    """Refuses (one line) a PostgreSQL database that cannot be reached; prepares SQLite."""
    import sqlalchemy as sa

    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            path = Path(parsed.database).expanduser()
            # Created private (0600), so SQLite's -wal and -shm files are private too.
            db.private_sqlite_file(parsed.set(database=str(path)).render_as_string(False))
        return
    sync_url = parsed.set(drivername=f"{parsed.get_backend_name()}+psycopg")
    engine = sa.create_engine(sync_url, connect_args={"connect_timeout": 5}, poolclass=sa.NullPool)
    try:
        with engine.connect():
            pass
    except Exception as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines() or ["no answer"]
        raise UpError(f"cannot reach {what} at {db.redact(url)}: {reason[0]}") from None
    finally:
        engine.dispose()


def check_credentials(api: str) -> None:
    """Refuses a Prefect server that does not accept this machine's credentials."""
    import httpx

    auth = os.environ.get("PREFECT_API_AUTH_STRING") or os.environ.get(
        "PREFECT_SERVER_API_AUTH_STRING"
    )
    headers = {}
    if auth:
        import base64

        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    response = httpx.get(f"{api}/admin/version", headers=headers, timeout=5)
    if response.status_code == 401:
        raise UpError(
            f"the Prefect server at {api} requires an auth string; "
            "set PREFECT_API_AUTH_STRING to it"
        )


# --- steps ---------------------------------------------------------------------------------


def start_server(api: str, bind_host: str, home: Path, echo: Callable[[str], None]) -> Child | None:
    """Starts `prefect server start` in the background and waits until it is healthy.

    None when another Prefect server took the port meanwhile (two `teamflow up` at once):
    that one is used.
    """
    port = urlsplit(api).port or 4200
    database_url = prefect_database_url(home)
    check_database(database_url, "the Prefect server's database")
    log = _log_path(home, "prefect-server.log")
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.server", "start",
             "--host", bind_host, "--port", str(port), "--analytics-off"],
            env=server_env(api, bind_host, port, database_url),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=home, umask=PRIVATE_UMASK,
        )  # fmt: skip
    child = Child("server", process, log, detail=f"database {db.redact(database_url)}")
    echo(f"starting the Prefect server on {bind_host}:{port} (log: {log})")
    started = time.monotonic()
    last_report = started
    try:
        while True:
            elapsed = time.monotonic() - started
            if not child.alive():
                if runner.probe(api, timeout=1) == "prefect":
                    echo(f"another Prefect server came up at {api} meanwhile; reusing it")
                    return None
                raise UpError(
                    f"the Prefect server stopped while starting (exit {process.returncode}): "
                    f"{_last_error(log)}; see {log}"
                )
            answer = runner.probe(api, timeout=1)
            if answer == "prefect":
                echo(f"  the Prefect server is healthy after {elapsed:.1f} s")
                return child
            if elapsed > SERVER_START_TIMEOUT:
                raise UpError(
                    f"the Prefect server did not become healthy within "
                    f"{SERVER_START_TIMEOUT:g} s; see {log}"
                )
            if time.monotonic() - last_report >= 5:
                echo(f"  waiting for the Prefect server ({elapsed:.0f} s)")
                last_report = time.monotonic()
            time.sleep(0.25)
    except BaseException:
        child.stop(grace=10)
        raise


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


def deploy(api: str, home: Path) -> list[str]:
    """Registers every deployment of `prefect.yaml` (`prefect deploy --all`); returns them."""
    prefect_file = PROJECT_ROOT / "prefect.yaml"
    if not prefect_file.exists():
        raise UpError(
            f"no prefect.yaml in {PROJECT_ROOT}; install teamflow from its source tree "
            "(pip install -e .) so its deployments can be registered"
        )
    log = _log_path(home, "deploy.log")
    for attempt in range(1, BUSY_TRIES + 1):
        with log.open("ab") as out:
            result = subprocess.run(
                [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all",
                 "--prefect-file", str(prefect_file)],
                cwd=PROJECT_ROOT, env=child_env(api), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, timeout=300, check=False,
            )  # fmt: skip
        if result.returncode == 0:
            return pool_deployments()
        error = _last_error(log)
        # A busy server on SQLite answers 503 now and then (more so where the client's own
        # retries are turned off); deploying again is harmless: it updates in place.
        if "503" not in error or attempt == BUSY_TRIES:
            raise UpError(f"`prefect deploy --all` failed: {error}; see {log}")
        print(
            f"`prefect deploy --all`: the server was busy (503); trying again ({attempt})",
            flush=True,
        )
        time.sleep(2 * attempt)
    raise AssertionError("unreachable")


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
        within_seconds = float(
            os.environ.get("TEAMFLOW_CRASH_AFTER_SECONDS") or DEFAULT_CRASH_AFTER_SECONDS
        )
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
    automation.id = existing.id
    automation.update()


def start_worker(api: str, home: Path, pool: str = POOL) -> Child:
    """Starts `teamflow worker` on `pool` and waits until the server sees it online."""
    child, name = spawn_worker(api, home, pool)
    try:
        _wait_for_worker(child, pool, name)
    except BaseException:
        child.stop(grace=10)
        raise
    return child


def spawn_worker(api: str, home: Path, pool: str = POOL) -> tuple[Child, str]:
    """Starts `teamflow worker` on `pool` in its own session; returns it and its name."""
    import uuid

    name = f"teamflow {socket.gethostname()} {uuid.uuid4().hex[:8]}"
    log = _log_path(home, "worker.log")
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "worker", "--pool", pool, "--name", name],
            env=child_env(api), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=PROJECT_ROOT,
            umask=PRIVATE_UMASK,
        )  # fmt: skip
    return Child("worker", process, log, detail=f"{name!r} on pool {pool}"), name


def _wait_for_worker(child: Child, pool: str, name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkerStatus

    started = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            if not child.alive():
                raise UpError(
                    f"the worker stopped while starting (exit {child.process.returncode}): "
                    f"{_last_error(child.log)}; see {child.log}"
                )
            workers = client.read_workers_for_work_pool(pool, limit=200, offset=0)
            if any(w.name == name and w.status == WorkerStatus.ONLINE for w in workers):
                return
            if time.monotonic() - started > WORKER_START_TIMEOUT:
                raise UpError(f"the worker did not come online; see {child.log}")
            time.sleep(0.25)


# --- the command ---------------------------------------------------------------------------


class _Stop(BaseException):
    """SIGTERM arrived."""


def up(*, host: str | None = None, echo: Callable[[str], None] = print) -> None:
    """Brings teamflow up (see the module docstring) and keeps it up until Ctrl-C/SIGTERM.

    Ctrl-C (SIGINT) stops it even when it was started with SIGINT ignored, as a shell
    without job control starts a command in the background (`teamflow up &`, `nohup`):
    Python would keep ignoring it, and `kill -INT` would do nothing."""
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    state: Up | None = None
    try:
        state = bring_up(host=host, echo=echo)
        _report(state, echo)
        _supervise(state, echo)
    except (KeyboardInterrupt, _Stop):
        with contextlib.suppress(KeyboardInterrupt, _Stop):
            echo("stopping what teamflow up started")
    finally:
        try:
            if state is not None:
                state.stop()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)


def _raise_stop(_signum: int, _frame: Any) -> None:
    raise _Stop


def bring_up(*, host: str | None = None, echo: Callable[[str], None] = print) -> Up:
    """Every step of `teamflow up` but waiting; the caller stops what it returns."""
    from flows.watchdog import every_s, schedule_watchdog

    try:  # a bad TEAMFLOW_WATCHDOG_EVERY is refused before anything starts
        watchdog_every = every_s()
    except ValueError as exc:
        raise UpError(str(exc)) from None
    settings = db.settings()
    home = settings.home
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        db.upgrade(settings.database_url)
        revision = db.current_revision(settings.database_url)
    except db.DatabaseError as exc:
        raise UpError(f"teamflow's database: {exc}") from None
    echo(f"teamflow's database {db.redact(settings.database_url)} is at migration {revision}")

    with runner.connected() as api:
        parts = urlsplit(api)
        state = Up(api=api, ui=runner.ui_url(api))
        try:
            answer = runner.probe(api)
            if answer == "prefect":
                check_credentials(api)
                state.reused_server = True
                echo(f"reusing the Prefect server at {api}")
            elif answer == "none":
                api_host = parts.hostname or "127.0.0.1"
                if not _is_local(api_host):
                    raise UpError(
                        f"no Prefect server answers at {api}, and teamflow up starts one "
                        "only on this machine; start it there or fix PREFECT_API_URL"
                    )
                bind = host or api_host
                if bind in {"0.0.0.0", "::"} and not os.environ.get(
                    "PREFECT_SERVER_API_AUTH_STRING"
                ):
                    echo(
                        "warning: the server listens on every interface without an auth "
                        "string; set PREFECT_SERVER_API_AUTH_STRING=user:password"
                    )
                server = start_server(api, bind, home, echo)
                if server is None:
                    state.reused_server = True
                else:
                    state.children.append(server)
            else:
                raise runner.NotPrefect(
                    f"{parts.hostname}:{parts.port} is taken by something that is not a "
                    f"Prefect server ({answer}); stop it or set PREFECT_API_URL to another port"
                )
            if _while_busy("creating the work pool", ensure_pool):
                echo(f"created the work pool {POOL!r}")
            names = deploy(api, home)
            echo(f"registered {len(names)} deployment(s): {', '.join(names)}")
            _while_busy("installing the crash automation", ensure_crash_automation)
            echo(f"installed the automation {CRASH_AUTOMATION!r}")
            every = _while_busy(
                "scheduling the watchdog", lambda: schedule_watchdog(watchdog_every)
            )
            echo(f"scheduled the watchdog every {every:g} s")
            state.children.append(start_worker(api, home))
        except BaseException:
            state.stop()
            raise
    return state


def _while_busy(what: str, step: Callable[[], _T]) -> _T:
    """`step()`, tried again (up to `BUSY_TRIES` times) while the server answers 503 (busy,
    as Prefect's server on SQLite is now and then, more so where the client's own retries are
    turned off); any other refusal of the server is one line for the user."""
    from prefect.exceptions import PrefectHTTPStatusError

    for attempt in range(1, BUSY_TRIES + 1):
        try:
            return step()
        except PrefectHTTPStatusError as exc:
            status = exc.response.status_code
            if status != 503 or attempt == BUSY_TRIES:
                raise UpError(f"{what}: the Prefect server answered {status}") from None
        print(f"{what}: the server was busy (503); trying again ({attempt})", flush=True)
        time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def _report(state: Up, echo: Callable[[str], None]) -> None:
    echo("")
    echo("teamflow is up")
    echo(f"  UI:      {state.ui}")
    echo(f"  API:     {state.api}")
    if state.reused_server:
        echo("  server:  reused (already running; not stopped by this command)")
    for child in state.children:
        echo(f"  {child.name + ':':<8} started, pid {child.process.pid}, {child.detail}")
        echo(f"           log {child.log}")
    echo("Ctrl-C stops what this command started.")


@dataclass
class Restarts:
    """When to start a dead worker again: 1 s, 2 s, 4 s ... capped; reset once it held."""

    first: float = RESTART_FIRST_SECONDS
    most: float = RESTART_MAX_SECONDS
    stable: float = STABLE_SECONDS
    wait: float = 0.0

    def after_death(self, lived: float) -> float:
        """The wait before the next start of a worker that died after `lived` seconds."""
        if lived >= self.stable or self.wait == 0.0:
            self.wait = self.first
        else:
            self.wait = min(self.wait * 2, self.most)
        return self.wait


def _supervise(state: Up, echo: Callable[[str], None]) -> None:
    """Watches the children: a worker that died is started again (with backoff, said on the
    output); a server that died ends `teamflow up` (an `UpError`)."""
    restarts = Restarts()
    started = {id(child): time.monotonic() for child in state.children}
    while True:
        for index, child in enumerate(state.children):
            if child.alive():
                continue
            code = child.process.returncode
            if child.name != "worker":
                raise UpError(
                    f"the {child.name} stopped unexpectedly (exit {code}): "
                    f"{_last_error(child.log)}; see {child.log}"
                )
            child.kill()  # what the dead worker left in its process group goes with it
            wait = restarts.after_death(time.monotonic() - started.pop(id(child)))
            echo(
                f"the worker (pid {child.process.pid}) died (exit {code}); "
                f"starting it again in {wait:g} s"
            )
            time.sleep(wait)
            with _signals_held():
                worker, _name = spawn_worker(state.api, child.log.parent.parent)
                state.children[index] = worker
            started[id(worker)] = time.monotonic()
            echo(f"  worker:  restarted, pid {worker.process.pid}, {worker.detail}")
        time.sleep(0.5)


def _log_path(home: Path, name: str) -> Path:
    """`home/logs/name`, created private (0600 in a 0700 folder) if it is not there."""
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = logs / name
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_MODE))
    os.chmod(path, PRIVATE_MODE)
    return path


def _last_error(log: Path) -> str:
    """The most telling line at the end of a log: the last error, else the last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return "no log"
    lines = [line for line in lines[-200:] if line]
    for line in reversed(lines):
        if any(word in line for word in ("Error", "error:", "Exception", "in use")):
            return line[:300]
    return lines[-1][:300] if lines else "no output"
