"""Tools: the `000` Tool Definition and Feedback, the `001` ToolResult, and their tables.

A Tool Definition says how to run a tool (`elisp` or `script`) and what it takes and gives,
as JSON Schema. Running it leaves a Feedback (stdout, stderr, exit code); what the agent is
told back is a ToolResult (SUCCESS with a result object, or FAILURE with an error message).

The store: `add_tool`, `get_tool`, `list_tools`, `check_tools_exist` (tool definitions) and
`record_feedback`, `get_feedback` (what executions printed). Running tools is `flows.tools`.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

import sqlalchemy as sa
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from pydantic import (
    AfterValidator,
    Field,
    StrictInt,
    StringConstraints,
    ValidationInfo,
    field_validator,
)
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from models.base import SnakeWireModel, Timestamp, json_column, utc_column, utcnow
from models.db import replace_row, session_scope

Identifier = Annotated[str, StringConstraints(min_length=1, max_length=255)]
"""An id that is a key in a table: 1-255 characters (the seeds' VARCHAR(255))."""


_CHECKED_SCHEMAS: set[str] = set()
"""Schemas (as canonical JSON) that passed the metaschema check: every stored tool's schemas
are read back on each `list_tools`/`get_tool`, and checking them again costs ~4 ms each."""
_CHECKED_SCHEMAS_MAX = 4096


def check_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Returns `schema` if it is a valid JSON Schema, else raises `ValueError` saying where.

    Checked against Draft 2020-12, or against the draft the schema names in `$schema`.
    """
    try:
        key: str | None = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _CHECKED_SCHEMAS:
        return schema
    validator = validator_for(schema, default=Draft202012Validator)
    try:
        validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"not a valid JSON Schema at {where}: {exc.message}") from None
    if key is not None and len(_CHECKED_SCHEMAS) < _CHECKED_SCHEMAS_MAX:
        _CHECKED_SCHEMAS.add(key)
    return schema


JsonSchema = Annotated[dict[str, Any], AfterValidator(check_json_schema)]
"""A JSON Schema object, checked against its metaschema."""


# --- 000 Tool Definition -------------------------------------------------------------------


class ToolType(StrEnum):
    """How a tool runs (`000`): Emacs Lisp, or a script run as argv."""

    ELISP = "elisp"
    SCRIPT = "script"


class ToolDefinition(SnakeWireModel):
    """`000` Tool Definition: a tool an agent may call, with JSON-schema input and output."""

    tool_id: Identifier
    type: ToolType
    description: str
    command: str = Field(description="The Lisp form (elisp) or the command line (script)")
    input_schema: JsonSchema = Field(description="JSON Schema of the params an action passes")
    output_schema: JsonSchema = Field(description="JSON Schema of the tool's result")
    created_at: Timestamp
    updated_at: Timestamp

    def input_errors(self, params: Any) -> list[str]:
        """What is wrong with `params` for this tool's `input_schema` (empty if nothing)."""
        return schema_errors(self.input_schema, params)

    def output_errors(self, result: Any) -> list[str]:
        """What is wrong with `result` for this tool's `output_schema` (empty if nothing)."""
        return schema_errors(self.output_schema, result)


def schema_errors(schema: dict[str, Any], instance: Any) -> list[str]:
    """What is wrong with `instance` for the JSON Schema `schema`: one `path: message` each
    (what a tool's params are checked with; also the internal actions' params)."""
    validator = validator_for(schema, default=Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors]


# --- 000 Feedback --------------------------------------------------------------------------


class Feedback(SnakeWireModel):
    """`000` Feedback: what one execution of a tool printed and how it exited."""

    execution_id: Identifier
    stdout: str
    stderr: str
    exit_code: StrictInt = Field(ge=-(2**31), le=2**31 - 1)
    created_at: Timestamp


# --- 001 ToolResult ------------------------------------------------------------------------


class ToolResultStatus(StrEnum):
    """Outcome of a tool call (`001`)."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


class ToolResult(SnakeWireModel):
    """`001` ToolResult: what a tool call gives back (`result`, `error_message` always set)."""

    tool_name: str = Field(min_length=1)
    status: ToolResultStatus
    result: dict[str, Any] | None = Field(description="Success data; null on failure")
    error_message: str | None = Field(description="Failure reason; null on success")

    @classmethod
    def success(cls, tool_name: str, result: dict[str, Any]) -> Self:
        return cls(
            tool_name=tool_name, status=ToolResultStatus.SUCCESS, result=result, error_message=None
        )

    @classmethod
    def failure(cls, tool_name: str, error_message: str) -> Self:
        return cls(
            tool_name=tool_name,
            status=ToolResultStatus.FAILURE,
            result=None,
            error_message=error_message,
        )

    @field_validator("error_message")
    @classmethod
    def _failure_says_why(cls, value: str | None, info: ValidationInfo) -> str | None:
        if not value and info.data.get("status") is ToolResultStatus.FAILURE:
            raise ValueError("a FAILURE must say why: error_message may not be null or empty")
        return value


# --- tables --------------------------------------------------------------------------------


class ToolDefinitionRow(SQLModel, table=True):
    """A stored `000` Tool Definition."""

    __tablename__ = "tool_definitions"

    tool_id: str = SQLField(primary_key=True, max_length=255)
    type: str = SQLField(max_length=16)
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    command: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    input_schema: dict = SQLField(sa_column=json_column(nullable=False))
    output_schema: dict = SQLField(sa_column=json_column(nullable=False))
    created_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: ToolDefinition) -> Self:
        """A row holding `wire`."""
        return cls(
            tool_id=wire.tool_id,
            type=wire.type.value,
            description=wire.description,
            command=wire.command,
            input_schema=wire.input_schema,
            output_schema=wire.output_schema,
            created_at=wire.created_at,
            updated_at=wire.updated_at,
        )

    def to_wire(self) -> ToolDefinition:
        """The row as a `000` Tool Definition."""
        return ToolDefinition.model_validate(
            {
                "tool_id": self.tool_id,
                "type": self.type,
                "description": self.description,
                "command": self.command,
                "input_schema": self.input_schema,
                "output_schema": self.output_schema,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            }
        )


class FeedbackRow(SQLModel, table=True):
    """A stored `000` Feedback, keyed by its execution id."""

    __tablename__ = "feedback"

    execution_id: str = SQLField(primary_key=True, max_length=255)
    stdout: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    stderr: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    exit_code: int = SQLField(nullable=False)
    created_at: datetime = SQLField(default_factory=utcnow, sa_column=utc_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: Feedback) -> Self:
        """A row holding `wire`."""
        return cls(
            execution_id=wire.execution_id,
            stdout=wire.stdout,
            stderr=wire.stderr,
            exit_code=wire.exit_code,
            created_at=wire.created_at,
        )

    def to_wire(self) -> Feedback:
        """The row as a `000` Feedback."""
        return Feedback.model_validate(
            {
                "execution_id": self.execution_id,
                "stdout": self.stdout,
                "stderr": self.stderr,
                "exit_code": self.exit_code,
                "created_at": self.created_at,
            }
        )


# --- the store -----------------------------------------------------------------------------


class ToolError(ValueError):
    """A refused tool store operation (e.g. an unknown tool id); one line for the user."""


def add_tool(definition: ToolDefinition, *, session: Session | None = None) -> ToolDefinition:
    """Stores `definition`, replacing a stored tool with the same `tool_id`.

    Adding the same file again is how a tool is updated, so adding is idempotent.
    """
    with session_scope(session) as s:
        replace_row(ToolDefinitionRow.from_wire(definition), definition.tool_id, session=s)
        return definition


def get_tool(tool_id: str, *, session: Session | None = None) -> ToolDefinition:
    """The stored tool `tool_id`; `ToolError` if there is none."""
    with session_scope(session) as s:
        row = s.get(ToolDefinitionRow, tool_id)
        if row is None:
            raise ToolError(f"no tool named {tool_id!r} (add it with `teamflow tool add FILE`)")
        return row.to_wire()


def missing_tools(names: list[str] | tuple[str, ...], *, session: Session) -> list[str]:
    """Those of `names` that are not stored tools, in the order given."""
    if not names:
        return []
    query = select(ToolDefinitionRow.tool_id).where(col(ToolDefinitionRow.tool_id).in_(set(names)))
    known = set(session.exec(query))
    return [name for name in dict.fromkeys(names) if name not in known]


def check_tools_exist(names: Any, *, session: Session) -> None:
    """Refuses (`ToolError`, one line) giving a member tools that are not stored."""
    if not isinstance(names, list | tuple):
        return
    missing = missing_tools([str(n) for n in names], session=session)
    if missing:
        listed = ", ".join(repr(n) for n in missing)
        raise ToolError(
            f"no tool named {listed} (`teamflow tool list` shows the tools; add one with "
            "`teamflow tool add FILE` or the built-in ones with `teamflow tool add --builtin`)"
        )


def list_tools(*, session: Session | None = None) -> list[ToolDefinition]:
    """Every stored tool, by `tool_id`."""
    with session_scope(session) as s:
        rows = s.exec(select(ToolDefinitionRow).order_by(ToolDefinitionRow.tool_id))
        return [row.to_wire() for row in rows]


def record_feedback(feedback: Feedback, *, session: Session | None = None) -> FeedbackRow:
    """Stores the `000` Feedback of one tool execution (flushed; committed by the scope)."""
    with session_scope(session) as s:
        row = FeedbackRow.from_wire(feedback)
        s.add(row)
        s.flush()
        return row


def get_feedback(execution_id: str, *, session: Session | None = None) -> Feedback:
    """The stored Feedback of execution `execution_id`; `ToolError` if there is none."""
    with session_scope(session) as s:
        row = s.get(FeedbackRow, execution_id)
        if row is None:
            raise ToolError(f"no feedback for execution {execution_id!r}")
        return row.to_wire()
