"""Builders for tests: a team as a user would set one up."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

from models import membership

FIXTURES = Path(__file__).parent / "fixtures"
DB_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
"""Hypothesis settings for tests that write to the database fixture."""


def fixture(name: str) -> Any:
    """A seed example from tests/fixtures, by name without `.json`."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


def changed(name: str, *path: str | int, to: Any) -> Any:
    """The fixture `name` with the value at `path` replaced by `to`."""
    data = copy.deepcopy(fixture(name))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = to
    return data


def without(name: str, *path: str | int) -> Any:
    """The fixture `name` without the key at `path`."""
    data = copy.deepcopy(fixture(name))
    target = data
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return data


TEAM = "research-team"


def research_team(*, analysts: int = 2) -> str:
    """`research-team` led by `coordinator`, with `analyst-1` (haiku), `analyst-2` (sonnet)."""
    membership.create_team(TEAM, description="Q4 sales analysis team", lead="coordinator")
    models = ["haiku", "sonnet", "opus"]
    for i in range(1, analysts + 1):
        membership.add_member(
            TEAM,
            f"analyst-{i}",
            model=models[(i - 1) % 3],
            prompt=f"You are data analyst {i}. Analyze data carefully.",
        )
    return TEAM
