"""Agents that remember: the internal actions `remember` and `recall` in team tasks."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import subprocess_teamflow
from factories import TEAM
from sqlmodel import select

from flows.team_task import run_team_task
from models import membership
from models import team as teams
from models.conversation import conversations_of
from models.db import session_scope
from models.memory import MemoryRow
from models.task import create_task
from models.team_config import agent_id

FINDING = "Q4 revenue peaked in the Northeast region, driven by enterprise renewals"


@pytest.fixture
def team(prefect_api: str, home: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("TEAMFLOW_EMBEDDINGS_URL", "TEAMFLOW_EMBEDDER"):  # full text only
        monkeypatch.delenv(name, raising=False)
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    return TEAM


def _step(actions: list[dict], *, stop: bool = False, response: str | None = None, **extra):
    return {
        "status": "SUCCESS" if stop else "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "next"}],
        "actions": actions,
        "stop": stop,
        "response": response,
        **extra,
    }


def _internal(name: str, params: dict) -> dict:
    return {"action": name, "type": "internal", "params": params, "execution": "SYNC"}


def _member(name: str, playbook: list[dict]) -> None:
    membership.add_member(
        TEAM, name, model="haiku", prompt=f"You are {name}.",
        runtime={"kind": "scripted", "playbook": playbook},
    )  # fmt: skip


def _run(title: str, assignee: str) -> dict:
    task = create_task(TEAM, title=title, assignees=[assignee])
    return asyncio.run(run_team_task(str(task.id)))


def _results(member: str, tool: str) -> list[dict]:
    """The `003` user messages handing `tool`'s results to `member`, parsed."""
    with session_scope() as s:
        found = conversations_of(session=s, agent_id=agent_id(member, TEAM))
    return [
        json.loads(m.content.text)
        for messages in found.values()
        for m in messages
        if m.role.value == "user" and m.content.userid == f"tool:{tool}"
    ]


def _log(member: str) -> subprocess.CompletedProcess:
    return subprocess_teamflow(["log", TEAM, member, "--color", "never"], stdin_devnull=False)


def _remember_step(**params) -> dict:
    return _step([_internal("remember", params)])


def test_an_agent_remembers_in_one_task_and_recalls_in_a_later_one(team: str) -> None:
    _member(
        "analyst-1",
        [
            _remember_step(
                content=FINDING,
                memory_type="knowledge",
                scope="individual",
                importance=0.9,
                tags=["q4", "regions"],
            ),
            _step([], stop=True, response="noted"),
        ],
    )
    first = _run("Find the Q4 peak", "analyst-1")
    assert first["status"] == "completed", first
    with session_scope() as s:
        rows = s.exec(select(MemoryRow)).all()
        assert [(r.team, r.agent_id, r.memory_type, r.scope, r.content, r.importance)
                for r in rows] == [
            (TEAM, "analyst-1@" + TEAM, "knowledge", "individual", FINDING, 0.9),
        ]  # fmt: skip
        memory_id, tags = str(rows[0].memory_id), rows[0].tags
    assert tags == ["q4", "regions"]

    # A later task is a new conversation: the member's playbook for it starts over.
    teams.update_member(
        TEAM, "analyst-1",
        runtime={"kind": "scripted", "playbook": [
            _step([_internal("recall", {"query": "which region peaked in Q4", "limit": 3})]),
            _step([], stop=True, response="{result.recall.memories.0.content}"),
        ]},
    )  # fmt: skip
    second = _run("Use what you found", "analyst-1")
    assert second["status"] == "completed", second
    assert second["members"]["analyst-1"]["response"] == FINDING

    [remembered] = _results("analyst-1", "remember")
    assert remembered["status"] == "SUCCESS"
    assert remembered["result"] == {
        "memory_id": memory_id, "memory_type": "knowledge", "scope": "individual",
    }  # fmt: skip
    [recalled] = _results("analyst-1", "recall")
    assert recalled["status"] == "SUCCESS" and recalled["result"]["count"] == 1
    assert recalled["result"]["memories"][0]["memory_id"] == memory_id
    with session_scope() as s:
        assert s.exec(select(MemoryRow)).one().access_count == 1  # the recall read it

    shown = _log("analyst-1")
    assert shown.returncode == 0, shown.stderr
    # The params in any order (PostgreSQL's JSONB keeps its own).
    [remember_call] = [x for x in shown.stdout.splitlines() if x.startswith("🔧 remember (")]
    assert f"content: {FINDING}" in remember_call and "scope: individual" in remember_call
    assert "👤 User tool:remember" in shown.stdout and memory_id in shown.stdout
    [recall_call] = [x for x in shown.stdout.splitlines() if x.startswith("🔧 recall (")]
    assert "query: which region peaked in Q4" in recall_call and "limit: 3" in recall_call
    assert "👤 User tool:recall" in shown.stdout
    assert shown.stdout.count(FINDING) >= 3  # remembered, recalled, and the answer


