"""The Prefect side of alerts: timer runs and `system-alert` deployment schedules.

A TIMER is one `system-alert` flow run in a Scheduled state for its due time; a
SCHEDULED_EVENT is one schedule (cron, interval or RRULE, with its own parameters) of the
one `system-alert` deployment, so it shows on the deployment's page in the Prefect UI and
Prefect's scheduler makes its runs. The alert is recorded in teamflow's database first
(`models.alert`), then created in Prefect; when Prefect refuses, the record is removed
again, so a failed command leaves nothing behind. Every network call of alerts is here,
through `runner.PrefectApi` (plain httpx: the commands do not import Prefect).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from flows import runner
from models import alert as store
from models.alert import Alert, AlertError, AlertStatus
from models.notification import AlertType

DEPLOYMENT = "system-alert/system-alert"
"""The deployment that runs `flows.system_alert` (`prefect.yaml`), as `flow/deployment`."""


def run_tags(team: str, alert_type: AlertType | str) -> list[str]:
    """The tags an alert's run carries in the Prefect UI: the team and the kind of alert."""
    return [f"team:{team}", AlertType(alert_type).value]


def _check_server(api: str) -> None:
    # As `runner.check_server`, with more patience: a busy server (SQLite, a loaded
    # machine) can take seconds to answer its health check; only a refused connection
    # or a foreign answer is a clear "no".
    answer = runner.probe(api, timeout=15.0)
    if answer == "none":
        raise runner.NoServer(f"no Prefect server answers at {api}; {runner.START_HINT}")
    if answer != "prefect":
        _check_server(api)


def _parameters(alert: Alert) -> dict[str, Any]:
    return {
        "team": alert.team,
        "alert_type": alert.alert_type,
        "alert_name": alert.name,
        "message": alert.message,
        "member": alert.recipient,
        "alert_id": alert.id,
    }


def prefect_schedule(spec: dict[str, Any]) -> dict[str, Any]:
    """The schedule of Prefect's API (cron, interval or RRULE) for a `models.schedule` spec."""
    tz = spec.get("timezone") or "UTC"
    if "cron" in spec:
        return {"cron": spec["cron"], "timezone": tz, "day_or": True}
    if "interval" in spec:
        return {"interval": float(spec["interval"]), "anchor_date": spec["anchor"],
                "timezone": tz}  # fmt: skip
    start = datetime.fromisoformat(spec["dtstart"])
    rule = spec["rrule"].removeprefix("RRULE:")
    return {"rrule": f"DTSTART:{start:%Y%m%dT%H%M%S}\nRRULE:{rule}", "timezone": tz}


def create_timer(
    team: str,
    name: str,
    message: str,
    *,
    due: datetime,
    member: str | None = None,
    require_worker: bool = True,
) -> tuple[Alert, runner.StartedRun]:
    """Records a TIMER and creates its `system-alert` run, scheduled for `due`; teamflow's
    clock in a worker delivers it at `due` if the run has not by then."""
    alert = store.create_alert(team, AlertType.TIMER, name, message, recipient=member, fire_at=due)
    assert alert.id is not None, "a stored alert has its id"
    try:
        run = runner.start(
            DEPLOYMENT,
            _parameters(alert),
            idempotency_key=f"teamflow-alert-{team}-{alert.id}-{alert.created_at.isoformat()}",
            tags=run_tags(team, AlertType.TIMER),
            scheduled_time=due,
            flow_run_name=f"timer-{name}@{team}",
            require_worker=require_worker,
        )
    except BaseException:
        store.delete_alert(alert.id)
        raise
    alert = store.set_prefect_ids(alert.id, flow_run_id=str(run.id))
    return alert, run


def _http(exc: httpx.HTTPStatusError) -> runner.RunnerError:
    return runner.RunnerError(runner._http_reason(exc, runner.api_url()))


