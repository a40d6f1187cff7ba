"""`teamflow alert` end to end: a real Prefect server with its scheduler on, a real worker.

A timer a few seconds ahead reaches the member's inbox and `alert list` shows its firing;
an `--every 5s` schedule fires from Prefect's scheduler, survives `prefect deploy --all`,
and stops when paused; the README's daily-sync schedule lands on the deployment with its
09:00 Europe/Berlin fire times; bad input is refused with one line and creates nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team
from prefect.client.orchestration import get_client
from prefect_server import (
    ROOT,
    Server,
    assert_clean_log,
    prefect_cli,
    prefect_server,
    talk_to,
    wait_until,
)
from teamflow_workers import postgres_databases, register_deployments, teamflow_workers
from test_prefect_services import SERVICES

from flows.alerts import DEPLOYMENT
from models import db, inbox, inbox_table, membership

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out


@dataclass
class Env:
    server: Server
    env: dict[str, str]
    tmp: Path


POSTGRES_URL = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")


@contextlib.contextmanager
def databases(tmp: Path) -> Iterator[tuple[str | None, str]]:
    """PostgreSQL for both servers where set (SQLite locks under load), else SQLite."""
    if POSTGRES_URL:
        with postgres_databases(POSTGRES_URL) as urls:
            yield urls
    else:
        yield None, f"sqlite:///{tmp / 'teamflow.db'}"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("alerts")
    with databases(tmp) as (prefect_url, url), pytest.MonkeyPatch.context() as mp:
        shared = {"TEAMFLOW_DATABASE_URL": url, "TEAMFLOW_HOME": str(tmp / "home")}
        for name, value in shared.items():
            mp.setenv(name, value)
        db.upgrade(url)
        research_team()
        try:
            with prefect_server(tmp, prefect_url, env=SERVICES) as server:
                register_deployments(server, tmp / "deploy.log")
                env = {**server.env, **shared}
                env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)
                with (
                    teamflow_workers(server, tmp, 1, env=shared),
                    talk_to(server.api),
                ):
                    yield Env(server, env, tmp)
                assert_clean_log(server.log)
        finally:
            db.dispose_engines()


def teamflow(live: Env, *args: str) -> subprocess.CompletedProcess:
    return run_teamflow(args, live.env, cwd=ROOT, stdin_devnull=False)


def ok_json(live: Env, *args: str):
    done = teamflow(live, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def listed(live: Env, alert_id: int, team: str = TEAM) -> dict:
    [row] = [r for r in ok_json(live, "alert", "list", team) if r["id"] == alert_id]
    return row


def alerts_named(member: str, name: str, team: str = TEAM) -> list[inbox_table.InboxMessageRow]:
    return [
        m for m in inbox.messages(team, member)
        if m.type == "system_alert" and m.payload["alert_name"] == name
    ]  # fmt: skip


def schedules(alert_id: int | None = None) -> list:
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(DEPLOYMENT)
        found = client.read_deployment_schedules(deployment.id)
    if alert_id is None:
        return found
    return [s for s in found if (s.parameters or {}).get("alert_id") == alert_id]


MINUTE_TEAM = "minute-team"


@pytest.fixture(scope="module", autouse=True)
def minutely(live: Env) -> dict:
    """A one-minute cron schedule, made as the module starts: its first minute passes while
    the module's other tests run, not in a test of its own. On a team of its own, so the
    other tests' alert lists do not change when it fires."""
    membership.create_team(MINUTE_TEAM, description="A minute's alerts", lead="coordinator")
    membership.add_member(MINUTE_TEAM, "analyst-2", model="sonnet", prompt="You keep time.")
    return ok_json(
        live, "alert", "schedule", MINUTE_TEAM, "--name", "minutely",
        "--message", "a minute passed", "--cron", "* * * * *", "--to", "analyst-2",
    )  # fmt: skip