def test_individual_memories_are_their_agents_own_and_shared_ones_the_teams(team: str) -> None:
    _member("analyst-1", [
        _step([_internal("remember", {"content": "private churn note", "memory_type": "knowledge",
                                      "scope": "individual"}),
               _internal("remember", {"content": "shared churn note", "memory_type": "knowledge",
                                      "scope": "shared"})]),
        _step([], stop=True, response="noted"),
    ])  # fmt: skip
    _member("analyst-2", [
        _step([_internal("recall", {"query": "churn note"})]),
        _step([], stop=True, response="{result.recall.count}: {result.recall.memories.0.content}"),
    ])  # fmt: skip
    assert _run("Note churn", "analyst-1")["status"] == "completed"
    second = _run("Recall churn", "analyst-2")
    assert second["members"]["analyst-2"]["response"] == "1: shared churn note"


def test_bad_params_are_refused_by_name_and_nothing_is_written(team: str) -> None:
    _member("analyst-1", [
        _step([_internal("remember", {"content": "x", "memory_type": "dream",
                                      "scope": "individual"}),
               _internal("recall", {"limit": 3})]),
        _step([], stop=True, response="done"),
    ])  # fmt: skip
    assert _run("Misuse memory", "analyst-1")["status"] == "completed"
    [remembered] = _results("analyst-1", "remember")
    assert remembered["status"] == "FAILURE"
    assert remembered["error_message"].startswith("invalid params for remember: memory_type: ")
    [recalled] = _results("analyst-1", "recall")
    assert recalled["error_message"] == (
        "invalid params for recall: (root): 'query' is a required property"
    )
    with session_scope() as s:
        assert s.exec(select(MemoryRow)).all() == []


def test_a_context_block_limits_the_memory_types_a_step_may_recall(team: str) -> None:
    def recall(relics: list[str], **params) -> dict:
        return _step(
            [_internal("recall", {"query": "churn", **params})],
            context={"knowledge_relics": relics, "security_level": "user"},
        )

    _member("analyst-1", [
        _step([_internal("remember", {"content": "churn is seasonal", "memory_type": "knowledge",
                                      "scope": "individual"}),
               _internal("remember", {"content": "churn report steps", "scope": "individual",
                                      "memory_type": "agent_procedure"})]),
        recall(["memory:agent_procedure"]),
        recall([]),
        recall(["memory:agent_procedure"], memory_type="knowledge"),
        recall(["memory"]),
        _step([], stop=True, response="done"),
    ])  # fmt: skip
    assert _run("Scoped recall", "analyst-1")["status"] == "completed"
    results = _results("analyst-1", "recall")
    assert [m["content"] for m in results[0]["result"]["memories"]] == ["churn report steps"]
    assert results[1]["error_message"].startswith("the step's context names no memories")
    assert results[2]["error_message"] == (
        "memory type 'knowledge' is outside the step's context "
        "(knowledge_relics: memory:agent_procedure)"
    )
    assert results[3]["result"]["count"] == 2


def test_a_context_block_naming_no_memory_type_fails_the_step(team: str) -> None:
    _member("analyst-1", [
        _step([_internal("recall", {"query": "churn"})],
              context={"knowledge_relics": ["memory:dreams"], "security_level": "user"}),
    ])  # fmt: skip
    result = _run("Bad relic", "analyst-1")
    assert result["status"] == "archived"
    assert "memory:dreams" in result["members"]["analyst-1"]["error"]
