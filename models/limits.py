"""How much outside data teamflow reads: every cap in one place (README: "Size limits").

Readers of data from outside (`teamflow validate`, `team import`, `team restore`, inbox files
taken in by sync) read at most cap + 1 bytes, check an archive's member sizes before
extracting anything, and refuse nesting deeper than `MAX_JSON_DEPTH`, each with one line
(`LimitError`, a `ValueError`). Imports nothing of teamflow.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 64 * 1024 * 1024
"""One JSON document: a file given to `validate`, a `config.json`, an inbox file."""
MAX_JSON_DEPTH = 100
"""How deeply arrays and objects may nest in one JSON document."""
MAX_ARCHIVE_MEMBER_BYTES = 64 * 1024 * 1024
"""One file in a backup archive (its database dump included)."""
MAX_ARCHIVE_BYTES = 1024 * 1024 * 1024
"""All the files of a backup archive together, extracted."""
MAX_ARCHIVE_MEMBERS = 100_000
"""Files and folders in a backup archive."""

MAX_SUMMARY_CHARS = 2_000
"""A message's `summary` (the `004` preview line), whichever door it comes through."""
MAX_DESCRIPTION_CHARS = 100_000
"""A task's or a project's description."""
MAX_NAME_CHARS = 500
"""A project's name (a task's title is held to the same, by `001`'s VARCHAR(500))."""


class LimitError(ValueError):
    """Outside data over one of teamflow's caps; the message is one line naming it."""


def read_capped(path: Path | str, cap: int | None = None, *, what: str | None = None) -> bytes:
    """The bytes of `path`, reading at most `cap` + 1: more than `cap` is refused.

    Opened without blocking, so a FIFO with no writer reads as empty instead of hanging;
    `/dev/zero` and other endless files stop at the cap.
    """
    cap = MAX_JSON_BYTES if cap is None else cap
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        chunks, size = [], 0
        while size <= cap:
            try:
                chunk = f.read(cap + 1 - size)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    if size > cap:
        raise LimitError(f"{what or path}: larger than teamflow's limit of {cap} bytes")
    return b"".join(chunks)


def check_chars(value: str | None, cap: int, *, what: str) -> None:
    """Refuses (`LimitError`, one line) a text of more than `cap` characters."""
    if value is not None and len(value) > cap:
        raise LimitError(f"{what}: {len(value)} characters; at most {cap}")


def loads_json(data: bytes | str, *, what: str) -> Any:
    """`json.loads`, refusing (`LimitError`) nesting deeper than `MAX_JSON_DEPTH` and
    numbers that are not finite (`NaN`, `Infinity`, `1e400`).

    Other malformed JSON raises `ValueError` (`json.JSONDecodeError`) or
    `UnicodeDecodeError`, as `json.loads` does.
    """

    try:
        value = json.loads(data, **_hooks(what))
    except RecursionError:
        raise LimitError(f"{what}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    check_depth(value, what=what)
    return value


def _hooks(what: str) -> dict[str, Any]:
    """`json.loads` keywords refusing numbers that are not finite."""

    def not_finite(token: str) -> float:
        raise LimitError(f"{what}: {token} is not a JSON number (numbers must be finite)")

    def finite(text: str) -> float:
        number = float(text)
        if not math.isfinite(number):
            not_finite(text)
        return number

    return {"parse_constant": not_finite, "parse_float": finite}


def salvage_array(text: str, *, what: str) -> list[Any]:
    """The whole values at the start of a damaged JSON array (a truncated file, a bad byte
    in the middle), up to the first damage; `[]` if `text` does not start an array.

    Each value is held to the same rules as `loads_json` (depth, finite numbers).
    """
    decoder = json.JSONDecoder(**_hooks(what))
    items: list[Any] = []
    pos = _skip_space(text, 0)
    if not text.startswith("[", pos):
        return items
    pos += 1
    while True:
        pos = _skip_space(text, pos)
        try:
            value, pos = decoder.raw_decode(text, pos)
            check_depth(value, what=what)
        except (ValueError, RecursionError):
            return items
        items.append(value)
        pos = _skip_space(text, pos)
        if not text.startswith(",", pos):
            return items
        pos += 1


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def check_depth(value: Any, *, what: str, limit: int | None = None) -> None:
    """Refuses a parsed JSON value nested deeper than `limit` (without recursing)."""
    limit = MAX_JSON_DEPTH if limit is None else limit
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                raise LimitError(f"{what}: nested deeper than {limit} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
