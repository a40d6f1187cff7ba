"""A teamflow worker's own life, as teamflow's database sees it (issue 31, item 4).

`teamflow worker` (`flows/worker.py`) says who it is (`set_worker_name`), notes each run it
runs in its process (`running`), and beats from a thread of its own every
`TEAMFLOW_WORKER_BEAT_SECONDS` (`keep_beating`): its name, pid, host and the runs it runs,
in `models.worker_beat`. The watchdog reads that before it declares a team task's run dead:
a run its worker still runs, in a worker that still beats, keeps its task, however late
Prefect heard from the run. A worker killed or frozen stops beating.

A run this process still runs that Prefect's crash automation marked Crashed anyway (its
heartbeats reached a loaded server late) is set back to Running at the next beat
(`revive`): a live run is never left declared dead. A run that waits for input pauses
itself again instead (`flows.waits`). A run that was here while the process stalled past
`TEAMFLOW_WORKER_ALIVE_SECONDS` (frozen, say) is not revived: its task may have been resumed
elsewhere meanwhile, and the step journal's lease stops it before it acts again.

A worker that dies under `teamflow up` has the runs it held marked Crashed as soon as `up`
sees it die (`end_dead_worker`), not when Prefect's crash automation misses their heartbeats
(`TEAMFLOW_CRASH_AFTER_SECONDS`, 90 s). A worker frozen, or dead on another machine, is left
to the automation: only a process known to be gone is taken for dead at once.

On the mirror host (`TEAMFLOW_MIRROR`), a worker also keeps that host's team files current
with the commits of other machines (`keep_mirroring`, `models.mirror_follow`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from typing import Any

_name: str | None = None
_runs: set[str] = set()
_taken: Callable[[], Collection[str]] = frozenset
"""The runs this worker took from the pool and has not started yet (`set_taken_runs`)."""
_forfeited: set[str] = set()  # here while the process stalled: never revived
_lock = threading.Lock()


def set_worker_name(name: str | None) -> None:
    """This process is the teamflow worker `name`."""
    global _name
    _name = name


def set_taken_runs(taken: Callable[[], Collection[str]]) -> None:
    """`taken()` is what this worker took from the pool (it said Pending) and has not
    started yet: its beats list those runs too, so the watchdog never hands back a run
    that a live worker is still starting, however long that takes on a loaded machine.
    Called from the beat's thread: it must be safe to call from any thread."""
    global _taken
    _taken = taken


def worker_name() -> str | None:
    """The teamflow worker this process is, if it is one (None: a run started with
    `--local`, a test; such a run's task is taken for dead as soon as Prefect says so)."""
    return _name


@contextlib.contextmanager
def running(run_id: str) -> Iterator[None]:
    """The flow run `run_id` runs in this process while the block runs."""
    with _lock:
        _runs.add(run_id)
    try:
        yield
    finally:
        with _lock:
            _runs.discard(run_id)
            _forfeited.discard(run_id)


def runs_here() -> list[str]:
    """The flow runs running in this process now."""
    with _lock:
        return sorted(_runs)


def listed_runs() -> list[str]:
    """What this worker's beat lists: the runs it runs and the runs it is starting."""
    return sorted({*runs_here(), *_taken()})


