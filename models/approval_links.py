"""Signed approval links: one per decider of a waiting plan, HMAC-SHA256 with a key from the
settings, expiring at the plan's deadline.

A link is `{base}/api/v1/links/{token}`, its token `PAYLOAD.SIGNATURE` (both base64url):
the payload names the plan, the decider and the expiry. `verify` refuses an altered or
expired token; a used one is refused by the plan itself, which is decided only once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from models.identity import Forbidden
from models.settings import get_settings

DEFAULT_LIFETIME = timedelta(hours=24)
"""How long a link lives when its plan has no deadline."""


class LinkRefused(Forbidden):
    """An approval link that is altered, expired or malformed."""


@dataclass(frozen=True)
class LinkClaim:
    """What a valid link says: the plan, who decides with it, until when."""

    request_id: str
    decider: str
    expires: datetime


def link_key() -> bytes:
    """The signing key: `TEAMFLOW_LINK_KEY`, else a random one kept (0600) in the home."""
    settings = get_settings()
    if settings.link_key:
        return settings.link_key.encode()
    path = Path(settings.home) / "link.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(request_id: str, decider: str, expires: datetime, *, key: bytes | None = None) -> str:
    """The token of a link for `decider` to decide plan `request_id` until `expires`."""
    payload = json.dumps(
        {"r": request_id, "d": decider, "e": int(expires.timestamp())}, separators=(",", ":")
    ).encode()
    signature = hmac.new(key or link_key(), payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(signature)}"


def verify(token: str, *, key: bytes | None = None, now: datetime | None = None) -> LinkClaim:
    """The claim of a valid token; `LinkRefused` (one line) for an altered, malformed or
    expired one."""
    try:
        payload_text, signature_text = token.split(".", 1)
        payload, signature = _unb64(payload_text), _unb64(signature_text)
    except ValueError:
        raise LinkRefused("this approval link is malformed") from None
    expected = hmac.new(key or link_key(), payload, hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise LinkRefused("this approval link was altered (its signature does not match)")
    data = json.loads(payload)
    expires = datetime.fromtimestamp(int(data["e"]), UTC)
    if (now or datetime.now(UTC)) >= expires:
        raise LinkRefused(f"this approval link expired at {expires:%Y-%m-%d %H:%M} UTC")
    return LinkClaim(str(data["r"]), str(data["d"]), expires)


def expiry_of(deadline: datetime | None, now: datetime | None = None) -> datetime:
    """When a plan's links expire: at its deadline, else `DEFAULT_LIFETIME` from now."""
    return deadline or (now or datetime.now(UTC)) + DEFAULT_LIFETIME


def base_url() -> str:
    """Where people reach the REST API (`TEAMFLOW_PUBLIC_URL`, else loopback)."""
    settings = get_settings()
    return (settings.public_url or f"http://127.0.0.1:{settings.api_port}").rstrip("/")


def links_for(request_id: str, deciders: list[str], deadline: datetime | None) -> dict[str, str]:
    """A link per decider, to the decision page of the plan."""
    expires = expiry_of(deadline)
    return {d: f"{base_url()}/api/v1/links/{sign(request_id, d, expires)}" for d in deciders}
