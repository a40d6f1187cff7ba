"""Every seed wire format by name: which model reads it, and how to tell it from the others.

`teamflow validate FILE` uses this to recognise a JSON document and check it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter


@dataclass(frozen=True)
class Format:
    """A seed format: its name (`{seed}/{kind}`), what it is, and the model that reads it."""

    name: str
    title: str
    target: str  # "module:attribute"; a model class or a TypeAdapter
    many: bool = False  # the document is a JSON array of `target`

    def adapter(self) -> TypeAdapter:
        module, _, attr = self.target.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        if isinstance(obj, TypeAdapter):
            if self.many:  # pydantic keeps an adapter's type private (`_type`): name the type
                raise TypeError(f"{self.name}: `many` needs a type as its target, not an adapter")
            return obj
        return TypeAdapter(list[obj] if self.many else obj)  # type: ignore[valid-type]  # known at run time

    def validate(self, data: Any) -> Any:
        """The parsed document; raises `pydantic.ValidationError`."""
        module, _, attr = self.target.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        if not self.many and hasattr(obj, "model_validate"):
            return obj.model_validate(data)
        return self.adapter().validate_python(data)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        Format("000/context", "000 Context", "models.knowledge:Context"),
        Format(
            "000/prompt-template",
            "000 LLM Prompt Template",
            "models.prompt_template:PromptTemplate",
        ),
        Format("000/tool-definition", "000 Tool Definition", "models.tool:ToolDefinition"),
        Format("000/feedback", "000 Feedback", "models.tool:Feedback"),
        Format("000/message", "000 Message", "models.notification:Message"),
        Format("000/messages", "000 Messages (an inbox)", "models.notification:Message", many=True),
        Format("000/project", "000 Project Definition", "models.project:ProjectDefinition"),
        Format(
            "000/agent-configuration", "000 Agent Configuration", "models.agent:AgentConfiguration"
        ),
        Format("000/resource", "000 Resource Definition", "models.knowledge:ResourceDefinition"),
        Format("000/knowledge", "000 Knowledge Entry", "models.knowledge:KnowledgeEntry"),
        Format("000/experience-log", "000 Experience Log", "models.agent:ExperienceLog"),
        Format("001/task-create", "001 TaskCreate", "models.task:TaskCreate"),
        Format("001/task", "001 Task", "models.task:Task"),
        Format("001/notification", "001 Notification", "models.notification:NotificationAdapter"),
        Format(
            "001/notifications",
            "001 Notifications (an inbox)",
            "models.notification:Notification",
            many=True,
        ),
        Format("001/tool-result", "001 ToolResult", "models.tool:ToolResult"),
        Format("001/memory", "001 Memory object", "models.memory:Memory"),
        Format("001/api-success", "001 API success response", "models.api:SuccessResponse"),
        Format("001/api-error", "001 API error response", "models.api:ErrorResponse"),
        Format(
            "002/agent-response",
            "002 Chimera agent response",
            "models.chimera_response:ChimeraResponse",
        ),
        Format(
            "003/conversation", "003 LLM conversation context", "models.conversation:Conversation"
        ),
        Format(
            "003/message", "003 conversation message", "models.conversation:ConversationMessage"
        ),
        Format("004/config", "004 team config.json", "models.team_config:TeamConfig"),
        Format("004/member", "004 team member", "models.team_config:TeamMember"),
        Format("004/inbox", "004 inbox file", "models.inbox_message:InboxMessage", many=True),
        Format("004/inbox-entry", "004 inbox message", "models.inbox_message:InboxMessage"),
        Format(
            "004/team-message", "004 typed team message", "models.inbox_message:TeamPayloadAdapter"
        ),
        Format("004/task-status", "004 task-status.json", "models.task_status:TaskStatus"),
    ]
}

_TEAM_MESSAGE_TYPES = {
    "idle_notification",
    "shutdown_request",
    "shutdown_approved",
    "shutdown_rejected",
    "plan_approval_request",
    "plan_approval_response",
}

# The first rule whose keys a document has decides its format. Order matters: more specific
# shapes come first.
_RULES: list[tuple[Callable[[dict], bool], str]] = [
    (lambda d: "members" in d and "createdAt" in d, "004/config"),
    (lambda d: "agentId" in d and "agentType" in d, "004/member"),
    (lambda d: "agentId" in d and "startedAt" in d, "004/task-status"),
    (lambda d: d.get("type") in _TEAM_MESSAGE_TYPES and "read" not in d, "004/team-message"),
    (lambda d: "from" in d and "read" in d, "004/inbox-entry"),
    (lambda d: "notification_type" in d, "001/notification"),
    (lambda d: "index" in d and "role" in d, "003/message"),
    (lambda d: "thoughts" in d or ("actions" in d and "stop" in d), "002/agent-response"),
    (lambda d: "tool_id" in d, "000/tool-definition"),
    (lambda d: "execution_id" in d and "exit_code" in d, "000/feedback"),
    (lambda d: "message_id" in d and "sender" in d, "000/message"),
    (lambda d: "template_id" in d, "000/prompt-template"),
    (lambda d: "knowledge_id" in d, "000/knowledge"),
    (lambda d: "resource_id" in d, "000/resource"),
    (lambda d: "log_id" in d, "000/experience-log"),
    (lambda d: "memory_id" in d, "001/memory"),
    (lambda d: "agent_id" in d and "image" in d, "000/agent-configuration"),
    (lambda d: "project_id" in d and "milestones" in d, "000/project"),
    (lambda d: "project_id" in d or "parent_context" in d, "000/context"),
    (lambda d: "tool_name" in d and "status" in d, "001/tool-result"),
    (lambda d: d.get("status") == "success", "001/api-success"),
    (lambda d: d.get("status") == "error", "001/api-error"),
    (lambda d: "title" in d and "id" in d, "001/task"),
    (lambda d: "title" in d, "001/task-create"),
]


def detect(data: Any) -> Format | None:
    """The format a parsed JSON document looks like, or None."""
    if isinstance(data, list):
        first = next((item for item in data if isinstance(item, dict)), None)
        if first is None:
            return None
        if "index" in first and "role" in first:
            return FORMATS["003/conversation"]
        if "from" in first and "read" in first:
            return FORMATS["004/inbox"]
        return None
    if isinstance(data, dict):
        for matches, name in _RULES:
            if matches(data):
                return FORMATS[name]
    return None
