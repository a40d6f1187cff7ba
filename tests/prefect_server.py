"""Real Prefect servers and teamflow processes for tests: free ports, own homes, always stopped.

Every process is started in its own session, so a test (or its `finally`) can kill the
whole process group, children included, even when the test fails halfway.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import forkserver
import httpx

from flows import runner
from flows.up import UP_LAST_LINE

ROOT = Path(__file__).resolve().parent.parent

# Where the test run keeps one Prefect database migrated to head, its block types registered
# (set by conftest, and for the benchmarks a test runs by TEMPLATE_VARIABLE; None: each
# server migrates its own, as for a user). Prefect's migrations cost a server start about
# 5 s of CPU, its block registration 1.4 s, and a run of the suite starts some sixty servers.
TEMPLATE_VARIABLE = "TEAMFLOW_TEST_PREFECT_TEMPLATE_DIR"
TEMPLATE_DIR: Path | None = (
    Path(os.environ[TEMPLATE_VARIABLE]) if os.environ.get(TEMPLATE_VARIABLE) else None
)

# A server on a copy of the template: its block types are there already.
_SEEDED_SERVER_ENV = {"PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false"}

# Registers Prefect's block types in the database of PREFECT_API_DATABASE_CONNECTION_URL,
# as a server's start does (`create_app`'s `add_block_types`).
_REGISTER_BLOCKS = """
import asyncio
from prefect.server.database import provide_database_interface
from prefect.server.models.block_registration import run_block_auto_registration

async def register():
    async with await provide_database_interface().session() as session:
        await run_block_auto_registration(session=session)

