"""The canaries of `flows.compat`: each patch of a library's private parts fails here when a
part it leans on changes shape, and the failure says which patch to re-check and why.

After re-checking a patch on the new version (and fixing it), `python -m flows.compat`
prints the fingerprints to record in `flows.compat.FINGERPRINTS`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from importlib.metadata import version

import pytest

import flows.compat as compat

BY_NAME = {patch.name: patch for patch in compat.PATCHES}


def _patch_functions() -> list[str]:
    """Every public function and class defined in a module of `flows.compat`."""
    names = []
    for info in pkgutil.iter_modules(compat.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"flows.compat.{info.name}")
        for name, member in vars(module).items():
            if name.startswith("_") or getattr(member, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(member) or inspect.isclass(member):
                names.append(f"{info.name}.{name}")
    return sorted(names)


@pytest.mark.parametrize("name", _patch_functions())
def test_every_patch_is_registered_with_its_targets(name: str) -> None:
    assert name in BY_NAME, (
        f"flows.compat.{name} is not in flows.compat.PATCHES: list it with the library "
        "parts it leans on, so that a version bump names it (then `python -m flows.compat`)"
    )
    patch = BY_NAME[name]
    assert patch.targets and patch.why
    for path in patch.targets:
        assert path in compat.FINGERPRINTS, (
            f"{path} (leaned on by flows.compat.{name}) has no recorded fingerprint: "
            "run `python -m flows.compat` and record it in flows.compat.FINGERPRINTS"
        )


def test_every_registered_patch_exists() -> None:
    assert sorted(BY_NAME) == _patch_functions()


@pytest.mark.parametrize("patch", compat.PATCHES, ids=lambda patch: patch.name)
def test_patch_docstring_names_version_breakage_and_upstream(patch: compat.Patch) -> None:
    module, _, name = patch.name.partition(".")
    doc = inspect.getdoc(getattr(importlib.import_module(f"flows.compat.{module}"), name)) or ""
    assert patch.version in doc, f"flows.compat.{patch.name}: name the version ({patch.version})"
    assert "Without" in doc, f"flows.compat.{patch.name}: say what breaks without it"
    assert "Upstream:" in doc, f"flows.compat.{patch.name}: name the upstream issue"


@pytest.mark.parametrize("patch", compat.PATCHES, ids=lambda patch: patch.name)
def test_patched_library_parts_have_not_changed_shape(patch: compat.Patch) -> None:
    installed = version(patch.library)
    changed = []
    for path in patch.targets:
        try:
            now = compat.fingerprint(path)
        except (ImportError, AttributeError) as exc:
            changed.append(f"{path}: gone ({exc})")
            continue
        recorded = compat.FINGERPRINTS.get(path)
        if now != recorded:
            changed.append(f"{path}: recorded {recorded}, now {now}")
    assert not changed, (
        f"flows.compat.{patch.name} (written against {patch.library} {patch.version}, "
        f"installed {installed}) leans on library parts that changed; re-check it: without "
        f"it, {patch.why}.\n  " + "\n  ".join(changed)
    )
