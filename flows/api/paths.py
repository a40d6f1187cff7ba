"""The path parameters of the REST API, typed once: the schema states each one's form (a
team's kebab-case name, a member's safe name, a task's UUID), so a client learns it from
`/openapi.json` and a malformed one is a 422 `ValidationError` envelope naming the part."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from models.base import KEBAB_CASE, SAFE_NAME

TeamPath = Annotated[
    str,
    Path(pattern=KEBAB_CASE, min_length=3, max_length=64, description="A team's name (kebab-case)"),
]
MemberPath = Annotated[
    str, Path(pattern=SAFE_NAME, max_length=64, description="A member's name")
]  # fmt: skip
TaskIdPath = Annotated[
    str,
    Path(
        pattern=r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$",
        description="A task's id (a UUID)",
    ),
]
RequestIdPath = Annotated[
    str, Path(min_length=1, max_length=255, description="A plan request's id (plan-...)")
]
CallIdPath = Annotated[
    str, Path(min_length=1, max_length=255, description="A tool call's id (calls-..., budget-...)")
]
