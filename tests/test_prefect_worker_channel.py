"""A worker that leaves while its channel to the server is being set up is a closed
channel, not a server error (`flows.server.quiet_worker_channel_disconnects`).

Workers keep a websocket open to the server (`/work_pools/{pool}/workers/connect`): they
authenticate, say hello, and get a ready frame. Around an outage a worker can go away in
the middle of that. With Prefect 3.8.8 and starlette 1.x the server then logged "Worker
channel setup failed due to a transient server error", "Exception in ASGI application" and
"Task exception was never retrieved", and a test's check of the server's log failed.
Here workers leave at that moment, politely and abruptly, against a real server started
as `teamflow up` starts it; the server must log no error and still serve the next worker.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
import websockets
from prefect.client.schemas.worker_channel import (
    WORK_POOL_SNAPSHOT_CAPABILITY,
    WORK_POOL_WORKER_CHANNEL_VERSION,
    WORKER_HEARTBEAT_CAPABILITY,
    WorkerHelloFrame,
)
from prefect.types._datetime import now
from prefect_server import prefect_server, wait_until

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

POOL = "teamflow"


def _hello(worker: str) -> str:
    return WorkerHelloFrame(
        type="worker.hello.v1",
        id=uuid.uuid4(),
        sent_at=now("UTC"),
        payload={
            "consumer_id": uuid.uuid4(),
            "worker_name": worker,
            "worker_type": "process",
            "heartbeat_interval_seconds": 30,
            "supported_channel_versions": [WORK_POOL_WORKER_CHANNEL_VERSION],
            "requested_capabilities": [WORKER_HEARTBEAT_CAPABILITY, WORK_POOL_SNAPSHOT_CAPABILITY],
        },
    ).model_dump_json()


async def _say_hello(url: str, worker: str) -> websockets.ClientConnection:
    channel = await websockets.connect(url, subprotocols=[websockets.Subprotocol("prefect")])
    await channel.send('{"type": "auth", "token": null}')
    assert "auth_success" in str(await channel.recv())
    await channel.send(_hello(worker))
    return channel


def _workers_of_the_pool(api: str) -> set[str]:
    listed = httpx.post(f"{api}/work_pools/{POOL}/workers/filter", json={}, timeout=30)
    return {worker["name"] for worker in listed.raise_for_status().json()}


async def _workers(api: str) -> str:
    """Workers that leave right after their hello (closing, or dropping the connection),
    then one that stays for its ready frame; returns that frame."""
    url = api.replace("http://", "ws://") + f"/work_pools/{POOL}/workers/connect"
    for i in range(3):
        channel = await _say_hello(url, f"closing-{i}")
        await channel.close()
        channel = await _say_hello(url, f"dropping-{i}")
        channel.transport.abort()
    # The server has set each of them up (it records a worker as it makes its ready frame,
    # then fails to send it): only then does the check of its log cover them.
    leaving = {f"{how}-{i}" for how in ("closing", "dropping") for i in range(3)}
    await asyncio.to_thread(
        wait_until, lambda: leaving <= _workers_of_the_pool(api), 60, "the workers recorded"
    )
    async with await _say_hello(url, "staying") as channel:
        return str(await channel.recv())


def test_workers_that_leave_during_setup_leave_no_error_in_the_servers_log(
    tmp_path: Path,
) -> None:
    with prefect_server(tmp_path) as server:  # fails the test if the server logged an error
        httpx.post(
            f"{server.api}/work_pools/", json={"name": POOL, "type": "process"}, timeout=30
        ).raise_for_status()
        ready = asyncio.run(_workers(server.api))
    assert '"type":"worker.ready.v1"' in ready.replace(" ", "")


def test_the_patch_is_applied_once() -> None:
    from prefect.server.utilities import subscriptions, worker_channel
    from starlette.websockets import WebSocketDisconnected

    from flows.compat.prefect_server import quiet_worker_channel_disconnects

    channel = worker_channel.WorkerChannelConnection
    before = (subscriptions.NORMAL_DISCONNECT_EXCEPTIONS, channel._send_loop)
    try:
        quiet_worker_channel_disconnects()
        quiet_worker_channel_disconnects()
        assert subscriptions.NORMAL_DISCONNECT_EXCEPTIONS.count(WebSocketDisconnected) == 1
        assert channel._send_loop.teamflow_quiet  # type: ignore[attr-defined]
    finally:
        subscriptions.NORMAL_DISCONNECT_EXCEPTIONS = before[0]
        channel._send_loop = before[1]  # type: ignore[method-assign]
