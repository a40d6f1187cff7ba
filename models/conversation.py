"""Conversations: what a runtime is given each step (`003`), and where it is kept (`001`).

- `003` `ConversationMessage` / `Conversation`: the context given to the model each step,
  numbered `index` 0, 1, 2, ... with non-decreasing `turn`; the role decides the content shape.
- The `001` `messages` table (the seed's name, columns and indexes, plus `messages.turn`):
  each agent's conversation history, and the functions that append to it and read it back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

import sqlalchemy as sa
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select
from sqlmodel.sql.expression import SelectOfScalar

from models.base import SnakeWireModel, Timestamp, utc_column, utcnow
from models.wire_support import not_null

# --- 003 conversation ----------------------------------------------------------------------


class ConversationRole(StrEnum):
    """Who speaks in a `003` conversation."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class UserContent(SnakeWireModel):
    """`003` user message content."""

    userid: str = Field(description="Who wrote it, e.g. `<@1234546>`")
    text: str


class AssistantContent(SnakeWireModel):
    """`003` assistant message content: a tool call, its reasoning and its parameters.

    The parameters are the other keys (`text`, `ascending`, ...), kept in the order they came.
    """

    # `toolCall` is 003's own spelling; only it is read, so a param named `tool_call` stays a
    # param.
    model_config = ConfigDict(extra="allow", validate_by_name=False)

    tool_call: str = Field(alias="toolCall", min_length=1)
    reasoning: Annotated[str | None, BeforeValidator(not_null)] = None

    _key_order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Self:
        model = handler(data)
        if isinstance(data, dict):
            model._key_order = tuple(data)
        return model

    # Replaces the base's serializer (same name): drops an unset reasoning and keeps key order.
    @model_serializer(mode="wrap")
    def _drop_unset_nones(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if self.reasoning is None and "reasoning" not in self.model_fields_set:
            data.pop("reasoning", None)
        first = [k for k in self._key_order if k in data]
        return {k: data[k] for k in first + [k for k in data if k not in self._key_order]}

    @property
    def params(self) -> dict[str, Any]:
        """The tool call's parameters: every key but `toolCall` and `reasoning`."""
        return dict(self.model_extra or {})


MessageContent = StrictStr | UserContent | AssistantContent

_USER_CONTENT = TypeAdapter(UserContent)
_ASSISTANT_CONTENT = TypeAdapter(AssistantContent)
_DIGITS = re.compile(r"[0-9]+")


def _turn_from_digits(value: Any) -> Any:
    # 003's own example writes the first turn as "0": read digit strings, always write ints.
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return value


class ConversationMessage(SnakeWireModel):
    """One `003` conversation entry; `role` decides the shape of `content`."""

    index: int = Field(strict=True, ge=0, description="Position in the conversation, from 0")
    turn: Annotated[int, BeforeValidator(_turn_from_digits), Field(strict=True, ge=0)] = Field(
        description="Conversation turn number; never decreases along a conversation"
    )
    timestamp: Timestamp
    role: ConversationRole
    content: MessageContent = Field(
        description="A string (system), {userid, text} (user) or {toolCall, ...} (assistant)"
    )

    @field_validator("content", mode="wrap")
    @classmethod
    def _content_fits_role(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> MessageContent:
        role = info.data.get("role")
        if role is None:  # the role itself is invalid and reported
            return handler(value)
        if role is ConversationRole.SYSTEM:
            if not isinstance(value, str):
                raise ValueError("a system message's content is a plain string")
            return value
        if isinstance(value, str):
            raise ValueError(f"a {role.value} message's content is an object, not a string")
        if role is ConversationRole.USER:
            return _USER_CONTENT.validate_python(value)
        return _ASSISTANT_CONTENT.validate_python(value)


class Conversation(RootModel[list[ConversationMessage]]):
    """`003` conversation: messages numbered 0, 1, 2, ... in order, turns never decreasing."""

    @model_validator(mode="after")
    def _in_order(self) -> Self:
        errors: list[Any] = []
        for position, message in enumerate(self.root):
            if message.index != position:
                errors.append(
                    _line_error(
                        (position, "index"),
                        f"message at position {position} has index {message.index}; indices "
                        f"must be 0, 1, 2, ... in order, so this one must be {position}",
                        message.index,
                    )
                )
                break
        for position in range(1, len(self.root)):
            before, turn = self.root[position - 1].turn, self.root[position].turn
            if turn < before:
                errors.append(
                    _line_error(
                        (position, "turn"),
                        f"message at position {position} has turn {turn}, less than the turn "
                        f"{before} before it; turns never decrease",
                        turn,
                    )
                )
                break
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def __iter__(self) -> Iterator[ConversationMessage]:  # type: ignore[override]  # the messages, as a list
        return iter(self.root)

    def __len__(self) -> int:
        return len(self.root)

    def __getitem__(self, position: int) -> ConversationMessage:
        return self.root[position]

    def to_wire(self) -> list[dict[str, Any]]:
        """The JSON-ready list, exactly as `003` writes it (turns always integers)."""
        return [message.to_wire() for message in self.root]


def _line_error(loc: tuple[int | str, ...], message: str, value: Any) -> Any:
    return {
        "type": PydanticCustomError("conversation_order", message),
        "loc": loc,
        "input": value,
    }


# --- 001 tables: messages and agent_state --------------------------------------------------


class MessageRole(StrEnum):
    """`messages.role` (`001`): the three `003` roles and `tool`."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


CONVERSATION_ROLES = frozenset({MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT})
"""The `messages` roles a `003` conversation holds (`tool` rows are not part of it)."""


class MessageRow(SQLModel, table=True):
    """One message of an agent's conversation history (`001` `messages`).

    A `003` message is stored with its content as the seed's TEXT: the string itself for
    `system`, the object's JSON (keys in order) for `user` and `assistant`. Its `index` is
    not stored: it is the message's position in its conversation, ordered by `id`.
    """

    __tablename__ = "messages"
    __table_args__ = (
        sa.Index("idx_messages_agent_id", "agent_id"),
        sa.Index("idx_messages_conversation_id", "conversation_id"),
        sa.Index("idx_messages_timestamp", "timestamp"),
    )

    id: int | None = SQLField(default=None, primary_key=True)
    agent_id: str = SQLField(sa_column=sa.Column(sa.String(255), nullable=False))
    conversation_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(255)))
    role: str = SQLField(
        sa_column=sa.Column(sa.String(50), nullable=False),
        description="user|assistant|system|tool (MessageRole)",
    )
    content: str | None = SQLField(default=None, sa_column=sa.Column(sa.Text))
    tool_calls: str | None = SQLField(
        default=None, sa_column=sa.Column(sa.Text), description="JSON array of tool calls"
    )
    tool_results: str | None = SQLField(
        default=None, sa_column=sa.Column(sa.Text), description="JSON array of tool results"
    )
    timestamp: datetime | None = SQLField(
        default_factory=utcnow, sa_column=utc_column(server_default=sa.func.current_timestamp())
    )
    # teamflow's: the `003` turn, so a conversation reads back as it was written.
    turn: int = SQLField(
        default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0")
    )

    @classmethod
    def from_wire(
        cls, wire: ConversationMessage, *, agent_id: str, conversation_id: str | None
    ) -> Self:
        """A row holding the `003` message `wire` (its `index` is where the row is placed)."""
        if isinstance(wire.content, str):
            content = wire.content
        else:
            content = json.dumps(wire.content.to_wire(), ensure_ascii=False)
        return cls(
            agent_id=agent_id,
            conversation_id=conversation_id,
            role=wire.role.value,
            content=content,
            timestamp=wire.timestamp,
            turn=wire.turn,
        )

    def to_wire(self, *, index: int) -> ConversationMessage:
        """The row as the `003` message at position `index` of its conversation."""
        if self.role not in CONVERSATION_ROLES:
            raise ValueError(f"message {self.id} has role {self.role!r}, which 003 does not have")
        content: Any = self.content
        if self.role != MessageRole.SYSTEM and content is not None:
            content = json.loads(content)
        return ConversationMessage.model_validate(
            {
                "index": index,
                "turn": self.turn,
                "timestamp": self.timestamp,
                "role": self.role,
                "content": content,
            }
        )


def _conversation_rows(agent_id: str, conversation_id: str | None) -> SelectOfScalar[MessageRow]:
    conversation = (
        col(MessageRow.conversation_id).is_(None)
        if conversation_id is None
        else MessageRow.conversation_id == conversation_id
    )
    return (
        select(MessageRow)
        .where(MessageRow.agent_id == agent_id, conversation)
        .where(col(MessageRow.role).in_([r.value for r in CONVERSATION_ROLES]))
    )


def load_conversation(
    *, session: Session, agent_id: str, conversation_id: str | None
) -> list[ConversationMessage]:
    """The `003` conversation of `agent_id` in `conversation_id`, in order (`tool` rows left
    out). Wrap it in `Conversation(...)` to check it as a whole."""
    rows = session.exec(
        _conversation_rows(agent_id, conversation_id).order_by(col(MessageRow.id))
    ).all()
    return [row.to_wire(index=position) for position, row in enumerate(rows)]


def conversations_of(
    *, session: Session, agent_id: str
) -> dict[str | None, list[ConversationMessage]]:
    """Every `003` conversation of `agent_id`, by conversation id, in the order they began."""
    rows = session.exec(
        select(MessageRow)
        .where(MessageRow.agent_id == agent_id)
        .where(col(MessageRow.role).in_([r.value for r in CONVERSATION_ROLES]))
        .order_by(col(MessageRow.id))
    ).all()
    grouped: dict[str | None, list[MessageRow]] = {}
    for row in rows:
        grouped.setdefault(row.conversation_id, []).append(row)
    return {
        key: [row.to_wire(index=i) for i, row in enumerate(group)] for key, group in grouped.items()
    }


def append_message(
    *,
    session: Session,
    agent_id: str,
    conversation_id: str | None,
    message: ConversationMessage,
    tool_calls: list[Any] | None = None,
    tool_results: list[Any] | None = None,
) -> MessageRow:
    """Adds `message` at the end of its conversation (flushed, not committed); `tool_calls`
    and `tool_results` fill the seed's JSON columns of the same names (None: left empty).

    Raises `ValueError` if `message.index` is not the next position or its turn is less than
    the last message's, so a stored conversation always reads back as a valid `Conversation`.
    """
    query = _conversation_rows(agent_id, conversation_id)
    count = session.exec(select(sa.func.count()).select_from(query.subquery())).one()
    if message.index != count:
        raise ValueError(
            f"message index {message.index} does not follow the conversation: "
            f"the next index is {count}"
        )
    last = session.exec(query.order_by(col(MessageRow.id).desc()).limit(1)).first()
    if last is not None and message.turn < last.turn:
        raise ValueError(f"message turn {message.turn} is less than the last turn {last.turn}")
    row = MessageRow.from_wire(message, agent_id=agent_id, conversation_id=conversation_id)
    if tool_calls:
        row.tool_calls = json.dumps(tool_calls, ensure_ascii=False)
    if tool_results:
        row.tool_results = json.dumps(tool_results, ensure_ascii=False)
    session.add(row)
    session.flush()
    return row