def revive() -> list[str]:
    """Sets back to Running each run of this process (not waiting for input, not forfeited
    by a stall) that the server says is Crashed; returns their ids."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Running

    from flows.run_watch import waiting_runs

    with _lock:
        mine = _runs - _forfeited
    mine -= waiting_runs()
    if not mine:
        return []
    crashed = FlowRunFilter(
        id=FlowRunFilterId(any_=[uuid.UUID(r) for r in sorted(mine)]),
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.CRASHED])),
    )
    revived = []
    with get_client(sync_client=True) as client:
        for run in client.read_flow_runs(flow_run_filter=crashed):
            if str(run.id) not in runs_here():
                continue  # it ended meanwhile
            said = run.state.message if run.state else ""
            client.set_flow_run_state(
                run.id,
                Running(message=f"still running in worker {_name or os.getpid()} "
                        f"(marked Crashed: {said or 'no message'})"),
                force=True,
            )  # fmt: skip
            revived.append(str(run.id))
    return revived


def keep_beating(stop: threading.Event) -> threading.Thread:
    """Starts the thread that records this worker's heartbeat until `stop` is set, and
    revives its runs marked Crashed while they run (see the module's docstring)."""
    from models.settings import get_settings
    from models.worker_beat import beat

    settings = get_settings()
    every, alive = settings.worker_beat_seconds, settings.worker_alive_seconds
    host = socket.gethostname()

    def loop() -> None:
        failing = unchecked = False
        last = time.monotonic()
        while True:
            now = time.monotonic()
            if now - last > alive:  # stalled (frozen, starved): its runs may be elsewhere now
                with _lock:
                    _forfeited.update(_runs)
            last = now
            try:
                beat(_name or f"pid-{os.getpid()}", os.getpid(), host, listed_runs())
                failing = False
            except Exception as exc:  # no database yet (not migrated), or away for now
                if not failing:
                    print(f"teamflow worker: heartbeat not recorded ({exc!r})", flush=True)
                failing = True
            try:
                for run_id in revive():
                    print(f"teamflow worker: run {run_id} was marked Crashed while it runs "
                          "here; set back to Running", flush=True)  # fmt: skip
                unchecked = False
            except Exception as exc:  # the server away: the next beat asks again
                if not unchecked:
                    print(f"teamflow worker: its runs' states not checked ({exc!r})", flush=True)
                unchecked = True
            if stop.wait(every):
                return

    thread = threading.Thread(target=loop, name="teamflow-worker-beat", daemon=True)
    thread.start()
    return thread


def keep_mirroring(stop: threading.Event) -> threading.Thread | None:
    """On the mirror host (`TEAMFLOW_MIRROR` on), starts the thread that writes the team
    files other machines' commits made stale (`models.mirror_follow`) until `stop` is set."""
    from models.mirror_follow import catch_up
    from models.settings import get_settings

    settings = get_settings()
    if not settings.mirror:
        return None

    def loop() -> None:
        failing = False
        while not stop.wait(settings.mirror_follow_seconds):
            try:
                catch_up()
                failing = False
            except Exception as exc:  # a full disk, the database away for now: next time
                if not failing:
                    print(f"teamflow worker: team files not brought up to date ({exc!r})",
                          flush=True)  # fmt: skip
                failing = True

    thread = threading.Thread(target=loop, name="teamflow-mirror-follow", daemon=True)
    thread.start()
    return thread


WITH_A_PROCESS = frozenset({"Running", "Paused"})
"""The states (by name) of a run that lives in its worker's process: a Suspended run (type
Paused too) has none, and a Pending one is handed back to the pool by the watchdog."""


def crash_runs(runs: Collection[str], why: str) -> list[str]:
    """Marks Crashed each of `runs` that Prefect says is Running or Paused in its process,
    with the message `why` (the process that held it is gone); returns their ids."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Crashed

    if not runs:
        return []
    ids = FlowRunFilterId(any_=[uuid.UUID(r) for r in sorted(runs)])
    crashed = []
    with get_client(sync_client=True) as client:
        for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(id=ids)):
            if run.state is None or run.state.name not in WITH_A_PROCESS:
                continue
            state: Any = Crashed(message=f"Flow run marked as crashed: {why}.")
            client.set_flow_run_state(run.id, state, force=True)
            crashed.append(str(run.id))
    return crashed


def end_dead_worker(name: str, pid: int, code: int | None) -> list[str]:
    """The worker `name` (process `pid`) died with exit `code`, as `teamflow up` saw: the
    runs it held are marked Crashed now, not when Prefect's crash automation misses their
    heartbeats (90 s), so the watchdog resumes their tasks at its next check. What it held:
    the runs its last beat listed, and those it started since (their `infrastructure_pid` is
    its pid) that no live worker lists."""
    from models.worker_beat import forget_runs, last_beat, live_runs

    row = last_beat(name)
    runs = set(row.runs or []) if row is not None else set()
    runs |= _started_by(pid) - live_runs()
    ended = crash_runs(runs, f"its worker {name!r} (pid {pid}) died (exit {code})")
    if row is not None:
        forget_runs(name, row.beat_at)
    return ended


def _started_by(pid: int) -> set[str]:
    """The Running or Paused runs of the `teamflow` pool whose process is `pid`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        WorkPoolFilter,
        WorkPoolFilterName,
    )
    from prefect.client.schemas.objects import StateType

    from flows.up_processes import POOL

    types = FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PAUSED])
    found: set[str] = set()
    with get_client(sync_client=True) as client:
        offset = 0
        while page := client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=types)),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[POOL])),
            limit=200, offset=offset,
        ):  # fmt: skip
            found |= {str(r.id) for r in page if r.infrastructure_pid == str(pid)}
            offset += len(page)
    return found
