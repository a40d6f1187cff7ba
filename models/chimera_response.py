"""What a runtime answers for one step: the `002` Chimera response.

Status, thoughts, actions, stop and response; v1 and v2 in one model: v2 adds the
`TASK_STARTED` status, an action's `task_id` and the `context` block, whose `security_level`
is one of `public < user < admin` (the seed's example shows `user` and names no other;
teamflow refuses any value outside this order).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
)

from models.base import SnakeWireModel
from models.wire_support import not_null

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
    execution: Annotated[Execution | None, BeforeValidator(not_null)] = Field(
        default=None, description="SYNC or ASYNC; absent means SYNC (see `mode`)"
    )
    confidence: Annotated[Confidence | None, BeforeValidator(not_null)] = Field(
        default=None, description="How sure the agent is, 0.0-1.0"
    )
    warnings: Annotated[list[str] | None, BeforeValidator(not_null)] = None
    task_id: Annotated[str | None, BeforeValidator(not_null)] = Field(
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
    context: Annotated[ActionContext | None, BeforeValidator(not_null)] = None
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