asyncio.run(register())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(tmp: Path, api: str) -> dict[str, str]:
    """An environment for teamflow and Prefect processes: own homes, no telemetry."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("PREFECT_", "TEAMFLOW_")) and name != "TEAMFLOW_TEST_POSTGRES_URL":
            del env[name]
    env.update(
        PREFECT_HOME=str(tmp / "prefect-home"),
        PREFECT_API_URL=api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_CLI_PROMPT="false",
        TEAMFLOW_HOME=str(tmp / "teamflow-home"),
        TEAMFLOW_MCP_PORT=str(free_port()),  # `teamflow up`'s MCP server, apart from others'
        TEAMFLOW_API_PORT=str(free_port()),  # its REST API, likewise
    )
    return env


def kill_group(process: forkserver.Process, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop(process: forkserver.Process, grace: float = 20) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds."""
    if process.poll() is None:
        kill_group(process, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    kill_group(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def prefect_cli(
    args: list[str], env: Mapping[str, str], *, cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m prefect ARGS` run to its end, its output captured: forked from the fork
    server that has Prefect's CLI imported (`forkserver.SERVER`), which saves each command
    about 4 s of CPU importing. stdin is /dev/null, as for a user's `--no-prompt` run."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = forkserver.popen(
            forkserver.SERVER, "prefect", args, env=env, cwd=cwd, stdout=out, stderr=err
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process)
            process.wait(timeout=10)
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "prefect", *args], code,
            out.read().decode(errors="replace"), err.read().decode(errors="replace"),
        )  # fmt: skip


def listens(process: forkserver.Process, port: int | str) -> bool:
    """Whether `process` (or a process of the session it leads) listens on `port` of this
    machine. A free port can be taken by another test's server between `free_port` and the
    bind; then the port answers, but not for `process` (which fails to bind and exits)."""
    hexport = f"{int(port):04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in itertools.islice(rows, 1, None):
                fields = row.split()
                if fields[1].rsplit(":", 1)[1] == hexport and fields[3] == "0A":
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in {process.pid, *_session_pids(process.pid)}:
        with contextlib.suppress(OSError):
            if any(
                os.readlink(f"/proc/{pid}/fd/{fd}") in inodes
                for fd in os.listdir(f"/proc/{pid}/fd")
            ):
                return True
    return False


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
    return pids


def healthy(api: str) -> bool:
    try:
        answer = httpx.get(f"{api}/health", timeout=1, verify=runner.tls_context())
        return answer.text.strip() == "true"
    except httpx.HTTPError:
        return False


# TEAMFLOW_TEST_WAIT_TRACE=1 (with `pytest -s`): each wait prints how long it took.
WAIT_TRACE = bool(os.environ.get("TEAMFLOW_TEST_WAIT_TRACE"))


def wait_until(condition, timeout: float, what: str, interval: float = 0.2, explain=None):
    """`condition()`'s first true value within `timeout` seconds; else an AssertionError
    naming `what`, and what `explain()` says was still missing."""
    start = time.monotonic()
    deadline = start + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            if WAIT_TRACE:  # where an end-to-end test spends its time
                print(f"waited {time.monotonic() - start:6.1f} s for {what}", file=sys.stderr)
            return value
        time.sleep(interval)
    missing = f"; still missing: {explain()}" if explain else ""
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{missing}")


@dataclass
class Server:
    api: str
    env: dict[str, str]
    process: forkserver.Process | None
    log: Path
    deployed: subprocess.CompletedProcess | None = None
    deleted_runs: set[str] = field(default_factory=set)
    """Flow runs a test deleted: events of theirs that come late cannot be recorded."""


# What a healthy server never logs: a traceback, an ERROR record, or the exception line
# that ends a traceback (`sqlalchemy.exc.InvalidRequestError: ...`).
_LOG_ERROR = re.compile(r"Traceback \(most recent call last\)|\bERROR\b|^[\w.]+(Error|Exception): ")

# Where a log record begins (Prefect's format: `14:33:56.216 | ERROR   | logger - ...`).
_RECORD = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| ", re.MULTILINE)

# The one error record tolerated. Prefect 3.8.8's task-run recorder writes outside a
# transaction, so `flows.server` cannot make that write wait for SQLite's write lock as it
# makes transactions wait; under load it can fail at once with "database is locked". The
# recorder then says so and writes the same events again, losing none ("0 dropped"). It
# says the same when the server is stopped during a flush (`CancelledError`). A flush that
# drops events, or fails for another reason, is an error.
_RETRIED_FLUSH = re.compile(
    r"task_run_recorder - Error flushing \d+ events \(\d+ to retry, 0 dropped\)"
    r"(?s:.*)(database is locked|asyncio.exceptions.CancelledError)"
)


# A task run of a flow run the test deleted: Prefect delivers some task-run events late (a
# minute after the run, seen here), and its recorder retries the insert, failing on the
# foreign key to the deleted flow run. After 6 attempts it drops the event ("Dropping
# event ID after 6 failed attempts", then the flush "1 dropped") and hands it back to its
# consumer ("Failed in consume_loop"), which retries it and then sets it aside; other events
# go on. Tolerated for the runs a test deleted only.
_ORPHANED_FLUSH = re.compile(
    r"(task_run_recorder - Error flushing \d+ events \(\d+ to retry, \d+ dropped\)"
    r"|messaging\.memory - Failed in consume_loop)"
    r"(?s:.*)FOREIGN KEY constraint failed(?s:.*)'flow_run_id_m0': '([0-9a-f-]{36})'"
)
_DROPPED_EVENT = re.compile(r"task_run_recorder - Dropping event [0-9a-f-]{36} after \d+ failed")


def log_errors(log: Path, deleted_runs: Collection[str] = (), since: int = 0) -> list[str]:
    """The lines of a server's log that report an error (see `_LOG_ERROR`), leaving out
    the records of `_RETRIED_FLUSH`, and those of `_ORPHANED_FLUSH` for `deleted_runs`;
    from byte `since` on (a server shared by several modules: what one module saw)."""
    if not log.exists():
        return []
    text = log.read_bytes()[since:].decode(errors="replace")
    starts = [0, *(m.start() for m in _RECORD.finditer(text)), len(text)]
    records = [text[a:b] for a, b in itertools.pairwise(starts) if a < b]

    def orphaned(record: str) -> bool:
        found = _ORPHANED_FLUSH.search(record)
        return bool(found and found[2] in deleted_runs)

    def tolerated(record: str, following: str) -> bool:
        if _DROPPED_EVENT.search(record):  # says which event, not which run: the flush after it
            return orphaned(following)
        return bool(_RETRIED_FLUSH.search(record) or orphaned(record))

    return [
        line
        for record, following in itertools.zip_longest(records, records[1:], fillvalue="")
        if not tolerated(record, following)
        for line in record.splitlines()
        if _LOG_ERROR.search(line)
    ]


def assert_clean_log(log: Path, deleted_runs: Collection[str] = (), since: int = 0) -> None:
    """Fails if the server (its API or its services) logged errors to `log` (from byte
    `since` on), quoting the first one whole (its traceback) and the error lines of the rest."""
    errors = log_errors(log, deleted_runs, since)
    if not errors:
        return
    lines = log.read_bytes()[since:].decode(errors="replace").splitlines()
    first = lines.index(errors[0])
    whole = lines[first : first + 80]
    raise AssertionError(
        f"the Prefect server logged {len(errors)} error lines ({log}); the first:\n"
        + "\n".join(whole)
        + "\n... the error lines:\n"
        + "\n".join(errors[:40])
    )


@contextlib.contextmanager
def prefect_server(
    tmp: Path,
    database_url: str | None = None,
    *,
    env: dict[str, str] | None = None,
    clean_log: bool = True,
) -> Iterator[Server]:
    """A `prefect server start` on a free port with its own PREFECT_HOME and database.

    Its services (scheduler, late runs, foreman, ...) run, as they do for a user. `env`
    adds server settings (e.g. a shorter PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS).
    With `clean_log`, a block that succeeded also fails if the server logged an error.
    """
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    server_env = base_env(tmp, api)
    server_env["PREFECT_API_DATABASE_CONNECTION_URL"] = (
        database_url or f"sqlite+aiosqlite:///{tmp / 'prefect.db'}"
    )
    if database_url is None and seed_prefect_db(tmp / "prefect.db"):
        server_env.update(_SEEDED_SERVER_ENV)
    server_env.update(env or {})
    Path(server_env["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    server = Server(api=api, env=server_env, process=None, log=tmp / "prefect-server.log")
    try:
        restart(server)
        yield server
    finally:
        drain_prefect_clients()
        if server.process is not None:
            stop(server.process)
    if clean_log:
        assert_clean_log(server.log, server.deleted_runs)


def drain_prefect_clients(timeout: float = 30) -> None:
    """Sends what this process's Prefect clients still hold (log lines, events) and stops
    them (they start again on next use), while the server is up. Left to the end, each would
    try the stopped server again at the test process's exit, with backoff: about 10 s
    before a test process could end."""
    if "prefect.logging.handlers" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=timeout)
    EventsWorker.drain_all(timeout=timeout)


@contextlib.contextmanager
def harness(tmp: Path) -> Iterator[str]:
    """A Prefect server for flows this process runs (in place of Prefect's test harness);
    yields its API URL, which is this process's Prefect API for the block.

    The server is started as `teamflow up` starts it (`prefect_server`, no UI), and a block
    that succeeded also fails if it logged an error: its services (event persister,
    triggers, ...) must run clean with our pins, as they must for a user.
    """
    with harness_server(tmp) as server, api_for_the_block(server.api):
        yield server.api


@contextlib.contextmanager
def harness_server(tmp: Path) -> Iterator[Server]:
    """The server of `harness`, without making it this process's Prefect API."""
    with prefect_server(tmp, env={"PREFECT_UI_ENABLED": "false"}) as server:
        yield server


@contextlib.contextmanager
def talk_to(api: str) -> Iterator[str]:
    """Makes `api` the Prefect API of this process for the block: of Prefect's client (its
    settings) and of teamflow's commands (`PREFECT_API_URL` in the environment, which
    `flows.runner` reads without importing Prefect). Its Prefect clients share one TLS
    context, as those of teamflow's processes do (`share_tls_context`)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.compat.prefect_client import share_tls_context

    share_tls_context()
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api
    try:
        with temporary_settings(updates={PREFECT_API_URL: api}):
            yield api
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


@contextlib.contextmanager
def api_for_the_block(api: str) -> Iterator[str]:
    """Makes `api` this process's Prefect API for the block (see `harness`)."""
    from prefect.context import _temporary_global_settings_context, get_settings_context

    with (
        talk_to(api),
        # Also for threads started in the block (they do not copy this context), as
        # Prefect's own test harness does.
        _temporary_global_settings_context(get_settings_context()),
    ):
        yield api


def _libc_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def with_the_tests(*, sigint_ignored: bool = False) -> Any:
    """A `preexec_fn`: the child gets SIGTERM when the test process ends, however it ends.

    Children run in their own session (their process group is stopped as a whole), so a
    test run that is killed outright would otherwise leave its servers and workers behind.
    With `sigint_ignored`, the child starts with SIGINT ignored, as a shell without job
    control starts a command in the background.
    """
    parent = os.getpid()

    def preexec() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.SIG_DFL)
        if _PRCTL is not None:
            _PRCTL(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the tests ended before the line above
            os._exit(143)

    return preexec


def seed_prefect_db(path: Path, *, deployed: bool = False) -> bool:
    """Copies the run's migrated Prefect database to `path` (SQLite, mode 0600 as `up`
    makes it), unless a database is there or no template dir is set; whether the database
    at `path` comes from the template (a copy made now or before). The template is made
    once for the run (every xdist worker shares it) with `prefect server database upgrade`
    and Prefect's block registration, so a server started on the copy finds its schema at
    head and its block types there, and need not register them (`_SEEDED_SERVER_ENV`).
    `deployed`: the template that also holds what `teamflow up` registers (`_deployed_template`)."""
    import shutil

    if TEMPLATE_DIR is None:
        return False
    if path.exists():
        return True
    template = _deployed_template() if deployed else _template()
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    path.chmod(0o600)
    return True


# Registers the `teamflow` work pool and the deployments as `teamflow up` does.
_DEPLOY = """
import os
from pathlib import Path
from flows.pool_setup import deploy, ensure_pool
ensure_pool()
deploy(os.environ["PREFECT_API_URL"], Path(os.environ["TEAMFLOW_HOME"]))
"""


def _deployed_template() -> Path:
    """The template with the `teamflow` work pool and deployments registered by `teamflow
    up`'s own step (`flows.pool_setup.deploy`, once for the run): a test's `teamflow up` on
    a copy finds them registered from the same sources and skips `prefect deploy` (7 s of
    CPU an `up`), as a user's second `up` does."""
    import fcntl
    import shutil
    import sqlite3

    assert TEMPLATE_DIR is not None
    template = TEMPLATE_DIR / "prefect-deployed-template.db"
    with (TEMPLATE_DIR / "prefect-deployed-template.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            work = TEMPLATE_DIR / "prefect-deployed-template"
            shutil.rmtree(work, ignore_errors=True)
            with prefect_server(work, env={"PREFECT_UI_ENABLED": "false"}) as server:
                subprocess.run(
                    [sys.executable, "-c", _DEPLOY],
                    env=server.env, cwd=ROOT, check=True, capture_output=True, timeout=300,
                )  # fmt: skip
            made = sqlite3.connect(work / "prefect.db")
            try:  # the server has stopped: everything in the file, no write-ahead log
                made.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                made.close()
            (work / "prefect.db").rename(template)
            shutil.rmtree(work, ignore_errors=True)
    return template


def _template() -> Path:
    import fcntl

    assert TEMPLATE_DIR is not None
    template = TEMPLATE_DIR / "prefect-template.db"
    with (TEMPLATE_DIR / "prefect-template.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            made = TEMPLATE_DIR / "prefect-template.db.new"
            _migrate(f"sqlite+aiosqlite:///{made}")
            made.rename(template)
    return template


def postgres_template(admin_url: str) -> str | None:
    """The name of the run's migrated Prefect database (block types registered) on the
    PostgreSQL of `admin_url`, made on first use; None without a template dir (a benchmark
    run by hand). `CREATE DATABASE ... TEMPLATE` copies it in a fraction of a second, where
    a server's migrations on a new database cost seconds of CPU. The controller drops it at
    the end of the run (`drop_postgres_templates`)."""
    import fcntl
    import hashlib
    import uuid

    import sqlalchemy as sa

    if TEMPLATE_DIR is None:
        return None
    key = hashlib.sha256(admin_url.encode()).hexdigest()[:10]
    marker = TEMPLATE_DIR / f"prefect-template-postgres-{key}"
    with (TEMPLATE_DIR / "prefect-template-postgres.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return marker.read_text().splitlines()[1]
        name = f"tf_prefect_template_{uuid.uuid4().hex[:10]}"
        _as_admin(admin_url, f'CREATE DATABASE "{name}"')
        marker.write_text(f"{admin_url}\n{name}\n")  # dropped at the end, made or not
        url = sa.make_url(admin_url).set(drivername="postgresql+asyncpg", database=name)
        _migrate(url.render_as_string(hide_password=False))
        return name


def _as_admin(admin_url: str, statement: str) -> None:
    import sqlalchemy as sa

    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(statement))
    finally:
        admin.dispose()


def _migrate(database_url: str) -> None:
    """Prefect's migrations and block types in the database at `database_url`."""
    assert TEMPLATE_DIR is not None
    env = base_env(TEMPLATE_DIR, "http://127.0.0.1:9/api")
    env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    upgraded = prefect_cli(["server", "database", "upgrade", "-y"], env)
    assert upgraded.returncode == 0, upgraded.stdout[-2000:] + upgraded.stderr[-2000:]
    subprocess.run(
        [sys.executable, "-c", _REGISTER_BLOCKS], env=env, check=True, capture_output=True,
        timeout=300,
    )  # fmt: skip


def drop_postgres_templates(template_dir: Path) -> None:
    """Drops the PostgreSQL templates `postgres_template` made in `template_dir`."""
    for marker in template_dir.glob("prefect-template-postgres-*"):
        admin_url, name = marker.read_text().splitlines()[:2]
        _as_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        marker.unlink()


def restart(server: Server) -> None:
    """Starts the server's process (again: same port, same database) and waits for it."""
    port = server.api.rsplit(":", 1)[1].split("/")[0]
    with server.log.open("ab") as out:
        server.process = forkserver.popen(
            forkserver.SERVER, "flows.server",
            ["start", "--host", "127.0.0.1", "--port", port, "--analytics-off"],
            env=server.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    process = server.process
    wait_until(
        lambda: (healthy(server.api) and listens(process, port)) or process.poll() is not None,
        120,
        "Prefect server",
    )
    assert process.poll() is None, server.log.read_text()[-3000:]


def start(
    args: list[str],
    env: dict[str, str],
    log: Path,
    *,
    sigint_ignored: bool = False,
    children_forked: bool = True,
) -> forkserver.Process:
    """A teamflow command (`python -m flows.cli ...`) in its own session, output to `log`.

    It starts with SIGINT's default action, however the tests were started (a test run
    started in the background ignores SIGINT), unless `sigint_ignored`. The processes `up`
    starts are forked too unless not `children_forked` (for a test that reads one's
    `/proc/PID/environ`, which shows a forked process's environment at its fork server's
    start). `teamflow up` on
    its own SQLite database finds it migrated, with its deployments registered
    (`seed_prefect_db`)."""
    database = env.get("PREFECT_API_DATABASE_CONNECTION_URL") or env.get(
        "PREFECT_SERVER_DATABASE_CONNECTION_URL"
    )
    home = env.get("TEAMFLOW_HOME")
    if (
        args[:1] == ["up"]
        and not database
        and home
        and seed_prefect_db(Path(home) / "prefect.db", deployed=True)
    ):
        env = {**_SEEDED_SERVER_ENV, **env}
    with log.open("ab") as out:
        return forkserver.popen(
            forkserver.TEAMFLOW, "flows.cli", args, env=env, cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT, sigint_ignored=sigint_ignored,
            children_forked=children_forked,
        )  # fmt: skip


def teamflow(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """A teamflow command run to its end, as a user runs it; `env` default: this process's.
    Data-only commands run in this process (`cli_runner`), the others as subprocesses."""
    from cli_runner import teamflow as run

    return run(args, env, cwd=ROOT, timeout=timeout)


def wait_for_up(process: forkserver.Process, log: Path, timeout: float = 240) -> str:
    """Waits until `teamflow up` (started with `start`) says it is up; returns its output."""

    def ready() -> str | None:
        text = log.read_text() if log.exists() else ""
        if UP_LAST_LINE in text:  # the report's last line: all of it is there
            return text
        assert process.poll() is None, f"teamflow up exited {process.returncode}:\n{text}"
        return None

    return wait_until(ready, timeout, "teamflow up")


def started_pids(output: str) -> list[int]:
    """The pids `teamflow up` says it started."""
    return [int(pid) for pid in re.findall(r"started, pid (\d+)", output)]


def started_by_name(output: str) -> dict[str, int]:
    """The pid of each process `teamflow up` says it started, by its name (server, worker,
    mcp, api): what a test kills by name."""
    return {name: int(pid) for name, pid in re.findall(r"(\w+): +started, pid (\d+)", output)}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def kill_pids(pids: list[int]) -> None:
    """Safety net: kills the process groups of pids a test saw started."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


class Run:
    """A flow run in a background thread, as a worker runs it; `result()` waits for it."""

    def __init__(self, coroutine: Any) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.finished_at: float | None = None
        self.thread = threading.Thread(target=self._run, args=(coroutine,), daemon=True)
        self.thread.start()

    def _run(self, coroutine: Any) -> None:
        try:
            self.value = asyncio.run(coroutine)
        except BaseException as exc:
            self.error = exc
        self.finished_at = time.perf_counter()

    def result(self, timeout: float = 180) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the flow run did not finish"
        if self.error is not None:
            raise self.error
        return self.value
