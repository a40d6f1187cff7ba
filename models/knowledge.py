"""What agents know and work in: `000` contexts, resources and knowledge entries; their wire
schemas and their tables. (`000` prompt templates are `models.prompt_template`, projects
`models.project`, `001` memories `models.memory`.)

`000` calls its formats strict: every key of a template is required. A key whose absence has a
meaning (a context at project level has no `thread_id`, a top context no `parent_context`) is
nullable, and written as `null`, never left out.

The store functions (`add_resource`, `list_resources`, `add_knowledge`, `get_knowledge`,
`knowledge_ids`) are what the `team-task` flow reads when a step's `002` `context` block names
knowledge relics (see `flows/scope.py`); `create_knowledge`, `list_knowledge`,
`update_knowledge` and `delete_knowledge` are `teamflow knowledge add`, `list`, `update` and
`delete`. The stores of templates and projects are
`models.prompt_template` and `models.project`.
"""

import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

import sqlalchemy as sa
from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from models.base import (
    JSONValue,
    SnakeWireModel,
    Timestamp,
    json_column,
    utc_column,
    utcnow,
)
from models.db import replace_row, session_scope
from models.limits import LimitError, loads_json
from models.wire_support import error_lines, row_values, wire_from_row

Id = Annotated[str, Field(min_length=1)]
"""An identifier: any non-empty string."""


class ElmoStatus(StrEnum):
    """`000` `status` of a Context, a Project Definition and an Agent Configuration."""

    READY = "ready"
    RUNNING = "running"
    PENDING = "pending"
    FINISHED = "finished"


class ResourceType(StrEnum):
    """`000` resource `type`."""

    FILE = "file"
    LINK = "link"
    DATA = "data"


class ResourceAccess(StrEnum):
    """`000` resource `access`."""

    READ = "read"
    WRITE = "write"


# --- 000 Context ---------------------------------------------------------------------------


class ContextResource(SnakeWireModel):
    """`000` Context `resources` item: a file, link or data set the context may use."""

    type: ResourceType
    id: Id
    path: str = Field(description="File path or URL")
    access: ResourceAccess


class ParentContext(SnakeWireModel):
    """`000` Context `parent_context`: the project, milestone and task the context sits under."""

    project_id: Id
    milestone_id: str | None = Field(description="null when the parent is the project")
    task_id: str | None = Field(description="null when the parent is no task")


class Context(SnakeWireModel):
    """`000` Context: where a piece of work sits (project down to branch) and what it may use."""

    project_id: Id
    milestone_id: str | None = Field(description="null for a context at project level")
    task_id: str | None = Field(description="null for a context above task level")
    process_id: str | None = Field(description="null when no process runs the work")
    thread_id: str | None = Field(description="null outside a conversation thread")
    branch_id: str | None = Field(description="null outside a branch")
    description: str
    resources: list[ContextResource]
    tags: list[str]
    created_at: Timestamp
    updated_at: Timestamp
    status: ElmoStatus
    parent_context: ParentContext | None = Field(description="null for a context at the top")


class ContextRow(SQLModel, table=True):
    """A stored `000` Context; `id` is teamflow's own key (the wire has none)."""

    __tablename__ = "contexts"
    __table_args__ = (
        sa.Index("ix_contexts_project_milestone_task", "project_id", "milestone_id", "task_id"),
    )

    id: uuid.UUID = SQLField(
        default_factory=uuid.uuid4, sa_column=sa.Column(sa.Uuid, primary_key=True)
    )
    project_id: str = SQLField(sa_column=sa.Column(sa.String, nullable=False))
    milestone_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String))
    task_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String, index=True))
    process_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String))
    thread_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String, index=True))
    branch_id: str | None = SQLField(default=None, sa_column=sa.Column(sa.String))
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    resources: list = SQLField(sa_column=json_column(nullable=False))
    tags: list = SQLField(sa_column=json_column(nullable=False))
    created_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    status: str = SQLField(sa_column=sa.Column(sa.String(16), nullable=False, index=True))
    parent_context: dict | None = SQLField(default=None, sa_column=json_column())

    @classmethod
    def from_wire(cls, wire: Context) -> Self:
        """A new row (with a new `id`) holding `wire`."""
        return cls(**row_values(wire))

    def to_wire(self) -> Context:
        """The row as the `000` Context it was built from."""
        return wire_from_row(Context, self)


