"""The processes `teamflow up` starts and stops: the Prefect server, the worker, the MCP server.

Each is a `Child`: its own session and process group (stopping it stops what it started),
a private log under `$TEAMFLOW_HOME/logs`, and the environment teamflow gives it
(`child_env`, `server_env`: telemetry off, CSRF protection on, cross-origin requests from
its own UI only, the heartbeat and poll intervals, slower loops for the services teamflow
leans on little). The checks refuse, in one line, a database that cannot be reached and a
server that does not take this machine's credentials.
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from flows import runner
from models import db

PRIVATE_MODE = 0o600
PRIVATE_UMASK = 0o077  # what the server and worker create (prefect.db, logs) is theirs alone

POOL = "teamflow"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
HEARTBEAT_SECONDS = 30
"""How often teamflow's runs send a heartbeat: the shortest interval Prefect accepts."""
WORKER_POLL_SECONDS = 2
"""The worker's fallback poll while it runs anything (`flows.worker.IDLE_POLL_SECONDS` when
idle); new runs normally reach it at once through the event stream."""
SERVICE_LOOP_SECONDS = {
    "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_LOOP_SECONDS": 60,
    "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS": 15,
    "PREFECT_SERVER_SERVICES_CLEANUP_RECONCILER_LOOP_SECONDS": 15,
    "PREFECT_SERVER_SERVICES_FOREMAN_LOOP_SECONDS": 30,
}
"""How often the server's services that teamflow leans on little look at the database
(Prefect: 5, 5, 5 and 15 s): teamflow acts on its own pauses' deadlines 10 minutes before
Prefect does, starts a due run within a second (Late is a label), and watches its workers
itself. Each is the user's to set."""
SERVER_START_TIMEOUT = 120.0
WORKER_START_TIMEOUT = 60.0
MCP_START_TIMEOUT = 60.0
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"}


class UpError(RuntimeError):
    """`teamflow up` cannot go on; the message is one line for the user."""


class Stopped(BaseException):
    """SIGTERM arrived."""


@dataclass
class Child:
    """A process `teamflow up` started and stops again."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    detail: str = ""
    worker: str = ""
    """A worker's name (its beats' in teamflow's database)."""

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


@contextlib.contextmanager
def signals_held(*, then: bool = True) -> Iterator[None]:
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
            raise Stopped
        if then and signal.SIGINT in arrived:
            raise KeyboardInterrupt


def _ours(argv: list[str], env: dict[str, str]) -> list[str]:
    """`argv` tied to `teamflow up`: killed with it (SIGTERM from the kernel when `up` dies,
    even by SIGKILL), so no server or worker of `up` lives on as an orphan that a later
    `teamflow up` would take for its own."""
    from flows.tools import die_with_parent

    return die_with_parent(argv, PROJECT_ROOT, env, sig="TERM")


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
    for name, seconds in SERVICE_LOOP_SECONDS.items():
        if not runner.user_setting(name):
            env[name] = str(seconds)
    env["PREFECT_SERVER_API_HOST"] = bind_host
    env["PREFECT_SERVER_API_PORT"] = str(port)
    return env


def _origin(api: str) -> str:
    parts = urlsplit(api)
    return f"{parts.scheme}://{parts.netloc}"


def is_local(host: str) -> bool:
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
    response = httpx.get(
        f"{api}/admin/version", headers=headers, timeout=5, verify=runner.tls_context()
    )
    if response.status_code == 401:
        raise UpError(
            f"the Prefect server at {api} requires an auth string; "
            "set PREFECT_API_AUTH_STRING to it"
        )


# --- the processes -----------------------------------------------------------------------


def start_server(api: str, bind_host: str, home: Path, echo: Callable[[str], None]) -> Child | None:
    """Starts `prefect server start` in the background and waits until it is healthy.

    None when another Prefect server took the port meanwhile (two `teamflow up` at once):
    that one is used.
    """
    port = urlsplit(api).port or 4200
    database_url = prefect_database_url(home)
    check_database(database_url, "the Prefect server's database")
    log = log_path(home, "prefect-server.log")
    with log.open("ab") as out:
        env = server_env(api, bind_host, port, database_url)
        process = subprocess.Popen(
            _ours([sys.executable, "-m", "flows.server", "start",
                   "--host", bind_host, "--port", str(port), "--analytics-off"], env),
            env=env,
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
                    f"{last_error(log)}; see {log}"
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
    log = log_path(home, "worker.log")
    with log.open("ab") as out:
        env = child_env(api)
        process = subprocess.Popen(
            _ours([sys.executable, "-m", "flows.cli", "worker",
                   "--pool", pool, "--name", name], env),
            env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=PROJECT_ROOT,
            umask=PRIVATE_UMASK,
        )  # fmt: skip
    return Child("worker", process, log, detail=f"{name!r} on pool {pool}", worker=name), name


def _wait_for_worker(child: Child, pool: str, name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkerStatus

    started = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            if not child.alive():
                raise UpError(
                    f"the worker stopped while starting (exit {child.process.returncode}): "
                    f"{last_error(child.log)}; see {child.log}"
                )
            workers = client.read_workers_for_work_pool(pool, limit=200, offset=0)
            if any(w.name == name and w.status == WorkerStatus.ONLINE for w in workers):
                return
            if time.monotonic() - started > WORKER_START_TIMEOUT:
                raise UpError(f"the worker did not come online; see {child.log}")
            time.sleep(0.25)


def log_path(home: Path, name: str) -> Path:
    """`home/logs/name`, created private (0600 in a 0700 folder) if it is not there."""
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = logs / name
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_MODE))
    os.chmod(path, PRIVATE_MODE)
    return path


