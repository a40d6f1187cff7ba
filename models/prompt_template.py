"""Prompt templates: versioned `000` LLM Prompt Templates, and filling in their variables.

A template's text names its variables as `{{name}}`, spaces inside the braces allowed
(`{{ region }}`); a name is a letter or `_`, then letters, digits, `_`, `.` or `-`. Other
braces are plain text. `variables` are the names in the order they first appear.

Versions: the first template stored under an id is version 1, each one added after it the
latest + 1; a stored version never changes. Processes adding the same id at once get
consecutive versions: they queue for the id (SQLite: the write lock its transactions take at
BEGIN; PostgreSQL: a transaction-level advisory lock on the id), and the primary key
(template_id, version) backs that up (a writer that loses a version counts again).

`render` refuses, with one line that names it, a variable the template uses that is not
given, a given one the template does not use, and an unknown template or version. Values go
in as they are: a value that contains `{{x}}` is not filled in again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

import sqlalchemy as sa
from pydantic import Field, StrictInt, ValidationError
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel

from models.base import SnakeWireModel, Timestamp, json_column, table_of, utc_column, utcnow
from models.db import session_scope
from models.knowledge import Id, KnowledgeError, check_id
from models.wire_support import error_lines, row_values, wire_from_row

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")
"""`{{name}}` or `{{ name }}`: a variable of a template."""
MAX_TEMPLATE_CHARS = 100_000
"""The longest template text."""
ADD_ATTEMPTS = 5
"""How often `add_template` counts the next version again after losing it to another writer."""


# --- 000 LLM Prompt Template ---------------------------------------------------------------


class PromptTemplate(SnakeWireModel):
    """`000` LLM Prompt Template: a versioned prompt text with named variables."""

    template_id: Id
    version: StrictInt = Field(ge=0, le=2**31 - 1)
    description: str
    template: str = Field(description="The prompt text, with the variables to fill in")
    variables: list[str] = Field(description="Names of the variables the template uses")
    created_at: Timestamp
    updated_at: Timestamp


class PromptTemplateRow(SQLModel, table=True):
    """A stored `000` LLM Prompt Template; one row per template id and version."""

    __tablename__ = "prompt_templates"

    template_id: str = SQLField(sa_column=sa.Column(sa.String, primary_key=True))
    version: int = SQLField(sa_column=sa.Column(sa.Integer, primary_key=True))
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    template: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    variables: list = SQLField(sa_column=json_column(nullable=False))
    created_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(sa_column=utc_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: PromptTemplate) -> Self:
        """A row holding `wire`."""
        return cls(**row_values(wire))

    def to_wire(self) -> PromptTemplate:
        """The row as the `000` LLM Prompt Template it was built from."""
        return wire_from_row(PromptTemplate, self)


class TemplateError(KnowledgeError):
    """A refused template operation (unknown id or version, a missing or unknown variable)."""


def variables_of(text: str) -> list[str]:
    """The variables `text` uses, in the order they first appear, each once."""
    return list(dict.fromkeys(PLACEHOLDER.findall(text)))


def _quoted(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


@dataclass(frozen=True)
class Rendered:
    """A template filled in: the template (its version), the values given, the text."""

    template: PromptTemplate
    values: dict[str, str]
    text: str

    def origin(self) -> dict[str, Any]:
        """Where a prompt made from it came from, as a member's `metadata.promptTemplate`."""
        return {
            "templateId": self.template.template_id,
            "version": self.template.version,
            "vars": dict(self.values),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "template_id": self.template.template_id,
            "version": self.template.version,
            "vars": dict(self.values),
            "text": self.text,
        }


def fill(template: PromptTemplate, values: dict[str, str]) -> str:
    """The text of `template` with `values` put in; `TemplateError` naming a variable the
    template uses that `values` lacks, or one of `values` the template does not use."""
    name = f"template {template.template_id!r} v{template.version}"
    needed = variables_of(template.template)
    missing = [v for v in needed if v not in values]
    if missing:
        s = "s" if len(missing) > 1 else ""
        raise TemplateError(f"missing variable{s} {_quoted(missing)} for {name}")
    unknown = [v for v in values if v not in needed]
    if unknown:
        s = "s" if len(unknown) > 1 else ""
        has = f"its variables: {', '.join(needed)}" if needed else "it has none"
        raise TemplateError(f"{name} has no variable{s} {_quoted(unknown)} ({has})")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template.template)


