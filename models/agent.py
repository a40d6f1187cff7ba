"""Agents: what a runtime is given (`003` conversation), what it answers (`002` Chimera
response), how an agent is configured and what it did (`000`), and their tables.

- `002` `ChimeraResponse`: one step's answer (status, thoughts, actions, stop, response), v1
  and v2 in one model: v2 adds the `TASK_STARTED` status, an action's `task_id` and the
  `context` block, whose `security_level` is one of `public < user < admin` (the seed's
  example shows `user` and names no other; teamflow refuses any value outside this order).
- `003` `ConversationMessage` / `Conversation`: the context given to the model each step,
  numbered `index` 0, 1, 2, ... with non-decreasing `turn`; the role decides the content shape.
- `000` `AgentConfiguration` and `ExperienceLog`.
- Tables: the `001` `messages` and `agent_state` tables (the seed's names, columns and
  indexes, plus `messages.turn` and `agent_state.team`), `agent_configs`, `experience_logs`.
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
    StrictBool,
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
from sqlmodel import Session, SQLModel, select

from models.base import SnakeWireModel, Timestamp, json_column, utc_column, utcnow
from models.knowledge import ElmoStatus
from models.tool import Identifier


def _not_null(value: Any) -> Any:
    """For optional fields the seeds never write as null: absent is fine, `null` is not."""
    if value is None:
        raise ValueError("may be left out, but not null")
    return value


# --- 002 Chimera response ------------------------------------------------------------------


class ChimeraStatus(StrEnum):
    """Where the agent is after this step (`002`; `TASK_STARTED` is v2)."""

    SUCCESS = "SUCCESS"
    EXECUTING = "EXECUTING"
    ERROR = "ERROR"
    TASK_STARTED = "TASK_STARTED"


class ThoughtType(StrEnum):
    """Kinds of thought (`002`; `DECISION` appears in the v2 example)."""

    PLAN = "PLAN"
    OBSERVATION = "OBSERVATION"
    DECISION = "DECISION"


class ActionType(StrEnum):
    """What an action runs (`002`)."""

    TOOL = "tool"
    SCRIPT = "script"
    INTERNAL = "internal"


class Execution(StrEnum):
    """How an action runs (`002`): inline, or started apart with a task id."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"


Confidence = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]


class Thought(SnakeWireModel):
    """One step of the agent's reasoning (`002`)."""

    type: ThoughtType
    content: str