def last_error(log: Path) -> str:
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


# --- the MCP server ------------------------------------------------------------------------


def mcp_url(host: str, port: int) -> str:
    """Where MCP clients reach the server `teamflow up` starts."""
    shown = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/mcp"


def probe_mcp(url: str, timeout: float = 2.0) -> str:
    """`teamflow` if a teamflow MCP server answers at `url`, `none` if nothing listens there,
    else what answered instead (one phrase). Asks only `initialize`, which needs no token."""
    import httpx

    hello = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "teamflow-up", "version": "1"}},
    }  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        response = httpx.post(
            url, json=hello, headers=headers, timeout=timeout, verify=runner.tls_context()
        )
    except httpx.ConnectError:
        return "none"
    except httpx.HTTPError as exc:
        return f"POST {urlsplit(url).path} failed: {type(exc).__name__}"
    if response.status_code == 200 and '"name":"teamflow"' in response.text.replace(" ", ""):
        return "teamflow"
    return f"POST {urlsplit(url).path} answered {response.status_code}"


def spawn_mcp(api: str, home: Path, host: str, port: int) -> Child:
    """Starts `teamflow mcp --http` on `host:port` in its own session (tokens required)."""
    log = log_path(home, "mcp.log")
    with log.open("ab") as out:
        env = child_env(api)
        process = subprocess.Popen(
            _ours([sys.executable, "-m", "flows.cli", "mcp", "--http",
                   "--host", host, "--port", str(port)], env),
            env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=PROJECT_ROOT,
            umask=PRIVATE_UMASK,
        )  # fmt: skip
    return Child("mcp", process, log, detail=f"MCP over HTTP at {mcp_url(host, port)}")


def start_mcp(api: str, home: Path, host: str, port: int) -> Child:
    """Starts the MCP server and waits until it answers `initialize`."""
    child = spawn_mcp(api, home, host, port)
    url = mcp_url(host, port)
    started = time.monotonic()
    try:
        while (answer := probe_mcp(url, timeout=1)) != "teamflow":
            if not child.alive():
                raise UpError(
                    f"the MCP server stopped while starting (exit {child.process.returncode}): "
                    f"{last_error(child.log)}; see {child.log}"
                )
            if time.monotonic() - started > MCP_START_TIMEOUT:
                raise UpError(f"the MCP server did not answer at {url} ({answer}); see {child.log}")
            time.sleep(0.25)
    except BaseException:
        child.stop(grace=10)
        raise
    return child


# --- the REST API --------------------------------------------------------------------------


def rest_url(host: str, port: int) -> str:
    """Where programs reach the REST API `teamflow up` starts (its routes' root)."""
    return mcp_url(host, port).removesuffix("/mcp") + "/api/v1/"


def probe_rest(url: str, timeout: float = 2.0) -> str:
    """`teamflow` if teamflow's REST API answers at `url` (its `/openapi.json`), `none` if
    nothing listens there, else what answered instead (one phrase)."""
    import httpx

    schema = url.removesuffix("/").removesuffix("/api/v1") + "/openapi.json"
    try:
        response = httpx.get(schema, timeout=timeout, verify=runner.tls_context())
    except httpx.ConnectError:
        return "none"
    except httpx.HTTPError as exc:
        return f"GET /openapi.json failed: {type(exc).__name__}"
    try:
        title = response.json().get("info", {}).get("title")
    except ValueError:
        title = None
    if response.status_code == 200 and title == "teamflow":
        return "teamflow"
    return f"GET /openapi.json answered {response.status_code}"


def spawn_rest(api: str, home: Path, host: str, port: int) -> Child:
    """Starts `teamflow api` on `host:port` in its own session."""
    log = log_path(home, "api.log")
    with log.open("ab") as out:
        env = child_env(api)
        process = subprocess.Popen(
            _ours([sys.executable, "-m", "flows.cli", "api", "--host", host, "--port", str(port)],
                  env),
            env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=PROJECT_ROOT,
            umask=PRIVATE_UMASK,
        )  # fmt: skip
    return Child("api", process, log, detail=f"REST API at {rest_url(host, port)}")


def start_rest(api: str, home: Path, host: str, port: int) -> Child:
    """Starts the REST API and waits until it answers."""
    child = spawn_rest(api, home, host, port)
    url = rest_url(host, port)
    started = time.monotonic()
    try:
        while (answer := probe_rest(url, timeout=1)) != "teamflow":
            if not child.alive():
                raise UpError(
                    f"the REST API stopped while starting (exit {child.process.returncode}): "
                    f"{last_error(child.log)}; see {child.log}"
                )
            if time.monotonic() - started > MCP_START_TIMEOUT:
                raise UpError(f"the REST API did not answer at {url} ({answer}); see {child.log}")
            time.sleep(0.25)
    except BaseException:
        child.stop(grace=10)
        raise
    return child
