"""Every answer of the REST API is a `001` envelope: `ok(data)` for a success, and the
exception handlers here for every failure (a refusal of the rule table, a store's one-line
error, FastAPI's own validation errors, an unknown route, a body too large).

`error` names the kind: `Unauthorized` (401), `Forbidden` (403), `NotFound` (404),
`MethodNotAllowed` (405), `Conflict` (409), `PayloadTooLarge` (413), `ValidationError` (422),
`Unavailable` (503: no Prefect server to start a run on), `InternalError` (500).
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from models.api import ErrorResponse, SuccessResponse
from models.identity import Forbidden, Unauthorized

MAX_BODY_BYTES = 1024 * 1024
"""A request body over this is refused (413) before it is read in full."""

MAX_LINE = 500
"""An error message is cut to this many characters."""

_NOT_FOUND = re.compile(
    r"^(no |unknown )|has no (member|message|task)|not found|does not exist", re.IGNORECASE
)
"""A store's one-line error that says the thing asked for is not there."""


class PayloadTooLarge(Exception):
    """The request body is larger than `MAX_BODY_BYTES`."""


class Conflict(ValueError):
    """The act conflicts with the state of what it acts on (a task still blocked, ...)."""


def ok(data: Any = None, message: str = "Operation completed", status: int = 200) -> JSONResponse:
    """The `001` success envelope."""
    body = {"status": "success", "data": jsonable_encoder(data), "message": message}
    return JSONResponse(body, status_code=status)


def failure(
    status: int, kind: str, message: str, details: dict[str, Any] | None = None
) -> JSONResponse:
    """The `001` error envelope: one line of message, the kind, the details."""
    line = " ".join(str(message).split()) or kind
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 3] + "..."
    body = {"status": "error", "error": kind, "message": line, "details": details or {}}
    return JSONResponse(jsonable_encoder(body), status_code=status)


def error_of(exc: Exception) -> tuple[int, str, str, dict[str, Any]]:
    """A refusal by the rule table or a store as (status, kind, message, details), from
    what it is: the one mapping every page and envelope of the API uses."""
    from models import tool_approval
    from models.approval import AlreadyDecided, NotAllowed

    details = dict(getattr(exc, "details", None) or {})
    message = str(exc) or type(exc).__name__
    if isinstance(exc, Unauthorized):
        return 401, "Unauthorized", message, details
    if isinstance(exc, Forbidden | NotAllowed | tool_approval.NotAllowed):
        return 403, "Forbidden", message, details
    if isinstance(exc, AlreadyDecided):
        return 409, "Conflict", message, {"plan": exc.request.to_json()}
    if isinstance(exc, tool_approval.Conflict):
        return 409, "Conflict", message, {"action": exc.stands}
    if isinstance(exc, Conflict):
        return 409, "Conflict", message, details
    if _is_runner_error(exc):
        return 503, "Unavailable", message, {"kind": type(exc).__name__}
    if _NOT_FOUND.search(message):
        return 404, "NotFound", message, {"kind": type(exc).__name__}
    return 422, "ValidationError", message, {"kind": type(exc).__name__, **details}


def _store_error(_: Request, exc: Exception) -> JSONResponse:
    """A refusal by the rule table or a store: its kind and status from what it is."""
    return failure(*error_of(exc))


def _is_runner_error(exc: Exception) -> bool:
    import sys

    runner = sys.modules.get("flows.runner")
    return runner is not None and isinstance(exc, runner.RunnerError)


def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    """FastAPI's refusal of a request that does not fit the route: the fields at fault."""
    assert isinstance(exc, RequestValidationError)
    errors = []
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ())]
        where = ".".join(p for p in loc if p != "body") or "body"
        errors.append({"field": where, "message": e.get("msg", ""), "type": e.get("type", "")})
    message = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    fields = sorted({e["field"] for e in errors})
    return failure(422, "ValidationError", message, {"fields": fields, "errors": errors})


_HTTP_KINDS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
}


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (an unknown route, a wrong method) as envelopes."""
    assert isinstance(exc, StarletteHTTPException)
    kind = _HTTP_KINDS.get(exc.status_code, "HTTPError")
    message = str(exc.detail) if exc.detail else kind
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path} (see /docs)"
    response = failure(exc.status_code, kind, message, {"path": request.url.path})
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


def _too_large(_: Request, exc: Exception) -> JSONResponse:
    return failure(
        413, "PayloadTooLarge", f"the request body is larger than {MAX_BODY_BYTES} bytes",
        {"limit": MAX_BODY_BYTES},
    )  # fmt: skip


def _internal(_: Request, exc: Exception) -> JSONResponse:
    return failure(500, "InternalError", f"{type(exc).__name__}: {exc}")


def install(app: FastAPI) -> None:
    """Every failure of `app` answers an error envelope."""
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(PayloadTooLarge, _too_large)
    app.add_exception_handler(ValueError, _store_error)
    app.add_exception_handler(LookupError, _store_error)
    app.add_exception_handler(Exception, _internal)


class BodyLimit:
    """ASGI middleware: a body over `MAX_BODY_BYTES` (by its Content-Length, or as it
    streams in) is refused with 413 before it is read in full."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            too_large = int(length) > MAX_BODY_BYTES if length.isdigit() else False
            kind = "PayloadTooLarge" if too_large else "BadRequest"
            status = 413 if too_large else 400
            text = (
                f"the request body is larger than {MAX_BODY_BYTES} bytes"
                if too_large else "Content-Length is not a number"
            )  # fmt: skip
            body = json.dumps({"status": "error", "error": kind, "message": text,
                               "details": {"limit": MAX_BODY_BYTES}}).encode()  # fmt: skip
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES:
                    raise PayloadTooLarge()
            return message

        await self.app(scope, counted, send)


SUCCESS_SCHEMA = SuccessResponse[Any]
"""The success envelope, as the OpenAPI schema shows it."""

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": kind}
    for code, kind in (
        (400, "BadRequest: a body that is not JSON, or a malformed Content-Length"),
        (401, "Unauthorized: no token, or an unknown or revoked one"),
        (403, "Forbidden: the caller's role may not do this"),
        (404, "NotFound"),
        (409, "Conflict: e.g. a second decision"),
        (413, "PayloadTooLarge"),
        (422, "ValidationError: `details.fields` names the fields at fault"),
        (503, "Unavailable: no Prefect server to start or resume the run on"),
    )
}
"""The error envelopes every route may answer, for the OpenAPI schema."""
