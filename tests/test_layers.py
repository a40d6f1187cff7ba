"""The import layering of `models/` and `flows/`: no import circle, models below flows.

Every import statement counts: top-level, inside functions, and under `if TYPE_CHECKING:`
(a type-only import is still a dependency a reader must follow). Relative imports are
resolved; `from models import mirror` is an edge to `models.mirror` when `mirror` is a
submodule, and to the package `models` otherwise.

Fails on any cycle (naming its modules in order), on a `models.*` module importing
`flows`, on a `models.*` module importing `prefect`, and on a module over 600 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("models", "flows")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages, by dotted name (`models.team`, `flows.runtimes`)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "migrations" in parts:
                continue  # Alembic scripts: loaded by Alembic, never imported
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path) -> set[str]:
    """What `name` imports, at any depth: `import a.b` gives `a.b`, `from a import b` gives
    `a.b` (a submodule, or a name of module `a`: `graph` tells them apart)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in imports_of(name, path):
            # The longest project module that `imported` is or lies in.
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts:
                targets.add(".".join(parts))
        targets.discard(name)
        edges[name] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as `[a, b, ..., a]`, or None. Deterministic (sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_names_the_modules_of_a_cycle_in_order() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": {"y"}}) == ["y", "z", "y"]


def test_imports_of_sees_lazy_type_checking_relative_and_submodule_imports(tmp_path: Path) -> None:
    package = tmp_path / "models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mirror.py").write_text("")
    (package / "db.py").write_text("")
    (package / "team.py").write_text("")
    (package / "inbox.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from models import mirror\n"
        "from . import db\n"
        "if TYPE_CHECKING:\n"
        "    from .team import Team\n"
        "def f():\n"
        "    import prefect\n"
    )
    (tmp_path / "flows").mkdir()
    modules = project_modules(tmp_path)
    edges = graph(modules)
    assert edges["models.inbox"] == {"models.mirror", "models.db", "models.team"}
    assert "prefect" in imports_of("models.inbox", modules["models.inbox"])
    (package / "team.py").write_text("def g():\n    from models.inbox import x\n")
    assert find_cycle(graph(project_modules(tmp_path))) == [
        "models.inbox",
        "models.team",
        "models.inbox",
    ]


def test_no_import_cycle() -> None:
    cycle = find_cycle(graph(project_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("forbidden", ["flows", "prefect"])
def test_models_never_import(forbidden: str) -> None:
    offenders = {
        name: sorted(i for i in imports_of(name, path) if i.split(".")[0] == forbidden)
        for name, path in project_modules().items()
        if name.split(".")[0] == "models"
    }
    offenders = {name: found for name, found in offenders.items() if found}
    assert not offenders, f"models importing {forbidden}: {offenders}"


MAX_LINES = 600
SIZE_CHECKED = ["models", "flows"]


@pytest.mark.parametrize("package", SIZE_CHECKED)
def test_no_module_is_over_600_lines(package: str) -> None:
    """A module a reader can hold in one sitting: none of the package (recursively) is
    longer than `MAX_LINES` lines."""
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