def add_schedule(
    team: str, name: str, message: str, spec: dict[str, Any], *, member: str | None = None
) -> Alert:
    """Records a SCHEDULED_EVENT and adds its schedule to the `system-alert` deployment."""
    schedule = prefect_schedule(spec)
    store.check_alert(team, name, message, member)
    api = runner.api_url()
    _check_server(api)
    alert = store.create_alert(
        team, AlertType.SCHEDULED_EVENT, name, message, recipient=member, schedule=spec
    )
    assert alert.id is not None, "a stored alert has its id"
    try:
        with runner.PrefectApi(api) as prefect:
            deployment = runner.find_deployment(prefect, DEPLOYMENT)
            [created] = prefect.call(
                "POST",
                f"/deployments/{deployment['id']}/schedules",
                [{"schedule": schedule, "active": True, "parameters": _parameters(alert),
                  "slug": f"{team}-{name}-{alert.id}"}],
            )  # fmt: skip
    except httpx.HTTPStatusError as exc:
        store.delete_alert(alert.id)
        raise _http(exc) from None
    except BaseException:
        store.delete_alert(alert.id)
        raise
    return store.set_prefect_ids(
        alert.id, schedule_id=str(created["id"]), deployment_id=str(deployment["id"])
    )


def _ensure(alert: Alert, *allowed: str) -> None:
    if alert.status not in allowed:
        raise AlertError(f"alert {alert.id} ({alert.name}) is {alert.status}")


def set_paused(alert_id: int, paused: bool) -> Alert:
    """Pauses or resumes a scheduled event's Prefect schedule (timers cannot be paused)."""
    alert = store.get_alert(alert_id)
    if alert.alert_type != AlertType.SCHEDULED_EVENT.value or not alert.schedule_id:
        raise AlertError(
            f"alert {alert_id} is a {alert.alert_type.lower()}: only scheduled events pause; "
            f"cancel a timer with `teamflow alert cancel {alert_id}`"
        )
    _ensure(alert, AlertStatus.ACTIVE if paused else AlertStatus.PAUSED)
    api = runner.api_url()
    _check_server(api)
    try:
        with runner.PrefectApi(api) as prefect:
            # The parameters again: Prefect 3.8.8's server resets a schedule's parameters
            # to {} on any update that omits them, and the resumed schedule would then
            # start runs without a team.
            prefect.call(
                "PATCH",
                f"/deployments/{alert.deployment_id}/schedules/{alert.schedule_id}",
                {"active": not paused, "parameters": _parameters(alert)},
            )
    except httpx.HTTPStatusError as exc:
        raise _http(exc) from None
    return store.set_status(alert_id, AlertStatus.PAUSED if paused else AlertStatus.ACTIVE)


def cancel(alert_id: int) -> Alert:
    """Deletes a scheduled event's schedule, or cancels a timer's scheduled run."""
    alert = store.get_alert(alert_id)
    _ensure(alert, AlertStatus.ACTIVE, AlertStatus.PAUSED)
    api = runner.api_url()
    _check_server(api)
    try:
        with runner.PrefectApi(api) as prefect:
            if alert.schedule_id:
                path = f"/deployments/{alert.deployment_id}/schedules/{alert.schedule_id}"
                try:
                    prefect.call("DELETE", path)
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 404:  # gone already: cancelled, as wanted
                        raise
            elif alert.flow_run_id:
                run = prefect.call("GET", f"/flow_runs/{alert.flow_run_id}")
                state = run.get("state") or {}
                if state and state.get("type") != "SCHEDULED":
                    kind = state.get("name") or state.get("type") or ""
                    raise AlertError(
                        f"timer {alert_id} ({alert.name}) is already "
                        f"{kind.lower()}; it cannot be cancelled"
                    )
                cancelled = {"type": "CANCELLED", "name": "Cancelled",
                             "message": "cancelled with `teamflow alert cancel`"}  # fmt: skip
                prefect.call("POST", f"/flow_runs/{run['id']}/set_state", {"state": cancelled})
    except httpx.HTTPStatusError as exc:
        raise _http(exc) from None
    # A timer that went off meanwhile (teamflow's clock does not wait for Prefect) is done,
    # not cancelled: say so.
    return store.set_status(
        alert_id, AlertStatus.CANCELLED, only_from=(AlertStatus.ACTIVE, AlertStatus.PAUSED)
    )
