"""Prompt templates (`000`), as a user runs them (a real process, both databases): versions
count up per id, rendering fills in every variable and names each one missing or unknown, a
member's prompt comes from a template; refusals are one line, exit 1, nothing written."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from factories import TEAM, research_team
from prefect_server import teamflow as run_teamflow
from sqlmodel import Session, select

from models import db
from models.prompt_template import (
    PromptTemplate,
    PromptTemplateRow,
    add_template,
    get_template,
    variables_of,
)
from models.team import Member

ANALYST = "You analyse {{ region }} sales for {{quarter}}. Start with {{region}}."


def teamflow(*args: str) -> subprocess.CompletedProcess:
    return run_teamflow(list(args))


@pytest.fixture
def store(db_url: str, home: Path) -> str:
    return db_url


@pytest.fixture
def analyst(store: str) -> str:
    """Template `analyst`: v1 uses region and quarter, v2 region, quarter and style."""
    add_template("analyst", description="Sales analyst", template=ANALYST)
    add_template("analyst", description="With a style", template=ANALYST + " Write {{style}}.")
    return "analyst"


def _versions() -> list[tuple[str, int]]:
    with Session(db.engine()) as s:
        rows = s.exec(select(PromptTemplateRow.template_id, PromptTemplateRow.version))
        return sorted(tuple(r) for r in rows)


def test_variables_are_the_placeholders_in_order_of_first_appearance() -> None:
    assert variables_of(ANALYST) == ["region", "quarter"]
    assert variables_of("{{b}} {{ a }} {{b}} {{  c.d-e_f  }}") == ["b", "a", "c.d-e_f"]
    # Other braces are text: single braces, JSON, names that are no names.
    assert variables_of('{single} {"json": 1} {{ two words }} {{1st}} {{}}') == []


def test_add_stores_version_1_then_counts_up_per_id(store: str) -> None:
    first = teamflow("template", "add", "analyst", "--description", "A", "--template", ANALYST)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "added template analyst v1 (variables: region, quarter)\n"
    second = teamflow(
        "template", "add", "analyst", "--description", "Styled", "--template",
        ANALYST + " Write {{style}}.", "--json",
    )  # fmt: skip
    made = json.loads(second.stdout)
    keys = ["template_id", "version", "description", "template", "variables", "created_at",
            "updated_at"]  # fmt: skip
    assert list(made) == keys
    assert PromptTemplate.model_validate(made).to_wire() == made
    assert (made["version"], made["variables"]) == (2, ["region", "quarter", "style"])
    other = teamflow("template", "add", "writer", "--description", "W", "--template", "Hi")
    assert other.stdout == "added template writer v1 (variables: none)\n"
    assert _versions() == [("analyst", 1), ("analyst", 2), ("writer", 1)]
    assert get_template("analyst", version=1).template == ANALYST  # v1 is unchanged


def test_concurrent_adds_get_consecutive_versions(store: str) -> None:
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            add_template("busy", description=f"writer {i}", template=f"Version by {i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _versions() == [("busy", v) for v in range(1, 7)]


def test_a_version_taken_meanwhile_is_counted_again(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from models import prompt_template

    add_template("busy", description="first", template="one")
    counted = prompt_template._latest
    stale = iter([None])  # the first count misses v1, as if another writer took it meanwhile

    def latest(s, template_id):
        return next(stale, counted(s, template_id))

    monkeypatch.setattr(prompt_template, "_latest", latest)
    made = add_template("busy", description="second", template="two")
    assert made.version == 2
    assert _versions() == [("busy", 1), ("busy", 2)]


def test_render_fills_in_every_variable(analyst: str) -> None:
    latest = teamflow(
        "template", "render", "analyst", "--var", "region=EMEA", "--var", "quarter=Q4",
        "--var", "style=bullet points",
    )  # fmt: skip
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == (
        "You analyse EMEA sales for Q4. Start with EMEA. Write bullet points.\n"
    )
    v1 = teamflow(
        "template", "render", "analyst", "--version", "1", "--var", "quarter=Q4",
        "--var", "region=EMEA", "--json",
    )  # fmt: skip
    assert json.loads(v1.stdout) == {
        "template_id": "analyst",
        "version": 1,
        "vars": {"quarter": "Q4", "region": "EMEA"},
        "text": "You analyse EMEA sales for Q4. Start with EMEA.",
    }


def test_a_value_goes_in_as_it_is(analyst: str) -> None:
    result = teamflow(
        "template", "render", "analyst", "--version", "1", "--var", "region={{quarter}}",
        "--var", "quarter=a=b",
    )  # fmt: skip
    assert result.stdout == "You analyse {{quarter}} sales for a=b. Start with {{quarter}}.\n"


def test_render_names_the_missing_variable(analyst: str) -> None:
    result = teamflow(
        "template", "render", "analyst", "--var", "quarter=Q4", "--var", "style=prose"
    )
    assert result.returncode == 1
    assert result.stderr == (
        "teamflow: error: missing variable 'region' for template 'analyst' v2\n"
    )
    both = teamflow("template", "render", "analyst", "--var", "quarter=Q4")
    assert "missing variables 'region', 'style' for template 'analyst' v2" in both.stderr


def test_render_names_a_variable_the_template_does_not_use(analyst: str) -> None:
    result = teamflow(
        "template", "render", "analyst", "--version", "1", "--var", "region=EMEA",
        "--var", "quarter=Q4", "--var", "tone=dry",
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        "teamflow: error: template 'analyst' v1 has no variable 'tone' "
        "(its variables: region, quarter)\n"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["template", "render", "nope"], "no template 'nope'"),
        (["template", "render", "analyst", "--version", "7"], "has no version 7 (latest: 2)"),
        (["template", "show", "analyst", "--version", "0"], "has no version 0 (latest: 2)"),
        (["template", "render", "analyst", "--var", "region"], "--var 'region' is not NAME="),
        (["template", "render", "analyst", "--var", "a=1", "--var", "a=2"], "--var a is given"),
        (["template", "add", "bad id", "--description", "d", "--template", "t"], "not an id"),
        (["template", "add", "new", "--description", "d", "--template", " "], "text is empty"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(analyst: str, args: list[str], says: str) -> None:
    result = teamflow(*args, "--json")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    assert _versions() == [("analyst", 1), ("analyst", 2)]


def test_show_and_list(analyst: str) -> None:
    add_template("writer", description="Writes", template="Write about {{topic}}.")
    shown = json.loads(teamflow("template", "show", "analyst", "--version", "1", "--json").stdout)
    assert (shown["version"], shown["template"]) == (1, ANALYST)
    listed = json.loads(teamflow("template", "list", "--json").stdout)
    assert [(t["template_id"], t["version"]) for t in listed] == [("analyst", 2), ("writer", 1)]
    text = teamflow("template", "show", "analyst").stdout
    assert text.startswith("analyst v2: With a style\n    variables: region, quarter, style;")


# --- a member's prompt from a template -----------------------------------------------------


def _member() -> Member:
    with Session(db.engine()) as s:
        return s.get(Member, (TEAM, "analyst-1"))


def _config_member(home: Path) -> dict:
    config = json.loads((home / "teams" / TEAM / "config.json").read_text())
    return next(m for m in config["members"] if m["name"] == "analyst-1")


def test_a_members_prompt_comes_from_a_template(analyst: str, home: Path) -> None:
    research_team()
    result = teamflow(
        "member", "set", TEAM, "analyst-1", "--template", "analyst", "--version", "1",
        "--var", "region=EMEA", "--var", "quarter=Q4",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    origin = {"templateId": "analyst", "version": 1, "vars": {"region": "EMEA", "quarter": "Q4"}}
    prompt = "You analyse EMEA sales for Q4. Start with EMEA."
    shown = json.loads(teamflow("member", "show", TEAM, "analyst-1", "--json").stdout)
    assert (shown["prompt"], shown["promptTemplate"]) == (prompt, origin)
    text = teamflow("member", "show", TEAM, "analyst-1").stdout
    assert "template     analyst v1 (region=EMEA, quarter=Q4)\n" in text
    # It travels in config.json, beside the prompt it made.
    written = _config_member(home)
    assert (written["prompt"], written["metadata"]["promptTemplate"]) == (prompt, origin)

    # A plain prompt later drops the record: it no longer says where the prompt came from.
    plain = teamflow("member", "set", TEAM, "analyst-1", "--prompt", "Just analyse.")
    assert plain.returncode == 0, plain.stderr
    assert "metadata" not in _config_member(home)
    again = json.loads(teamflow("member", "show", TEAM, "analyst-1", "--json").stdout)
    assert (again["prompt"], again["promptTemplate"]) == ("Just analyse.", None)


BAD_TEMPLATE_CASES = [
    (["--template", "analyst", "--var", "quarter=Q4", "--var", "style=x"],
     "missing variable 'region' for template 'analyst' v2"),
    (["--template", "analyst", "--version", "1", "--var", "region=E", "--var", "quarter=Q",
      "--var", "x=1"], "template 'analyst' v1 has no variable 'x'"),
    (["--template", "ghost"], "no template 'ghost'"),
    (["--template", "analyst", "--version", "3"], "has no version 3"),
    (["--template", "analyst", "--prompt", "p"], "--prompt or --template, not both"),
]  # fmt: skip
"""(options, what the refusal says) that `member set` and `member add` refuse alike."""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        *BAD_TEMPLATE_CASES,
        (["--var", "region=EMEA"], "--var and --version go with --template"),
    ],
)  # fmt: skip
def test_member_set_from_a_bad_template_changes_nothing(
    analyst: str, home: Path, args: list[str], says: str
) -> None:
    research_team()
    before, written = _member(), _config_member(home)
    result = teamflow("member", "set", TEAM, "analyst-1", *args, "--model", "opus")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    after = _member()
    assert (after.prompt, after.meta, after.model) == (before.prompt, before.meta, "haiku")
    assert _config_member(home) == written


# --- a new member's prompt from a template -------------------------------------------------


def test_member_add_makes_the_prompt_from_a_template(analyst: str, home: Path) -> None:
    research_team(analysts=0)
    result = teamflow(
        "member", "add", TEAM, "analyst-1", "--model", "haiku", "--template", "analyst",
        "--version", "1", "--var", "region=EMEA", "--var", "quarter=Q4", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    origin = {"templateId": "analyst", "version": 1, "vars": {"region": "EMEA", "quarter": "Q4"}}
    prompt = "You analyse EMEA sales for Q4. Start with EMEA."
    added = json.loads(result.stdout)
    assert (added["prompt"], added["metadata"]["promptTemplate"]) == (prompt, origin)
    shown = json.loads(teamflow("member", "show", TEAM, "analyst-1", "--json").stdout)
    assert (shown["prompt"], shown["promptTemplate"]) == (prompt, origin)
    written = _config_member(home)
    assert (written["prompt"], written["metadata"]["promptTemplate"]) == (prompt, origin)
    # Its first inbox message, the system init, is the prompt made.
    inbox = json.loads((home / "teams" / TEAM / "inboxes" / "analyst-1.json").read_text())
    assert inbox[0]["text"] == prompt

    # Without --version: the latest (v2, which also needs style).
    latest = teamflow(
        "member", "add", TEAM, "analyst-2", "--model", "sonnet", "--template", "analyst",
        "--var", "region=APAC", "--var", "quarter=Q1", "--var", "style=briefly",
    )  # fmt: skip
    assert latest.returncode == 0, latest.stderr
    second = json.loads(teamflow("member", "show", TEAM, "analyst-2", "--json").stdout)
    assert second["promptTemplate"]["version"] == 2
    assert second["prompt"].endswith("Write briefly.")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        *BAD_TEMPLATE_CASES,
        (["--prompt", "p", "--var", "region=EMEA"], "--var and --version go with --template"),
        ([], "give the member's prompt: --prompt TEXT or --template ID"),
    ],
)  # fmt: skip
def test_member_add_from_a_bad_template_adds_nothing(
    analyst: str, home: Path, args: list[str], says: str
) -> None:
    research_team(analysts=0)
    written = (home / "teams" / TEAM / "config.json").read_text()
    result = teamflow("member", "add", TEAM, "analyst-1", "--model", "haiku", *args, "--json")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert json.loads(result.stdout)["status"] == "error"
    with Session(db.engine()) as s:
        assert s.get(Member, (TEAM, "analyst-1")) is None
    assert (home / "teams" / TEAM / "config.json").read_text() == written
    assert not (home / "teams" / TEAM / "inboxes" / "analyst-1.json").exists()
