"""The REST API application (`build`) and `teamflow api`'s server (`serve`)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from flows.api import actions, alerts, envelopes, links, plans, tasks, teams

PREFIX = "/api/v1"

DESCRIPTION = """\
teamflow's REST API: teams, members, messages, inboxes, tasks, plan approvals, tool-call
approvals (actions), alerts,
memory and metrics. Every answer is a seed `001` envelope: `{"status": "success", "data",
"message"}` or `{"status": "error", "error": KIND, "message", "details"}`. Send
`Authorization: Bearer TOKEN`: a user token (`teamflow user add NAME --role
lead|approver|viewer [--team T]`) or a member token (`teamflow member token TEAM NAME`)."""


def build() -> FastAPI:
    """The API with every route under `/api/v1/`, its OpenAPI schema at `/openapi.json` and
    its docs page at `/docs`."""
    app = FastAPI(
        title="teamflow",
        version=_version(),
        description=DESCRIPTION,
        responses=envelopes.ERROR_RESPONSES,
    )
    envelopes.install(app)
    for module in (teams, tasks, plans, actions, alerts, links):
        app.include_router(module.router, prefix=PREFIX)
    app.add_middleware(envelopes.BodyLimit)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("teamflow")
    except PackageNotFoundError:
        return "0"


def serve(host: str, port: int, **options: Any) -> None:
    """Serves the API with uvicorn until interrupted."""
    import uvicorn

    from flows.compat.uvicorn_server import quieter_ticks

    quieter_ticks()
    uvicorn.run(build(), host=host, port=port, log_level="warning", **options)
