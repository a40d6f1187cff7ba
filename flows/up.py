"""`teamflow up`: a Prefect server, the `teamflow` work pool, the deployments and a worker.

If no Prefect server answers at `PREFECT_API_URL` (default `http://127.0.0.1:4200/api`),
`teamflow up` starts one on that host and port, with its database under `$TEAMFLOW_HOME`
(SQLite) unless `PREFECT_API_DATABASE_CONNECTION_URL` says otherwise. A server that answers
already is reused, so a second `teamflow up` adds a worker instead of failing on the port.
Then it creates the `teamflow` process work pool, registers every deployment of
`prefect.yaml` (`prefect deploy --all`; not again while the server holds them from the same
`prefect.yaml` and teamflow source, `flows.pool_setup.deploy`), installs the automation that
marks runs Crashed when their heartbeats stop, schedules the `watchdog` (every 30 s,
`TEAMFLOW_WATCHDOG_EVERY`), starts a teamflow worker and the MCP server over streamable HTTP
(`teamflow mcp --http` on
`TEAMFLOW_MCP_PORT`, default 4310; reused if one answers there already) and the REST API
(`teamflow api` on `TEAMFLOW_API_PORT`, default 4300; reused likewise), and applies
teamflow's own migrations. Ctrl-C or SIGTERM stops what it started, the MCP server first.

A worker, MCP server, REST API or Prefect server that dies (killed, or out of memory) is
started again, after 1 s,
then 2 s, 4 s ... up to `RESTART_MAX_SECONDS` while it keeps dying; one that stayed up for
`STABLE_SECONDS` starts the count again. `teamflow up` says so on its output each time. The
runs the dead worker held are marked Crashed at once (by the automation only if that
fails), a watchdog run is started if none runs any more, and the watchdog resumes their
tasks from their last completed step, or, past `TEAMFLOW_RESUME_ATTEMPTS`, closes them as
failed, so `teamflow task run ID` can start them again. Every watchdog interval `up` also
marks Crashed the runs of any worker whose beat in teamflow's database is older than
`TEAMFLOW_WORKER_ALIVE_SECONDS` (frozen, or dead on another machine). Stopping is clean
also while the Prefect server is away: every process `teamflow up` started is stopped.
While its server is restarted the worker keeps running, and the runs waiting in it keep
waiting. Every process `up` starts is tied to it by the kernel (`PR_SET_PDEATHSIG`): `up`
killed, even with SIGKILL, takes its server, worker and MCP server along.

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
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flows import runner
from flows.pool_setup import (
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
    mcp_url,
    probe_mcp,
    probe_rest,
    rest_url,
    signals_held,
    spawn_mcp,
    spawn_rest,
    spawn_worker,
    start_mcp,
    start_rest,
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
UP_LAST_LINE = "Ctrl-C stops what this command started."
"""The last line of what `teamflow up` says once everything is up: a script waits for it."""
_T = TypeVar("_T")


@dataclass
class Up:
    """What `teamflow up` set up, in the order to undo it."""

    api: str
    ui: str
    children: list[Child] = field(default_factory=list)
    reused_server: bool = False
    mcp: str = ""
    """The MCP server's URL (streamable HTTP)."""
    mcp_host: str = "127.0.0.1"
    reused_mcp: bool = False
    server_bind: str = "127.0.0.1"
    """Where the server `up` started listens (it is started there again if it dies)."""
    rest: str = ""
    """The REST API's URL (`/api/v1/`)."""
    reused_rest: bool = False

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
    from flows.tools import install_builtin_tools
    from flows.watchdog_schedule import every_s, schedule_watchdog

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
        install_builtin_tools(missing_only=True)
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
                state.server_bind = bind
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
            names, now = deploy(api, home)
            if now:
                echo(f"registered {len(names)} deployment(s): {', '.join(names)}")
            else:
                echo(f"the {len(names)} deployment(s) are registered from this prefect.yaml "
                     f"and source already: {', '.join(names)}")  # fmt: skip
            _while_busy("installing the crash automation", ensure_crash_automation)
            echo(f"installed the automation {CRASH_AUTOMATION!r}")
            every = _while_busy(
                "scheduling the watchdog", lambda: schedule_watchdog(watchdog_every)
            )
            echo(f"scheduled the watchdog every {every:g} s")
            state.children.append(start_worker(api, home))
            _bring_up_mcp(state, host or "127.0.0.1", settings.mcp_port, home, echo)
            _bring_up_rest(state, host or "127.0.0.1", settings.api_port, home, echo)
        except BaseException:
            state.stop()
            raise
    return state


def _bring_up_mcp(state: Up, host: str, port: int, home: Path, echo: Callable[[str], None]) -> None:
    """Starts `teamflow mcp --http` on `host:port`, or reuses the teamflow MCP server that
    answers there already (a second `teamflow up`); refuses a port something else holds."""
    state.mcp, state.mcp_host = mcp_url(host, port), host
    answer = probe_mcp(state.mcp)
    if answer == "teamflow":
        state.reused_mcp = True
        echo(f"reusing the MCP server at {state.mcp}")
        return
    if answer != "none":
        raise UpError(
            f"{host}:{port} is taken by something that is not teamflow's MCP server "
            f"({answer}); stop it or set TEAMFLOW_MCP_PORT to another port"
        )
    state.children.append(start_mcp(state.api, home, host, port))
    echo(f"started the MCP server at {state.mcp}")


