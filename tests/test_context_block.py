"""The `002` v2 `context` block: a step may use only the knowledge and resources it names.

The scope rules on their own (relics resolved against the real database), then whole
`team-task` runs whose scripted agents send context blocks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from factories import TEAM
from pydantic import ValidationError

from flows.runtimes import tool_results
from flows.scope import ScopeError, read_knowledge, step_scope
from flows.team_task import run_team_task
from flows.tools import builtin_tools, install_builtin_tools
from models import membership
from models.chimera_response import ActionContext
from models.conversation import load_conversation
from models.db import session_scope
from models.knowledge import (
    KnowledgeEntry,
    KnowledgeError,
    ResourceAccess,
    ResourceDefinition,
    add_knowledge,
    add_resource,
    get_knowledge,
    list_resources,
)
from models.task import create_task
from models.tool import ToolDefinition, ToolResult, ToolResultStatus

SUCCESS, FAILURE = ToolResultStatus.SUCCESS, ToolResultStatus.FAILURE
STAMP = "2026-01-01T00:00:00Z"


def builtin(tool_id: str) -> ToolDefinition:
    return next(t for t in builtin_tools() if t.tool_id == tool_id)


def context(*relics: str, level: str = "user") -> ActionContext:
    return ActionContext(knowledge_relics=list(relics), security_level=level)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A sales file, a read-only archive folder and an artifacts folder."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "q4-sales.csv").write_text("date,revenue\n2025-10-01,10\n")
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / "2024.csv").write_text("date,revenue\n")
    (tmp_path / "artifacts").mkdir()
    return tmp_path


def member_resources(root: Path) -> list[dict[str, str]]:
    """The member's `runtime.resources`."""
    sales = str(root / "data" / "q4-sales.csv")
    return [
        {"type": "file", "id": "sales", "path": sales, "access": "read"},
        {"type": "file", "id": "artifacts", "path": str(root / "artifacts"), "access": "write"},
        {"type": "data", "id": "archive", "path": str(root / "archive"), "access": "read"},
        {"type": "link", "id": "wiki", "path": "https://wiki.example.com/q4", "access": "read"},
    ]  # fmt: skip


def store_docs(root: Path) -> None:
    """A stored Resource Definition and a stored Knowledge Entry."""
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "architecture.md").write_text("# Architecture\n")
    add_resource(
        ResourceDefinition.model_validate(
            {
                "resource_id": "project_docs",
                "name": "Project docs",
                "type": "file",
                "description": "The architecture documents",
                "path": str(root / "docs"),
                "access": "read",
                "created_at": STAMP,
                "updated_at": STAMP,
                "tags": ["docs"],
            }
        )
    )
    add_knowledge(
        KnowledgeEntry.model_validate(
            {
                "knowledge_id": "relic_id_project_docs_v2",
                "type": "text",
                "content": "The new architecture runs every team task as a Prefect flow.",
                "summary": "Architecture v2",
                "created_at": STAMP,
                "updated_at": STAMP,
                "tags": ["architecture"],
                "source": "architecture.md",
            }
        )
    )
    add_knowledge(
        KnowledgeEntry.model_validate(
            {
                "knowledge_id": "hr_salaries",
                "type": "json",
                "content": {"ceo": 1},
                "summary": "Salaries",
                "created_at": STAMP,
                "updated_at": STAMP,
                "tags": [],
                "source": "hr",
            }
        )
    )


# --- the scope on its own ------------------------------------------------------------------


def test_a_named_resource_may_be_used(db_url: str, data: Path) -> None:
    scope = step_scope(context("sales"), resources=member_resources(data))
    assert scope is not None
    refusals = scope.tool_refusals(
        builtin("read_csv_summary"), {"path": "data/q4-sales.csv"}, cwd=data
    )
    assert refusals == []


def test_a_resource_the_context_does_not_name_is_refused_by_name(db_url: str, data: Path) -> None:
    scope = step_scope(context("sales"), resources=member_resources(data))
    assert scope is not None
    archive = data / "archive" / "2024.csv"

    read = scope.tool_refusals(builtin("read_csv_summary"), {"path": str(archive)}, cwd=data)
    written = scope.tool_refusals(
        builtin("write_file"), {"path": "artifacts/report.md", "content": "# Q4"}, cwd=data
    )
    link = scope.tool_refusals(
        builtin("read_csv_summary"), {"path": "https://wiki.example.com/q4/sales"}, cwd=data
    )

    assert read == [
        f"param 'path' refers to {archive}, which is resource 'archive' ({data / 'archive'}); "
        "the step's context does not name it (knowledge_relics: sales)"
    ]
    assert len(written) == 1 and "resource 'artifacts'" in written[0]
    assert len(link) == 1 and "resource 'wiki'" in link[0]


