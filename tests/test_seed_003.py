"""Seed 003 conversation context and the 001 `messages` / `agent_state` tables: the seed
example reads and writes back (its `"turn": "0"` as 0), the role decides the content, a
conversation is numbered in order, and a conversation stored in `messages` reads back
unchanged."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError
from sqlmodel import Session, delete, select
from strategies import conversation_messages, conversations

from models.agent import AGENT_AVAILABLE, AGENT_BUSY, AGENT_GONE, AgentStateRow, AgentStateStatus
from models.conversation import (
    AssistantContent,
    Conversation,
    ConversationMessage,
    ConversationRole,
    MessageRow,
    UserContent,
    append_message,
    load_conversation,
)

FIXTURES = Path(__file__).parent / "fixtures"
DB_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
USER_TEXT = "Oi, me dê uma sugestão de almoço por favor."


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


# --- the seed example ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["003_message_system.json", "003_message_user.json", "003_message_assistant.json"]
)
def test_seed_message_reads_and_writes_back_unchanged(name: str) -> None:
    data = fixture(name)
    assert ConversationMessage.model_validate(data).to_wire() == data


def test_seed_conversation_reads_turn_zero_string_as_the_integer_zero() -> None:
    data = fixture("003_conversation.json")
    assert data[0]["turn"] == "0"

    conversation = Conversation.model_validate(data)
    assert conversation[0].turn == 0

    wire = conversation.to_wire()
    assert wire[0]["turn"] == 0 and type(wire[0]["turn"]) is int
    expected = copy.deepcopy(data)
    expected[0]["turn"] = 0
    assert wire == expected
    # byte for byte, key order included
    assert json.dumps(wire, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)


def test_seed_conversation_contents_follow_their_roles() -> None:
    conversation = Conversation.model_validate(fixture("003_conversation.json"))
    roles = [m.role for m in conversation]
    assert roles == ["system", "user", "assistant", "assistant"]
    assert isinstance(conversation[0].content, str)
    user = conversation[1].content
    assert isinstance(user, UserContent)
    assert (user.userid, user.text) == ("<@1234546>", USER_TEXT)
    history = conversation[2].content
    assert isinstance(history, AssistantContent)
    assert history.tool_call == "getThreadHistory"
    assert history.params == {"ascending": False}
    assert list(history.to_wire()) == ["toolCall", "ascending", "reasoning"]


def test_assistant_params_keep_their_order_and_a_param_named_tool_call() -> None:
    content = {"tool_call": "x", "toolCall": "search", "b": 1, "a": [2]}
    assert list(AssistantContent.model_validate(content).to_wire()) == list(content)
    assert AssistantContent.model_validate(content).params == {"tool_call": "x", "b": 1, "a": [2]}


# --- bad messages and conversations --------------------------------------------------------


def message(**changes: Any) -> dict[str, Any]:
    return {**fixture("003_message_user.json"), **changes}


BAD_MESSAGES = [
    pytest.param(message(role="tool"), ("role",), id="role-tool"),
    pytest.param(message(timestamp="04/04/2025 12:33"), ("timestamp",), id="timestamp-not-iso"),
    pytest.param(message(timestamp="2025-04-04T12:33:00"), ("timestamp",), id="timestamp-naive"),
    pytest.param(message(role="system"), ("content",), id="system-content-object"),
    pytest.param(message(content={"text": USER_TEXT}), ("content", "userid"), id="no-userid"),
    pytest.param(message(content=USER_TEXT), ("content",), id="user-content-string"),
    pytest.param(
        message(content={"userid": "<@1>", "text": "hi", "mood": "ok"}),
        ("content", "mood"),
        id="user-content-extra-key",
    ),
    pytest.param(
        message(role="assistant", content={"text": "hi"}),
        ("content", "toolCall"),
        id="assistant-without-tool-call",
    ),
    pytest.param(message(turn="-1"), ("turn",), id="turn-negative-string"),
    pytest.param(message(turn="one"), ("turn",), id="turn-word"),
    pytest.param(message(index=-1), ("index",), id="index-negative"),
    pytest.param(message(index="1"), ("index",), id="index-string"),
]


@pytest.mark.parametrize(("data", "loc"), BAD_MESSAGES)
def test_bad_message_is_refused_at_the_wrong_field(
    data: dict[str, Any], loc: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as refused:
        ConversationMessage.model_validate(data)
    assert [e["loc"] for e in refused.value.errors()] == [loc]


def numbered(*pairs: tuple[int, int]) -> list[dict[str, Any]]:
    """Messages with the given (index, turn) pairs."""
    return [
        {**fixture("003_message_system.json"), "index": index, "turn": turn}
        for index, turn in pairs
    ]


BAD_CONVERSATIONS = [
    pytest.param(numbered((0, 0), (2, 0), (1, 0)), (1, "index"), id="indices-out-of-order"),
    pytest.param(numbered((1, 0), (2, 0)), (0, "index"), id="index-not-starting-at-0"),
    pytest.param(numbered((0, 0), (1, 0), (1, 0)), (2, "index"), id="index-repeated"),
    pytest.param(numbered((0, 1), (1, 2), (2, 1)), (2, "turn"), id="turn-decreasing"),
]


@pytest.mark.parametrize(("data", "loc"), BAD_CONVERSATIONS)
def test_bad_conversation_is_refused_at_the_offending_position(
    data: list[dict[str, Any]], loc: tuple[int, str]
) -> None:
    with pytest.raises(ValidationError) as refused:
        Conversation.model_validate(data)
    (error,) = refused.value.errors()
    assert error["loc"] == loc
    assert f"position {loc[0]}" in error["msg"] and loc[1] in error["msg"]


def test_conversation_reports_a_bad_message_at_its_position() -> None:
    data = fixture("003_conversation.json")
    data[3]["role"] = "tool"
    with pytest.raises(ValidationError) as refused:
        Conversation.model_validate(data)
    assert [e["loc"] for e in refused.value.errors()] == [(3, "role")]


# --- generated messages and conversations --------------------------------------------------


@given(data=conversation_messages())
def test_generated_message_round_trips_through_json(data: dict) -> None:
    wire = ConversationMessage.model_validate_json(json.dumps(data)).to_wire()
    assert json.dumps(wire) == json.dumps(data)  # key order included


@given(data=conversations())
def test_generated_conversation_round_trips_through_json(data: list) -> None:
    wire = Conversation.model_validate_json(json.dumps(data)).to_wire()
    assert json.dumps(wire) == json.dumps(data)


# --- the messages table --------------------------------------------------------------------


def _store(session: Session, data: list[dict], agent_id: str, conversation_id: str | None) -> None:
    for item in Conversation.model_validate(data):
        append_message(
            session=session, agent_id=agent_id, conversation_id=conversation_id, message=item
        )


@DB_SETTINGS
@given(data=conversations())
def test_generated_conversation_round_trips_through_the_messages_table(
    session: Session, data: list
) -> None:
    try:
        _store(session, data, "researcher@paper-review", "c-1")
        session.commit()
        with Session(session.get_bind()) as fresh:
            loaded = load_conversation(
                session=fresh, agent_id="researcher@paper-review", conversation_id="c-1"
            )
        assert json.dumps(Conversation(loaded).to_wire()) == json.dumps(data)
    finally:
        session.rollback()
        session.exec(delete(MessageRow))
        session.commit()


def test_seed_conversation_round_trips_through_the_messages_table(session: Session) -> None:
    data = fixture("003_conversation.json")
    _store(session, data, "aya", None)
    session.commit()
    with Session(session.get_bind()) as fresh:
        loaded = load_conversation(session=fresh, agent_id="aya", conversation_id=None)
        rows = fresh.exec(select(MessageRow).order_by(MessageRow.id)).all()
    data[0]["turn"] = 0
    assert [m.to_wire() for m in loaded] == data
    assert rows[0].content == data[0]["content"]  # a system message's content is the text
    assert json.loads(rows[1].content) == data[1]["content"]  # others are their JSON
    assert USER_TEXT in rows[1].content  # stored as real UTF-8, not escaped


def test_conversations_are_kept_apart_and_tool_rows_left_out(session: Session) -> None:
    seed = fixture("003_conversation.json")
    _store(session, seed[:2], "aya", "c-1")
    _store(session, seed[:1], "aya", "c-2")
    _store(session, seed[:1], "other", "c-1")
    session.add(MessageRow(agent_id="aya", conversation_id="c-1", role="tool", content="{}"))
    after_tool = ConversationMessage.model_validate(seed[2])
    append_message(session=session, agent_id="aya", conversation_id="c-1", message=after_tool)
    session.commit()

    loaded = load_conversation(session=session, agent_id="aya", conversation_id="c-1")
    assert [m.index for m in loaded] == [0, 1, 2]
    assert [m.role for m in loaded] == ["system", "user", "assistant"]
    assert len(load_conversation(session=session, agent_id="aya", conversation_id="c-2")) == 1
    assert load_conversation(session=session, agent_id="aya", conversation_id=None) == []


def test_append_refuses_a_message_out_of_place(session: Session) -> None:
    seed = Conversation.model_validate(fixture("003_conversation.json"))
    append_message(session=session, agent_id="aya", conversation_id="c", message=seed[0])
    with pytest.raises(ValueError, match="the next index is 1"):
        append_message(session=session, agent_id="aya", conversation_id="c", message=seed[2])
    append_message(session=session, agent_id="aya", conversation_id="c", message=seed[1])
    append_message(session=session, agent_id="aya", conversation_id="c", message=seed[2])
    earlier = seed[3].model_copy(update={"turn": 0})
    with pytest.raises(ValueError, match="less than the last turn 1"):
        append_message(session=session, agent_id="aya", conversation_id="c", message=earlier)


def test_a_tool_row_is_no_conversation_message() -> None:
    with pytest.raises(ValueError, match="role 'tool'"):
        MessageRow(agent_id="aya", role="tool", content="{}").to_wire(index=0)


def test_messages_table_has_the_seed_columns_and_indexes(session: Session) -> None:
    inspector = sa.inspect(session.get_bind())
    columns = {c["name"] for c in inspector.get_columns("messages")}
    seed_columns = {"id", "agent_id", "conversation_id", "role", "content", "tool_calls"}
    assert seed_columns | {"tool_results", "timestamp"} <= columns
    indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes("messages")}
    assert indexes["idx_messages_agent_id"] == ["agent_id"]
    assert indexes["idx_messages_conversation_id"] == ["conversation_id"]
    assert indexes["idx_messages_timestamp"] == ["timestamp"]


def test_messages_rows_get_the_seed_defaults(session: Session) -> None:
    session.execute(sa.text("INSERT INTO messages (agent_id, role) VALUES ('aya', 'user')"))
    session.commit()
    row = session.exec(select(MessageRow)).one()
    assert row.id is not None and row.turn == 0
    assert row.timestamp is not None and row.timestamp.tzinfo is not None


# --- the agent_state table -----------------------------------------------------------------


def test_agent_state_has_the_seed_columns_and_defaults(session: Session) -> None:
    columns = {c["name"] for c in sa.inspect(session.get_bind()).get_columns("agent_state")}
    assert {
        "agent_id",
        "status",
        "processing_state",
        "last_heartbeat",
        "created_at",
        "updated_at",
    } <= columns
    session.execute(sa.text("INSERT INTO agent_state (agent_id) VALUES ('aya')"))
    session.commit()
    state = session.get(AgentStateRow, "aya")
    assert state is not None
    assert (state.status, state.processing_state) == ("idle", "idle")
    assert state.last_heartbeat is not None and state.last_heartbeat.tzinfo is not None
    assert state.created_at is not None and state.updated_at is not None


def test_agent_state_round_trips_a_busy_agent(session: Session) -> None:
    beat = datetime(2025, 4, 4, 12, 33, tzinfo=UTC)
    session.add(
        AgentStateRow(
            agent_id="researcher@paper-review",
            status=AgentStateStatus.EXECUTING_TOOLS.value,
            processing_state="running_tool",
            last_heartbeat=beat,
            team="paper-review",
        )
    )
    session.commit()
    with Session(session.get_bind()) as fresh:
        state = fresh.get(AgentStateRow, "researcher@paper-review")
        assert state is not None
        assert AgentStateStatus(state.status) in AGENT_BUSY
        assert (state.last_heartbeat, state.team) == (beat, "paper-review")


def test_agent_state_sets_cover_every_status_once() -> None:
    sets = [AGENT_AVAILABLE, AGENT_BUSY, AGENT_GONE]
    assert set().union(*sets) == set(AgentStateStatus)
    assert sum(len(s) for s in sets) == len(AgentStateStatus)


def test_conversation_roles_are_the_seed_roles() -> None:
    assert [r.value for r in ConversationRole] == ["system", "user", "assistant"]
