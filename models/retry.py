"""Transient errors, tried again: one helper for every caller.

A loaded Prefect server answers 503 (its SQLite "database is locked"), a connection drops, a
request times out, SQLite is locked by another writer for longer than its busy timeout,
PostgreSQL aborts a transaction on a serialization failure or loses its connection. Each
passes if the same call is made again a moment later. `retrying` (and `retrying_async`)
makes the call again with exponential backoff and full jitter for at most
`TEAMFLOW_RETRY_SECONDS`, then raises `GaveUp`: one line saying what was tried, how often,
for how long, and the last error. Any other error (a 4xx, a bug, a refusal) is raised at
once, untouched.

Prefect's own client already retries 502, 503, 429, 408 and dropped connections (up to
`PREFECT_CLIENT_MAX_RETRIES` times, 2 s, 4 s, 8 s, ...); this helper is for what it leaves:
a 500 or 504, a connection refused before the first answer, the client's retries used up,
and every call to teamflow's database. Wrap a whole unit of work (a transaction, an
idempotent API call), never a part of one.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from models.settings import get_settings

T = TypeVar("T")

FIRST_DELAY_S = 0.1
MAX_DELAY_S = 5.0

_TRANSIENT_HTTP_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "database is busy")
# PostgreSQL SQLSTATEs worth a second try: serialization_failure, deadlock_detected,
# connection_exception and its kinds, admin/crash shutdown, cannot_connect_now.
_PG_TRANSIENT_CODES = frozenset(
    {"40001", "40P01", "08000", "08001", "08003", "08004", "08006", "57P01", "57P02", "57P03"}
)


class GaveUp(RuntimeError):
    """A call still failed with a transient error when the retry time was up (one line)."""

    def __init__(self, what: str, tries: int, seconds: float, last: BaseException):
        self.what, self.tries, self.seconds, self.last = what, tries, seconds, last
        super().__init__(
            f"{what}: gave up after {tries} tries in {seconds:.0f} s "
            f"(transient errors; TEAMFLOW_RETRY_SECONDS); last: {describe(last)}"
        )


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (httpx's `HTTPStatusError`, Prefect's wrappers of
    it), or None."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` may pass if the same call is made again a moment later."""
    if isinstance(exc, GaveUp):
        return False
    status = http_status(exc)
    if status is not None:
        return status in _TRANSIENT_HTTP_STATUSES
    if _is_transient_transport(exc):
        return True
    if _is_transient_database(exc):
        return True
    # Prefect wraps a client error now and then (`raise ObjectNotFound(...) from exc`); an
    # error merely raised while another was handled (`__context__`) is its own.
    cause = exc.__cause__
    return cause is not None and cause is not exc and _is_transient_wrapped(cause)


def _is_transient_wrapped(exc: BaseException) -> bool:
    status = http_status(exc)
    if status is not None:
        return status in _TRANSIENT_HTTP_STATUSES
    return _is_transient_transport(exc)


def _is_transient_transport(exc: BaseException) -> bool:
    import httpx

    # Timeouts, refused and dropped connections, protocol errors: every transport error but
    # an unsupported protocol (which no retry mends).
    if isinstance(exc, httpx.TransportError):
        return not isinstance(exc, httpx.UnsupportedProtocol)
    return isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError))


def _is_transient_database(exc: BaseException) -> bool:
    import sqlalchemy as sa

    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    original = exc.orig
    code = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
    if code in _PG_TRANSIENT_CODES:
        return True
    if isinstance(exc, sa.exc.OperationalError):
        text = str(original).lower()
        if any(each in text for each in _SQLITE_TRANSIENT):
            return True
        # psycopg's OperationalError without a SQLSTATE: the connection is gone.
        return code is None and type(original).__module__.startswith("psycopg")
    return False


_TRANSIENT_TEXT = re.compile(
    r"\b(50[0234]|429|408) (Internal Server Error|Bad Gateway|Service Unavailable"
    r"|Gateway Timeout|Too Many Requests|Request Timeout)\b"
    r"|\b(ReadTimeout|ConnectTimeout|PoolTimeout|WriteTimeout|ReadError|WriteError|ConnectError"
    r"|RemoteProtocolError)\b|database is locked",
)


def transient_text(text: str) -> bool:
    """Whether a program's error line (a subprocess's, where no exception reaches us) names a
    transient error: an HTTP 5xx, 429 or 408 with its reason, an httpx transport error, a
    locked SQLite database."""
    return _TRANSIENT_TEXT.search(text) is not None


def describe(exc: BaseException) -> str:
    """One line for an error: its kind and the first line of its message."""
    status = http_status(exc)
    if status is not None:
        reason = getattr(getattr(exc, "response", None), "reason_phrase", "") or ""
        return f"HTTP {status} {reason}".strip()
    import sqlalchemy as sa

    if isinstance(exc, sa.exc.DBAPIError):
        exc = exc.orig or exc  # the driver's error says it plainly
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _delay(attempt: int) -> float:
    """Full jitter over an exponential backoff: uniform in [0, min(MAX, FIRST * 2**n))."""
    return random.uniform(0, min(MAX_DELAY_S, FIRST_DELAY_S * 2**attempt))


def _budget(seconds: float | None) -> float:
    return get_settings().retry_seconds if seconds is None else seconds


def retrying(
    what: str,
    call: Callable[[], T],
    *,
    seconds: float | None = None,
    transient: Callable[[BaseException], bool] = is_transient,
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """`call()`, made again while it fails with a transient error, for at most `seconds`
    (default `TEAMFLOW_RETRY_SECONDS`).

    Args:
        what: What the call does, for the one line (`creating the work pool`).
        call: The whole unit of work; it must be safe to make again.
        seconds: The time after which no new try starts.
        transient: Which errors to try again.
        on_retry: Told one line before each new try (e.g. `print`).

    Raises:
        GaveUp: Still failing with a transient error when the time was up.
    """
    budget, started, attempt = _budget(seconds), time.monotonic(), 0
    while True:
        try:
            return call()
        except Exception as exc:
            attempt += 1
            wait = _next_wait(what, exc, attempt, started, budget, transient, on_retry)
        time.sleep(wait)


async def retrying_async(
    what: str,
    call: Callable[[], Awaitable[T]],
    *,
    seconds: float | None = None,
    transient: Callable[[BaseException], bool] = is_transient,
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """`retrying` for a coroutine function."""
    budget, started, attempt = _budget(seconds), time.monotonic(), 0
    while True:
        try:
            return await call()
        except Exception as exc:
            attempt += 1
            wait = _next_wait(what, exc, attempt, started, budget, transient, on_retry)
        await asyncio.sleep(wait)


def _next_wait(
    what: str,
    exc: Exception,
    attempt: int,
    started: float,
    budget: float,
    transient: Callable[[BaseException], bool],
    on_retry: Callable[[str], None] | None,
) -> float:
    if not transient(exc):
        raise exc
    elapsed = time.monotonic() - started
    wait = min(_delay(attempt), max(0.0, budget - elapsed))
    if elapsed + wait >= budget:
        raise GaveUp(what, attempt, elapsed, exc) from exc
    if on_retry is not None:
        on_retry(f"{what}: {describe(exc)}; trying again ({attempt})")
    return wait
