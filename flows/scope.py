"""A step's scope: what the `002` v2 `context` block lets one step use.

A Chimera response without a `context` block runs as it always has: the member's tools, with
the member's resources (`runtime.resources`) guarding writes (`flows.tools.check_access`).
With a block, the step may draw only on what the block names, and the `team-task` flow
enforces it where it executes the step's actions:

- `knowledge_relics` are ids of `000` Knowledge Entries (`knowledge_entries`) and of `000`
  resources: the member's `runtime.resources` (by `id`) and the stored Resource Definitions
  (`resources`, by `resource_id`). An id that is none of these fails the step with a
  `ScopeError` naming it: a misspelt relic is never silently ignored.
- A `tool` or `script` action whose params refer to a known resource the block does not name
  is refused before anything runs: its `001` ToolResult is a FAILURE that names the param, the
  resource and the relics. A param refers to a `file` or `data` resource when it is a path
  the tool writes (`x-teamflow-writes`) or a path that exists, and that path is the
  resource's, lies inside it (the most specific resource covering it decides, as for access)
  or is a folder holding it; to a `link` resource when it is the link's URL or a URL below
  it. Paths and URLs no known resource covers are not governed, as without a block. The
  resources in force for the read/write rule are then the member's and the stored ones, so
  writing a named resource whose access is `read` is still refused.
- `memory` and `memory:TYPE` name the memory types the internal action `recall` may search
  (`flows/memory_actions.py`); under a block naming none, a step recalls nothing.
- The internal action `read_knowledge` (`{"knowledge_id": ...}`) gives back a Knowledge
  Entry; under a block, only one the block names.
- `security_level` is one of `public < user < admin` (`models.chimera_response.SecurityLevel`;
  the wire refuses others). The seeds give resources and knowledge no level, so the level
  does not gate them one by one; it is capped by the member: a step may not claim more than
  the member's `runtime.security_level` (default `user`), else the step fails.

Nothing here imports Prefect.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import Session

from flows.memory_actions import is_memory_relic, relic_errors
from flows.runtimes import StepError
from flows.tools import written_paths
from models.chimera_response import ActionContext, SecurityLevel
from models.knowledge import (
    ContextResource,
    KnowledgeError,
    ResourceType,
    get_knowledge,
    knowledge_ids,
    list_resources,
)
from models.memory import MemoryType
from models.tool import ToolDefinition, ToolResult

__all__ = [
    "DEFAULT_CLEARANCE",
    "READ_KNOWLEDGE",
    "ScopeError",
    "StepScope",
    "read_knowledge",
    "step_scope",
]

DEFAULT_CLEARANCE = SecurityLevel.USER
"""The highest level a member's steps may claim when its runtime config sets none."""

READ_KNOWLEDGE = "read_knowledge"
"""The internal action that gives back a `000` Knowledge Entry: `{"knowledge_id": ...}`."""

_MAX_PATH = 4096
_LEVELS = ", ".join(level.value for level in SecurityLevel)


class ScopeError(StepError):
    """A step's `context` block cannot be honoured: an unknown relic, or a level above the
    member's clearance. The member's work fails with this message."""


@dataclass(frozen=True)
class StepScope:
    """What one step with a `context` block may use."""

    context: ActionContext
    resources: tuple[ContextResource, ...]
    """Every known resource, the member's and the stored ones: the resources in force."""
    named: frozenset[str]
    """The relic ids the block names."""

    @property
    def relics(self) -> str:
        """The named relics, for messages."""
        return ", ".join(self.context.knowledge_relics) or "none"

    def resources_in_force(self) -> list[dict[str, Any]]:
        """The resources for `run_tool` (read access is enforced on all of them)."""
        return [r.to_wire() for r in self.resources]

    def tool_refusals(
        self,
        definition: ToolDefinition,
        params: dict[str, Any],
        *,
        cwd: str | os.PathLike[str] | None = None,
    ) -> list[str]:
        """Why running `definition` with `params` would leave the step's scope (empty:
        allowed). Relative paths are read from `cwd`, symlinks followed."""
        base = Path(cwd) if cwd is not None else Path.cwd()
        files = [
            (r, _resolve(base, r.path))
            for r in self.resources
            if r.type in (ResourceType.FILE, ResourceType.DATA) and r.path
        ]
        links = [r for r in self.resources if r.type is ResourceType.LINK and r.path]
        refusals: list[str] = []
        for param, value, is_url in _references(definition, params, base):
            if is_url:
                outside = self._outside_links(value, links)
            else:
                outside = self._outside_files(_resolve(base, value), files)
            refusals += [
                f"param {param!r} refers to {value}, which is resource {r.id!r} ({r.path}); "
                f"the step's context does not name it (knowledge_relics: {self.relics})"
                for r in outside
            ]
        return refusals

    def _outside_files(
        self, target: Path, files: list[tuple[ContextResource, Path]]
    ) -> list[ContextResource]:
        covering = [(r, p) for r, p in files if target == p or target.is_relative_to(p)]
        named_depth = max((len(p.parts) for r, p in covering if r.id in self.named), default=-1)
        outside = [r for r, p in covering if r.id not in self.named and len(p.parts) > named_depth]
        outside += [
            r
            for r, p in files
            if r.id not in self.named and p != target and p.is_relative_to(target)
        ]
        return _unique(outside)

    def _outside_links(self, url: str, links: list[ContextResource]) -> list[ContextResource]:
        covering = [r for r in links if _url_covers(r.path, url)]
        named_depth = max((len(r.path) for r in covering if r.id in self.named), default=-1)
        outside = [r for r in covering if r.id not in self.named and len(r.path) > named_depth]
        return _unique(outside)