def test_a_timer_reaches_the_member_and_list_shows_its_firing(live: Env) -> None:
    timer = ok_json(
        live, "alert", "timer", TEAM, "--name", "standup", "--message", "Standup now",
        "--in", "3s", "--to", "analyst-1",
    )  # fmt: skip
    assert timer["type"] == "TIMER" and timer["status"] == "active" and timer["flowRunId"]

    [message] = wait_until(lambda: alerts_named("analyst-1", "standup"), 120, "the timer")
    assert message.payload == {
        "alert_type": "TIMER", "alert_name": "standup", "message": "Standup now",
    }  # fmt: skip
    assert alerts_named("analyst-2", "standup") == []

    row = wait_until(lambda: listed(live, timer["id"])["lastFiring"], 180, "the firing")
    assert row["flowRunId"] == timer["flowRunId"]
    assert row["recipients"] == ["analyst-1"]
    assert row["messageIds"] == [message.message_id]
    assert row["dueAt"] == timer["dueAt"]
    assert listed(live, timer["id"])["status"] == "done"
    assert "standup" in teamflow(live, "alert", "list", TEAM).stdout


def test_a_cancelled_timer_never_fires(live: Env) -> None:
    timer = ok_json(
        live, "alert", "timer", TEAM, "--name", "later", "--message", "x", "--in", "1h"
    )  # fmt: skip
    assert ok_json(live, "alert", "cancel", str(timer["id"]))["status"] == "cancelled"
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(timer["flowRunId"]))
    assert run.state is not None and run.state.is_cancelled()
    again = teamflow(live, "alert", "cancel", str(timer["id"]))
    assert again.returncode == 1 and "is cancelled" in again.stderr


def test_a_schedule_fires_survives_redeploy_and_stops_when_paused(live: Env) -> None:
    pulse = ok_json(
        live, "alert", "schedule", TEAM, "--name", "pulse", "--message", "every five seconds",
        "--every", "5s", "--to", "coordinator",
    )  # fmt: skip
    assert len(pulse["nextFireTimes"]) == 3
    [prefect_schedule] = schedules(pulse["id"])
    assert str(prefect_schedule.id) == pulse["scheduleId"] and prefect_schedule.active

    wait_until(lambda: alerts_named("coordinator", "pulse"), 120, "the scheduled event")
    first = listed(live, pulse["id"])["lastFiring"]
    assert first["recipients"] == ["coordinator"] and first["outcome"] == "delivered"
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(first["flowRunId"]))
    assert run.auto_scheduled, "the run was not made by Prefect's scheduler"

    # `teamflow up` again = `prefect deploy --all`: the team's schedule stays and fires on.
    redeploy = prefect_cli(
        ["--no-prompt", "deploy", "--all", "--prefect-file", str(ROOT / "prefect.yaml")],
        live.server.env,
    )
    assert redeploy.returncode == 0, redeploy.stdout[-2000:] + redeploy.stderr[-2000:]
    assert [str(s.id) for s in schedules(pulse["id"])] == [pulse["scheduleId"]]
    seen = len(alerts_named("coordinator", "pulse"))
    wait_until(
        lambda: len(alerts_named("coordinator", "pulse")) > seen, 120, "a firing after redeploy"
    )

    assert ok_json(live, "alert", "pause", str(pulse["id"]))["status"] == "paused"
    [paused] = schedules(pulse["id"])  # its parameters (the alert) survive the update
    assert not paused.active and paused.parameters["member"] == "coordinator"
    assert listed(live, pulse["id"])["nextFireTimes"] == []

    def settled() -> bool:  # no run of it scheduled or on its way any more
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs()
        return not [
            r for r in runs
            if r.parameters.get("alert_id") == pulse["id"] and not r.state.is_final()
        ]  # fmt: skip

    wait_until(settled, 180, "the paused schedule's runs to end")
    count = len(alerts_named("coordinator", "pulse"))
    time.sleep(12)  # six scheduler loops: a live schedule fires twice in that time
    assert len(alerts_named("coordinator", "pulse")) == count

    assert ok_json(live, "alert", "resume", str(pulse["id"]))["status"] == "active"
    wait_until(
        lambda: len(alerts_named("coordinator", "pulse")) > count, 120, "a firing after resume"
    )
    assert ok_json(live, "alert", "cancel", str(pulse["id"]))["status"] == "cancelled"
    assert schedules(pulse["id"]) == []


