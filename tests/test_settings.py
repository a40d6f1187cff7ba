"""One settings object: every TEAMFLOW_* variable is declared in models/settings.py, read
nowhere else, and documented by the table generated from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from models.settings import PREFIX, Settings, SettingsError, get_settings, markdown_table

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def test_docs_table_is_generated_from_the_settings_object() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    table = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert table == markdown_table().strip(), "run: python -m models.settings > the table"


def _environment_reads(path: Path) -> list[str]:
    """The TEAMFLOW_* names a module reads from the environment itself: `os.environ.get(X)`,
    `os.getenv(X)`, `os.environ[X]`, `X in os.environ`, directly or through a module constant.
    Writing one into a child's environment is not a read."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def teamflow(node: ast.AST) -> str | None:
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and text.startswith(PREFIX) and text[len(PREFIX) :].isupper():
            return text
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    constants: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and (name := teamflow(node.value)):
            constants.update({t.id: name for t in node.targets if isinstance(t, ast.Name)})

    def environ(node: ast.AST) -> bool:
        return ast.unparse(node) in {"os.environ", "environ"}

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            func = ast.unparse(node.func)
            if func in {"os.getenv", "getenv"} or (
                isinstance(node.func, ast.Attribute) and environ(node.func.value)
            ):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice if environ(node.value) else None
        elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
            key = node.left
        if key is not None and (name := teamflow(key)):
            found.append(name)
    return found


@pytest.mark.parametrize("package", ["models", "flows"])
def test_no_module_reads_teamflow_variables_itself(package: str) -> None:
    readers = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "settings.py" and "migrations" not in path.parts
        if (names := _environment_reads(path))
    }
    assert readers == {}, "read these through models.settings.get_settings()"


def test_every_variable_has_a_type_default_and_description() -> None:
    for name, field in Settings.model_fields.items():
        assert field.description, name
        assert field.annotation is not None, name


def test_a_changed_environment_is_seen_at_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMFLOW_WATCHDOG_EVERY", "2m")
    assert get_settings().watchdog_every == 120
    monkeypatch.setenv("TEAMFLOW_WATCHDOG_EVERY", "90")
    assert get_settings().watchdog_every == 90
    assert get_settings() is get_settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TEAMFLOW_WATCHDOG_EVERY", "nan"),
        ("TEAMFLOW_WATCHDOG_EVERY", "2d"),
        ("TEAMFLOW_MAX_MESSAGE_BYTES", "lots"),
        ("TEAMFLOW_PAUSE_POLL_SECONDS", "-1"),
        ("TEAMFLOW_CRASH_AFTER_SECONDS", "1e300"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        get_settings()
    message = str(caught.value)
    assert message.startswith(f"{name}=") and "\n" not in message


def test_home_is_expanded_and_resolved(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TEAMFLOW_HOME", str(tmp_path / "a" / ".." / "home"))
    assert get_settings().home == (tmp_path / "home").resolve()
