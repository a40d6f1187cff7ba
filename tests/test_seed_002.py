"""Seed 002 Chimera agent response, v1 and v2: the seed examples read and write back unchanged,
bad responses are refused at the field that is wrong, generated responses round-trip."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from pydantic import ValidationError
from strategies import chimera_responses

from models.chimera_response import ChimeraResponse, ChimeraStatus, Execution, ThoughtType

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = ["002_v1.json", "002_v2_task_started.json", "002_v2_context.json"]


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_seed_example_reads_and_writes_back_unchanged(name: str) -> None:
    data = fixture(name)
    response = ChimeraResponse.model_validate(data)
    assert response.to_wire() == data
    assert json.loads(response.to_json()) == data


def test_v1_template_instance_uses_every_v1_key() -> None:
    response = ChimeraResponse.model_validate(fixture("002_v1.json"))
    assert response.version == "1.0"
    action = response.actions[0]
    assert action.mode is Execution.SYNC
    assert action.confidence == 0.92
    assert action.warnings == ["The task list may be up to one minute old."]
    assert response.response is None


def test_v2_task_started_dispatches_an_async_action() -> None:
    response = ChimeraResponse.model_validate(fixture("002_v2_task_started.json"))
    assert response.version == "2.0"
    assert response.status is ChimeraStatus.TASK_STARTED
    assert [t.type for t in response.thoughts] == [ThoughtType.PLAN, ThoughtType.DECISION]
    assert response.actions[0].mode is Execution.ASYNC
    assert response.stop is True


def test_action_without_execution_runs_sync_and_writes_no_execution() -> None:
    response = ChimeraResponse.model_validate(fixture("002_v2_context.json"))
    action = response.actions[0]
    assert action.execution is None
    assert action.mode is Execution.SYNC
    assert "execution" not in response.to_wire()["actions"][0]
    assert response.to_wire()["response"] is None  # always on the wire, even when null
    assert response.context is not None
    assert response.context.knowledge_relics == ["relic_id_project_docs_v2"]


def test_async_action_may_carry_its_task_id() -> None:
    data = fixture("002_v2_task_started.json")
    data["actions"][0]["task_id"] = "a7b3c9d1-e4f6"
    assert ChimeraResponse.model_validate(data).to_wire() == data


# --- bad responses -------------------------------------------------------------------------


def changed(name: str, path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The fixture with the key at `path` set to `value` (or removed if `value` is DELETE)."""
    data = copy.deepcopy(fixture(name))
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


DELETE = object()
V1, STARTED, CONTEXT = EXAMPLES

BAD = [
    pytest.param(
        changed(V1, ("actions", 0, "execution"), "LATER"),
        ("actions", 0, "execution"),
        id="execution-later",
    ),
    pytest.param(changed(V1, ("status",), "DONE"), ("status",), id="status-done"),
    pytest.param(
        changed(V1, ("thoughts", 0, "type"), "WISH"), ("thoughts", 0, "type"), id="thought-wish"
    ),
    pytest.param(
        changed(V1, ("actions", 0, "type"), "shell"), ("actions", 0, "type"), id="action-shell"
    ),
    pytest.param(
        changed(V1, ("actions", 0, "confidence"), 1.5),
        ("actions", 0, "confidence"),
        id="confidence-above-1",
    ),
    pytest.param(
        changed(V1, ("actions", 0, "confidence"), "0.9"),
        ("actions", 0, "confidence"),
        id="confidence-as-string",
    ),
    pytest.param(
        changed(V1, ("actions", 0, "execution"), None),
        ("actions", 0, "execution"),
        id="execution-null",
    ),
    pytest.param(
        changed(V1, ("actions", 0, "params"), "target=//main:app"),
        ("actions", 0, "params"),
        id="params-not-an-object",
    ),
    pytest.param(changed(V1, ("response",), DELETE), ("response",), id="response-missing"),
    pytest.param(changed(V1, ("stop",), "yes"), ("stop",), id="stop-not-boolean"),
    pytest.param(
        changed(V1, ("actions", 0, "task_id"), "t-1"),
        ("actions", 0, "task_id"),
        id="task-id-on-sync-action",
    ),
    pytest.param(
        changed(CONTEXT, ("context", "security_level"), DELETE),
        ("context", "security_level"),
        id="context-without-security-level",
    ),
    pytest.param(
        changed(CONTEXT, ("context", "security_level"), "root"),
        ("context", "security_level"),
        id="context-with-an-unknown-security-level",
    ),
    pytest.param(changed(STARTED, ("priority",), "high"), ("priority",), id="unknown-key"),
]


@pytest.mark.parametrize(("data", "loc"), BAD)
def test_bad_response_is_refused_at_the_wrong_field(
    data: dict[str, Any], loc: tuple[Any, ...]
) -> None:
    with pytest.raises(ValidationError) as refused:
        ChimeraResponse.model_validate(data)
    assert [e["loc"] for e in refused.value.errors()] == [loc]


def test_refusal_names_the_allowed_executions() -> None:
    with pytest.raises(ValidationError, match="'SYNC' or 'ASYNC'"):
        ChimeraResponse.model_validate(changed(V1, ("actions", 0, "execution"), "LATER"))


# --- generated responses -------------------------------------------------------------------


@given(data=chimera_responses())
def test_generated_response_round_trips_through_json(data: dict) -> None:
    assert ChimeraResponse.model_validate_json(json.dumps(data)).to_wire() == data
