"""The REST API against its own OpenAPI schema, as schemathesis checks it: for every
operation, requests generated from the schema (valid ones, and invalid ones), sent by a lead,
a member and a viewer; every answer must be no 5xx, a status the schema lists, a body that
matches the schema of that status, and a seed `001` envelope (an approval link's page is
HTML, for a person; its refusals say why on the page). Bounded examples per
operation; SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from api_world import World, build, is_envelope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from flows.api.app import build as build_app

APP = build_app()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
EXAMPLES = 12
"""Per operation, per mode: bounded, so the whole file stays a few seconds per operation."""


def _constrained(operation) -> bool:
    """Whether some input of `operation` can be sent invalid: a body, or a parameter whose
    schema says more than "a string" (a path part or query that takes any text cannot)."""
    definition = operation.definition.raw
    if "requestBody" in definition:
        return True
    loose = {"type", "title", "description"}
    return any(
        set(p.get("schema", {})) - loose or p.get("schema", {}).get("type") != "string"
        for p in definition.get("parameters", [])
    )


CASES = [
    pytest.param(op, mode, id=f"{op.label}-{mode.value}")
    for op in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or _constrained(op)
]


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Prefect server here: a route that starts a run answers 503 `Unavailable`."""
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")


@pytest.fixture
def world(db_url: str, home: Path) -> World:
    return build()


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_every_answer_matches_the_schema_and_is_an_envelope(
    world: World, operation, mode: GenerationMode
) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)  # fmt: skip
    @given(case=operation.as_strategy(generation_mode=mode),
           who=st.sampled_from(["lena", "alice", "vic"]))  # fmt: skip
    def answer(case, who: str) -> None:
        response = case.call(headers=world.headers(who), timeout=120)  # a loaded CI is slow
        case.validate_response(response)
        if response.headers.get("content-type", [""])[0].startswith("text/html"):
            # An approval link's page, for a person: a refusal says why on the page.
            assert response.status_code == 200 or 'id="refused"' in response.text
            return
        assert is_envelope(response.json()), response.text

    answer()