def _latest(s: Session, template_id: str) -> int | None:
    table = table_of(PromptTemplateRow)
    return s.execute(
        sa.select(sa.func.max(table.c.version)).where(table.c.template_id == template_id)
    ).scalar()


def _queue_for(s: Session, template_id: str) -> None:
    """Waits until no other transaction is adding a version of `template_id` (PostgreSQL;
    SQLite's write lock already serialises writers). Released when the transaction ends."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:id))"), {"id": template_id})


def add_template(
    template_id: str, *, description: str, template: str, session: Session | None = None
) -> PromptTemplate:
    """Stores `template` as the next version of `template_id` (1 for a new id).

    `variables` are those the text uses. Refused (`TemplateError`, nothing written): a
    malformed id, an empty text or one longer than `MAX_TEMPLATE_CHARS`.
    """
    check_id(template_id, "template id")
    if not template.strip():
        raise TemplateError("template: the text is empty")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"template: {len(template)} characters; at most {MAX_TEMPLATE_CHARS}")
    check_braces(template)
    now = utcnow()
    with session_scope(session) as s:
        _queue_for(s, template_id)
        for _ in range(ADD_ATTEMPTS):
            try:
                made = PromptTemplate(
                    template_id=template_id, version=(_latest(s, template_id) or 0) + 1,
                    description=description, template=template,
                    variables=variables_of(template), created_at=now, updated_at=now,
                )  # fmt: skip
            except ValidationError as exc:
                raise TemplateError(error_lines(exc)[0]) from None
            try:
                with s.begin_nested():
                    s.add(PromptTemplateRow.from_wire(made))
            except sa.exc.IntegrityError:
                continue  # another writer took this version first: count again
            return made
        raise TemplateError(f"template {template_id!r}: too many writers at once; try again")


def check_braces(template: str) -> None:
    """Refuses (`TemplateError`) a text whose `{{` or `}}` is not part of a `{{name}}`
    variable (`hi {{name`): it would render as written, never filled in."""
    rest = PLACEHOLDER.sub("", template)
    for token in ("{{", "}}"):
        at = rest.find(token)
        if at >= 0:
            near = rest[max(0, at - 10) : at + 12]
            raise TemplateError(
                f"template: {token!r} is not part of a {{{{name}}}} variable (near {near!r})"
            )


MAX_VERSION = 2**31 - 1
"""The highest template version (a 32-bit integer, in SQLite and PostgreSQL alike)."""


def get_template(
    template_id: str, *, version: int | None = None, session: Session | None = None
) -> PromptTemplate:
    """Version `version` of template `template_id` (None: the latest); `TemplateError`
    naming the template or the version when there is none."""
    if version is not None and not 0 <= version <= MAX_VERSION:
        raise TemplateError(
            f"template {template_id!r} has no version {version} (versions are whole numbers "
            f"up to {MAX_VERSION})"
        )
    with session_scope(session) as s:
        latest = _latest(s, template_id)
        if latest is None:
            raise TemplateError(f"no template {template_id!r}")
        row = s.get(PromptTemplateRow, (template_id, latest if version is None else version))
        if row is None:
            raise TemplateError(
                f"template {template_id!r} has no version {version} (latest: {latest})"
            )
        return row.to_wire()


def list_templates(*, session: Session | None = None) -> list[PromptTemplate]:
    """The latest version of every template, by id."""
    table = table_of(PromptTemplateRow)
    latest = (
        sa.select(table.c.template_id, sa.func.max(table.c.version).label("version"))
        .group_by(table.c.template_id)
        .subquery()
    )
    query = (
        sa.select(PromptTemplateRow)
        .join(
            latest,
            sa.and_(
                table.c.template_id == latest.c.template_id, table.c.version == latest.c.version
            ),
        )
        .order_by(table.c.template_id)
    )
    with session_scope(session) as s:
        return [row.to_wire() for row in s.execute(query).scalars()]


def render(
    template_id: str,
    values: dict[str, str],
    *,
    version: int | None = None,
    session: Session | None = None,
) -> Rendered:
    """Template `template_id` (version `version`, else the latest) filled in with `values`;
    see `fill` and `get_template` for what is refused."""
    template = get_template(template_id, version=version, session=session)
    return Rendered(template, dict(values), fill(template, values))
