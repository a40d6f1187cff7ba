"""The internal actions `remember` and `recall`: an agent's steps using the memory store.

A `002` action of type `internal` named `remember` or `recall` is executed by the
`team-task` flow against `models.memory`, for the acting member: what it remembers is its
own (`agent_id` `{member}@{team}`), and it recalls what it may see (its own individual
memories and the team's shared ones). Params are checked against a JSON Schema the way a
tool's are (`invalid params for remember: ...`); the result is a `001` ToolResult, handed
back to the agent in its `003` conversation like a tool's.

    {"action": "remember", "type": "internal", "params": {
        "content": "...", "memory_type": "knowledge", "scope": "individual",
        "importance": 0.8, "tags": ["q4"]}}
    -> {"memory_id": "...", "memory_type": "knowledge", "scope": "individual"}

    {"action": "recall", "type": "internal", "params": {
        "query": "q4 revenue", "limit": 5, "memory_type": "knowledge"}}
    -> {"memories": [{"memory_id", "memory_type", "scope", "content", "importance",
                      "tags", "agent_id", "score"}, ...], "count": N}

Under a v2 `context` block (`flows/scope.py`), a step recalls only the memory types its
`knowledge_relics` name: `memory` (every type) or `memory:TYPE` (e.g. `memory:knowledge`).
A block that names none lets the step recall nothing; `remember` is not limited.

Nothing here imports Prefect.
"""

from __future__ import annotations

from typing import Any

from models import memory as store
from models import memory_search
from models.memory import MemoryScope, MemoryType
from models.tool import ToolResult, schema_errors

__all__ = [
    "MEMORY_RELIC",
    "RECALL",
    "RECALL_SCHEMA",
    "REMEMBER",
    "REMEMBER_SCHEMA",
    "is_memory_relic",
    "memory_action",
    "recallable_types",
    "relic_errors",
]

REMEMBER = "remember"
RECALL = "recall"
MEMORY_RELIC = "memory"
"""A relic naming memories: `memory` (every type) or `memory:TYPE`."""

DEFAULT_RECALL_LIMIT = 5

REMEMBER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "minLength": 1, "maxLength": store.MAX_CONTENT},
        "memory_type": {"enum": [t.value for t in MemoryType]},
        "scope": {"enum": [s.value for s in MemoryScope]},
        "importance": {"type": "number", "minimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["content", "memory_type", "scope"],
    "additionalProperties": False,
}

RECALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": memory_search.MAX_LIMIT},
        "memory_type": {"enum": [t.value for t in MemoryType]},
    },
    "required": ["query"],
    "additionalProperties": False,
}

_SCHEMAS = {REMEMBER: REMEMBER_SCHEMA, RECALL: RECALL_SCHEMA}


def is_memory_relic(relic: str) -> bool:
    """Whether `relic` names memories (`memory` or `memory:TYPE`), valid or not."""
    return relic == MEMORY_RELIC or relic.startswith(f"{MEMORY_RELIC}:")


def relic_errors(relics: list[str]) -> list[str]:
    """The memory relics that name no memory type (`memory:nonsense`)."""
    types = {t.value for t in MemoryType}
    return [
        r for r in relics if r.startswith(f"{MEMORY_RELIC}:") and r.split(":", 1)[1] not in types
    ]


def recallable_types(relics: list[str] | None) -> list[str] | None:
    """The memory types a step may recall: None without a context block (any), else those
    its relics name (every type for `memory`; an empty list: none)."""
    if relics is None:
        return None
    if MEMORY_RELIC in relics:
        return [t.value for t in MemoryType]
    types = {r.split(":", 1)[1] for r in relics if r.startswith(f"{MEMORY_RELIC}:")}
    return [t.value for t in MemoryType if t.value in types]


def memory_action(
    team: str, member: str, action: str, params: dict[str, Any], relics: list[str] | None = None
) -> ToolResult:
    """Runs `remember` or `recall` for `member` of `team`; a FAILURE result says why not.

    `relics` are the step's `context.knowledge_relics` (None: the step has no block).
    """
    errors = schema_errors(_SCHEMAS[action], params)
    if errors:
        return ToolResult.failure(action, f"invalid params for {action}: {'; '.join(errors)}")
    try:
        if action == REMEMBER:
            return _remember(team, member, params)
        return _recall(team, member, params, relics)
    except store.MemoryStoreError as exc:
        return ToolResult.failure(action, f"{action}: {exc}")


def _remember(team: str, member: str, params: dict[str, Any]) -> ToolResult:
    memory = store.add(
        team,
        member,
        content=params["content"],
        memory_type=params["memory_type"],
        scope=params["scope"],
        importance=params.get("importance"),
        tags=params.get("tags"),
    )
    return ToolResult.success(
        REMEMBER,
        {
            "memory_id": str(memory.memory_id),
            "memory_type": memory.memory_type.value,
            "scope": memory.scope.value,
        },
    )


def _recall(team: str, member: str, params: dict[str, Any], relics: list[str] | None) -> ToolResult:
    wanted = [params["memory_type"]] if "memory_type" in params else None
    allowed = recallable_types(relics)
    if allowed is not None:
        named = ", ".join(relics or []) or "none"
        if not allowed:
            return ToolResult.failure(
                RECALL,
                f"the step's context names no memories (knowledge_relics: {named}); "
                "name `memory` or `memory:TYPE` to recall",
            )
        if wanted is not None and wanted[0] not in allowed:
            return ToolResult.failure(
                RECALL,
                f"memory type {wanted[0]!r} is outside the step's context "
                f"(knowledge_relics: {named})",
            )
        wanted = wanted or allowed
    found = memory_search.search(
        team,
        params["query"],
        agent=member,
        memory_types=wanted,
        limit=params.get("limit", DEFAULT_RECALL_LIMIT),
    )
    memories = [
        {
            "memory_id": str(f.memory.memory_id),
            "memory_type": f.memory.memory_type.value,
            "scope": f.memory.scope.value,
            "content": f.memory.content,
            "importance": f.memory.importance,
            "tags": f.memory.tags or [],
            "agent_id": f.memory.agent_id,
            "score": round(f.score, 6),
        }
        for f in found
    ]
    return ToolResult.success(RECALL, {"memories": memories, "count": len(memories)})
