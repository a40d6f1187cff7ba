"""Every change teamflow makes to a private part of a library, fenced in one package.

One module per library: `prefect_server` (Prefect's server, as `flows.server` starts it),
`prefect_worker` (Prefect's worker and result storage, in `teamflow worker`),
`prefect_engine` (the flow engine, from inside a run), `prefect_client` (Prefect's API past
its Python client), `sqlalchemy_sqlite` (SQLAlchemy's aiosqlite adapter, in Prefect's
server) and `typer_cli` (Typer's command building, for `teamflow`'s lazy CLI). Each patch
is a function (or class) there whose docstring names the version it was written against,
what breaks without it, and the upstream issue; `docs/upstream.md` has the wording for
upstream.

`PATCHES` lists each patch with the library parts it leans on ("targets") and a
fingerprint of each: a hash of its source and its signature, taken on the pinned version.
`tests/test_compat.py` compares them with what is installed, so a version bump names
exactly the patches to re-check; `python -m flows.compat` prints the current fingerprints
to paste here once a patch has been re-checked. Importing this package imports no library.
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
)
"""Every patch, in the order of their modules; `tests/test_compat.py` runs over it."""

from flows.compat._fingerprints import FINGERPRINTS  # noqa: E402  (after PATCHES: it is data)

__all__ = ["FINGERPRINTS", "PATCHES", "Patch", "fingerprint", "resolve"]
