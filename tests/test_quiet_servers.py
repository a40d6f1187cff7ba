"""Idle servers wake once a second, not ten times (`flows.compat.uvicorn_server`,
`flows.compat.burner_redis_pubsub`), and lose nothing by it: a uvicorn server still
refreshes its `Date` header every second and stops at once on a signal; a pub/sub
subscriber still gets each message the moment it is published."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
from prefect_server import free_port, wait_until

from flows import server
from flows.api import app as api_app
from flows.compat.burner_redis_pubsub import patient_pubsub_reads
from flows.mcp import app as mcp_app

ROOT = Path(__file__).resolve().parent.parent

SERVE = textwrap.dedent(
    """
    import sys
    import uvicorn
    from flows.compat.uvicorn_server import quieter_ticks

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    quieter_ticks()
    quieter_ticks()  # a second application changes nothing
    print("patched", uvicorn.Server.main_loop.teamflow_quiet, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info")
    """
)


def test_a_quiet_uvicorn_server_keeps_its_date_header_fresh_and_stops_on_a_signal(
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port)], cwd=ROOT, stdout=out, stderr=out
        )
    try:
        url = f"http://127.0.0.1:{port}/"

        def date() -> str | None:
            try:
                return httpx.get(url, timeout=2).headers["date"]
            except httpx.HTTPError:
                return None

        first = wait_until(date, 60, "the server to answer", explain=log.read_text)
        wait_until(lambda: date() not in (None, first), 10, "a fresh Date header")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert "patched True" in text
    assert "Finished server process" in text  # uvicorn's own orderly shutdown


def test_every_server_teamflow_runs_is_quiet() -> None:
    import inspect

    assert "quieter_ticks()" in inspect.getsource(server.main)
    assert "patient_pubsub_reads()" in inspect.getsource(server.main)
    assert "quieter_ticks()" in inspect.getsource(api_app.serve)
    assert "quieter_ticks()" in inspect.getsource(mcp_app.serve_http)


def test_a_subscriber_gets_a_message_at_once_while_it_waits_in_long_slices() -> None:
    from burner_redis.pubsub import PubSub
    from docket import Docket

    from flows.compat import burner_redis_pubsub

    patient_pubsub_reads()
    patient_pubsub_reads()  # a second application changes nothing

    async def scenario() -> tuple[object, object]:
        async with (
            Docket(name="teamflow-quiet-test", url="memory://") as docket,
            docket._pubsub() as pubsub,
        ):
            assert isinstance(pubsub, PubSub)
            assert isinstance(pubsub._queue, burner_redis_pubsub._PatientQueue)
            await pubsub.subscribe("news")
            confirmed = await pubsub.get_message(timeout=None)
            empty = await pubsub.get_message(timeout=0.1)  # nothing yet: it ends empty
            assert empty is None
            reader = asyncio.ensure_future(pubsub.get_message(timeout=30))
            async with docket.redis() as redis:
                await redis.publish("news", "hello")
            message = await asyncio.wait_for(reader, timeout=30)
            return confirmed, message

    confirmed, message = asyncio.run(scenario())
    assert isinstance(confirmed, dict) and confirmed["type"] == "subscribe"
    assert isinstance(message, dict) and message["data"] in (b"hello", "hello")