class Action(SnakeWireModel):
    """One thing the agent wants done (`002`)."""

    action: str = Field(min_length=1, description="The tool id, script or internal action")
    type: ActionType
    params: dict[str, Any]
    execution: Annotated[Execution | None, BeforeValidator(_not_null)] = Field(
        default=None, description="SYNC or ASYNC; absent means SYNC (see `mode`)"
    )
    confidence: Annotated[Confidence | None, BeforeValidator(_not_null)] = Field(
        default=None, description="How sure the agent is, 0.0-1.0"
    )
    warnings: Annotated[list[str] | None, BeforeValidator(_not_null)] = None
    task_id: Annotated[str | None, BeforeValidator(_not_null)] = Field(
        default=None, description="v2: the id an ASYNC action was started under"
    )

    @field_validator("task_id")
    @classmethod
    def _task_id_is_async(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("execution") is not Execution.ASYNC:
            raise ValueError("only an ASYNC action has a task_id")
        return value

    @property
    def mode(self) -> Execution:
        """How the action runs: its `execution`, or SYNC when the response leaves it out."""
        return self.execution or Execution.SYNC


class SecurityLevel(StrEnum):
    """v2 `context.security_level`, lowest first. The seed shows only `user`; teamflow's
    vocabulary is `public < user < admin`, and any other value is refused."""

    PUBLIC = "public"
    USER = "user"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """Its place in the order: `public` 0, `user` 1, `admin` 2."""
        return list(SecurityLevel).index(self)


class ActionContext(SnakeWireModel):
    """v2 `context` block: which knowledge the step may draw on, and at what clearance.

    The `team-task` flow enforces it (see `flows/scope.py`): the step may use only the `000`
    Knowledge Entries and resources whose ids `knowledge_relics` names.
    """

    knowledge_relics: list[str] = Field(
        description="Ids of the knowledge entries and resources the step may use"
    )
    security_level: SecurityLevel = Field(description="The clearance the step runs at")


class ChimeraResponse(SnakeWireModel):
    """`002` Chimera agent response (v1 and v2): what an agent runtime returns each step."""

    status: ChimeraStatus
    context: Annotated[ActionContext | None, BeforeValidator(_not_null)] = None
    thoughts: list[Thought]
    actions: list[Action]
    stop: StrictBool = Field(description="True when the agent has nothing more to do")
    response: str | None = Field(description="What to tell the requester; always on the wire")

    @property
    def version(self) -> str:
        """`2.0` when the response uses a v2 feature, else `1.0`."""
        v2 = (
            self.status is ChimeraStatus.TASK_STARTED
            or self.context is not None
            or any(a.task_id is not None for a in self.actions)
        )
        return "2.0" if v2 else "1.0"


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
    reasoning: Annotated[str | None, BeforeValidator(_not_null)] = None

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

    def __iter__(self) -> Iterator[ConversationMessage]:  # type: ignore[override]
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


# --- 000 Agent Configuration and Experience Log --------------------------------------------


class AgentConfiguration(SnakeWireModel):
    """`000` Agent Configuration: who an agent is, what it runs in, what it may use."""

    agent_id: Identifier
    name: str = Field(min_length=1, max_length=255)
    description: str
    image: str = Field(description="The image the agent runs in")
    resources: list[str] = Field(description="Ids of `000` resources the agent may use")
    tools: list[str] = Field(description="Ids of `000` tool definitions the agent may call")
    created_at: Timestamp
    updated_at: Timestamp
    status: ElmoStatus
    current_task: str | None = Field(description="The task it works on; null when it has none")


class ExperienceStatus(StrEnum):
    """How a task execution ended (`000` Experience Log)."""

    SUCCESS = "success"
    FAILURE = "failure"


class ExperienceLog(SnakeWireModel):
    """`000` Experience Log: one agent's execution of one task, and how it went."""

    log_id: Identifier
    agent_id: Identifier
    task_id: Identifier
    start_time: Timestamp
    end_time: Timestamp
    status: ExperienceStatus
    feedback_id: Identifier = Field(description="The `000` Feedback (execution_id) it produced")
    created_at: Timestamp
    updated_at: Timestamp

    @field_validator("end_time")
    @classmethod
    def _ends_after_start(cls, value: datetime, info: ValidationInfo) -> datetime:
        start = info.data.get("start_time")
        if start is not None and value < start:
            raise ValueError("end_time is before start_time")
        return value


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


def _conversation_rows(agent_id: str, conversation_id: str | None) -> Any:
    conversation = (
        MessageRow.conversation_id.is_(None)  # type: ignore[union-attr]
        if conversation_id is None
        else MessageRow.conversation_id == conversation_id
    )
    return (
        select(MessageRow)
        .where(MessageRow.agent_id == agent_id, conversation)
        .where(MessageRow.role.in_([r.value for r in CONVERSATION_ROLES]))  # type: ignore[attr-defined]
    )


def load_conversation(
    *, session: Session, agent_id: str, conversation_id: str | None
) -> list[ConversationMessage]:
    """The `003` conversation of `agent_id` in `conversation_id`, in order (`tool` rows left
    out). Wrap it in `Conversation(...)` to check it as a whole."""
    rows = session.exec(
        _conversation_rows(agent_id, conversation_id).order_by(MessageRow.id)  # type: ignore[arg-type]
    ).all()
    return [row.to_wire(index=position) for position, row in enumerate(rows)]


def conversations_of(
    *, session: Session, agent_id: str
) -> dict[str | None, list[ConversationMessage]]:
    """Every `003` conversation of `agent_id`, by conversation id, in the order they began."""
    rows = session.exec(
        select(MessageRow)
        .where(MessageRow.agent_id == agent_id)
        .where(MessageRow.role.in_([r.value for r in CONVERSATION_ROLES]))  # type: ignore[attr-defined]
        .order_by(MessageRow.id)  # type: ignore[arg-type]
    ).all()
    grouped: dict[str | None, list[MessageRow]] = {}
    for row in rows:
        grouped.setdefault(row.conversation_id, []).append(row)
    return {
        key: [row.to_wire(index=i) for i, row in enumerate(group)] for key, group in grouped.items()
    }


def append_message(
    *, session: Session, agent_id: str, conversation_id: str | None, message: ConversationMessage
) -> MessageRow:
    """Adds `message` at the end of its conversation (flushed, not committed).

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
    last = session.exec(query.order_by(MessageRow.id.desc()).limit(1)).first()  # type: ignore[union-attr]
    if last is not None and message.turn < last.turn:
        raise ValueError(f"message turn {message.turn} is less than the last turn {last.turn}")
    row = MessageRow.from_wire(message, agent_id=agent_id, conversation_id=conversation_id)
    session.add(row)
    session.flush()
    return row


class AgentStateStatus(StrEnum):
    """`agent_state.status` (`001`)."""

    IDLE = "idle"
    THINKING = "thinking"
    EXECUTING_TOOLS = "executing_tools"
    OFFLINE = "offline"


AGENT_AVAILABLE = frozenset({AgentStateStatus.IDLE})
"""Can take work now."""
AGENT_BUSY = frozenset({AgentStateStatus.THINKING, AgentStateStatus.EXECUTING_TOOLS})
"""Working on a step."""
AGENT_GONE = frozenset({AgentStateStatus.OFFLINE})
"""Not running."""


class AgentStateRow(SQLModel, table=True):
    """An agent's live state (`001` `agent_state`), plus the team it belongs to."""

    __tablename__ = "agent_state"

    agent_id: str = SQLField(sa_column=sa.Column(sa.String(255), primary_key=True))
    status: str = SQLField(
        default=AgentStateStatus.IDLE.value,
        sa_column=sa.Column(sa.String(50), server_default=AgentStateStatus.IDLE.value),
        description="idle|thinking|executing_tools|offline (AgentStateStatus)",
    )
    processing_state: str = SQLField(
        default="idle", sa_column=sa.Column(sa.String(50), server_default="idle")
    )
    last_heartbeat: datetime | None = SQLField(
        default_factory=utcnow, sa_column=utc_column(server_default=sa.func.current_timestamp())
    )
    created_at: datetime | None = SQLField(
        default_factory=utcnow, sa_column=utc_column(server_default=sa.func.current_timestamp())
    )
    updated_at: datetime | None = SQLField(
        default_factory=utcnow,
        sa_column=utc_column(server_default=sa.func.current_timestamp(), onupdate=utcnow),
    )
    # teamflow's: the `004` team the agent is a member of, if any.
    team: str | None = SQLField(default=None, sa_column=sa.Column(sa.String(64), index=True))


class AgentStateHistoryRow(SQLModel, table=True):
    """One stretch of a member's `agent_state` status: from `changed_at` (when the status
    became this) to `ended_at` (when it changed again; None while it is in force).

    Written only when the status changes (`change_agent_status`), in the transaction that
    changes `agent_state`: heartbeats that repeat the status add nothing. Closing the stretch
    when the next begins keeps each row's span on the row, so time per status in a window is
    one aggregate (`models.metrics.liveness`), no window function over a member's history.
    """

    __tablename__ = "agent_state_history"
    __table_args__ = (
        # Liveness per team and window from the index alone, already in GROUP BY order.
        sa.Index(
            "ix_agent_state_history_liveness", "team", "member", "status", "changed_at",
            "ended_at",
        ),
        # The open row of each member (one per member), which a change closes.
        sa.Index(
            "ix_agent_state_history_open", "team", "member",
            sqlite_where=sa.text("ended_at IS NULL"),
            postgresql_where=sa.text("ended_at IS NULL"),
        ),
    )  # fmt: skip

    id: int | None = SQLField(default=None, primary_key=True)
    team: str = SQLField(max_length=64)
    member: str = SQLField(max_length=64)
    status: str = SQLField(max_length=50, description="an AgentStateStatus")
    changed_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    ended_at: datetime | None = SQLField(default=None, sa_column=utc_column())


def change_agent_status(
    session: Session, state: AgentStateRow, status: str, *, member: str, now: datetime
) -> bool:
    """Sets `state.status` to `status` at `now`; if that changes it (or the row is new),
    closes the member's open history row and opens one for `status`, in `session`'s
    transaction. Returns whether the status changed. `state.team` must be set."""
    if state.status == status and _known(session, state):
        return False
    state.status = status
    state.updated_at = now
    session.add(state)
    table = AgentStateHistoryRow.__table__
    session.execute(
        sa.update(table)
        .where(table.c.team == state.team, table.c.ended_at.is_(None), table.c.member == member)
        .values(ended_at=now)
    )
    session.add(AgentStateHistoryRow(team=state.team, member=member, status=status, changed_at=now))
    return True


def _known(session: Session, state: AgentStateRow) -> bool:
    """Whether `state` is a stored row (a new one's first status is a change)."""
    return sa.inspect(state).persistent


# --- 000 tables: agent_configs and experience_logs -----------------------------------------


class AgentConfigurationRow(SQLModel, table=True):
    """A stored `000` Agent Configuration."""

    __tablename__ = "agent_configs"

    agent_id: str = SQLField(primary_key=True, max_length=255)
    name: str = SQLField(max_length=255)
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    image: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    resources: list = SQLField(default_factory=list, sa_column=json_column(nullable=False))
    tools: list = SQLField(default_factory=list, sa_column=json_column(nullable=False))
    created_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    status: str = SQLField(max_length=16)
    current_task: str | None = SQLField(default=None, sa_column=sa.Column(sa.Text))

    @classmethod
    def from_wire(cls, wire: AgentConfiguration) -> Self:
        """A row holding `wire`."""
        return cls(
            agent_id=wire.agent_id,
            name=wire.name,
            description=wire.description,
            image=wire.image,
            resources=list(wire.resources),
            tools=list(wire.tools),
            created_at=wire.created_at,
            updated_at=wire.updated_at,
            status=wire.status.value,
            current_task=wire.current_task,
        )

    def to_wire(self) -> AgentConfiguration:
        """The row as a `000` Agent Configuration."""
        return AgentConfiguration.model_validate(
            {
                "agent_id": self.agent_id,
                "name": self.name,
                "description": self.description,
                "image": self.image,
                "resources": self.resources,
                "tools": self.tools,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "status": self.status,
                "current_task": self.current_task,
            }
        )


class ExperienceLogRow(SQLModel, table=True):
    """A stored `000` Experience Log."""

    __tablename__ = "experience_logs"

    log_id: str = SQLField(primary_key=True, max_length=255)
    agent_id: str = SQLField(max_length=255, index=True)
    task_id: str = SQLField(max_length=255, index=True)
    start_time: datetime = SQLField(sa_column=utc_column(nullable=False))
    end_time: datetime = SQLField(sa_column=utc_column(nullable=False))
    status: str = SQLField(max_length=16)
    feedback_id: str = SQLField(max_length=255)
    created_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: ExperienceLog) -> Self:
        """A row holding `wire`."""
        return cls(
            log_id=wire.log_id,
            agent_id=wire.agent_id,
            task_id=wire.task_id,
            start_time=wire.start_time,
            end_time=wire.end_time,
            status=wire.status.value,
            feedback_id=wire.feedback_id,
            created_at=wire.created_at,
            updated_at=wire.updated_at,
        )

    def to_wire(self) -> ExperienceLog:
        """The row as a `000` Experience Log."""
        return ExperienceLog.model_validate(
            {
                "log_id": self.log_id,
                "agent_id": self.agent_id,
                "task_id": self.task_id,
                "start_time": self.start_time,
                "end_time": self.end_time,
                "status": self.status,
                "feedback_id": self.feedback_id,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            }
        )
