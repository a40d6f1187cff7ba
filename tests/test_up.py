"""`teamflow up`, run as a user runs it: a real process, a real Prefect server, real runs.

Each test gives `teamflow up` a free port and its own PREFECT_HOME and TEAMFLOW_HOME, and
stops everything it started in a `finally` (the pids `teamflow up` prints, by process group).
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from factories import TEAM, research_team
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings
from prefect_server import (
    assert_clean_log,
    base_env,
    free_port,
    healthy,
    kill_pids,
    pid_alive,
    start,
    started_by_name,
    started_pids,
    stop,
    talk_to,
    teamflow,
    wait_for_up,
    wait_until,
)
from teamflow_workers import postgres_databases

from flows import pool_setup, runner, up_processes
from flows import up as bring_up
from flows.alerts import DEPLOYMENT
from models import db, inbox, membership
from models.task import get_task

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

AUTH = "teamflow:s3cret"
POSTGRES_URL = os.environ.get("TEAMFLOW_TEST_POSTGRES_URL")


async def mcp_call(url: str, token: str | None, tool: str, **arguments: Any) -> Any:
    """One tool call to the MCP server at `url`: its JSON result, or the error envelope."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        Client(streamable_http_client(url, http_client=http_client)) as client,
    ):
        result = await client.call_tool(tool, {"team_name": TEAM, **arguments})
    text = "".join(getattr(block, "text", "") for block in result.content)
    if not result.is_error and result.structured_content is not None:
        structured = result.structured_content
        return structured["result"] if set(structured) == {"result"} else structured
    return json.loads(text)


def alert(n: int) -> dict[str, str]:
    return {"team": TEAM, "alert_type": "TIMER", "alert_name": f"tick-{n}", "message": f"#{n}"}


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on `port` (from /proc/net/tcp)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, _remote, state = line.split()[1:4]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":
                found.add(address)
    return found