# --- 000 Resource Definition ---------------------------------------------------------------


class ResourceDefinition(SnakeWireModel):
    """`000` Resource Definition: a file, link or data set, and whether agents may write it."""

    resource_id: Id
    name: str = Field(min_length=1)
    type: ResourceType
    description: str
    path: str = Field(description="File path or URL")
    access: ResourceAccess
    created_at: Timestamp
    updated_at: Timestamp
    tags: list[str]


class ResourceRow(SQLModel, table=True):
    """A stored `000` Resource Definition."""

    __tablename__ = "resources"

    resource_id: str = SQLField(sa_column=sa.Column(sa.String, primary_key=True))
    name: str = SQLField(sa_column=sa.Column(sa.String, nullable=False, index=True))
    type: str = SQLField(sa_column=sa.Column(sa.String(8), nullable=False, index=True))
    description: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    path: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    access: str = SQLField(sa_column=sa.Column(sa.String(8), nullable=False))
    created_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    tags: list = SQLField(sa_column=json_column(nullable=False))

    @classmethod
    def from_wire(cls, wire: ResourceDefinition) -> Self:
        """A row holding `wire`."""
        return cls(**row_values(wire))

    def to_wire(self) -> ResourceDefinition:
        """The row as the `000` Resource Definition it was built from."""
        return wire_from_row(ResourceDefinition, self)


# --- 000 Knowledge Entry -------------------------------------------------------------------


class KnowledgeType(StrEnum):
    """`000` Knowledge Entry `type`: what `content` holds."""

    TEXT = "text"
    JSON = "json"
    LINK = "link"


