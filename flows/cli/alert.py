"""`teamflow alert`: timers and scheduled events that put a `system_alert` in inboxes.

`timer` and `schedule` check everything (team, member, name, message, time or schedule)
before anything is created; `list` reads teamflow's database only (no Prefect); `pause`,
`resume` and `cancel` change the Prefect schedule or run and record it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit, fail

alert_app = typer.Typer(
    help="Alerts: timers (one-shot) and scheduled events (cron, interval, RRULE) for a team.",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Option("--name", help="The alert's name, e.g. daily_sync.")]
Message = Annotated[str, typer.Option("--message", help="What the recipients read.")]
To = Annotated[
    str | None, typer.Option("--to", help="The one member to alert (default: every active one).")
]


def _prefect_call(call, *args, **kwargs):
    from flows import runner

    try:
        return call(*args, **kwargs)
    except runner.RunnerError as exc:
        fail(str(exc))


@alert_app.command("timer")
def alert_timer(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: Name,
    message: Message,
    after: Annotated[
        str | None, typer.Option("--in", help="Fire after this long: 90s, 10m, 1h30m, 2d.")
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="Fire at this ISO 8601 time (no offset: UTC).")
    ] = None,
    to: To = None,
    as_json: JsonFlag = False,
) -> None:
    """Sets a one-shot timer: a system-alert run scheduled for its time (needs `teamflow up`)."""
    from models.alert import check_alert
    from models.schedule import due_time

    due = due_time(after=after, at=at)
    check_alert(team_name, name, message, to)
    from flows import alerts

    alert, run = _prefect_call(alerts.create_timer, team_name, name, message, due=due, member=to)
    if as_json:
        emit({**alert.to_json(), "url": run.url})
    else:
        typer.echo(f"timer {alert.id} ({name}) fires at {due.isoformat()}: flow run {run.id}")


@alert_app.command("schedule")
def alert_schedule(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: Name,
    message: Message,
    cron: Annotated[
        str | None, typer.Option("--cron", help="A cron expression, e.g. '0 9 * * 1-5'.")
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="An interval: 5s, 10m, 1h30m, 1d.")
    ] = None,
    rrule: Annotated[
        str | None,
        typer.Option("--rrule", help="An RRULE, e.g. 'FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0'."),
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="IANA time zone for cron/RRULE (UTC).")
    ] = None,
    to: To = None,
    as_json: JsonFlag = False,
) -> None:
    """Adds a recurring event: a schedule of the system-alert deployment (needs `teamflow up`)."""
    from models.alert import check_alert
    from models.schedule import next_fire_times, schedule_of

    spec = schedule_of(cron=cron, every=every, rrule=rrule, timezone=timezone)
    check_alert(team_name, name, message, to)
    from flows import alerts

    alert = _prefect_call(alerts.add_schedule, team_name, name, message, spec, member=to)
    upcoming = [t.isoformat() for t in next_fire_times(spec)]
    if as_json:
        emit({**alert.to_json(), "nextFireTimes": upcoming})
    else:
        typer.echo(f"schedule {alert.id} ({name}) added; next: {', '.join(upcoming)}")


def _row(alert, now: datetime) -> dict:
    from models.alert import AlertStatus, last_firing
    from models.schedule import next_fire_times

    if alert.status not in (AlertStatus.ACTIVE,):
        upcoming: list[str] = []
    elif alert.schedule:
        upcoming = [t.isoformat() for t in next_fire_times(alert.schedule, after=now)]
    else:
        upcoming = [alert.fire_at.isoformat()] if alert.fire_at else []
    last = last_firing(alert.id)
    return {**alert.to_json(), "nextFireTimes": upcoming,
            "lastFiring": last.to_json() if last else None}  # fmt: skip


@alert_app.command("list")
def alert_list(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    as_json: JsonFlag = False,
) -> None:
    """Lists a team's timers and schedules: status, next fire times, last firing."""
    from models.alert import list_alerts

    now = datetime.now(UTC)
    rows = [_row(a, now) for a in list_alerts(team_name)]
    if as_json:
        emit(rows)
        return
    for r in rows:
        when = (r["schedule"] or {}).get("cron") or (r["schedule"] or {}).get("rrule")
        if r["schedule"] and "interval" in r["schedule"]:
            when = f"every {r['schedule']['interval']}s"
        what = f"{r['type'].lower()} {when}" if when else r["type"].lower()
        nxt = r["nextFireTimes"][0] if r["nextFireTimes"] else "-"
        last = r["lastFiring"]
        fired = (
            f"last {last['outcome']} {last['firedAt']} to {', '.join(last['recipients'])}"
            if last
            else "never fired"
        )
        typer.echo(f"{r['id']:>4}  {r['name']:<20} {r['status']:<9} {what:<28} next {nxt}  {fired}")
    if not rows:
        typer.echo("no alerts")


def _change(alert_id: int, verb: str, as_json: bool) -> None:
    from flows import alerts

    if verb == "cancel":
        alert = _prefect_call(alerts.cancel, alert_id)
    else:
        alert = _prefect_call(alerts.set_paused, alert_id, verb == "pause")
    if as_json:
        emit(alert.to_json())
    else:
        typer.echo(f"alert {alert.id} ({alert.name}) is {alert.status}")


AlertId = Annotated[
    int, typer.Argument(metavar="ID", help="The alert's id (`teamflow alert list`).")
]


@alert_app.command("pause")
def alert_pause(alert_id: AlertId, as_json: JsonFlag = False) -> None:
    """Pauses a scheduled event: its Prefect schedule stops making runs."""
    _change(alert_id, "pause", as_json)


@alert_app.command("resume")
def alert_resume(alert_id: AlertId, as_json: JsonFlag = False) -> None:
    """Resumes a paused scheduled event."""
    _change(alert_id, "resume", as_json)


@alert_app.command("cancel")
def alert_cancel(alert_id: AlertId, as_json: JsonFlag = False) -> None:
    """Cancels a timer's scheduled run, or deletes a scheduled event's schedule."""
    _change(alert_id, "cancel", as_json)
