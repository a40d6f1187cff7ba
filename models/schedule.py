"""Time logic of alerts: durations, due times, schedules and their next fire times.

Pure code (no Prefect, no database): `cronsim` for cron, `dateutil.rrule` for RRULEs and
`zoneinfo` for time zones. A schedule is a small dict, the same one the `alerts` table
stores and the Prefect deployment schedule is built from:

    {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
    {"interval": 300, "anchor": "2026-11-23T09:00:00+00:00", "timezone": "UTC"}
    {"rrule": "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0", "timezone": "Europe/Berlin"}

Cron and RRULE times are wall-clock times in the schedule's time zone: a 09:00
Europe/Berlin daily cron fires at 09:00 local on both sides of a DST change (07:00 UTC in
summer, 08:00 UTC in winter).

Missed fire times (the server or every worker was down), decided here and applied by the
`system-alert` flow:

- A TIMER whose due time passed while nothing ran fires once, late, when a worker picks
  it up; the message says how late (`late_note`).
- A SCHEDULED_EVENT does not catch up: a run that starts more than `MISSED_GRACE` after
  its slot is recorded as missed and delivers nothing; the next slot fires as usual.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from models import durations

__all__ = [
    "MISSED_GRACE",
    "ScheduleError",
    "check_schedule",
    "due_time",
    "late_note",
    "missed",
    "next_fire_times",
    "parse_duration",
    "schedule_of",
    "zone",
]

MISSED_GRACE = timedelta(minutes=10)
"""A scheduled event that starts later than this after its slot is skipped as missed."""

LATE_NOTE_AFTER = timedelta(minutes=1)
"""A timer later than this says so in its message."""

MAX_AHEAD = timedelta(days=366 * 5)
"""The furthest ahead a timer may be set."""


class ScheduleError(ValueError):
    """A bad duration, time or schedule; the message is one line for the user."""


def parse_duration(text: str) -> timedelta:
    """`10m`, `90s`, `1h30m`, `2d`, or plain seconds (`45`) as a positive timedelta."""
    try:
        return durations.parse_duration(text)
    except durations.DurationError as exc:
        raise ScheduleError(str(exc)) from None


def zone(name: str | None) -> ZoneInfo:
    """The time zone called `name` (IANA, e.g. `Europe/Berlin`); UTC when None."""
    if not name:
        return ZoneInfo("UTC")
    try:
        if name.startswith(("/", ".")) or ".." in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (use an IANA name, e.g. Europe/Berlin)"
        ) from None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def due_time(
    *, after: str | None = None, at: str | None = None, now: datetime | None = None
) -> datetime:
    """A timer's due time (UTC) from `--in DURATION` or `--at ISO`; never in the past.

    An `--at` time without an offset is UTC.
    """
    now = _aware(now or datetime.now(UTC))
    if (after is None) == (at is None):
        raise ScheduleError("give exactly one of --in DURATION or --at TIME")
    if after is not None:
        due = now + parse_duration(after)
    else:
        try:
            due = _aware(datetime.fromisoformat(str(at).strip().replace("Z", "+00:00")))
        except ValueError:
            raise ScheduleError(
                f"bad time {at!r}: use ISO 8601, e.g. 2026-11-24T09:00:00+01:00"
            ) from None
        if due <= now:
            raise ScheduleError(
                f"time {due.astimezone(UTC).isoformat()} is in the past "
                f"(now is {now.astimezone(UTC).isoformat(timespec='seconds')})"
            )
    if due - now > MAX_AHEAD:
        raise ScheduleError(f"time {due.isoformat()} is more than five years ahead")
    return due.astimezone(UTC)


def schedule_of(
    *,
    cron: str | None = None,
    every: str | None = None,
    rrule: str | None = None,
    timezone: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The checked schedule dict for `--cron`, `--every` or `--rrule` (exactly one)."""
    given = [name for name, value in (("cron", cron), ("every", every), ("rrule", rrule)) if value]
    if len(given) != 1:
        raise ScheduleError("give exactly one of --cron EXPR, --every DURATION or --rrule RULE")
    tz = timezone or "UTC"
    zone(tz)
    if cron:
        spec: dict[str, Any] = {"cron": " ".join(cron.split()), "timezone": tz}
    elif every:
        anchor = _aware(now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
        interval = int(parse_duration(every).total_seconds())
        if interval < 1:
            raise ScheduleError(f"interval {every!r} is shorter than 1s, the shortest schedule")
        spec = {
            "interval": interval,
            "anchor": anchor.isoformat(),
            "timezone": tz,
        }
    else:
        local = _aware(now or datetime.now(UTC)).astimezone(zone(tz))
        start = local.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
        spec = {"rrule": str(rrule).strip(), "timezone": tz, "dtstart": start.isoformat()}
    check_schedule(spec, now=now)
    return spec


def check_schedule(spec: dict[str, Any], *, now: datetime | None = None) -> None:
    """Raises `ScheduleError` unless `spec` is a schedule that fires at least once more."""
    if not next_fire_times(spec, after=now, count=1):
        raise ScheduleError("the schedule never fires again")


def next_fire_times(
    spec: dict[str, Any], *, after: datetime | None = None, count: int = 3
) -> list[datetime]:
    """The next `count` fire times of `spec` strictly after `after` (default: now), in UTC."""
    after = _aware(after or datetime.now(UTC))
    tz = zone(spec.get("timezone"))
    if "cron" in spec:
        return _cron_times(spec["cron"], after.astimezone(tz), count)
    if "interval" in spec:
        step = timedelta(seconds=int(spec["interval"]))
        if step <= timedelta(0):
            raise ScheduleError("the interval must be at least 1s")
        anchor = _aware(datetime.fromisoformat(spec["anchor"]))
        n = max(0, (after - anchor) // step + 1)
        return [(anchor + (n + i) * step).astimezone(UTC) for i in range(count)]
    if "rrule" in spec:
        return _rrule_times(spec["rrule"], after.astimezone(tz), tz, count, spec.get("dtstart"))
    raise ScheduleError(f"not a schedule: {spec!r}")


def _cron_times(expr: str, after: datetime, count: int) -> list[datetime]:
    from cronsim import CronSim, CronSimError

    fields = expr.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"bad cron {expr!r}: it needs 5 fields (minute hour day month weekday), "
            f"e.g. '0 9 * * 1-5'"
        )
    try:
        it = CronSim(expr, after.replace(microsecond=0))
    except CronSimError as exc:
        raise ScheduleError(f"bad cron {expr!r}: {exc}") from None
    times: list[datetime] = []
    try:
        for value in it:
            if value > after:
                times.append(value.astimezone(UTC))
            if len(times) == count:
                break
    except CronSimError:
        pass  # no further match (e.g. February 30th): what was found is all
    return times


def _rrule_times(
    rule: str, after: datetime, tz: ZoneInfo, count: int, dtstart: str | None = None
) -> list[datetime]:
    from dateutil.rrule import rrulestr

    text = rule.strip()
    if text.upper().startswith("RRULE:"):
        text = text[6:]
    if "DTSTART" in text.upper() or "\n" in text:
        raise ScheduleError(f"bad rrule {rule!r}: give one RRULE line without DTSTART")
    # Anchored at local midnight of the day the schedule was made (default: of `after`).
    if dtstart:
        start = datetime.fromisoformat(dtstart).replace(tzinfo=None)
    else:
        start = after.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    try:
        parsed = rrulestr(text, dtstart=start)
    except (ValueError, TypeError) as exc:
        raise ScheduleError(f"bad rrule {rule!r}: {exc}") from None
    local_after = after.replace(tzinfo=None)
    times: list[datetime] = []
    value = parsed.after(local_after)
    while value is not None and len(times) < count:
        times.append(value.replace(tzinfo=tz).astimezone(UTC))
        value = parsed.after(value)
    return times


def lateness(due: datetime | None, fired: datetime) -> timedelta:
    """How late a firing is (zero when on time or without a due time)."""
    if due is None:
        return timedelta(0)
    return max(timedelta(0), _aware(fired) - _aware(due))


def missed(alert_type: str, due: datetime | None, fired: datetime) -> bool:
    """True when a SCHEDULED_EVENT run started so late that its slot counts as missed."""
    return str(alert_type) == "SCHEDULED_EVENT" and lateness(due, fired) > MISSED_GRACE


def late_note(due: datetime | None, fired: datetime) -> str | None:
    """`"(fired 12 min late; due 09:00:00 UTC)"` for a late timer, None when on time."""
    late = lateness(due, fired)
    if due is None or late <= LATE_NOTE_AFTER:
        return None
    when = _aware(due).astimezone(UTC)
    return f"(fired {format_duration(late)} late; due {when:%Y-%m-%d %H:%M:%S} UTC)"


def format_duration(value: timedelta) -> str:
    """`1h30m`, `10m`, `45s`: the inverse of `parse_duration`, to the second."""
    seconds = int(value.total_seconds())
    if seconds <= 0:
        return "0s"
    out = ""
    for unit, size in durations.UNITS.items():
        n, seconds = divmod(seconds, size)
        if n:
            out += f"{n}{unit}"
    return out
