"""Who calls the REST API: the bearer token of a user (`teamflow user add`) or of a member
(`teamflow member token`), checked on every request; no token is a 401 envelope."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from models.identity import Door, Principal, Unauthorized

bearer = HTTPBearer(
    auto_error=False,
    description="A user token (teamflow user add) or a member token (teamflow member token).",
)
"""Declares the Bearer scheme in the OpenAPI schema (checked by `caller`, not here)."""


def caller(request: Request, _: Annotated[object, Depends(bearer)] = None) -> Principal:
    """The principal of the request's `Authorization: Bearer TOKEN`; `Unauthorized`
    (401) if there is none, or it is unknown or revoked."""
    from models.users import principal_of_bearer

    auth = request.headers.get("authorization", "")
    scheme, _sep, token = auth.strip().partition(" ")
    if not auth:
        raise Unauthorized(
            "this API needs a token: send Authorization: Bearer TOKEN "
            "(teamflow user add NAME --role ROLE, or teamflow member token TEAM NAME)"
        )
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be: Bearer TOKEN")
    return principal_of_bearer(token, Door.API)


Caller = Annotated[Principal, Depends(caller)]
"""A route's caller, as its token says."""