def test_a_folder_holding_an_unnamed_resource_is_refused_and_ungoverned_paths_are_not(
    db_url: str, data: Path
) -> None:
    scope = step_scope(context("sales", "artifacts"), resources=member_resources(data))
    assert scope is not None
    whole_folder = scope.tool_refusals(builtin("read_csv_summary"), {"path": "."}, cwd=data)
    elsewhere = scope.tool_refusals(
        builtin("write_file"), {"path": "scratch.txt", "content": "notes"}, cwd=data
    )
    [refusal] = whole_folder
    assert refusal.startswith("param 'path' refers to ., which is resource 'archive'")
    assert elsewhere == []


def test_stored_resources_and_knowledge_entries_are_relics(db_url: str, data: Path) -> None:
    store_docs(data)
    doc = str(data / "docs" / "architecture.md")
    named = step_scope(context("project_docs", "relic_id_project_docs_v2"))
    unnamed = step_scope(context("relic_id_project_docs_v2"))
    assert named is not None and unnamed is not None

    assert named.tool_refusals(builtin("read_csv_summary"), {"path": doc}, cwd=data) == []
    [refusal] = unnamed.tool_refusals(builtin("read_csv_summary"), {"path": doc}, cwd=data)
    assert "resource 'project_docs'" in refusal

    entry = read_knowledge({"knowledge_id": "relic_id_project_docs_v2"}, named)
    assert entry.status is SUCCESS
    assert entry.result["content"].startswith("The new architecture")
    outside = read_knowledge({"knowledge_id": "hr_salaries"}, named)
    assert outside.status is FAILURE
    assert outside.error_message == (
        "knowledge entry 'hr_salaries' is outside the step's context "
        "(knowledge_relics: project_docs, relic_id_project_docs_v2)"
    )
    # Without a context block nothing limits which entry a step reads.
    assert read_knowledge({"knowledge_id": "hr_salaries"}, None).status is SUCCESS


def test_the_store_replaces_entries_and_resources_by_id(db_url: str, data: Path) -> None:
    store_docs(data)
    entry = get_knowledge("hr_salaries")
    add_knowledge(entry.model_copy(update={"summary": "Pay bands"}))
    [docs] = list_resources()
    add_resource(docs.model_copy(update={"access": ResourceAccess.WRITE}))

    assert get_knowledge("hr_salaries").summary == "Pay bands"
    assert [r.access for r in list_resources()] == [ResourceAccess.WRITE]
    with pytest.raises(KnowledgeError, match="no knowledge entry 'nope'"):
        get_knowledge("nope")


def test_an_unknown_relic_is_an_error_that_names_it(db_url: str, data: Path) -> None:
    with pytest.raises(ScopeError) as error:
        step_scope(context("sales", "relic_typo"), resources=member_resources(data))
    assert str(error.value) == (
        "the step's context names knowledge relic 'relic_typo', but no knowledge entry or "
        "resource has that id"
    )


def test_the_security_level_is_a_known_level_no_higher_than_the_members(db_url: str) -> None:
    with pytest.raises(ValidationError, match="'public', 'user' or 'admin'"):
        ActionContext.model_validate({"knowledge_relics": [], "security_level": "root"})
    with pytest.raises(ScopeError, match="asks for security_level 'admin', above the member's"):
        step_scope(context(level="admin"))
    assert step_scope(context(level="admin"), clearance="admin") is not None
    assert step_scope(context(level="public")) is not None
    with pytest.raises(ScopeError, match="runtime security_level 'root' is not one of"):
        step_scope(context(), clearance="root")


def test_without_a_context_block_there_is_no_scope(db_url: str) -> None:
    assert step_scope(None, resources=[]) is None


# --- whole team tasks ----------------------------------------------------------------------


@pytest.fixture
def team(prefect_api: str, home: Path, db_url: str, data: Path) -> Path:
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    install_builtin_tools()
    store_docs(data)
    return data


def _step(
    actions: list[dict], *, relics: list[str] | None = None, stop: bool = False, response=None
) -> dict:
    step: dict[str, Any] = {"status": "SUCCESS" if stop else "EXECUTING"}
    if relics is not None:
        step["context"] = {"knowledge_relics": relics, "security_level": "user"}
    step |= {"thoughts": [], "actions": actions, "stop": stop, "response": response}
    return step


def _tool(name: str, params: dict, execution: str = "SYNC") -> dict:
    return {"action": name, "type": "tool", "params": params, "execution": execution}


