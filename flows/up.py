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

This module is the command's story; the processes it starts are `flows.up_processes`, what
it sets up in Prefect is `flows.pool_setup`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flows import runner
from flows.pool_setup import (
    BUSY_TRIES,
    CRASH_AUTOMATION,
    deploy,
    ensure_crash_automation,
    ensure_pool,
)
from flows.up_processes import (
    POOL,
    Child,
    Stopped,
    UpError,
    check_credentials,
    is_local,
    last_error,
    signals_held,
    spawn_worker,
    start_server,
    start_worker,
)
from models import db
from models.settings import get_settings

RESTART_FIRST_SECONDS = 1.0
"""The wait before the first restart of a worker that died; doubled for each next one."""
RESTART_MAX_SECONDS = 60.0
"""The longest wait between two restarts of a worker that keeps dying."""
STABLE_SECONDS = 120.0
"""A worker that stayed up this long has its restart wait reset to the first."""
_T = TypeVar("_T")


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
        except (KeyboardInterrupt, Stopped):  # a second signal: no more waiting
            with signals_held(then=False):
                for child in self.children:
                    child.kill()


# --- the command ---------------------------------------------------------------------------


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
    except (KeyboardInterrupt, Stopped):
        with contextlib.suppress(KeyboardInterrupt, Stopped):
            echo("stopping what teamflow up started")
    finally:
        try:
            if state is not None:
                state.stop()
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)


def _raise_stop(_signum: int, _frame: Any) -> None:
    raise Stopped


def bring_up(*, host: str | None = None, echo: Callable[[str], None] = print) -> Up:
    """Every step of `teamflow up` but waiting; the caller stops what it returns."""
    from flows.watchdog import every_s, schedule_watchdog

    try:  # a bad TEAMFLOW_WATCHDOG_EVERY is refused before anything starts
        watchdog_every = every_s()
    except ValueError as exc:
        raise UpError(str(exc)) from None
    settings = get_settings()
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
                if not is_local(api_host):
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
                    f"{last_error(child.log)}; see {child.log}"
                )
            child.kill()  # what the dead worker left in its process group goes with it
            wait = restarts.after_death(time.monotonic() - started.pop(id(child)))
            echo(
                f"the worker (pid {child.process.pid}) died (exit {code}); "
                f"starting it again in {wait:g} s"
            )
            time.sleep(wait)
            with signals_held():
                worker, _name = spawn_worker(state.api, child.log.parent.parent)
                state.children[index] = worker
            started[id(worker)] = time.monotonic()
            echo(f"  worker:  restarted, pid {worker.process.pid}, {worker.detail}")
        time.sleep(0.5)
