"""Every change teamflow makes to a private part of a library, fenced in one package.

One module per library: `prefect_server` (Prefect's server, as `flows.server` starts it),
`prefect_worker` (Prefect's worker and result storage, in `teamflow worker`),
`prefect_engine` (the flow engine, from inside a run), `prefect_client` (Prefect's API past
its Python client), `sqlalchemy_sqlite` (SQLAlchemy's aiosqlite adapter, in Prefect's
server), `burner_redis_pubsub` (the in-memory Redis of the server's background tasks),
`uvicorn_server` (every server teamflow runs) and `typer_cli` (Typer's command building,
for `teamflow`'s lazy CLI). Each patch
is a function (or class) there whose docstring names the version it was written against,
what breaks without it, and the upstream issue; `docs/upstream.md` has the wording for
upstream.

`PATCHES` lists each patch with the library parts it leans on ("targets") and a
fingerprint of each: a hash of its source and its signature, taken on the pinned version.
`tests/test_compat.py` compares them with what is installed, so a version bump names
exactly the patches to re-check; `python -m flows.compat` records the fingerprints as
installed (in `_fingerprints.py`) once the patches it names are re-checked. Importing this
package imports no library.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Patch:
    """One patch: where it is, the library version it was written for, what it leans on."""

    name: str
    """`module.function` inside `flows.compat`."""
    library: str
    version: str
    targets: tuple[str, ...]
    """The library parts it leans on, as `module:attribute.attribute`; each has its
    fingerprint in `FINGERPRINTS`."""
    why: str
    """One line: what breaks without it (the docstring says more)."""


def resolve(path: str) -> Any:
    """The object `module:attr.attr` names, with any `functools.wraps` wrappers peeled off
    (a patch applied in this process leaves the original under `__wrapped__`)."""
    module_name, _, attributes = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for name in attributes.split(".") if attributes else []:
        target = (
            inspect.getattr_static(target, name)
            if inspect.isclass(target)
            else getattr(target, name)
        )
        if isinstance(target, (staticmethod, classmethod)):
            target = target.__func__
        if isinstance(target, property):
            target = target.fget
    return inspect.unwrap(target) if callable(target) else target


def normalised_source(target: Any) -> str:
    """`target`'s source without indentation, blank lines, comments or trailing spaces: a
    reformatting upstream does not count as a change; a changed line does."""
    lines = []
    for line in inspect.getsource(target).splitlines():
        code = line.split("#", 1)[0].strip() if "#" in line and '"' not in line else line.strip()
        if code:
            lines.append(code)
    return "\n".join(lines)


def fingerprint(path: str) -> tuple[str, str | None]:
    """`path`'s fingerprint as installed now: the first 16 hex digits of the sha256 of its
    normalised source (of its `repr` for a value), and its signature (None if it has none)."""
    target = resolve(path)
    if not (inspect.isroutine(target) or inspect.isclass(target)):
        return hashlib.sha256(repr(target).encode()).hexdigest()[:16], None
    digest = hashlib.sha256(normalised_source(target).encode()).hexdigest()[:16]
    try:
        signature = str(inspect.signature(target))
    except (TypeError, ValueError):
        return digest, None
    return digest, re.sub(r" at 0x[0-9a-f]+", "", signature)  # no addresses of defaults


PRE = "prefect"
PREFECT = "3.8.8"

PATCHES: tuple[Patch, ...] = (
    Patch(
        "prefect_client.propose_state",
        PRE,
        PREFECT,
        ("prefect.utilities.engine:propose_state",),
        "teamflow's waits cannot pause or suspend their run with keys of their own",
    ),
    Patch(
        "prefect_client.keyed_for_input",
        PRE,
        PREFECT,
        (
            "prefect.input:keyset_from_paused_state",
            "prefect.flow_runs:apause_flow_run",
            "prefect.flow_runs:suspend_flow_run",
        ),
        "a resume from the UI's form finds no schema; the run never sees its input",
    ),
    Patch(
        "prefect_client.bulk_reschedule_suspended",
        PRE,
        PREFECT,
        (
            "prefect.server.api.flow_runs:bulk_set_flow_run_state",
            "prefect.server.api.flow_runs:resume_flow_run",
            "prefect.client.orchestration.base:BaseAsyncClient.request",
        ),
        "resuming 250 suspended runs costs 250 resumes plus their reads",
    ),
    Patch(
        "prefect_client.share_tls_context",
        PRE,
        PREFECT,
        (
            "prefect.client.orchestration:PrefectClient.__init__",
            "prefect.client.orchestration:SyncPrefectClient.__init__",
        ),
        "every Prefect client loads the CA bundle anew (25 ms of CPU; two for each run)",
    ),
    Patch(
        "prefect_engine.abort_with_state",
        PRE,
        PREFECT,
        (
            "prefect.exceptions:Abort",
            "prefect.flow_engine:FlowRunEngine.initialize_run",
            "prefect.flow_engine:AsyncFlowRunEngine.initialize_run",
        ),
        "a run cancelled while it waits in process ends Failed or Crashed, not Cancelled",
    ),
    Patch(
        "prefect_engine.leave_suspended",
        PRE,
        PREFECT,
        ("prefect.exceptions:Pause", "prefect.flow_runs:suspend_flow_run"),
        "a suspended run's process reports the run as failed",
    ),
    Patch(
        "prefect_engine.refused_as_repeat",
        PRE,
        PREFECT,
        ("prefect.utilities.engine:propose_state",),
        "a wait whose pause the server made but answered 503 fails its paused run",
    ),
    Patch(
        "prefect_server.immediate_sqlite_transactions",
        PRE,
        PREFECT,
        (
            "prefect.server.database.configurations:AioSqliteConfiguration.begin_transaction",
            "prefect.server.database.configurations:AioSqliteConfiguration.session",
        ),
        "a loaded server on SQLite answers 503 (database is locked) and logs tracebacks",
    ),
    Patch(
        "prefect_server.skip_stored_event_batches",
        PRE,
        PREFECT,
        (
            "prefect.server.events.storage.database:_write_sqlite_events",
            "prefect.server.events.storage.database:_in_safe_batches",
            "prefect.server.events.storage.database:write_events",
        ),
        "events sent again after an outage make the persister drop whole flushes",
    ),
    Patch(
        "prefect_server.quiet_worker_channel_disconnects",
        PRE,
        PREFECT,
        (
            "prefect.server.utilities.worker_channel:WorkerChannelConnection._send_loop",
            "prefect.server.utilities.subscriptions:accept_prefect_socket",
            "prefect.server.utilities.subscriptions:still_connected",
        ),
        "a worker leaving around an outage makes the server log errors and tracebacks",
    ),
    Patch(
        "prefect_server.scheduled_states_not_awaited",
        PRE,
        PREFECT,
        (
            "prefect.server.models.events:flow_run_state_change_event",
            "prefect.server.orchestration.instrumentation_policies:"
            "InstrumentFlowRunStateTransitions.after_transition",
            "prefect.server.models.deployments:_generate_scheduled_flow_runs",
        ),
        "state events of scheduled runs reach automations 15 minutes late",
    ),
    Patch(
        "prefect_server.slower_background_checks",
        PRE,
        PREFECT,
        (
            "prefect.server.api.background_workers:background_worker",
            "docket.worker:Worker.__init__",
        ),
        "an idle server spends a quarter of its CPU looking for background tasks 4 times a second",
    ),
    Patch(
        "burner_redis_pubsub.patient_pubsub_reads",
        "burner-redis",
        "0.1.7",
        (
            "burner_redis.pubsub:PubSub.__init__",
            "burner_redis.pubsub:PubSub._queue_get",
            "docket.worker:Worker._cancellation_listener",
        ),
        "an idle server wakes ten times a second to ask for cancellations of background tasks",
    ),
    Patch(
        "uvicorn_server.quieter_ticks",
        "uvicorn",
        "0.54.0",
        (
            "uvicorn.server:Server.main_loop",
            "uvicorn.server:Server.on_tick",
            "uvicorn.server:Server.capture_signals",
            "uvicorn.server:HANDLED_SIGNALS",
        ),
        "every idle server teamflow runs wakes ten times a second",
    ),
    Patch(
        "sqlalchemy_sqlite.write_gate",
        "sqlalchemy",
        "2.0.58",
        (
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_cursor.execute",
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_cursor.executemany",
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_cursor.__init__",
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.commit",
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.rollback",
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.close",
            "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.terminate",
            "sqlalchemy.util.concurrency:await_only",
        ),
        "SQLite writers of the server sleep in the busy handler while the lock is free",
    ),
    Patch(
        "prefect_worker.cache_server_result_storage",
        PRE,
        PREFECT,
        (
            "prefect.results:_read_server_default_result_storage_block_id",
            "prefect.results:_aread_server_default_result_storage_block_id",
            "prefect.results:_get_default_result_storage",
        ),
        "every flow run and task run that persists a result asks the server again",
    ),
    Patch(
        "prefect_worker.keep_definition_reads",
        PRE,
        PREFECT,
        (
            "prefect.client.orchestration._deployments.client:"
            "DeploymentAsyncClient.read_deployment",
            "prefect.client.orchestration._flows.client:FlowAsyncClient.read_flow",
            "prefect.workers.base:BaseWorker._submit_run",
            "prefect.workers.base:BaseJobConfiguration.resolve_for_flow_run",
        ),
        "the worker reads a run's deployment twice and its flow once per run",
    ),
    Patch(
        "prefect_worker.run_on_time",
        PRE,
        PREFECT,
        (
            "prefect.flow_engine:AsyncFlowRunEngine.set_state",
            "prefect.flow_engine:_flow_parameters",
            "prefect.flow_engine:run_flow_async",
        ),
        "a run taken ahead of its time starts early or late: a TIMER alert fires off time",
    ),
    Patch(
        "prefect_worker.KeptEnvironmentJobConfiguration",
        PRE,
        PREFECT,
        ("prefect.workers.base:BaseJobConfiguration._base_environment",),
        "the settings' environment is made for every run: a fifth of a worker's CPU",
    ),
    Patch(
        "prefect_worker.ProcessWorkerHooks",
        PRE,
        PREFECT,
        (
            "prefect.workers.base:BaseWorker.__init__",
            "prefect.workers.base:BaseWorker.setup",
            "prefect.workers.base:BaseWorker._sync_and_initialize",
            "prefect.workers.base:BaseWorker._give_worker_labels_to_flow_run",
            "prefect.workers.base:BaseWorker._submit_scheduled_flow_runs",
            "prefect.workers.base:BaseWorker._submit_run",
            "prefect.workers.base:BaseWorker._propose_submitting_state",
            "prefect.workers.base:BaseWorker._submit_run_and_capture_errors",
            "prefect.workers.process:ProcessWorker",
        ),
        "the worker exits after a minute of outage; runs wait for the labels' retries; "
        "the watchdog hands back runs a live worker is still starting; a failed read of a "
        "run's deployment ends the worker; each in-process run costs a Submitting state",
    ),
    Patch(
        "typer_cli.lazy_group",
        "typer",
        "0.29.2",
        ("typer.core:TyperGroup",),
        "every command module is imported at each start of the CLI",
    ),
    Patch(
        "typer_cli.group_command",
        "typer",
        "0.29.2",
        ("typer.main:get_group_from_info", "typer.models:TyperInfo.__init__"),
        "a command group cannot be built on its own, only with the whole app",
    ),
    Patch(
        "typer_cli.function_command",
        "typer",
        "0.29.2",
        ("typer.main:get_command_from_info", "typer.main:Typer.command"),
        "a command cannot be built on its own, only with the whole app",
    ),
    Patch(
        "typer_cli.usage_errors",
        "typer",
        "0.29.2",
        (
            "typer._click.exceptions:ClickException",
            "typer._click.exceptions:NoArgsIsHelpError",
            "typer.main:Typer.__call__",
        ),
        "a bad command line prints a traceback instead of one line and exit code 2",
    ),
)
"""Every patch, in the order of their modules; `tests/test_compat.py` runs over it."""

from flows.compat._fingerprints import FINGERPRINTS  # noqa: E402  (after PATCHES: it is data)

__all__ = ["FINGERPRINTS", "PATCHES", "Patch", "fingerprint", "resolve"]