def _bring_up_rest(
    state: Up, host: str, port: int, home: Path, echo: Callable[[str], None]
) -> None:
    """Starts `teamflow api` on `host:port`, or reuses teamflow's REST API that answers
    there already; refuses a port something else holds."""
    state.rest = rest_url(host, port)
    answer = probe_rest(state.rest)
    if answer == "teamflow":
        state.reused_rest = True
        echo(f"reusing the REST API at {state.rest}")
        return
    if answer != "none":
        raise UpError(
            f"{host}:{port} is taken by something that is not teamflow's REST API "
            f"({answer}); stop it or set TEAMFLOW_API_PORT to another port"
        )
    state.children.append(start_rest(state.api, home, host, port))
    echo(f"started the REST API at {state.rest}")


def _while_busy(what: str, step: Callable[[], _T]) -> _T:
    """`step()`, tried again while it fails with a transient error (a busy server's 503, a
    dropped connection: `models.retry`); any other refusal of the server, or giving up, is
    one line for the user."""
    from prefect.exceptions import PrefectHTTPStatusError

    from models.retry import GaveUp, retrying

    try:
        return retrying(what, step, on_retry=lambda line: print(line, flush=True))
    except GaveUp as exc:
        raise UpError(str(exc)) from None
    except PrefectHTTPStatusError as exc:
        raise UpError(f"{what}: the Prefect server answered {exc.response.status_code}") from None


def _report(state: Up, echo: Callable[[str], None]) -> None:
    """Says what is up, in one write: a reader that waits for its last line (Ctrl-C ...)
    never sees half of it."""
    lines = [
        "",
        "teamflow is up",
        f"  UI:      {state.ui}",
        f"  API:     {state.api}",
        f"  MCP:     {state.mcp}",
        f"  REST:    {state.rest}",
    ]
    if state.reused_server:
        lines.append("  server:  reused (already running; not stopped by this command)")
    if state.reused_mcp:
        lines.append("  mcp:     reused (already running; not stopped by this command)")
    if state.reused_rest:
        lines.append("  api:     reused (already running; not stopped by this command)")
    for child in state.children:
        lines.append(f"  {child.name + ':':<8} started, pid {child.process.pid}, {child.detail}")
        lines.append(f"           log {child.log}")
    lines.append(UP_LAST_LINE)
    echo("\n".join(lines))


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
    """Watches the children: one that died is started again, with backoff, said on the
    output. The worker keeps running while its Prefect server is restarted: runs waiting in
    it keep waiting, and take a decision recorded meanwhile once the server is back."""
    restarts = {name: Restarts() for name in ("worker", "mcp", "api", "server")}
    started = {id(child): time.monotonic() for child in state.children}
    while True:
        for index, child in enumerate(state.children):
            if child.alive():
                continue
            code = child.process.returncode
            child.kill()  # what the dead child left in its process group goes with it
            wait = restarts[child.name].after_death(time.monotonic() - started.pop(id(child)))
            echo(
                f"the {child.name} (pid {child.process.pid}) died (exit {code}); "
                f"starting it again in {wait:g} s"
                + (f" (its last words: {last_error(child.log)})" if child.name == "server" else "")
            )
            if child.worker:
                _end_dead_worker(child, code, echo)
            time.sleep(wait)
            new = _restart(state, child, echo)
            started[id(new or child)] = time.monotonic()
            if new is None:  # another Prefect server took the port meanwhile: used as is
                state.children.remove(child)
                break
            if new is not child:
                state.children[index] = new
                echo(f"  {child.name + ':':<8} restarted, pid {new.process.pid}, {new.detail}")
                if child.worker:
                    _watchdog_again(echo)
        time.sleep(0.5)


def _end_dead_worker(child: Child, code: int | None, echo: Callable[[str], None]) -> None:
    """Marks Crashed the runs the dead worker held (`worker_life.end_dead_worker`), so the
    watchdog resumes their tasks at its next check; said on the output."""
    from flows.worker_life import end_dead_worker

    try:
        ended = end_dead_worker(child.worker, child.process.pid, code)
    except Exception as exc:  # the server or the database away: the watchdog does it later
        echo(f"  its runs not marked Crashed yet ({_first_line(exc)}); the watchdog will")
        return
    if ended:
        echo(f"  its runs marked Crashed: {', '.join(ended)}")


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"


def _watchdog_again(echo: Callable[[str], None]) -> None:
    """Starts a watchdog run now if none runs (its run died with the worker): the tasks of
    the dead worker's runs are resumed at once, not at the next window."""
    from flows.watchdog_schedule import run_now_unless_running

    try:
        started = run_now_unless_running()
    except Exception as exc:  # the server away: the next window's run comes all the same
        echo(f"  the watchdog not started again now ({_first_line(exc)})")
        return
    if started:
        echo(f"  no watchdog run was left running: started {started}")


def _restart(state: Up, child: Child, echo: Callable[[str], None]) -> Child | None:
    """`child` started anew (a server: until it is healthy); None when its start failed (said;
    the next round of `_supervise` tries again) or another server took the port."""
    home = child.log.parent.parent
    if child.name == "server":
        try:
            server = start_server(state.api, state.server_bind, home, echo)
        except UpError as exc:
            echo(f"  the server did not come back: {exc}")
            return child  # still dead: tried again after a longer wait
        if server is None:
            state.reused_server = True
            echo("  another Prefect server answers there now; using it (not stopped by up)")
        return server
    with signals_held():
        if child.name == "worker":
            new, _name = spawn_worker(state.api, home)
        elif child.name == "api":
            port = int(state.rest.rsplit(":", 1)[1].split("/")[0])
            new = spawn_rest(state.api, home, state.mcp_host, port)
        else:
            port = int(state.mcp.rsplit(":", 1)[1].split("/")[0])
            new = spawn_mcp(state.api, home, state.mcp_host, port)
    return new