def step_scope(
    context: ActionContext | None,
    *,
    resources: Sequence[ContextResource | Mapping[str, Any]] | None = None,
    clearance: str | None = None,
    session: Session | None = None,
) -> StepScope | None:
    """The scope of a step with `context` (None without a block: the step is not limited).

    Args:
        context: the step's `002` v2 `context` block.
        resources: the member's `runtime.resources`.
        clearance: the member's `runtime.security_level` (default `user`).

    Raises:
        ScopeError: the block names an id that is no knowledge entry or resource, or asks for
            a level above the member's clearance (or the member's clearance is no level).
    """
    if context is None:
        return None
    try:
        ceiling = SecurityLevel(clearance) if clearance is not None else DEFAULT_CLEARANCE
    except ValueError:
        raise ScopeError(
            f"the member's runtime security_level {clearance!r} is not one of {_LEVELS}"
        ) from None
    if context.security_level.rank > ceiling.rank:
        raise ScopeError(
            f"the step's context asks for security_level {context.security_level.value!r}, "
            f"above the member's {ceiling.value!r} (its runtime security_level)"
        )
    known: dict[str, ContextResource] = {
        d.resource_id: ContextResource(type=d.type, id=d.resource_id, path=d.path, access=d.access)
        for d in list_resources(session=session)
    }
    for item in resources or []:
        resource = (
            item if isinstance(item, ContextResource) else ContextResource.model_validate(item)
        )
        known[resource.id] = resource  # the member's own definition wins
    relics = list(dict.fromkeys(context.knowledge_relics))
    bad_memory = relic_errors(relics)
    if bad_memory:
        names = ", ".join(repr(r) for r in bad_memory)
        types = ", ".join(t.value for t in MemoryType)
        raise ScopeError(
            f"the step's context names knowledge relic {names}, but memory types are {types}"
        )
    entries = knowledge_ids(relics, session=session)
    unknown = [r for r in relics if r not in known and r not in entries and not is_memory_relic(r)]
    if unknown:
        names = ", ".join(repr(r) for r in unknown)
        raise ScopeError(
            f"the step's context names knowledge relic {names}, but no knowledge entry or "
            f"resource has that id"
        )
    return StepScope(context=context, resources=tuple(known.values()), named=frozenset(relics))


def read_knowledge(params: dict[str, Any], scope: StepScope | None) -> ToolResult:
    """The `read_knowledge` internal action: the entry as a `001` ToolResult, or a FAILURE
    saying why (no such entry, or one the step's context does not name)."""
    knowledge_id = params.get("knowledge_id")
    if not isinstance(knowledge_id, str) or not knowledge_id:
        return ToolResult.failure(
            READ_KNOWLEDGE, "read_knowledge needs a knowledge_id param (a non-empty string)"
        )
    if scope is not None and knowledge_id not in scope.named:
        return ToolResult.failure(
            READ_KNOWLEDGE,
            f"knowledge entry {knowledge_id!r} is outside the step's context "
            f"(knowledge_relics: {scope.relics})",
        )
    try:
        entry = get_knowledge(knowledge_id)
    except KnowledgeError as exc:
        return ToolResult.failure(READ_KNOWLEDGE, str(exc))
    return ToolResult.success(READ_KNOWLEDGE, entry.to_wire())


# --- what params refer to -------------------------------------------------------------------


def _references(
    definition: ToolDefinition, params: dict[str, Any], base: Path
) -> Iterator[tuple[str, str, bool]]:
    """(param, value, is_url) for each param value that may name a resource: the paths the
    tool writes, and any other string that is a URL or names a path that exists."""
    written = written_paths(definition, params)
    for name, value in written.items():
        yield name, value, False
    for name, value in _strings(params):
        if name in written:
            continue
        if "://" in value:
            yield name, value, True
        elif _exists(base, value):
            yield name, value, False


def _strings(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield prefix, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _strings(item, f"{prefix}.{position}")


def _exists(base: Path, value: str) -> bool:
    if not value or len(value) > _MAX_PATH or "\n" in value or "\x00" in value:
        return False
    try:
        return os.path.lexists(base / Path(value).expanduser())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: `~user` with no such user
        return False


def _resolve(base: Path, path: str) -> Path:
    try:
        expanded = Path(path).expanduser()
    except RuntimeError:
        expanded = Path(path)
    return Path(os.path.realpath(base / expanded))


def _url_covers(url: str, value: str) -> bool:
    root = url.rstrip("/")
    return value in (url, root) or any(value.startswith(root + sep) for sep in "/?#")


def _unique(resources: list[ContextResource]) -> list[ContextResource]:
    return list({r.id: r for r in resources}.values())
