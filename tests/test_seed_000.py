"""Seed 000: contexts, prompt templates, projects, resources, knowledge entries and messages
read the seed's examples, refuse what the seed does not allow, and survive the database."""

from __future__ import annotations

from typing import Any

import pytest
from factories import DB_SETTINGS, changed, fixture, without
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlmodel import Session
from stored import store_and_reload
from strategies import (
    contexts,
    elmo_messages,
    knowledge_entries,
    projects,
    prompt_templates,
    resource_definitions,
)

from models.knowledge import (
    Context,
    ContextRow,
    KnowledgeEntry,
    KnowledgeEntryRow,
    ResourceDefinition,
    ResourceRow,
)
from models.notification import Message
from models.project import ProjectDefinition, ProjectRow
from models.prompt_template import PromptTemplate, PromptTemplateRow

EXAMPLES = [
    ("000_context", Context, ContextRow),
    ("000_prompt_template", PromptTemplate, PromptTemplateRow),
    ("000_project", ProjectDefinition, ProjectRow),
    ("000_resource", ResourceDefinition, ResourceRow),
    ("000_knowledge_entry_text", KnowledgeEntry, KnowledgeEntryRow),
    ("000_knowledge_entry_json", KnowledgeEntry, KnowledgeEntryRow),
    ("000_message", Message, None),
    ("000_message_text", Message, None),
]


@pytest.mark.parametrize(("name", "model"), [(n, m) for n, m, _ in EXAMPLES])
def test_seed_example_reads_and_writes_back_unchanged(name: str, model: type) -> None:
    data = fixture(name)
    assert model.model_validate(data).to_wire() == data


@pytest.mark.parametrize(
    ("name", "model", "row_type"), [example for example in EXAMPLES if example[2] is not None]
)
def test_seed_example_comes_back_from_the_database_unchanged(
    session: Session, name: str, model: type, row_type: type
) -> None:
    data = fixture(name)
    row = row_type.from_wire(model.model_validate(data))
    assert store_and_reload(session.get_bind(), row, lambda r: r.to_wire().to_wire()) == data


def test_top_level_context_writes_its_nulls(session: Session) -> None:
    data = changed("000_context", "parent_context", to=None)
    data.update(milestone_id=None, task_id=None, process_id=None, thread_id=None)
    context = Context.model_validate(data)
    assert context.to_wire() == data
    stored = store_and_reload(
        session.get_bind(), ContextRow.from_wire(context), lambda r: r.to_wire().to_wire()
    )
    assert stored == data
    assert stored["parent_context"] is None


def test_context_rows_are_found_by_task() -> None:
    # The lookups a context store makes have indexes.
    indexed = {tuple(c.name for c in index.columns) for index in ContextRow.__table__.indexes}
    assert ("project_id", "milestone_id", "task_id") in indexed
    assert ("task_id",) in indexed


READERS = {name: model for name, model, _ in EXAMPLES}
MISSING = object()


def bad(case: str, name: str, *path: str | int, to: Any = MISSING, field: str = "") -> Any:
    """A bad input: fixture `name` with `path` set to `to` (or removed), refused at `field`."""
    data = without(name, *path) if to is MISSING else changed(name, *path, to=to)
    return pytest.param(READERS[name], data, field or path[-1], id=case)


BAD_INPUTS = [
    bad("resource-access-admin", "000_context", "resources", 0, "access", to="admin"),
    bad("resource-type-folder", "000_context", "resources", 1, "type", to="folder"),
    bad("context-status-done", "000_context", "status", to="done"),
    bad("timestamp-not-iso", "000_context", "created_at", to="2024-01-01 00:00"),
    bad("timestamp-naive", "000_context", "updated_at", to="2024-01-01T00:00:00"),
    bad("context-key-left-out", "000_context", "thread_id"),
    bad("parent-unknown-key", "000_context", "parent_context", "branch_id", to="b1"),
    bad("template-version-string", "000_prompt_template", "version", to="3"),
    bad("template-version-negative", "000_prompt_template", "version", to=-1),
    bad("project-status-archived", "000_project", "status", to="archived"),
    bad("project-unknown-key", "000_project", "owner", to="ywatanabe"),
    bad("project-empty-id", "000_project", "project_id", to=""),
    bad("resource-access-execute", "000_resource", "access", to="execute"),
    bad("knowledge-type-video", "000_knowledge_entry_text", "type", to="video"),
    bad(
        "knowledge-json-holds-text", "000_knowledge_entry_text", "type", to="json", field="content"
    ),
    bad(
        "knowledge-link-holds-object",
        "000_knowledge_entry_json",
        "type",
        to="link",
        field="content",
    ),
    bad("message-status-deleted", "000_message", "status", to="deleted"),
    bad("message-type-alert", "000_message", "type", to="alert"),
    bad("message-content-list", "000_message", "payload", "content", to=["a", "list"]),
]


@pytest.mark.parametrize(("model", "data", "field"), BAD_INPUTS)
def test_bad_input_is_refused_naming_the_field(model: type, data: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    locations = [error["loc"] for error in caught.value.errors()]
    assert any(field in loc for loc in locations), locations


STRATEGIES = [
    pytest.param(contexts, Context, ContextRow, id="context"),
    pytest.param(prompt_templates, PromptTemplate, PromptTemplateRow, id="prompt-template"),
    pytest.param(projects, ProjectDefinition, ProjectRow, id="project"),
    pytest.param(resource_definitions, ResourceDefinition, ResourceRow, id="resource"),
    pytest.param(knowledge_entries(), KnowledgeEntry, KnowledgeEntryRow, id="knowledge-entry"),
    pytest.param(elmo_messages, Message, None, id="message"),
]


@pytest.mark.parametrize(("strategy", "model", "row_type"), STRATEGIES)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_any_valid_document_writes_back_unchanged(
    strategy: st.SearchStrategy, model: type, row_type: type | None, data: st.DataObject
) -> None:
    document = data.draw(strategy)
    assert model.model_validate(document).to_wire() == document


@pytest.mark.parametrize(
    ("strategy", "model", "row_type"), [p for p in STRATEGIES if p.values[2] is not None]
)
@DB_SETTINGS
@given(data=st.data())
def test_any_valid_document_comes_back_from_the_database_unchanged(
    session: Session,
    strategy: st.SearchStrategy,
    model: type,
    row_type: type,
    data: st.DataObject,
) -> None:
    document = data.draw(strategy)
    row = row_type.from_wire(model.model_validate(document))
    assert store_and_reload(session.get_bind(), row, lambda r: r.to_wire().to_wire()) == document