def test_a_one_minute_cron_schedule_puts_the_alert_in_the_inbox(live: Env, minutely: dict) -> None:
    """The README's kind of schedule, at its shortest: Prefect's scheduler fires it each
    minute (made when the module started: `minutely`)."""
    minute = minutely
    due = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in minute["nextFireTimes"]]
    assert [t.second for t in due] == [0, 0, 0] and due[1] - due[0] == timedelta(minutes=1)

    [message, *_] = wait_until(
        lambda: alerts_named("analyst-2", "minutely", MINUTE_TEAM), 180, "the cron firing"
    )
    assert message.payload["alert_type"] == "SCHEDULED_EVENT"
    assert message.payload["message"] == "a minute passed"
    firing = wait_until(
        lambda: listed(live, minute["id"], MINUTE_TEAM)["lastFiring"], 180, "the firing"
    )
    assert firing["outcome"] == "delivered" and firing["recipients"] == ["analyst-2"]
    fired_slot = datetime.fromisoformat(firing["dueAt"].replace("Z", "+00:00"))
    assert fired_slot.second == 0, firing  # a cron slot, not whenever something polled
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(UUID(firing["flowRunId"])).auto_scheduled
    assert ok_json(live, "alert", "cancel", str(minute["id"]))["status"] == "cancelled"


def readme_alert_lines() -> list[str]:
    section = (ROOT / "docs" / "alerts.md").read_text().split("## Timers and scheduled events")[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.startswith("teamflow alert ")]


def test_the_readme_alert_commands_run_as_shown(live: Env) -> None:
    membership.create_team("q4-team", description="Q4 sales analysis team", lead="coordinator")
    membership.add_member("q4-team", "analyst-1", model="haiku", prompt="You analyse trends.")
    lines = readme_alert_lines()
    assert any("--name daily_sync" in line for line in lines)
    for line in lines:
        done = teamflow(live, *shlex.split(line, comments=True)[1:])
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"

    rows = {r["name"]: r for r in ok_json(live, "alert", "list", "q4-team")}
    assert rows["standup"]["type"] == "TIMER" and rows["standup"]["to"] == "analyst-1"
    sync = rows["daily_sync"]
    [on_prefect] = schedules(sync["id"])
    assert on_prefect.schedule.cron == "0 9 * * 1-5"
    assert on_prefect.schedule.timezone == "Europe/Berlin"
    assert on_prefect.parameters["message"] == "Time for daily sync"
    berlin = ZoneInfo("Europe/Berlin")
    times = [datetime.fromisoformat(t).astimezone(berlin) for t in sync["nextFireTimes"]]
    assert len(times) == 3
    assert all((t.hour, t.minute) == (9, 0) and t.isoweekday() <= 5 for t in times)
    for row in rows.values():
        ok_json(live, "alert", "cancel", str(row["id"]))


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["timer", TEAM, "--name", "x", "--message", "m", "--in", "10x"], "bad duration '10x'"),
        (["timer", TEAM, "--name", "x", "--message", "m", "--at", "2020-01-01T00:00:00Z"],
         "in the past"),
        (["timer", "no-team", "--name", "x", "--message", "m", "--in", "1m"], "no team named"),
        (["timer", TEAM, "--name", "x", "--message", "m", "--in", "1m", "--to", "ghost"],
         "no member named 'ghost'"),
        (["timer", TEAM, "--name", "../x", "--message", "m", "--in", "1m"], "not an alert name"),
        (["timer", TEAM, "--name", "x", "--message", "m" * 5000, "--in", "1m"], "at most 4000"),
        (["schedule", TEAM, "--name", "x", "--message", "m", "--cron", "61 * * * *"], "bad cron"),
        (["schedule", TEAM, "--name", "x", "--message", "m", "--rrule", "FREQ=NEVER"],
         "bad rrule"),
        (["schedule", TEAM, "--name", "x", "--message", "m", "--every", "0s"], "zero"),
        (["schedule", TEAM, "--name", "x", "--message", "m", "--cron", "0 9 * * *",
          "--timezone", "Mars/Base"], "unknown time zone"),
        (["pause", "9999"], "no alert with id 9999"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_schedules_nothing(
    live: Env, args: list[str], problem: str
) -> None:
    before_alerts = ok_json(live, "alert", "list", TEAM)
    before_schedules = schedules()
    done = teamflow(live, "alert", *args)
    assert done.returncode != 0
    assert done.stderr.startswith("teamflow: error: ") and problem in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert ok_json(live, "alert", "list", TEAM) == before_alerts
    assert [s.id for s in schedules()] == [s.id for s in before_schedules]


def test_alert_list_does_not_import_prefect(live: Env) -> None:
    code = (
        "import sys; from flows.cli.app import main; sys.argv=['teamflow','alert','list',"
        f"'{TEAM}']\ntry: main()\nexcept SystemExit: pass\n"
        "assert 'prefect' not in sys.modules, 'prefect imported'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=live.env, cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
