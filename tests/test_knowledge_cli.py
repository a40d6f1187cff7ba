"""`teamflow knowledge` as a user runs it (a real process, both databases): add, list, show
`000` Knowledge Entries; bad input is one line, exit 1 and nothing written."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from prefect_server import teamflow as run_teamflow
from sqlmodel import Session, select

from models import db
from models.knowledge import KnowledgeEntry, KnowledgeEntryRow


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return run_teamflow(list(args))


@pytest.fixture
def store(db_url: str, home: Path) -> str:
    return db_url


def _count() -> int:
    with Session(db.engine()) as s:
        return s.exec(select(sa.func.count()).select_from(KnowledgeEntryRow)).one()


def _add(*args: str) -> dict:
    result = teamflow("knowledge", "add", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_add_list_and_show_text_json_and_link_entries(store: str) -> None:
    text = _add(
        "--type", "text", "--content", "Use make-process with a :sentinel", "--summary",
        "Async processes in Emacs Lisp", "--tag", "elisp", "--tag", "processes", "--source",
        "GNU Emacs Lisp Reference Manual", "--id", "kn-elisp-async",
    )  # fmt: skip
    codes = _add(
        "--type", "json", "--content", '{"0": "success", "127": "command not found"}',
        "--summary", "Shell exit codes", "--tag", "shell", "--id", "kn-exit-codes",
    )  # fmt: skip
    link = _add(
        "--type", "link", "--content", "https://www.gnu.org/software/emacs/manual/",
        "--summary", "The Emacs manual", "--tag", "elisp",
    )  # fmt: skip

    # The 000 Knowledge Entry, exactly: its keys, nothing more.
    keys = ["knowledge_id", "type", "content", "summary", "created_at", "updated_at", "tags",
            "source"]  # fmt: skip
    for entry in (text, codes, link):
        assert list(entry) == keys
        assert KnowledgeEntry.model_validate(entry).to_wire() == entry
    assert text["tags"] == ["elisp", "processes"]
    assert text["source"] == "GNU Emacs Lisp Reference Manual"
    assert codes["content"] == {"0": "success", "127": "command not found"}
    assert codes["source"] == "cli"
    assert uuid.UUID(link["knowledge_id"])  # ids default to a new UUID
    assert text["created_at"] == text["updated_at"] and text["created_at"].endswith("Z")

    shown = teamflow("knowledge", "show", "kn-exit-codes", "--json")
    assert json.loads(shown.stdout) == codes
    shown_text = teamflow("knowledge", "show", "kn-exit-codes")
    assert shown_text.stdout.startswith("kn-exit-codes  json  Shell exit codes [shell]\n")
    assert '"127": "command not found"' in shown_text.stdout

    listed = json.loads(teamflow("knowledge", "list", "--json").stdout)
    assert [e["knowledge_id"] for e in listed] == [
        "kn-elisp-async",
        "kn-exit-codes",
        link["knowledge_id"],
    ]
    tagged = json.loads(teamflow("knowledge", "list", "--tag", "elisp", "--json").stdout)
    assert [e["knowledge_id"] for e in tagged] == ["kn-elisp-async", link["knowledge_id"]]
    lines = teamflow("knowledge", "list", "--tag", "shell").stdout
    assert lines == "kn-exit-codes  json  Shell exit codes [shell]\n"
    assert teamflow("knowledge", "list", "--tag", "none").stdout == "no knowledge entries\n"


def test_show_names_an_unknown_entry(store: str) -> None:
    result = teamflow("knowledge", "show", "kn-nope")
    assert result.returncode == 1
    assert result.stderr == "teamflow: error: no knowledge entry 'kn-nope'\n"


def test_a_taken_id_is_refused_and_the_entry_kept(store: str) -> None:
    first = _add("--type", "text", "--content", "one", "--summary", "first", "--id", "kn-1")
    again = teamflow(
        "knowledge", "add", "--type", "text", "--content", "two", "--summary", "second",
        "--id", "kn-1",
    )  # fmt: skip
    assert again.returncode == 1
    assert again.stderr == "teamflow: error: knowledge entry 'kn-1' exists already\n"
    assert json.loads(teamflow("knowledge", "show", "kn-1", "--json").stdout) == first


BASE = ["knowledge", "add", "--type", "text", "--content", "c", "--summary", "s"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([*BASE, "--type", "pdf"], "type 'pdf' is not one of text, json, link"),
        ([*BASE, "--type", "json", "--content", "[1, 2]"], "must be a JSON object"),
        ([*BASE, "--type", "json", "--content", "{nope"], "content is not valid JSON"),
        ([*BASE, "--type", "json", "--content", '{"n": NaN}'], "content"),
        ([*BASE, "--type", "link", "--content", "not a url"], "a link is a URL"),
        ([*BASE, "--content", "  "], "content: empty"),
        ([*BASE, "--summary", ""], "summary: empty"),
        ([*BASE, "--id", "has space"], "knowledge id 'has space' is not an id"),
        ([*BASE, "--tag", " "], "tags: a tag is empty"),
        ([*BASE, "--source", ""], "source: empty"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(store: str, args: list[str], says: str) -> None:
    result = teamflow(*args, "--json")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    assert _count() == 0


# --- update and delete ---------------------------------------------------------------------


def _stored(knowledge_id: str) -> dict:
    result = teamflow("knowledge", "show", knowledge_id, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _update(knowledge_id: str, *args: str) -> dict:
    result = teamflow("knowledge", "update", knowledge_id, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_update_changes_only_what_is_given_and_moves_updated_at(store: str) -> None:
    first = _add(
        "--type", "text", "--content", "Use make-process", "--summary", "Async processes",
        "--tag", "elisp", "--source", "the manual", "--id", "kn-async",
    )  # fmt: skip
    changed = _update("kn-async", "--content", "Use make-process with a :sentinel")
    assert changed == _stored("kn-async")
    assert KnowledgeEntry.model_validate(changed).to_wire() == changed
    assert changed["content"] == "Use make-process with a :sentinel"
    kept = ("knowledge_id", "type", "summary", "created_at", "tags", "source")
    assert {k: changed[k] for k in kept} == {k: first[k] for k in kept}
    assert datetime.fromisoformat(changed["updated_at"]) > datetime.fromisoformat(
        first["updated_at"]
    )

    retagged = _update("kn-async", "--summary", "Processes", "--tag", "emacs", "--tag", "lisp")
    assert (retagged["summary"], retagged["tags"]) == ("Processes", ["emacs", "lisp"])
    assert _update("kn-async", "--no-tags", "--source", "a colleague")["tags"] == []
    plain = teamflow("knowledge", "update", "kn-async", "--summary", "Async in Emacs")
    assert plain.stdout == "updated knowledge kn-async\n"
    # The same values again change nothing, not even updated_at.
    now = _stored("kn-async")
    assert _update("kn-async", "--summary", "Async in Emacs", "--no-tags") == now


def test_a_new_type_rereads_the_content_as_that_type(store: str) -> None:
    _add("--type", "text", "--content", '{"0": "success"}', "--summary", "codes", "--id", "kn-c")
    as_json = _update("kn-c", "--type", "json")
    assert (as_json["type"], as_json["content"]) == ("json", {"0": "success"})
    as_text = _update("kn-c", "--type", "text")
    assert (as_text["type"], as_text["content"]) == ("text", '{"0": "success"}')
    link = _update("kn-c", "--type", "link", "--content", "https://example.com/codes")
    assert (link["type"], link["content"]) == ("link", "https://example.com/codes")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["kn-nope", "--summary", "s"], "no knowledge entry 'kn-nope'"),
        (["kn-1"], "nothing to change: give --type, --content, --summary"),
        (["kn-1", "--type", "pdf"], "type 'pdf' is not one of text, json, link"),
        (["kn-1", "--type", "json"], "content is not valid JSON"),
        (["kn-1", "--type", "link"], "content: a link is a URL"),
        (["kn-1", "--type", "json", "--content", "[1, 2]"], "must be a JSON object"),
        (["kn-1", "--content", " "], "content: empty"),
        (["kn-1", "--summary", ""], "summary: empty"),
        (["kn-1", "--source", " "], "source: empty"),
        (["kn-1", "--tag", ""], "tags: a tag is empty"),
        (["kn-1", "--tag", "a", "--no-tags"], "give --tag or --no-tags, not both"),
    ],
)
def test_a_refused_update_is_one_line_and_writes_nothing(
    store: str, args: list[str], says: str
) -> None:
    before = _add("--type", "text", "--content", "one", "--summary", "first", "--id", "kn-1")
    result = teamflow("knowledge", "update", *args, "--json")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    assert _stored("kn-1") == before


def test_delete_removes_the_entry_and_prints_it(store: str) -> None:
    entry = _add("--type", "text", "--content", "one", "--summary", "first", "--id", "kn-1")
    kept = _add("--type", "text", "--content", "two", "--summary", "second", "--id", "kn-2")
    deleted = teamflow("knowledge", "delete", "kn-1", "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == entry
    assert json.loads(teamflow("knowledge", "list", "--json").stdout) == [kept]
    assert teamflow("knowledge", "delete", "kn-2").stdout == "deleted knowledge kn-2\n"
    assert _count() == 0

    again = teamflow("knowledge", "delete", "kn-1", "--json")
    assert again.returncode == 1
    assert again.stderr == "teamflow: error: no knowledge entry 'kn-1'\n"


def _step(relics: list[str]) -> dict:
    return {"status": "EXECUTING", "context": {"knowledge_relics": relics,
            "security_level": "user"}, "thoughts": [], "actions": [], "stop": False}  # fmt: skip


def test_delete_is_refused_while_a_members_playbook_names_the_entry(store: str) -> None:
    from factories import TEAM, research_team

    from models import team as teams

    research_team()
    entry = _add("--type", "text", "--content", "bands", "--summary", "Pay", "--id", "kn-pay")
    _add("--type", "text", "--content", "other", "--summary", "Other", "--id", "kn-other")
    # Named by a step of a per-task playbook: every place a playbook holds steps counts.
    teams.update_member(TEAM, "analyst-2", runtime={
        "kind": "scripted", "playbook": [_step(["kn-other"])],
        "tasks": {"Q4 brief": [_step(["memory", "kn-pay"])]},
    })  # fmt: skip

    refused = teamflow("knowledge", "delete", "kn-pay", "--json")
    assert refused.returncode == 1
    assert refused.stderr == (
        "teamflow: error: knowledge entry 'kn-pay' is in the knowledge_relics of the playbook "
        f"of analyst-2@{TEAM}; take it out there first (teamflow member set TEAM NAME "
        "--playbook FILE)\n"
    )
    assert _stored("kn-pay") == entry

    # Once the playbook no longer names it, it goes.
    teams.update_member(TEAM, "analyst-2", runtime={"kind": "scripted",
                                                    "playbook": [_step(["kn-other"])]})  # fmt: skip
    assert teamflow("knowledge", "delete", "kn-pay").returncode == 0
    assert teamflow("knowledge", "delete", "kn-other").returncode == 1
