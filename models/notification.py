"""Notifications (`001`) and messages (`000`): what one agent's inbox receives.

A `001` notification is an envelope (`notification_id, timestamp, recipient_agent_id,
notification_type, source, payload`) whose `payload` depends on `notification_type`. There is
one class per type, each with its own payload model; `Notification` is their union, told apart
by `notification_type`, and `NotificationAdapter` parses bare JSON into the right class.

A `000` message is the ELMO envelope (`message_id, type, sender, recipient, timestamp,
payload {type, content}, status`).

Neither has a table of its own: both are stored as rows of the inbox (`models.inbox_table`).
"""

from __future__ import annotations

import json
import uuid
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from models.base import SnakeWireModel, Timestamp
from models.inbox_message import InboxError
from models.task import TaskPriority
from models.tool import ToolResult
from models.wire_support import error_lines, tag_error_at

UnitFloat = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A float from 0.0 to 1.0."""


class NotificationType(StrEnum):
    """`001` `notification_type`: the seven kinds of notification."""

    USER_MESSAGE = "user_message"
    AGENT_MESSAGE = "agent_message"
    TASK_ASSIGNMENT = "task_assignment"
    TOOL_RESULT = "tool_result"
    SYSTEM_ALERT = "system_alert"
    STATUS_UPDATE = "status_update"
    CAPABILITY_BROADCAST = "capability_broadcast"


class ContentType(StrEnum):
    """`001` user_message `content_type`: what the user's `content` is."""

    TEXT = "text"
    VOICE_TRANSCRIPT = "voice_transcript"
    IMAGE_ID = "image_id"


class AlertType(StrEnum):
    """`001` system_alert `alert_type`."""

    TIMER = "TIMER"
    ALARM = "ALARM"
    SCHEDULED_EVENT = "SCHEDULED_EVENT"


class AgentActivity(StrEnum):
    """`001` status_update `status`: what an agent reports it is doing."""

    IDLE = "idle"
    BUSY = "busy"
    OFFLINE = "offline"
    ERROR = "error"


# --- payloads ------------------------------------------------------------------------------


class UserMessagePayload(SnakeWireModel):
    """`001` user_message payload: what a user said (or showed) to the agent."""

    content: str = Field(description="The text, the voice transcript, or the image id")
    content_type: ContentType
    session_id: str | None = Field(default=None, description="The user's device session")


class AgentMessagePayload(SnakeWireModel):
    """`001` agent_message payload: a message from another agent."""

    sender_agent_id: str = Field(min_length=1)
    content: str
    attachments: list[str] | None = Field(default=None, description="Ids of attached documents")


class TaskAssignmentPayload(SnakeWireModel):
    """`001` task_assignment payload: a task given to the recipient."""

    task_id: uuid.UUID
    task_description: str
    priority: TaskPriority
    deadline: Timestamp | None = None
    context: dict[str, Any] | None = Field(
        default=None, description="Whatever the assignee needs to know to do the task"
    )


class ToolResultPayload(ToolResult):
    """`001` tool_result payload: a `ToolResult` (the Tool Result Standard), as is."""


class SystemAlertPayload(SnakeWireModel):
    """`001` system_alert payload: a timer, alarm or scheduled event went off."""

    alert_type: AlertType
    alert_name: str = Field(min_length=1)
    message: str | None = None


class StatusUpdatePayload(SnakeWireModel):
    """`001` status_update payload: an agent reports its state and spare capacity."""

    agent_id: str = Field(min_length=1)
    status: AgentActivity
    current_task: str | None = Field(default=None, description="What the agent is working on")
    capacity: UnitFloat | None = Field(
        default=None, description="Share of the agent's capacity in use, 0.0-1.0"
    )
    message: str | None = None


class CapabilityBroadcastPayload(SnakeWireModel):
    """`001` capability_broadcast payload: an agent announces what it can do."""

    agent_id: str = Field(min_length=1)
    capabilities: list[str] = Field(description="Names of the tools or skills the agent offers")
    version: str | None = Field(default=None, description="The agent's version")
    status: str | None = Field(
        default=None, description='Free text; the seed shows "available" and lists no others'
    )


# --- notifications -------------------------------------------------------------------------


class NotificationBase(SnakeWireModel):
    """The `001` Base Notification envelope; every notification type extends it."""

    notification_id: uuid.UUID
    timestamp: Timestamp
    recipient_agent_id: str = Field(min_length=1)
    source: str = Field(description="Who sent it: an agent id or a service such as api_gateway")