class KnowledgeEntry(SnakeWireModel):
    """`000` Knowledge Entry: a piece of text, JSON or a link that agents can look up."""

    knowledge_id: Id
    type: KnowledgeType
    content: str | dict[str, Any] = Field(
        description="A string for text and link (the URL), a JSON object for json"
    )
    summary: str
    created_at: Timestamp
    updated_at: Timestamp
    tags: list[str]
    source: str = Field(description="Where the knowledge came from: an agent, a document, a URL")

    @field_validator("content")
    @classmethod
    def _content_fits_type(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is KnowledgeType.JSON and not isinstance(value, dict):
            raise ValueError("a json knowledge entry's content must be a JSON object")
        if kind in (KnowledgeType.TEXT, KnowledgeType.LINK) and not isinstance(value, str):
            raise ValueError(f"a {kind} knowledge entry's content must be a string")
        return value


class KnowledgeEntryRow(SQLModel, table=True):
    """A stored `000` Knowledge Entry (`content` is JSON: a string or an object)."""

    __tablename__ = "knowledge_entries"

    knowledge_id: str = SQLField(sa_column=sa.Column(sa.String, primary_key=True))
    type: str = SQLField(sa_column=sa.Column(sa.String(8), nullable=False, index=True))
    content: Any = SQLField(sa_column=json_column(nullable=False))
    summary: str = SQLField(sa_column=sa.Column(sa.Text, nullable=False))
    created_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    updated_at: datetime = SQLField(sa_column=utc_column(nullable=False))
    tags: list = SQLField(sa_column=json_column(nullable=False))
    source: str = SQLField(sa_column=sa.Column(sa.String, nullable=False, index=True))

    @classmethod
    def from_wire(cls, wire: KnowledgeEntry) -> Self:
        """A row holding `wire`."""
        return cls(**row_values(wire))

    def to_wire(self) -> KnowledgeEntry:
        """The row as the `000` Knowledge Entry it was built from."""
        return wire_from_row(KnowledgeEntry, self)


# --- the store: resources and knowledge ----------------------------------------------------


class KnowledgeError(ValueError):
    """A refused knowledge store operation (e.g. an unknown id); one line for the user."""


def add_resource(
    definition: ResourceDefinition, *, session: Session | None = None
) -> ResourceDefinition:
    """Stores `definition`, replacing a stored resource with the same `resource_id`."""
    with session_scope(session) as s:
        replace_row(ResourceRow.from_wire(definition), definition.resource_id, session=s)
        return definition


def list_resources(*, session: Session | None = None) -> list[ResourceDefinition]:
    """Every stored `000` Resource Definition, by `resource_id`."""
    with session_scope(session) as s:
        rows = s.exec(select(ResourceRow).order_by(col(ResourceRow.resource_id)))
        return [row.to_wire() for row in rows]


def get_resource(resource_id: str, *, session: Session | None = None) -> ResourceDefinition:
    """The stored Resource Definition `resource_id`; `KnowledgeError` if there is none."""
    with session_scope(session) as s:
        row = s.get(ResourceRow, resource_id)
        if row is None:
            raise KnowledgeError(
                f"no resource {resource_id!r} (add it with `teamflow resource add`)"
            )
        return row.to_wire()


def resource_grants(specs: list[str], *, session: Session | None = None) -> list[dict[str, Any]]:
    """A member's resources (its `runtime.resources`) from `ID:read|write` specs: each a
    `000` Context resource of the stored Resource Definition `ID` with the access given.
    `KnowledgeError` (one line) for a spec that is not `ID:read|write` or an unknown id."""
    accesses = " or ".join(a.value for a in ResourceAccess)
    grants: dict[str, dict[str, Any]] = {}
    with session_scope(session) as s:
        for spec in specs:
            resource_id, sep, access = spec.rpartition(":")
            if not sep or not resource_id or access not in {a.value for a in ResourceAccess}:
                raise KnowledgeError(
                    f"--resource {spec!r} is not ID:{accesses.replace(' or ', '|')}"
                )
            definition = get_resource(resource_id, session=s)
            grant = ContextResource(
                type=definition.type, id=definition.resource_id, path=definition.path,
                access=ResourceAccess(access),
            )  # fmt: skip
            grants[grant.id] = grant.model_dump(mode="json")
    return list(grants.values())


def add_knowledge(entry: KnowledgeEntry, *, session: Session | None = None) -> KnowledgeEntry:
    """Stores `entry`, replacing a stored entry with the same `knowledge_id`."""
    with session_scope(session) as s:
        replace_row(KnowledgeEntryRow.from_wire(entry), entry.knowledge_id, session=s)
        return entry


def get_knowledge(knowledge_id: str, *, session: Session | None = None) -> KnowledgeEntry:
    """The stored Knowledge Entry `knowledge_id`; `KnowledgeError` if there is none."""
    with session_scope(session) as s:
        row = s.get(KnowledgeEntryRow, knowledge_id)
        if row is None:
            raise KnowledgeError(f"no knowledge entry {knowledge_id!r}")
        return row.to_wire()


def knowledge_ids(ids: list[str], *, session: Session | None = None) -> set[str]:
    """Those of `ids` that are stored Knowledge Entries."""
    if not ids:
        return set()
    with session_scope(session) as s:
        found = s.exec(
            select(KnowledgeEntryRow.knowledge_id).where(
                col(KnowledgeEntryRow.knowledge_id).in_(set(ids))
            )
        )
        return set(found)


ID_RULE = "1-128 letters, digits and _ . : @ -, starting with a letter or digit"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
MAX_KNOWLEDGE_CHARS = 1_000_000
"""The longest content (text, URL or JSON text) `create_knowledge` stores."""
DEFAULT_SOURCE = "cli"
"""A knowledge entry's `source` when nobody says where it came from."""


def check_id(value: str, what: str) -> str:
    """`value` if it is an id a person can type (see `ID_RULE`); else `KnowledgeError`."""
    if not _ID.fullmatch(value):
        raise KnowledgeError(f"{what} {value!r} is not an id: {ID_RULE}")
    return value


def check_tags(tags: list[str] | None) -> list[str]:
    """The tags without repeats, in order; `KnowledgeError` for an empty one."""
    for tag in tags or []:
        if not tag.strip():
            raise KnowledgeError("tags: a tag is empty")
    return list(dict.fromkeys(tags or []))


def _content(kind: KnowledgeType, content: str) -> str | dict[str, Any]:
    if len(content) > MAX_KNOWLEDGE_CHARS:
        raise KnowledgeError(f"content: {len(content)} characters; at most {MAX_KNOWLEDGE_CHARS}")
    if not content.strip():
        raise KnowledgeError("content: empty")
    if kind is KnowledgeType.JSON:
        try:
            parsed = loads_json(content, what="content")
        except json.JSONDecodeError as exc:
            raise KnowledgeError(
                f"content is not valid JSON: {exc.msg} at column {exc.colno}"
            ) from None
        except LimitError as exc:
            raise KnowledgeError(str(exc)) from None
        if not isinstance(parsed, dict):
            raise KnowledgeError("content: a json knowledge entry's content must be a JSON object")
        return parsed
    if kind is KnowledgeType.LINK and not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", content):
        raise KnowledgeError(f"content: a link is a URL (e.g. https://...), not {content!r}")
    return content


def _knowledge_type(value: KnowledgeType | str) -> KnowledgeType:
    try:
        return KnowledgeType(value)
    except ValueError:
        allowed = ", ".join(t.value for t in KnowledgeType)
        raise KnowledgeError(f"type {value!r} is not one of {allowed}") from None


def create_knowledge(
    *,
    type: KnowledgeType | str,
    content: str,
    summary: str,
    tags: list[str] | None = None,
    source: str | None = None,
    knowledge_id: str | None = None,
    session: Session | None = None,
) -> KnowledgeEntry:
    """Stores a new `000` Knowledge Entry, created now (`teamflow knowledge add`).

    `content` is the text, the URL (`link`), or the JSON text of an object (`json`). The id
    is a new UUID unless given, the source `DEFAULT_SOURCE` unless given. Refused with one
    line (`KnowledgeError`), nothing written: an unknown type, empty content, summary or
    source, JSON that is not an object, a link that is no URL, an empty tag, a malformed id
    or one that is taken.
    """
    kind = _knowledge_type(type)
    if knowledge_id is not None:
        check_id(knowledge_id, "knowledge id")
    if not summary.strip():
        raise KnowledgeError("summary: empty")
    source = DEFAULT_SOURCE if source is None else source
    if not source.strip():
        raise KnowledgeError("source: empty")
    now = utcnow()
    try:
        entry = KnowledgeEntry(
            knowledge_id=knowledge_id or str(uuid.uuid4()), type=kind,
            content=_content(kind, content), summary=summary, created_at=now, updated_at=now,
            tags=check_tags(tags), source=source,
        )  # fmt: skip
    except ValidationError as exc:
        raise KnowledgeError(error_lines(exc)[0]) from None
    with session_scope(session) as s:
        taken = KnowledgeError(f"knowledge entry {entry.knowledge_id!r} exists already")
        if s.get(KnowledgeEntryRow, entry.knowledge_id) is not None:
            raise taken
        try:
            with s.begin_nested():  # another process may take the id meanwhile
                s.add(KnowledgeEntryRow.from_wire(entry))
        except sa.exc.IntegrityError:
            raise taken from None
        return entry


def update_knowledge(
    knowledge_id: str,
    *,
    type: KnowledgeType | str | None = None,
    content: str | None = None,
    summary: str | None = None,
    tags: list[str] | None = None,
    source: str | None = None,
    session: Session | None = None,
) -> KnowledgeEntry:
    """Changes a stored Knowledge Entry (`teamflow knowledge update`); None: unchanged.

    Checked as `create_knowledge` checks a new entry. A new `type` without new `content`
    re-reads the stored content as that type (an object as its JSON text, JSON text as an
    object), so the entry always fits its type. `tags` replace the stored ones (`[]`: none).
    `updated_at` becomes now when something changes; `created_at` and the id never change.
    Refused with one line (`KnowledgeError`), nothing written: an unknown id, nothing to
    change, and every value `create_knowledge` refuses.
    """
    if all(v is None for v in (type, content, summary, tags, source)):
        raise KnowledgeError(
            "nothing to change: give --type, --content, --summary, --tag/--no-tags or --source"
        )
    kind = None if type is None else _knowledge_type(type)
    if summary is not None and not summary.strip():
        raise KnowledgeError("summary: empty")
    if source is not None and not source.strip():
        raise KnowledgeError("source: empty")
    checked_tags = None if tags is None else check_tags(tags)
    with session_scope(session) as s:
        row = s.get(KnowledgeEntryRow, knowledge_id, with_for_update=True)
        if row is None:
            raise KnowledgeError(f"no knowledge entry {knowledge_id!r}")
        current = row.to_wire()
        new_kind = kind or current.type
        if content is None and new_kind is not current.type:
            stored = current.content
            content = stored if isinstance(stored, str) else json.dumps(stored, ensure_ascii=False)
        changes: dict[str, Any] = {"type": new_kind}
        if content is not None:
            changes["content"] = _content(new_kind, content)
        for name, value in (("summary", summary), ("tags", checked_tags), ("source", source)):
            if value is not None:
                changes[name] = value
        if all(getattr(current, k) == v for k, v in changes.items()):
            return current  # nothing changes, not even updated_at
        try:
            entry = KnowledgeEntry.model_validate(
                {**current.model_dump(), **changes, "updated_at": utcnow()}
            )
        except ValidationError as exc:
            raise KnowledgeError(error_lines(exc)[0]) from None
        for name, value in KnowledgeEntryRow.from_wire(entry).model_dump().items():
            setattr(row, name, value)
        s.flush()
        return entry


_MEMBERS = sa.table(
    "members", sa.column("team"), sa.column("position"), sa.column("agent_id"),
    sa.column("runtime", JSONValue()),
)  # fmt: skip
"""What `playbooks_naming` reads of the `members` table: `models.team` is a layer above this
module, so its table is named here, not imported."""


def playbooks_naming(knowledge_id: str, *, session: Session | None = None) -> list[str]:
    """The members (`agentId`) whose stored runtime names `knowledge_id` in a `002` context
    block (`knowledge_relics`) of its playbook: steps that will ask for the entry."""
    m = _MEMBERS.c
    with session_scope(session) as s:
        rows = s.execute(
            sa.select(m.agent_id, m.runtime)
            .where(sa.cast(m.runtime, sa.Text).like("%knowledge_relics%"))
            .order_by(m.team, m.position)
        ).all()
    return [r.agent_id for r in rows if any(knowledge_id in n for n in _relic_lists(r.runtime))]


def _relic_lists(value: Any) -> Iterator[list]:
    """Every `knowledge_relics` list anywhere in `value` (a playbook is steps, per-task
    playbooks and an `on_denial` step, each with its own context block)."""
    if isinstance(value, dict):
        relics = value.get("knowledge_relics")
        if isinstance(relics, list):
            yield relics
        for item in value.values():
            yield from _relic_lists(item)
    elif isinstance(value, list):
        for item in value:
            yield from _relic_lists(item)


def delete_knowledge(knowledge_id: str, *, session: Session | None = None) -> KnowledgeEntry:
    """Deletes a stored Knowledge Entry (`teamflow knowledge delete`); returns it as it was.

    Refused with one line (`KnowledgeError`), nothing deleted: an unknown id, and an entry a
    member's stored playbook names in a context block's `knowledge_relics` (that step would
    fail on a relic that is gone), naming the members. A step of a running agent that names
    it later fails naming the relic (`flows.scope`); past conversations keep mentioning it.
    """
    with session_scope(session) as s:
        row = s.get(KnowledgeEntryRow, knowledge_id, with_for_update=True)
        if row is None:
            raise KnowledgeError(f"no knowledge entry {knowledge_id!r}")
        users = playbooks_naming(knowledge_id, session=s)
        if users:
            raise KnowledgeError(
                f"knowledge entry {knowledge_id!r} is in the knowledge_relics of the playbook "
                f"of {', '.join(users)}; take it out there first (teamflow member set TEAM "
                "NAME --playbook FILE)"
            )
        entry = row.to_wire()
        s.delete(row)
        s.flush()
        return entry


def list_knowledge(
    *, tag: str | None = None, session: Session | None = None
) -> list[KnowledgeEntry]:
    """The stored Knowledge Entries, oldest first; with `tag`, those tagged with it."""
    with session_scope(session) as s:
        query = select(KnowledgeEntryRow).order_by(
            col(KnowledgeEntryRow.created_at),
            col(KnowledgeEntryRow.knowledge_id),
        )
        # Tags are a JSON list; filtering here reads the same on SQLite and PostgreSQL.
        entries = [row.to_wire() for row in s.exec(query)]
    return [e for e in entries if tag is None or tag in e.tags]
