"""A team's `config.json` on the wire (`004` TeamConfig, TeamMember), and its vocabulary.

The `004` files in the wild carry more than the seed shows (`joinedAt`, `cwd`,
`leadAgentId`, ...). Known fields are validated; unknown ones are kept and written back
unchanged, so a team folder survives import and export. The tables and the store are
`models.team`.
"""

import re
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from models.base import (
    JsTimestamp,
    MemberName,
    TeamName,
    WireModel,
)

DEFAULT_MODELS = ("haiku", "sonnet", "opus")
"""`004`: the models a team allows unless its config widens the set (`allowedModels`)."""

SCHEMA_VERSION = "1.0.0"
"""What a config without `schemaVersion` is read as (`004` Schema Evolution)."""

AGENT_ID = re.compile(r"^(?P<name>[^@]+)@(?P<team>[^@]+)$")
TMUX_PANE = r"^%\d+$"


class AgentType(StrEnum):
    """`004` `agentType`."""

    GENERAL_PURPOSE = "general-purpose"
    SPECIALIZED = "specialized"


class BackendType(StrEnum):
    """`004` `backendType`: tmux today, docker and k8s reserved.

    `in-process` is what agent-team tools write for a teammate that runs without a pane;
    teamflow's own agents use it.
    """

    TMUX = "tmux"
    DOCKER = "docker"
    K8S = "k8s"
    IN_PROCESS = "in-process"


class Color(StrEnum):
    """`004` terminal colours, assigned to members in this order."""

    BLUE = "blue"
    GREEN = "green"
    YELLOW = "yellow"
    MAGENTA = "magenta"
    CYAN = "cyan"
    RED = "red"


ANSI = {
    Color.BLUE: "\033[34m",
    Color.GREEN: "\033[32m",
    Color.YELLOW: "\033[33m",
    Color.MAGENTA: "\033[35m",
    Color.CYAN: "\033[36m",
    Color.RED: "\033[31m",
}


def agent_id(name: str, team: str) -> str:
    """`004`: a member's `agentId` is `{name}@{team}`."""
    return f"{name}@{team}"


class TeamMember(WireModel):
    """One entry of `config.json` `members` (`004` TeamMember)."""

    model_config = ConfigDict(extra="allow")

    agent_id: str = Field(description='"{name}@{team}"')
    name: MemberName = Field(description="Unique member name within the team")
    agent_type: AgentType
    model: str = Field(description="haiku | sonnet | opus, or a model the team allows")
    prompt: str = Field(description="System prompt")
    color: Color
    tmux_pane_id: str | None = Field(
        default=None,
        pattern=TMUX_PANE,
        description='Tmux pane, e.g. "%88"; required when backendType is tmux',
    )
    backend_type: BackendType
    is_active: StrictBool
    spawned_at: JsTimestamp | None = None
    shutdown_at: JsTimestamp | None = None
    metadata: dict[str, Any] | None = None
    plan_mode_required: StrictBool | None = Field(
        default=None, description="When true, the member's plans need the lead's approval"
    )

    @field_validator("model")
    @classmethod
    def _model_allowed(cls, value: str, info: ValidationInfo) -> str:
        allowed = (info.context or {}).get("allowed_models") or DEFAULT_MODELS
        if value not in allowed:
            raise ValueError(f"model {value!r} is not allowed here (allowed: {', '.join(allowed)})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        match = AGENT_ID.fullmatch(self.agent_id)
        if not match or match["name"] != self.name:
            raise ValueError(
                f"agentId {self.agent_id!r} must be '{self.name}@{{team}}' (name@team)"
            )
        if self.backend_type is BackendType.TMUX and not self.tmux_pane_id:
            raise ValueError("tmuxPaneId is required when backendType is tmux")
        return self

    @property
    def team(self) -> str:
        return self.agent_id.split("@", 1)[1]


class TeamConfig(WireModel):
    """A team's `config.json` (`004` TeamConfig)."""

    model_config = ConfigDict(extra="allow")

    name: TeamName = Field(description="Team identifier, kebab-case, 3-64 characters")
    description: str = Field(min_length=1, max_length=500, description="Team purpose")
    members: list[TeamMember]
    created_at: JsTimestamp
    schema_version: str | None = None
    metadata: dict[str, Any] | None = None
    allowed_models: list[str] | None = Field(
        default=None, description="Models this team allows beyond the seed's haiku/sonnet/opus"
    )

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """Validates with the team's own allowed models in force for its members."""
        if isinstance(obj, dict) and "allowed_models" not in (kwargs.get("context") or {}):
            widened = obj.get("allowedModels") or obj.get("allowed_models")
            if isinstance(widened, list):
                context = dict(kwargs.get("context") or {})
                context["allowed_models"] = tuple(DEFAULT_MODELS) + tuple(map(str, widened))
                kwargs["context"] = context
        return super().model_validate(obj, *args, **kwargs)

    @model_validator(mode="after")
    def _members_belong(self) -> Self:
        seen: set[str] = set()
        for i, member in enumerate(self.members):
            if member.team != self.name:
                raise ValueError(
                    f"members[{i}].agentId {member.agent_id!r} must be "
                    f"'{member.name}@{self.name}' (name@team)"
                )
            if member.name in seen:
                raise ValueError(f"members[{i}].name {member.name!r} is a duplicate")
            seen.add(member.name)
        return self

    @property
    def version(self) -> str:
        """The schema version, `1.0.0` when the file has none."""
        return self.schema_version or SCHEMA_VERSION

    def allowed(self) -> tuple[str, ...]:
        return tuple(DEFAULT_MODELS) + tuple(self.allowed_models or ())
