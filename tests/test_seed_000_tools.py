"""Seed 000 Tool Definition, Feedback, Agent Configuration, Experience Log and the 001 ToolResult:
the seed examples read and write back unchanged, bad documents are refused at the field that
is wrong, and generated documents survive JSON and the database unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel, ValidationError
from sqlmodel import Session, delete
from strategies import (
    agent_configurations,
    experience_logs,
    feedbacks,
    tool_definitions,
    tool_results,
)

from models.agent import AgentConfiguration, AgentConfigurationRow, ExperienceLog, ExperienceLogRow
from models.tool import Feedback, FeedbackRow, ToolDefinition, ToolDefinitionRow, ToolResult

FIXTURES = Path(__file__).parent / "fixtures"
DB_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def with_changes(name: str, **changes: Any) -> dict[str, Any]:
    return {**fixture(name), **changes}


def without(name: str, key: str) -> dict[str, Any]:
    data = fixture(name)
    del data[key]
    return data


# --- the seed examples ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("000_tool_definition.json", ToolDefinition),
        ("000_feedback.json", Feedback),
        ("000_agent_configuration.json", AgentConfiguration),
        ("000_experience_log.json", ExperienceLog),
        ("001_tool_result_success.json", ToolResult),
        ("001_tool_result_failure.json", ToolResult),
    ],
)
def test_seed_example_reads_and_writes_back_unchanged(name: str, model: type[BaseModel]) -> None:
    data = fixture(name)
    assert model.model_validate(data).to_wire() == data  # type: ignore[attr-defined]


def test_tool_result_keeps_its_explicit_nulls() -> None:
    success = ToolResult.model_validate(fixture("001_tool_result_success.json")).to_wire()
    failure = ToolResult.model_validate(fixture("001_tool_result_failure.json")).to_wire()
    assert success["error_message"] is None and "error_message" in success
    assert failure["result"] is None and "result" in failure


def test_tool_definition_checks_params_against_its_input_schema() -> None:
    tool = ToolDefinition.model_validate(fixture("000_tool_definition.json"))
    assert tool.input_errors({"arg1": "notes.txt", "arg2": 10}) == []
    assert tool.input_errors({"arg2": "ten"}) == [
        "(root): 'arg1' is a required property",
        "arg2: 'ten' is not of type 'integer'",
    ]
    assert tool.output_errors({"result": "42", "status": 0}) == []


# --- bad documents -------------------------------------------------------------------------


BAD = [
    pytest.param(
        ToolDefinition,
        with_changes("000_tool_definition.json", type="python"),
        ("type",),
        id="tool-type-python",
    ),
    pytest.param(
        ToolDefinition,
        with_changes("000_tool_definition.json", input_schema={"type": 5}),
        ("input_schema",),
        id="input-schema-invalid",
    ),
    pytest.param(
        ToolDefinition,
        with_changes("000_tool_definition.json", output_schema={"properties": {"x": 3}}),
        ("output_schema",),
        id="output-schema-invalid",
    ),
    pytest.param(
        ToolDefinition,
        with_changes("000_tool_definition.json", created_at="18/12/2024"),
        ("created_at",),
        id="tool-created-at-not-iso",
    ),
    pytest.param(
        ToolDefinition,
        with_changes("000_tool_definition.json", tool_id=""),
        ("tool_id",),
        id="tool-id-empty",
    ),
    pytest.param(
        Feedback,
        with_changes("000_feedback.json", exit_code="abc"),
        ("exit_code",),
        id="exit-code-abc",
    ),
    pytest.param(
        Feedback,
        with_changes("000_feedback.json", exit_code=1.5),
        ("exit_code",),
        id="exit-code-float",
    ),
    pytest.param(Feedback, without("000_feedback.json", "stderr"), ("stderr",), id="no-stderr"),
    pytest.param(
        ToolResult,
        with_changes("001_tool_result_success.json", status="OK"),
        ("status",),
        id="tool-result-status-ok",
    ),
    pytest.param(
        ToolResult,
        without("001_tool_result_success.json", "error_message"),
        ("error_message",),
        id="tool-result-error-message-missing",
    ),
    pytest.param(
        ToolResult,
        with_changes("001_tool_result_failure.json", error_message=None),
        ("error_message",),
        id="failure-without-reason",
    ),
    pytest.param(
        ExperienceLog,
        with_changes("000_experience_log.json", status="partial"),
        ("status",),
        id="experience-status-partial",
    ),
    pytest.param(
        ExperienceLog,
        with_changes("000_experience_log.json", end_time="2024-12-18T14:00:00Z"),
        ("end_time",),
        id="experience-ends-before-start",
    ),
    pytest.param(
        AgentConfiguration,
        with_changes("000_agent_configuration.json", status="idle"),
        ("status",),
        id="agent-status-idle",
    ),
    pytest.param(
        AgentConfiguration,
        with_changes("000_agent_configuration.json", tools="word-count"),
        ("tools",),
        id="agent-tools-not-a-list",
    ),
    pytest.param(
        AgentConfiguration,
        without("000_agent_configuration.json", "current_task"),
        ("current_task",),
        id="agent-current-task-missing",
    ),
    pytest.param(
        AgentConfiguration,
        with_changes("000_agent_configuration.json", team="x"),
        ("team",),
        id="agent-unknown-key",
    ),
]


@pytest.mark.parametrize(("model", "data", "loc"), BAD)
def test_bad_document_is_refused_at_the_wrong_field(
    model: type[BaseModel], data: dict[str, Any], loc: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(data)
    assert [e["loc"] for e in refused.value.errors()] == [loc]


# --- generated documents -------------------------------------------------------------------


@given(data=tool_definitions)
def test_generated_tool_definition_round_trips_through_json(data: dict) -> None:
    assert ToolDefinition.model_validate_json(json.dumps(data)).to_wire() == data


@given(data=feedbacks)
def test_generated_feedback_round_trips_through_json(data: dict) -> None:
    assert Feedback.model_validate_json(json.dumps(data)).to_wire() == data


@given(data=tool_results())
def test_generated_tool_result_round_trips_through_json(data: dict) -> None:
    assert ToolResult.model_validate_json(json.dumps(data)).to_wire() == data


@given(data=agent_configurations)
def test_generated_agent_configuration_round_trips_through_json(data: dict) -> None:
    assert AgentConfiguration.model_validate_json(json.dumps(data)).to_wire() == data


@given(data=experience_logs())
def test_generated_experience_log_round_trips_through_json(data: dict) -> None:
    assert ExperienceLog.model_validate_json(json.dumps(data)).to_wire() == data


def _through_the_database(session: Session, row_type: Any, wire: Any, key: str) -> dict:
    """Stores `wire`, reads it back in a fresh session, and removes it again."""
    try:
        session.add(row_type.from_wire(wire))
        session.commit()
        with Session(session.get_bind()) as fresh:
            return fresh.get(row_type, getattr(wire, key)).to_wire().to_wire()
    finally:
        session.rollback()
        session.exec(delete(row_type))
        session.commit()


@DB_SETTINGS
@given(data=tool_definitions)
def test_generated_tool_definition_round_trips_through_the_database(
    session: Session, data: dict
) -> None:
    wire = ToolDefinition.model_validate(data)
    assert _through_the_database(session, ToolDefinitionRow, wire, "tool_id") == data


@DB_SETTINGS
@given(data=feedbacks)
def test_generated_feedback_round_trips_through_the_database(session: Session, data: dict) -> None:
    wire = Feedback.model_validate(data)
    assert _through_the_database(session, FeedbackRow, wire, "execution_id") == data


@DB_SETTINGS
@given(data=agent_configurations)
def test_generated_agent_configuration_round_trips_through_the_database(
    session: Session, data: dict
) -> None:
    wire = AgentConfiguration.model_validate(data)
    assert _through_the_database(session, AgentConfigurationRow, wire, "agent_id") == data


@DB_SETTINGS
@given(data=experience_logs())
def test_generated_experience_log_round_trips_through_the_database(
    session: Session, data: dict
) -> None:
    wire = ExperienceLog.model_validate(data)
    assert _through_the_database(session, ExperienceLogRow, wire, "log_id") == data


@pytest.mark.parametrize(
    ("name", "model", "row_type", "key"),
    [
        ("000_tool_definition.json", ToolDefinition, ToolDefinitionRow, "tool_id"),
        ("000_feedback.json", Feedback, FeedbackRow, "execution_id"),
        ("000_agent_configuration.json", AgentConfiguration, AgentConfigurationRow, "agent_id"),
        ("000_experience_log.json", ExperienceLog, ExperienceLogRow, "log_id"),
    ],
)
def test_seed_example_round_trips_through_the_database(
    session: Session, name: str, model: Any, row_type: Any, key: str
) -> None:
    data = fixture(name)
    assert _through_the_database(session, row_type, model.model_validate(data), key) == data