def _run(root: Path, playbook: list[dict]) -> tuple[dict, dict[str, ToolResult]]:
    membership.add_member(
        TEAM, "analyst-1", model="haiku", prompt="You analyse Q4.",
        runtime={
            "kind": "scripted", "playbook": playbook, "resources": member_resources(root),
        },
    )  # fmt: skip
    task = create_task(TEAM, title="Q4", assignees=["analyst-1"])
    outcome = asyncio.run(run_team_task(str(task.id)))
    with session_scope() as s:
        conversation = load_conversation(
            session=s, agent_id=f"analyst-1@{TEAM}", conversation_id=f"task-{task.id}"
        )
    return outcome["members"]["analyst-1"], tool_results(conversation)


def test_a_step_whose_context_names_its_relics_uses_them(team: Path) -> None:
    sales = str(team / "data" / "q4-sales.csv")
    report = team / "artifacts" / "q4.md"
    member, results = _run(
        team,
        [
            _step(
                [
                    _tool("read_csv_summary", {"path": sales}),
                    {
                        "action": "read_knowledge",
                        "type": "internal",
                        "params": {"knowledge_id": "relic_id_project_docs_v2"},
                    },
                ],
                relics=["sales", "relic_id_project_docs_v2"],
            ),
            _step(
                [
                    _tool(
                        "write_file",
                        {"path": str(report), "content": "{result.read_knowledge.summary}"},
                    )
                ],
                relics=["artifacts"],
            ),
            _step([], stop=True, response="{result.read_csv_summary.row_count} rows"),
        ],
    )
    assert member["ok"], member["error"]
    assert member["response"] == "1 rows"
    assert results["read_knowledge"].result["summary"] == "Architecture v2"
    assert report.read_text() == "Architecture v2"


def test_a_tool_touching_a_resource_the_context_does_not_name_is_refused(team: Path) -> None:
    report = team / "artifacts" / "q4.md"
    member, results = _run(
        team,
        [
            _step(
                [
                    _tool("write_file", {"path": str(report), "content": "# Q4"}),
                    _tool("write_file", {"path": str(report), "content": "# Q4"}, "ASYNC"),
                ],
                relics=["sales"],
            ),
            _step([], stop=True, response="done"),
        ],
    )
    assert member["ok"], member["error"]
    refused = results["write_file"]
    assert refused.status is FAILURE
    assert refused.error_message == (
        f"tool write_file refused: param 'path' refers to {report}, which is resource "
        f"'artifacts' ({team / 'artifacts'}); the step's context does not name it "
        "(knowledge_relics: sales)"
    )
    assert not report.exists()


def test_a_named_resource_with_read_access_is_still_not_written(team: Path) -> None:
    sales = team / "data" / "q4-sales.csv"
    before = sales.read_text()
    member, results = _run(
        team,
        [
            _step([_tool("write_file", {"path": str(sales), "content": "x"})], relics=["sales"]),
            _step([], stop=True, response="done"),
        ],
    )
    assert member["ok"], member["error"]
    assert results["write_file"].status is FAILURE
    assert "which is resource 'sales'" in results["write_file"].error_message
    assert "with read access" in results["write_file"].error_message
    assert sales.read_text() == before


def test_an_unknown_relic_fails_the_step_with_a_clear_error(team: Path) -> None:
    report = team / "artifacts" / "q4.md"
    member, _ = _run(
        team,
        [
            _step(
                [_tool("write_file", {"path": str(report), "content": "# Q4"})],
                relics=["artifacts", "relic_typo"],
            ),
            _step([], stop=True, response="done"),
        ],
    )
    assert not member["ok"]
    assert member["error"] == (
        "the step's context names knowledge relic 'relic_typo', but no knowledge entry or "
        "resource has that id"
    )
    assert not report.exists()


def test_a_step_without_a_context_block_is_unchanged(team: Path) -> None:
    report = team / "artifacts" / "q4.md"
    archive = str(team / "archive" / "2024.csv")
    member, results = _run(
        team,
        [
            _step(
                [
                    _tool("write_file", {"path": str(report), "content": "# Q4"}),
                    _tool("read_csv_summary", {"path": archive}),
                    {
                        "action": "read_knowledge",
                        "type": "internal",
                        "params": {"knowledge_id": "hr_salaries"},
                    },
                ]
            ),
            _step([], stop=True, response="{result.read_csv_summary.row_count}"),
        ],
    )
    assert member["ok"], member["error"]
    assert member["response"] == "0"
    assert report.read_text() == "# Q4"
    assert results["read_knowledge"].status is SUCCESS
