"""Durations as people type them: `90s`, `10m`, `1h30m`, `1.5h`, `2d`, `1w`, or plain seconds.

One grammar for every command that takes a duration (`alert timer --in`, `alert schedule
--every`, `team settings --offline-after`, `metrics --since`, `TEAMFLOW_WATCHDOG_EVERY`),
so a duration that one command takes, every other takes too.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
"""Seconds per unit, largest first."""

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(rf"({_NUMBER})([wdhms])")
_SECONDS = re.compile(_NUMBER)


class DurationError(ValueError):
    """Not a duration, not longer than zero, or longer than allowed; one line for the user."""


def parse_duration(text: str, *, what: str = "", most: float | None = None) -> timedelta:
    """The duration `text` says, longer than zero and, with `most`, at most `most` seconds.

    Args:
        text: Number-unit pairs, each unit at most once, largest first or not (`1h30m`,
            `1.5h`, `90s`), or a plain number of seconds (`300`); case and outer spaces are
            ignored.
        what: What the duration is for (an option's name), named in the error.
        most: The longest duration allowed, in seconds.

    Raises:
        DurationError: Naming `text` (and `what`).
    """
    raw = (text or "").strip().lower()
    bad = f"{what}: bad duration {text!r}" if what else f"bad duration {text!r}"
    if _SECONDS.fullmatch(raw):
        seconds = float(raw)
    else:
        parts = _PART.findall(raw)
        units = [unit for _, unit in parts]
        if not parts or "".join(n + u for n, u in parts) != raw or len(set(units)) != len(units):
            raise DurationError(
                f"{bad}: write e.g. 90s, 10m, 1h30m, 1.5h or 2d "
                "(units w, d, h, m, s; a plain number is seconds)"
            )
        seconds = sum(float(n) * UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise DurationError(f"{bad}: it must be longer than zero")
    if most is not None and seconds > most:
        raise DurationError(f"{bad}: it is longer than the most allowed, {most:g}s")
    return timedelta(seconds=seconds)
