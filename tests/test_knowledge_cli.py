"""`teamflow knowledge` as a user runs it (a real process, both databases): add, list, show
`000` Knowledge Entries; bad input is one line, exit 1 and nothing written."""

from __future__ import annotations

import json
import subprocess
import uuid
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
