"""Pure time logic of alerts (models/schedule.py): durations, due times, next fire times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from models import schedule
from models.schedule import ScheduleError, next_fire_times, parse_duration


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10m", 600),
        ("90s", 90),
        ("1h30m", 5400),
        ("2d", 172800),
        ("45", 45),
        ("1H", 3600),
        ("1.5h", 5400),
        ("1w", 604800),
    ],
)
def test_durations_parse(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["10x", "", "m", "1h1h", "-5m", "10 m x", "nan", "1y"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ScheduleError, match="bad duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0s", "0", "0h0m"])
def test_a_zero_duration_is_refused(text: str) -> None:
    with pytest.raises(ScheduleError, match="zero"):
        parse_duration(text)


@freeze_time("2026-11-23 10:00:00")
def test_a_timer_is_due_after_its_duration_or_at_its_time() -> None:
    assert schedule.due_time(after="10m") == utc(2026, 11, 23, 10, 10)
    assert schedule.due_time(at="2026-11-23T12:00:00+01:00") == utc(2026, 11, 23, 11)
    assert schedule.due_time(at="2026-11-23T12:00:00") == utc(2026, 11, 23, 12)


@freeze_time("2026-11-23 10:00:00")
def test_a_time_in_the_past_or_none_or_both_is_refused() -> None:
    with pytest.raises(ScheduleError, match="in the past"):
        schedule.due_time(at="2026-11-23T09:59:59Z")
    with pytest.raises(ScheduleError, match="exactly one"):
        schedule.due_time()
    with pytest.raises(ScheduleError, match="exactly one"):
        schedule.due_time(after="1m", at="2026-11-24T00:00:00Z")
    with pytest.raises(ScheduleError, match="bad time"):
        schedule.due_time(at="tomorrow")


@freeze_time("2026-10-23 12:00:00")
def test_a_berlin_9am_cron_keeps_9am_local_across_the_october_dst_change() -> None:
    spec = schedule.schedule_of(cron="0 9 * * *", timezone="Europe/Berlin")
    # CEST (UTC+2) until Sunday 25 October 2026, CET (UTC+1) after.
    assert next_fire_times(spec, count=4) == [
        utc(2026, 10, 24, 7), utc(2026, 10, 25, 8), utc(2026, 10, 26, 8), utc(2026, 10, 27, 8),
    ]  # fmt: skip


@freeze_time("2026-03-27 12:00:00")
def test_a_berlin_9am_cron_keeps_9am_local_across_the_march_dst_change() -> None:
    spec = schedule.schedule_of(cron="0 9 * * *", timezone="Europe/Berlin")
    assert next_fire_times(spec, count=3) == [
        utc(2026, 3, 28, 8), utc(2026, 3, 29, 7), utc(2026, 3, 30, 7),
    ]  # fmt: skip


@freeze_time("2026-10-23 12:00:00")
def test_an_rrule_keeps_local_time_across_dst_too() -> None:
    spec = schedule.schedule_of(
        rrule="FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0", timezone="Europe/Berlin"
    )
    assert next_fire_times(spec, count=3) == [
        utc(2026, 10, 24, 7), utc(2026, 10, 25, 8), utc(2026, 10, 26, 8),
    ]  # fmt: skip


@freeze_time("2026-11-23 09:00:00")
def test_weekday_cron_skips_the_weekend() -> None:
    spec = schedule.schedule_of(cron="0 9 * * 1-5", timezone="UTC")  # Monday 23 Nov 2026
    with freeze_time("2026-11-27 10:00:00"):  # Friday, after 9
        assert next_fire_times(spec, count=1) == [utc(2026, 11, 30, 9)]


@freeze_time("2026-11-23 09:00:00")
def test_an_interval_counts_from_its_anchor() -> None:
    spec = schedule.schedule_of(every="1h30m")
    assert spec["interval"] == 5400
    assert next_fire_times(spec, after=utc(2026, 11, 23, 12), count=2) == [
        utc(2026, 11, 23, 13, 30), utc(2026, 11, 23, 15),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"cron": "61 * * * *"}, "bad cron"),
        ({"cron": "* * *"}, "bad cron"),
        ({"rrule": "FREQ=SOMETIMES"}, "bad rrule"),
        ({"rrule": "DTSTART:20260101T000000\nRRULE:FREQ=DAILY"}, "bad rrule"),
        ({"every": "0s"}, "zero"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 9 * * *", "timezone": "../etc/passwd"}, "unknown time zone"),
        ({}, "exactly one"),
        ({"cron": "0 9 * * *", "every": "5m"}, "exactly one"),
    ],
)
def test_bad_schedules_are_refused(options: dict, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem):
        schedule.schedule_of(**options)


def test_an_rrule_that_ended_never_fires_again() -> None:
    with pytest.raises(ScheduleError, match="never fires again"):
        schedule.schedule_of(rrule="FREQ=DAILY;UNTIL=20200101T000000")


def test_missed_policy_late_timers_fire_and_say_so_schedules_skip() -> None:
    due = utc(2026, 11, 23, 9)
    assert schedule.late_note(due, due + timedelta(seconds=20)) is None
    note = schedule.late_note(due, due + timedelta(minutes=12, seconds=5))
    assert note == "(fired 12m5s late; due 2026-11-23 09:00:00 UTC)"
    assert not schedule.missed("TIMER", due, due + timedelta(days=1))
    assert not schedule.missed("SCHEDULED_EVENT", due, due + timedelta(minutes=5))
    assert schedule.missed("SCHEDULED_EVENT", due, due + timedelta(minutes=11))


@pytest.mark.parametrize("text", ["90s", "1.5m", "1h30m", "300", "2w"])
def test_every_command_reads_a_duration_alike(text: str) -> None:
    """`alert --in/--every`, `metrics --since` and `--offline-after` share one grammar."""
    from models.metrics import parse_duration as since
    from models.team_settings import parse_duration as offline_after

    assert since(text) == parse_duration(text)
    assert offline_after(text, most=30 * 86400) == parse_duration(text).total_seconds()


def test_an_interval_under_a_second_is_refused() -> None:
    with pytest.raises(ScheduleError, match="shorter than 1s"):
        schedule.schedule_of(every="0.5s")