class UserMessageNotification(NotificationBase):
    """`001` notification of type user_message."""

    notification_type: Literal["user_message"] = "user_message"
    payload: UserMessagePayload


class AgentMessageNotification(NotificationBase):
    """`001` notification of type agent_message."""

    notification_type: Literal["agent_message"] = "agent_message"
    payload: AgentMessagePayload


class TaskAssignmentNotification(NotificationBase):
    """`001` notification of type task_assignment."""

    notification_type: Literal["task_assignment"] = "task_assignment"
    payload: TaskAssignmentPayload


class ToolResultNotification(NotificationBase):
    """`001` notification of type tool_result."""

    notification_type: Literal["tool_result"] = "tool_result"
    payload: ToolResultPayload


class SystemAlertNotification(NotificationBase):
    """`001` notification of type system_alert."""

    notification_type: Literal["system_alert"] = "system_alert"
    payload: SystemAlertPayload


class StatusUpdateNotification(NotificationBase):
    """`001` notification of type status_update."""

    notification_type: Literal["status_update"] = "status_update"
    payload: StatusUpdatePayload


class CapabilityBroadcastNotification(NotificationBase):
    """`001` notification of type capability_broadcast."""

    notification_type: Literal["capability_broadcast"] = "capability_broadcast"
    payload: CapabilityBroadcastPayload


Notification = Annotated[
    UserMessageNotification
    | AgentMessageNotification
    | TaskAssignmentNotification
    | ToolResultNotification
    | SystemAlertNotification
    | StatusUpdateNotification
    | CapabilityBroadcastNotification,
    Field(discriminator="notification_type"),
    tag_error_at("notification_type"),
]
"""A `001` notification of any type, told apart by `notification_type`."""

NotificationAdapter: TypeAdapter[Notification] = TypeAdapter(Notification)

NOTIFICATION_CLASSES: dict[NotificationType, type[NotificationBase]] = {
    NotificationType.USER_MESSAGE: UserMessageNotification,
    NotificationType.AGENT_MESSAGE: AgentMessageNotification,
    NotificationType.TASK_ASSIGNMENT: TaskAssignmentNotification,
    NotificationType.TOOL_RESULT: ToolResultNotification,
    NotificationType.SYSTEM_ALERT: SystemAlertNotification,
    NotificationType.STATUS_UPDATE: StatusUpdateNotification,
    NotificationType.CAPABILITY_BROADCAST: CapabilityBroadcastNotification,
}
"""The notification class of each `notification_type`."""

PAYLOAD_CLASSES: dict[NotificationType, type[BaseModel]] = {
    kind: cls.model_fields["payload"].annotation  # type: ignore[misc]
    for kind, cls in NOTIFICATION_CLASSES.items()
}
"""The `001` payload model of each `notification_type`."""


def check_payload(kind: str, payload: str | dict[str, Any]) -> dict[str, Any]:
    """A notification's payload checked against the `001` model of its type.

    `payload` is the payload itself or its JSON text (what `msg send --type T --text`
    carries). Returns it as a dict, as given; `InboxError` (one line, naming the type and
    the field) when it is not JSON or not a valid payload of `kind`.
    """
    data: Any = payload
    if isinstance(payload, str):
        try:
            data = json.loads(payload)
        except ValueError:
            raise InboxError(
                f"a {kind} notification takes its JSON payload as the text; got: {payload[:60]!r}"
            ) from None
    try:
        PAYLOAD_CLASSES[NotificationType(kind)].model_validate(data)
    except ValidationError as exc:
        raise InboxError(f"bad {kind} payload: " + "; ".join(error_lines(exc))) from None
    return data


# --- 000 message ---------------------------------------------------------------------------


class MessageCategory(StrEnum):
    """`000` Message `type`."""

    LOG = "log"
    COMMAND = "command"
    EVENT = "event"


class MessageStatus(StrEnum):
    """`000` Message `status`."""

    SENT = "sent"
    READ = "read"
    JUNK = "junk"


class MessagePayload(SnakeWireModel):
    """`000` Message `payload`: a typed content, text or a JSON object."""

    type: str = Field(description="What the content is, in the sender's words")
    content: str | dict[str, Any]


class Message(SnakeWireModel):
    """`000` Message: a log line, command or event sent from one agent to another."""

    message_id: str = Field(min_length=1)
    type: MessageCategory
    sender: str
    recipient: str
    timestamp: Timestamp
    payload: MessagePayload
    status: MessageStatus