@pytest.fixture
def up_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment a user would run `teamflow up` in; this test process shares it."""
    api = f"http://127.0.0.1:{free_port()}/api"
    env = base_env(tmp_path, api)
    for name in ("TEAMFLOW_HOME", "PREFECT_HOME"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("TEAMFLOW_DATABASE_URL", raising=False)
    return env


def test_logs_and_the_prefect_database_are_created_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        log = up_processes.log_path(tmp_path, "worker.log")
        up_processes.check_database(
            f"sqlite+aiosqlite:///{tmp_path / 'prefect.db'}", "the database"
        )
    finally:
        os.umask(old)
    assert log.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "logs").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "prefect.db").stat().st_mode & 0o777 == 0o600


def test_up_runs_teamflow_for_real_and_stops_what_it_started(
    up_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    late_runs = "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS"
    env = {**up_env, "PREFECT_SERVER_API_AUTH_STRING": AUTH, late_runs: "7"}
    monkeypatch.setenv("PREFECT_SERVER_API_AUTH_STRING", AUTH)
    api = env["PREFECT_API_URL"]
    port = int(api.rsplit(":", 1)[1].split("/")[0])
    # Started anew: the test reads the server's environment from /proc (`start`).
    first = start(["up"], env, tmp_path / "up-1.log", children_forked=False)
    second = None
    pids: list[int] = []
    try:
        output = wait_for_up(first, tmp_path / "up-1.log")
        pids = started_pids(output)
        assert len(pids) == 4  # the server, the worker, the MCP server and the REST API
        # Its Prefect database (the suite's template) holds the deployments `up` registers,
        # from these very sources: no `prefect deploy` this time.
        assert "deployment(s) are registered from this prefect.yaml and source already" in output
        assert not (Path(env["TEAMFLOW_HOME"]) / "logs" / "deploy.log").exists()
        assert f"UI:      http://127.0.0.1:{port}" in output
        mcp_url = f"http://127.0.0.1:{env['TEAMFLOW_MCP_PORT']}/mcp"
        assert f"MCP:     {mcp_url}" in output
        rest_url = f"http://127.0.0.1:{env['TEAMFLOW_API_PORT']}/api/v1/"
        assert f"REST:    {rest_url}" in output

        # The safer server: loopback only, an auth string, CSRF protection, its own origin.
        assert listening_addresses(port) == {"0100007F"}
        assert httpx.get(f"{api}/admin/version").status_code == 401
        basic = {"Authorization": "Basic " + base64.b64encode(AUTH.encode()).decode()}
        no_csrf = httpx.post(f"{api}/flow_runs/filter", json={}, headers=basic)
        assert no_csrf.status_code == 403
        preflight = {"Access-Control-Request-Method": "POST"}
        foreign = httpx.options(
            f"{api}/flow_runs/filter", headers={**preflight, "Origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in foreign.headers
        own = httpx.options(
            f"{api}/flow_runs/filter", headers={**preflight, "Origin": api.removesuffix("/api")}
        )
        assert own.headers.get("access-control-allow-origin") == api.removesuffix("/api")

        # The services teamflow leans on little look less often; the user's choice wins.
        environ = Path(f"/proc/{started_by_name(output)['server']}/environ")
        server_env = set(environ.read_bytes().split(b"\0"))
        assert b"PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_LOOP_SECONDS=60" in server_env
        assert f"{late_runs}=7".encode() in server_env

        # Runs that the CLI starts run on the worker and deliver their alerts.
        db.upgrade()
        research_team()
        with talk_to(api):
            for n in range(5):
                started = runner.start(DEPLOYMENT, alert(n))
                with runner.connected(), get_client(sync_client=True) as client:
                    run = wait_until(
                        lambda s=started: (r := client.read_flow_run(s.id)).state.is_final() and r,
                        180,
                        "the alert run",
                    )
                assert run.state.is_completed(), run.state
        # The watchdog is scheduled: every 30 s unless TEAMFLOW_WATCHDOG_EVERY says otherwise.
        assert "scheduled the watchdog every 30 s" in output
        with (
            talk_to(api),
            runner.connected(),
            get_client(sync_client=True) as client,
        ):
            found = client.read_deployment_by_name("watchdog/watchdog")
            schedules = client.read_deployment_schedules(found.id)
        # one run per ten checks (5 minutes), not one per check
        assert [s.schedule.interval.total_seconds() for s in schedules if s.active] == [300]
        ticks = {m.payload["alert_name"] for m in inbox.messages(TEAM, "analyst-2")
                 if m.type == "system_alert"}  # fmt: skip
        assert ticks == {f"tick-{n}" for n in range(5)}

        # `teamflow task run ID`, as the README shows it: the worker works the team task.
        done = {"status": "SUCCESS", "thoughts": [], "actions": [], "stop": True,
                "response": "done"}  # fmt: skip
        membership.add_member(TEAM, "runner", model="haiku", prompt="p",
                              runtime={"kind": "scripted", "playbook": [done]})  # fmt: skip
        created = teamflow(["task", "create", TEAM, "--title", "Up", "--assignee", "runner"], env)
        assert created.returncode == 0, created.stderr
        task_id = created.stdout.strip()
        ran = teamflow(["task", "run", task_id, "--json"], env)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["task_id"] == task_id
        wait_until(lambda: get_task(task_id).status == "completed", 180, "the team task")

        # The MCP server it serves over HTTP: a member's session with its token reads the
        # team's tasks; a session without a token is refused.
        token = teamflow(["member", "token", TEAM, "runner"], env)
        assert token.returncode == 0, token.stderr
        tasks = anyio.run(mcp_call, mcp_url, token.stdout.strip(), "task_list")
        assert task_id in {t["id"] for t in tasks}
        refused = anyio.run(mcp_call, mcp_url, None, "task_list")
        assert refused["error"] == "Unauthorized"
        # And its REST API: the same member's token, the same tasks, in a 001 envelope.
        bearer = {"Authorization": f"Bearer {token.stdout.strip()}"}
        listed = httpx.get(f"{rest_url}teams/{TEAM}/tasks", headers=bearer).json()
        assert listed["status"] == "success" and task_id in {t["id"] for t in listed["data"]}
        assert httpx.get(f"{rest_url}teams").json()["error"] == "Unauthorized"

        # A second `teamflow up` reuses the server and adds a worker of its own. It is
        # started as a shell without job control starts `teamflow up &` (SIGINT ignored);
        # Ctrl-C (`kill -INT`) still stops it.
        second = start(["up"], env, tmp_path / "up-2.log", sigint_ignored=True)
        output_2 = wait_for_up(second, tmp_path / "up-2.log")
        assert f"reusing the Prefect server at {api}" in output_2
        assert f"reusing the MCP server at {mcp_url}" in output_2
        assert f"reusing the REST API at {rest_url}" in output_2
        [second_worker] = started_pids(output_2)
        os.killpg(second.pid, signal.SIGINT)  # Ctrl-C
        assert second.wait(timeout=180) == 0
        assert not pid_alive(second_worker)
        assert healthy(api)

        stop(first)
        assert first.returncode == 0
        assert "stopping what teamflow up started" in (tmp_path / "up-1.log").read_text()
        assert not any(pid_alive(pid) for pid in pids)
        assert not healthy(api)
        assert up_processes.probe_mcp(mcp_url) == "none"
        assert up_processes.probe_rest(rest_url) == "none"
        assert_clean_log(Path(env["TEAMFLOW_HOME"]) / "logs" / "prefect-server.log")
    finally:
        for process in (first, second):
            if process is not None:
                stop(process)
        kill_pids(pids)


class _NotPrefect(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def other_server(up_env: dict[str, str]) -> Iterator[int]:
    """Something that is not a Prefect server, listening on the port of PREFECT_API_URL."""
    port = int(up_env["PREFECT_API_URL"].rsplit(":", 1)[1].split("/")[0])
    server = http.server.HTTPServer(("127.0.0.1", port), _NotPrefect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def test_up_refuses_a_port_taken_by_something_else(
    up_env: dict[str, str], other_server: int
) -> None:
    result = teamflow(["up"], up_env)

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line == (
        f"teamflow: error: 127.0.0.1:{other_server} is taken by something that is not a "
        "Prefect server (GET /api/health answered 404); stop it or set PREFECT_API_URL to "
        "another port"
    )
    assert "teamflow is up" not in result.stdout


@pytest.mark.parametrize(
    ("variable", "says"),
    [
        ("TEAMFLOW_DATABASE_URL", "teamflow's database: cannot reach the database at"),
        ("PREFECT_API_DATABASE_CONNECTION_URL", "cannot reach the Prefect server's database at"),
    ],
)
def test_up_refuses_a_database_it_cannot_reach(
    up_env: dict[str, str], variable: str, says: str
) -> None:
    driver = "psycopg" if variable.startswith("TEAMFLOW") else "asyncpg"
    env = {**up_env, variable: f"postgresql+{driver}://teamflow@127.0.0.1:{free_port()}/gone"}

    result = teamflow(["up"], env, timeout=60)  # refused at once, not after retrying

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"teamflow: error: {says} postgresql+{driver}://teamflow@127.0.0.1:")
    assert "refused" in line.lower()
    assert not healthy(env["PREFECT_API_URL"])


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="TEAMFLOW_TEST_POSTGRES_URL is not set")
def test_up_on_postgresql_runs_the_alert_deployment_to_completion(
    up_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both databases on PostgreSQL, no code change: only the two URLs differ."""
    with postgres_databases(POSTGRES_URL) as (prefect_url, teamflow_url):
        env = {
            **up_env,
            "TEAMFLOW_DATABASE_URL": teamflow_url,
            "PREFECT_API_DATABASE_CONNECTION_URL": prefect_url,
        }
        monkeypatch.setenv("TEAMFLOW_DATABASE_URL", teamflow_url)
        process = start(["up"], env, tmp_path / "up.log")
        pids: list[int] = []
        try:
            output = wait_for_up(process, tmp_path / "up.log")
            pids = started_pids(output)
            assert f"database {db.redact(prefect_url)}" in output
            # A new Prefect database: `prefect deploy --all` registers the deployments, and
            # they are what a later `up` finds; unless one of them is gone, or the sources
            # differ from those they were registered from.
            registered = re.search(r"registered (\d+) deployment\(s\): (.*)", output)
            assert registered is not None, output
            names = registered[2].split(", ")
            assert len(names) == int(registered[1]) and "team-task/team-task" in names
            stamp = pool_setup.sources_fingerprint(up_processes.PROJECT_ROOT / "prefect.yaml")
            with talk_to(env["PREFECT_API_URL"]):
                assert pool_setup._registered(stamp) == names
                assert pool_setup._registered(stamp[::-1]) is None
                with get_client(sync_client=True) as client:
                    gone = client.read_deployment_by_name("shutdown-member/shutdown-member")
                    client.delete_deployment(gone.id)
                assert pool_setup._registered(stamp) is None  # `up` would deploy again
            research_team()
            with talk_to(env["PREFECT_API_URL"]):
                started = runner.start(DEPLOYMENT, alert(1))
                with get_client(sync_client=True) as client:
                    run = wait_until(
                        lambda: (r := client.read_flow_run(started.id)).state.is_final() and r,
                        180,
                        "the alert run",
                    )
            assert run.state.is_completed(), run.state
            [message] = [m for m in inbox.messages(TEAM, "coordinator") if m.type == "system_alert"]
            assert message.payload["alert_name"] == "tick-1"
            stop(process)
            assert not any(pid_alive(pid) for pid in pids)
            assert_clean_log(Path(env["TEAMFLOW_HOME"]) / "logs" / "prefect-server.log")
        finally:
            stop(process)
            kill_pids(pids)


