"""Hypothesis strategies for the seed wire formats, one section per group of seeds."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from models.base import format_js_timestamp, format_timestamp

# seeds 002, 003 and tools
#
# Each strategy draws a valid wire document as JSON (dicts, lists, strings), exactly as the seed
# writes it: timestamps with `Z`, optional keys either absent or present, never `null` where the
# seed has no null. Text never holds NUL or a lone surrogate, so PostgreSQL can store it.

safe_text_chars = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")


def safe_text(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Text PostgreSQL can store (no NUL, no lone surrogates)."""
    return st.text(alphabet=safe_text_chars, min_size=min_size, max_size=max_size)


identifiers = safe_text(1, 64)
wire_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2100, 12, 31), timezones=st.just(UTC)
)
wire_timestamps = wire_datetimes.map(format_timestamp)
wire_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | safe_text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(safe_text(0, 10), inner, max_size=3)
    ),
    max_leaves=8,
)
wire_json_objects = st.dictionaries(safe_text(0, 10), wire_json_values, max_size=4)


def _ordered(mapping: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """`st.fixed_dictionaries`, with the keys always in the order given (the seed's order)."""
    return st.fixed_dictionaries(mapping).map(lambda d: {key: d[key] for key in mapping})


def _maybe(draw, data: dict, key: str, strategy) -> None:
    if draw(st.booleans()):
        data[key] = draw(strategy)


# -- 002 Chimera response


@st.composite
def chimera_actions(draw) -> dict:
    data = {
        "action": draw(identifiers),
        "type": draw(st.sampled_from(["tool", "script", "internal"])),
        "params": draw(wire_json_objects),
    }
    _maybe(draw, data, "execution", st.sampled_from(["SYNC", "ASYNC"]))
    _maybe(draw, data, "confidence", st.floats(0.0, 1.0))
    _maybe(draw, data, "warnings", st.lists(safe_text(), max_size=3))
    if data.get("execution") == "ASYNC":
        _maybe(draw, data, "task_id", identifiers)
    return data


@st.composite
def chimera_responses(draw) -> dict:
    """`002` Chimera responses, v1 and v2."""
    data: dict = {
        "status": draw(st.sampled_from(["SUCCESS", "EXECUTING", "ERROR", "TASK_STARTED"]))
    }
    _maybe(
        draw,
        data,
        "context",
        _ordered(
            {
                "knowledge_relics": st.lists(identifiers, max_size=3),
                "security_level": st.sampled_from(["public", "user", "admin"]),
            }
        ),
    )
    thought = _ordered(
        {
            "type": st.sampled_from(["PLAN", "OBSERVATION", "DECISION"]),
            "content": safe_text(),
        }
    )
    data["thoughts"] = draw(st.lists(thought, max_size=3))
    data["actions"] = draw(st.lists(chimera_actions(), max_size=3))
    data["stop"] = draw(st.booleans())
    data["response"] = draw(st.none() | safe_text())
    return data


# -- 003 conversation


@st.composite
def assistant_contents(draw) -> dict:
    """`003` assistant content: toolCall, maybe reasoning, params, in any key order."""
    params = draw(
        st.dictionaries(
            safe_text(1, 12).filter(lambda k: k not in ("toolCall", "reasoning")),
            wire_json_values,
            max_size=3,
        )
    )
    items = [("toolCall", draw(identifiers)), *params.items()]
    if draw(st.booleans()):
        items.append(("reasoning", draw(safe_text())))
    return dict(draw(st.permutations(items)))


def conversation_contents(role: str) -> st.SearchStrategy:
    if role == "system":
        return safe_text()
    if role == "user":
        return _ordered({"userid": safe_text(1, 20), "text": safe_text()})
    return assistant_contents()


@st.composite
def conversation_messages(draw, index: int | None = None, turn: int | None = None) -> dict:
    """One `003` message (index and turn drawn unless given)."""
    role = draw(st.sampled_from(["system", "user", "assistant"]))
    return {
        "index": draw(st.integers(0, 1000)) if index is None else index,
        "turn": draw(st.integers(0, 1000)) if turn is None else turn,
        "timestamp": draw(wire_timestamps),
        "role": role,
        "content": draw(conversation_contents(role)),
    }


@st.composite
def conversations(draw, max_size: int = 6) -> list[dict]:
    """A `003` conversation: indices 0, 1, 2, ..., turns never decreasing."""
    size = draw(st.integers(0, max_size))
    turn = draw(st.integers(0, 3))
    messages = []
    for index in range(size):
        turn += draw(st.integers(0, 2))
        messages.append(draw(conversation_messages(index=index, turn=turn)))
    return messages


# -- 000 tools, feedback, agent configuration, experience log; 001 ToolResult

_leaf_schemas = st.builds(
    lambda kind, description: {
        "type": kind,
        **({"description": description} if description else {}),
    },
    st.sampled_from(["string", "integer", "number", "boolean", "null", "array"]),
    st.none() | safe_text(1, 20),
)


@st.composite
def json_schemas(draw) -> dict:
    """Valid JSON Schemas for a tool's input or output: an object of typed properties."""
    properties = draw(st.dictionaries(safe_text(1, 12), _leaf_schemas, max_size=4))
    schema: dict = {"type": "object", "properties": properties}
    if properties and draw(st.booleans()):
        schema["required"] = sorted(draw(st.sets(st.sampled_from(sorted(properties)), min_size=1)))
    _maybe(draw, schema, "additionalProperties", st.booleans())
    return schema


tool_definitions = _ordered(
    {
        "tool_id": identifiers,
        "type": st.sampled_from(["elisp", "script"]),
        "description": safe_text(),
        "command": safe_text(1, 40),
        "input_schema": json_schemas(),
        "output_schema": json_schemas(),
        "created_at": wire_timestamps,
        "updated_at": wire_timestamps,
    }
)
feedbacks = _ordered(
    {
        "execution_id": identifiers,
        "stdout": safe_text(0, 200),
        "stderr": safe_text(0, 200),
        "exit_code": st.integers(-(2**31), 2**31 - 1),
        "created_at": wire_timestamps,
    }
)


@st.composite
def tool_results(draw) -> dict:
    """`001` ToolResults: a FAILURE always says why."""
    status = draw(st.sampled_from(["SUCCESS", "FAILURE"]))
    return {
        "tool_name": draw(identifiers),
        "status": status,
        "result": draw(st.none() | wire_json_objects),
        "error_message": draw(safe_text(1) if status == "FAILURE" else st.none() | safe_text()),
    }


agent_configurations = _ordered(
    {
        "agent_id": identifiers,
        "name": safe_text(1, 40),
        "description": safe_text(),
        "image": safe_text(),
        "resources": st.lists(identifiers, max_size=3),
        "tools": st.lists(identifiers, max_size=3),
        "created_at": wire_timestamps,
        "updated_at": wire_timestamps,
        "status": st.sampled_from(["ready", "running", "pending", "finished"]),
        "current_task": st.none() | safe_text(),
    }
)


@st.composite
def experience_logs(draw) -> dict:
    """`000` Experience Logs: the execution ends no earlier than it starts."""
    start, end = sorted([draw(wire_datetimes), draw(wire_datetimes)])
    return {
        "log_id": draw(identifiers),
        "agent_id": draw(identifiers),
        "task_id": draw(identifiers),
        "start_time": format_timestamp(start),
        "end_time": format_timestamp(end),
        "status": draw(st.sampled_from(["success", "failure"])),
        "feedback_id": draw(identifiers),
        "created_at": draw(wire_timestamps),
        "updated_at": draw(wire_timestamps),
    }


# seeds 000 and 001
#
# Contexts, prompt templates, projects, resources, knowledge entries and messages (`000`);
# tasks, notifications, memories and API envelopes (`001`); `004` task-status.json. Each draws
# the JSON exactly as the model writes it back: `000` keys all present, `001` optional keys
# absent, present, or (where the seed allows null) an explicit `null`. Floats in JSON objects
# stay below 2**53 so PostgreSQL's JSONB (exact decimals) gives back the same number.

_ABSENT = object()

wire_uuids = st.uuids().map(str)
short_ids = safe_text(1, 24)
js_timestamps = wire_datetimes.map(format_js_timestamp)
db_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(-(2.0**53), 2.0**53, allow_nan=False, allow_infinity=False)
    | safe_text(0, 20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(safe_text(0, 8), inner, max_size=3),
    max_leaves=6,
)
db_json_objects = st.dictionaries(safe_text(0, 8), db_json_values, max_size=4)
unit_floats = st.floats(0.0, 1.0, allow_nan=False)


def _optional(draw, data: dict, key: str, strategy, *, nullable: bool = True) -> None:
    """Leaves `key` out, sets it from `strategy`, or (if `nullable`) sets it to null."""
    choices = [_ABSENT, strategy] + ([None] if nullable else [])
    choice = draw(st.sampled_from(range(len(choices))))
    if choices[choice] is _ABSENT:
        return
    data[key] = None if choices[choice] is None else draw(strategy)


# -- 000

elmo_statuses = st.sampled_from(["ready", "running", "pending", "finished"])
resource_types = st.sampled_from(["file", "link", "data"])
resource_accesses = st.sampled_from(["read", "write"])

contexts = st.fixed_dictionaries(
    {
        "project_id": short_ids,
        "milestone_id": st.none() | short_ids,
        "task_id": st.none() | short_ids,
        "process_id": st.none() | short_ids,
        "thread_id": st.none() | short_ids,
        "branch_id": st.none() | short_ids,
        "description": safe_text(),
        "resources": st.lists(
            st.fixed_dictionaries(
                {
                    "type": resource_types,
                    "id": short_ids,
                    "path": safe_text(),
                    "access": resource_accesses,
                }
            ),
            max_size=3,
        ),
        "tags": st.lists(safe_text(0, 12), max_size=3),
        "created_at": wire_timestamps,
        "updated_at": wire_timestamps,
        "status": elmo_statuses,
        "parent_context": st.none()
        | st.fixed_dictionaries(
            {
                "project_id": short_ids,
                "milestone_id": st.none() | short_ids,
                "task_id": st.none() | short_ids,
            }
        ),
    }
)
prompt_templates = st.fixed_dictionaries(
    {
        "template_id": short_ids,
        "version": st.integers(0, 2**31 - 1),
        "description": safe_text(),
        "template": safe_text(0, 200),
        "variables": st.lists(safe_text(1, 12), max_size=4),
        "created_at": wire_timestamps,
        "updated_at": wire_timestamps,
    }
)
projects = st.fixed_dictionaries(
    {
        "project_id": short_ids,
        "name": safe_text(1, 40),
        "description": safe_text(),
        "created_at": wire_timestamps,
        "updated_at": wire_timestamps,
        "status": elmo_statuses,
        "milestones": st.lists(short_ids, max_size=4),
        "tags": st.lists(safe_text(0, 12), max_size=3),
    }
)
resource_definitions = st.fixed_dictionaries(
    {
        "resource_id": short_ids,
        "name": safe_text(1, 40),
        "type": resource_types,
        "description": safe_text(),
        "path": safe_text(),
        "access": resource_accesses,
        "created_at": wire_timestamps,
        "updated_at": wire_timestamps,
        "tags": st.lists(safe_text(0, 12), max_size=3),
    }
)


@st.composite
def knowledge_entries(draw) -> dict:
    """`000` Knowledge Entries: text and link hold a string, json an object."""
    kind = draw(st.sampled_from(["text", "json", "link"]))
    return {
        "knowledge_id": draw(short_ids),
        "type": kind,
        "content": draw(db_json_objects if kind == "json" else safe_text(0, 200)),
        "summary": draw(safe_text()),
        "created_at": draw(wire_timestamps),
        "updated_at": draw(wire_timestamps),
        "tags": draw(st.lists(safe_text(0, 12), max_size=3)),
        "source": draw(safe_text()),
    }


elmo_messages = st.fixed_dictionaries(
    {
        "message_id": short_ids,
        "type": st.sampled_from(["log", "command", "event"]),
        "sender": short_ids,
        "recipient": short_ids,
        "timestamp": wire_timestamps,
        "payload": st.fixed_dictionaries(
            {"type": safe_text(0, 16), "content": safe_text() | db_json_objects}
        ),
        "status": st.sampled_from(["sent", "read", "junk"]),
    }
)

# -- 001 tasks

agent_refs = safe_text(1, 32)
task_titles = safe_text(1, 80) | st.just("t" * 500)


@st.composite
def task_creates(draw) -> dict:
    """`001` TaskCreate inputs."""
    data: dict = {"title": draw(task_titles)}
    _optional(draw, data, "creator_id", agent_refs)
    _optional(draw, data, "description", safe_text(0, 200))
    _optional(draw, data, "assignee_ids", st.lists(agent_refs, max_size=4, unique=True))
    return data


@st.composite
def tasks(draw) -> dict:
    """`001` Tasks as the API returns them."""
    data: dict = {
        "id": draw(wire_uuids),
        "created_at": draw(wire_timestamps),
        "title": draw(task_titles),
        "status": draw(st.sampled_from(["pending", "in_progress", "completed", "archived"])),
        "assignee_ids": draw(st.lists(agent_refs, max_size=4, unique=True)),
    }
    _optional(draw, data, "creator_id", agent_refs)
    _optional(draw, data, "description", safe_text(0, 200))
    return data


# -- 001 notifications


@st.composite
def _user_message_payloads(draw) -> dict:
    data = {
        "content": draw(safe_text()),
        "content_type": draw(st.sampled_from(["text", "voice_transcript", "image_id"])),
    }
    _optional(draw, data, "session_id", short_ids)
    return data


@st.composite
def _agent_message_payloads(draw) -> dict:
    data = {"sender_agent_id": draw(agent_refs), "content": draw(safe_text())}
    _optional(draw, data, "attachments", st.lists(short_ids, max_size=3))
    return data


@st.composite
def _task_assignment_payloads(draw) -> dict:
    data = {
        "task_id": draw(wire_uuids),
        "task_description": draw(safe_text()),
        "priority": draw(st.sampled_from(["low", "normal", "high", "critical"])),
    }
    _optional(draw, data, "deadline", wire_timestamps)
    _optional(draw, data, "context", db_json_objects)
    return data


@st.composite
def _tool_result_payloads(draw) -> dict:
    status = draw(st.sampled_from(["SUCCESS", "FAILURE"]))
    return {
        "tool_name": draw(short_ids),
        "status": status,
        "result": draw(st.none() | db_json_objects),
        "error_message": draw(safe_text(1) if status == "FAILURE" else st.none() | safe_text()),
    }


@st.composite
def _system_alert_payloads(draw) -> dict:
    data = {
        "alert_type": draw(st.sampled_from(["TIMER", "ALARM", "SCHEDULED_EVENT"])),
        "alert_name": draw(short_ids),
    }
    _optional(draw, data, "message", safe_text())
    return data


@st.composite
def _status_update_payloads(draw) -> dict:
    data = {
        "agent_id": draw(agent_refs),
        "status": draw(st.sampled_from(["idle", "busy", "offline", "error"])),
    }
    _optional(draw, data, "current_task", safe_text())
    _optional(draw, data, "capacity", unit_floats)
    _optional(draw, data, "message", safe_text())
    return data


@st.composite
def _capability_broadcast_payloads(draw) -> dict:
    data = {"agent_id": draw(agent_refs), "capabilities": draw(st.lists(short_ids, max_size=4))}
    _optional(draw, data, "version", safe_text(1, 12))
    _optional(draw, data, "status", safe_text(1, 12))
    return data


NOTIFICATION_PAYLOADS = {
    "user_message": _user_message_payloads(),
    "agent_message": _agent_message_payloads(),
    "task_assignment": _task_assignment_payloads(),
    "tool_result": _tool_result_payloads(),
    "system_alert": _system_alert_payloads(),
    "status_update": _status_update_payloads(),
    "capability_broadcast": _capability_broadcast_payloads(),
}


@st.composite
def notifications(draw, notification_type: str | None = None) -> dict:
    """`001` notifications of `notification_type` (any type if None), with a full envelope."""
    kind = notification_type or draw(st.sampled_from(sorted(NOTIFICATION_PAYLOADS)))
    return {
        "notification_id": draw(wire_uuids),
        "timestamp": draw(wire_timestamps),
        "recipient_agent_id": draw(agent_refs),
        "notification_type": kind,
        "source": draw(safe_text(0, 24)),
        "payload": draw(NOTIFICATION_PAYLOADS[kind]),
    }


# -- 001 memory and API envelopes


@st.composite
def memories(draw) -> dict:
    """`001` Memory objects."""
    data: dict = {
        "memory_id": draw(wire_uuids),
        "memory_type": draw(
            st.sampled_from(
                [
                    "user_preference",
                    "user_fact",
                    "conversation_context",
                    "agent_procedure",
                    "knowledge",
                    "event_pattern",
                    "error_handling",
                    "proactive_action",
                ]
            )
        ),
        "content": draw(safe_text(0, 200)),
        "scope": draw(st.sampled_from(["individual", "shared"])),
    }
    _optional(draw, data, "embedding", st.lists(st.floats(-1.0, 1.0), max_size=16))
    for key in ("source", "agent_id"):
        _optional(draw, data, key, agent_refs)
    for key in ("importance", "confidence"):
        _optional(draw, data, key, unit_floats)
    _optional(draw, data, "tags", st.lists(safe_text(0, 12), max_size=3))
    _optional(draw, data, "related_memories", st.lists(wire_uuids, max_size=3))
    for key in ("created_at", "updated_at", "last_accessed"):
        _optional(draw, data, key, wire_timestamps)
    _optional(draw, data, "access_count", st.integers(0, 2**63 - 1))
    return data


@st.composite
def api_successes(draw) -> dict:
    """`001` success envelopes; `data` is any JSON."""
    data: dict = {"status": "success"}
    _optional(draw, data, "data", db_json_values)
    _optional(draw, data, "message", safe_text())
    return data


@st.composite
def api_errors(draw) -> dict:
    """`001` error envelopes."""
    data: dict = {"status": "error", "error": draw(safe_text(1, 24)), "message": draw(safe_text())}
    _optional(draw, data, "details", db_json_objects)
    return data


# -- 004 task-status.json

team_names = (
    st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8),
        min_size=1,
        max_size=4,
    )
    .map("-".join)
    .filter(lambda name: 3 <= len(name) <= 64)
)
member_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,15}", fullmatch=True)
counts = st.integers(0, 2**53 - 1)


@st.composite
def task_statuses(draw) -> dict:
    """`004` task-status.json documents, sometimes with keys the seed does not name."""
    data: dict = {
        "agentId": f"{draw(member_names)}@{draw(team_names)}",
        "status": draw(st.sampled_from(["running", "idle", "complete", "error"])),
        "startedAt": draw(js_timestamps),
        "lastActiveAt": draw(js_timestamps),
    }
    _optional(draw, data, "completedAt", js_timestamps)
    _optional(draw, data, "errorMessage", safe_text())
    metrics = st.fixed_dictionaries(
        {
            "tokens_used": counts,
            "tasks_completed": counts,
            "avg_response_time": st.integers(0, 10**9) | st.floats(0.0, 1e9),
        },
        optional={"cost_usd": st.floats(0.0, 1e6)},
    )
    _optional(draw, data, "metrics", metrics)
    _optional(draw, data, "sessionId", safe_text(1, 24), nullable=False)
    return data
