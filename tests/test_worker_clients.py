"""Runs inside a worker share Prefect's clients and ask for the server's result storage
once in a while, not once per flow run and task run (`flows.flow_threads.api_clients`).

Flow runs with a persisted task, on a real Prefect server, the requests counted as they
leave the process.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import httpx
import pytest

from flows import flow_threads, worker
from flows.compat import prefect_worker
from flows.compat.prefect_worker import keep_definition_reads

pytestmark = pytest.mark.usefixtures("home")


def storage_lookups(runs: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """`GET /admin/storage` requests made by `runs` flow runs inside `api_clients()`."""
    from prefect import flow, task

    @task(persist_result=True)
    def double(x: int) -> int:
        return 2 * x

    @flow(name="storage-lookups", persist_result=True)
    async def doubled(x: int) -> int:
        return double(x)

    requests: collections.Counter[str] = collections.Counter()
    sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send

    def counted(self: Any, request: httpx.Request, *args: Any, **kwargs: Any) -> Any:
        requests[request.url.path] += 1
        return sync_send(self, request, *args, **kwargs)

    async def acounted(self: Any, request: httpx.Request, *args: Any, **kwargs: Any) -> Any:
        requests[request.url.path] += 1
        return await async_send(self, request, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "send", counted)
    monkeypatch.setattr(httpx.AsyncClient, "send", acounted)

    async def main() -> list[int]:
        async with flow_threads.api_clients():
            return [await doubled(i) for i in range(runs)]

    assert asyncio.run(main()) == [2 * i for i in range(runs)]
    return requests["/api/admin/storage"]


def test_runs_in_a_worker_ask_for_the_result_storage_once(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prefect alone asks once a run (see below).
    assert storage_lookups(3, monkeypatch) <= 1


def test_the_answer_is_asked_again_once_it_is_old(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prefect_worker, "STORAGE_LOOKUP_S", 0.0)
    assert storage_lookups(3, monkeypatch) == 3


def test_the_job_environment_is_made_once_per_settings_and_follows_them() -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessJobConfiguration

    made = worker.TeamflowJobConfiguration._base_environment()
    assert made == ProcessJobConfiguration._base_environment()
    made["EXTRA"] = "changed by a caller"
    assert "EXTRA" not in worker.TeamflowJobConfiguration._base_environment()
    with temporary_settings(updates={PREFECT_API_URL: "http://elsewhere:4200/api"}):
        moved = worker.TeamflowJobConfiguration._base_environment()
    assert moved["PREFECT_API_URL"] == "http://elsewhere:4200/api"
    back = worker.TeamflowJobConfiguration._base_environment()
    assert back == ProcessJobConfiguration._base_environment()
    assert back.get("PREFECT_API_URL") != "http://elsewhere:4200/api"


def test_a_worker_reads_a_deployment_and_its_flow_once_in_a_while(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import get_client

    requests: collections.Counter[str] = collections.Counter()
    async_send = httpx.AsyncClient.send

    async def acounted(self: Any, request: httpx.Request, *args: Any, **kwargs: Any) -> Any:
        requests[f"{request.method} {request.url.path.split('/')[2]}"] += 1
        return await async_send(self, request, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "send", acounted)

    async def main() -> None:
        async with get_client() as client:
            flow_id = await client.create_flow_from_name("kept-reads")
            deployment_id = await client.create_deployment(
                flow_id=flow_id, name="kept", job_variables={"env": {"A": "1"}}
            )
            keep_definition_reads(client, seconds=60)
            requests.clear()
            first = await client.read_deployment(deployment_id)
            first.job_variables["env"]["B"] = "2"  # as Prefect merges a run's variables
            again = await client.read_deployment(deployment_id)
            assert again.job_variables == {"env": {"A": "1"}}
            assert (await client.read_flow(flow_id)).name == "kept-reads"
            await client.read_flow(flow_id)
            assert (requests["GET deployments"], requests["GET flows"]) == (1, 1)

            await client.update_deployment(deployment_id, DeploymentUpdate(paused=True))
            assert (await client.read_deployment(deployment_id)).paused is False  # kept
        async with get_client() as client:
            keep_definition_reads(client, seconds=0)  # nothing kept: read each time
            assert (await client.read_deployment(deployment_id)).paused is True

    from prefect.client.schemas.actions import DeploymentUpdate

    asyncio.run(main())