class _Busy(http.server.BaseHTTPRequestHandler):
    """Answers 503 to its first `busy` requests, then what a Prefect server answers to
    `GET /api/admin/version`, or `status` if set."""

    busy = 0
    status = 200
    seen = 0

    def do_GET(self) -> None:
        type(self).seen += 1
        status = 503 if type(self).seen <= type(self).busy else type(self).status
        body = json.dumps("3.8.8" if status == 200 else {"detail": "busy"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("busy", "status", "outcome"),
    [
        (2, 200, "3.8.8"),  # busy twice, then done: the step's own answer
        (10**6, 200, "checking the version: gave up after "),  # busy throughout: one line
        (0, 404, "checking the version: the Prefect server answered 404"),  # a refusal: at once
    ],
)
def test_a_busy_server_is_asked_again_and_a_refusal_is_one_line(
    busy: int, status: int, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `up` does on each of its steps on the server (pool, automation, schedule)."""
    handler = type("Handler", (_Busy,), {"busy": busy, "status": status, "seen": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # Busy throughout: given up within 3 s (Prefect's client, its retries off, still waits
    # 2 s after a 503 before it raises).
    if busy > 2:
        monkeypatch.setenv("TEAMFLOW_RETRY_SECONDS", "3")
    api = f"http://127.0.0.1:{server.server_address[1]}/api"

    def step() -> str:
        with get_client(sync_client=True) as client:
            return client.api_version()

    try:
        with temporary_settings(updates={PREFECT_API_URL: api, PREFECT_CLIENT_MAX_RETRIES: 0}):
            try:
                answer = bring_up._while_busy("checking the version", step)
            except bring_up.UpError as exc:
                answer = str(exc)
    finally:
        server.shutdown()
        server.server_close()
    assert answer.startswith(outcome)
    assert "\n" not in answer
    if busy > 2:
        assert answer.endswith("last: HTTP 503 Service Unavailable")
        assert f"after {handler.seen} tries" in answer
    else:
        assert handler.seen == busy + 1
