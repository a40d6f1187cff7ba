"""Where teamflow talks to Prefect's API (3.8.8) past what its Python client offers.

Each function is a patch (`flows.compat.PATCHES` lists it with the fingerprint of what it
leans on; `tests/test_compat.py` fails when that changes): re-check it when Prefect moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefect.input.run_input import Keyset


async def propose_state(client: Any, state: Any, run_id: Any) -> Any:
    """Proposes `state` for the run, as the engine does; returns the state the server set.

    Written against Prefect 3.8.8: `prefect.utilities.engine.propose_state` is the engine's
    internal helper (not in Prefect's documented API); it waits out `Wait` answers and
    raises `Pause`/`Abort` for refusals. teamflow's own waits (`wait_for_input`,
    `suspend_for_input`) need it to pause and suspend a run with keys of their own, which
    `pause_flow_run`/`suspend_flow_run` do not offer. Without it, those waits cannot set
    their states. Upstream: not reported (a public `propose_state` would do).
    """
    from prefect.utilities.engine import propose_state as propose

    return await propose(client, state, flow_run_id=run_id)


def keyed_for_input(state: Any) -> Keyset:
    """Gives a Paused/Suspended `state` the keys of the run input it waits for; returns them.

    Written against Prefect 3.8.8: `pause_flow_run` and `suspend_flow_run` do exactly this
    inside (`flow_runs.apause_flow_run`, `flow_runs.suspend_flow_run`) and the UI's form
    and `resume_flow_run` find the input under these keys. Without it, a resume from the
    form finds no schema and the run never sees its input. Upstream: not reported.
    """
    from prefect.input import keyset_from_paused_state

    keyset = keyset_from_paused_state(state)
    state.state_details.run_input_keyset = keyset
    return keyset


async def bulk_reschedule_suspended(client: Any, run_ids: list[Any], limit: int) -> int:
    """Reschedules (`Scheduled`, named `Resuming`) those of `run_ids` that are Suspended, in
    one `POST /flow_runs/bulk_set_state`; returns how many the server accepted.

    Written against Prefect 3.8.8: the server has the bulk route, the Python client has no
    method for it, so this goes through `client.request`; the state is what Prefect's
    `resume_flow_run` proposes (a Scheduled state named "Resuming", which workers and
    `flows.worker` listen for). Without it, resuming 250 suspended runs costs 250 resumes
    plus their reads. Upstream: not reported (a `bulk_set_flow_run_state` client method).
    """
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateName,
    )
    from prefect.states import Scheduled, to_state_create

    runs = FlowRunFilter(
        id=FlowRunFilterId(any_=run_ids),
        state=FlowRunFilterState(name=FlowRunFilterStateName(any_=["Suspended"])),
    )
    state = to_state_create(Scheduled(name="Resuming")).model_dump(mode="json")
    body = {"flow_runs": runs.model_dump(mode="json"), "state": state, "limit": limit}
    response = await client.request("POST", "/flow_runs/bulk_set_state", json=body)
    response.raise_for_status()
    return sum(
        result["status"] == "ACCEPT" and (result["state"] or {}).get("type") == "SCHEDULED"
        for result in response.json()["results"]
    )


def share_tls_context() -> None:
    """Gives every Prefect API client this process makes one TLS context for its settings,
    made once, instead of one of its own.

    Written against Prefect 3.8.8: `PrefectClient.__init__` and `SyncPrefectClient.__init__`
    make a new `ssl.SSLContext` for every client unless `httpx_settings["verify"]` holds
    one, loading the CA bundle each time: about 25 ms of CPU a client here. The engine makes
    two for every flow run that is not inside `flows.flow_threads`' clients (an empty run
    in a test or a notebook: 82 ms of CPU with them, 35 ms without), and every `get_client()`
    of a command, a wait or a poll makes one. The context made here is the one Prefect would
    make (`PREFECT_API_TLS_INSECURE_SKIP_VERIFY`, `PREFECT_API_SSL_CERT_FILE` or certifi's
    bundle, read at each client), one per distinct setting. Without it, nothing breaks; each
    client costs a CA bundle load. Upstream: not reported (cache the context per setting).
    """
    import functools
    import ssl

    from prefect.client.orchestration import PrefectClient, SyncPrefectClient

    contexts: dict[tuple[bool, str], ssl.SSLContext] = {}

    def context() -> ssl.SSLContext:
        import certifi
        from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_TLS_INSECURE_SKIP_VERIFY

        key = (bool(PREFECT_API_TLS_INSECURE_SKIP_VERIFY.value()),
               PREFECT_API_SSL_CERT_FILE.value() or certifi.where())  # fmt: skip
        made = contexts.get(key)
        if made is None:
            if key[0]:  # as Prefect makes it: the default context, verifying nothing
                made = ssl.create_default_context()
                made.check_hostname = False
                made.verify_mode = ssl.CERT_NONE
            else:
                made = ssl.create_default_context(cafile=key[1])
            made = contexts.setdefault(key, made)
        return made

    for cls in (PrefectClient, SyncPrefectClient):
        init = cls.__init__
        if getattr(init, "teamflow_shared_tls", False):
            continue

        @functools.wraps(init)
        def shared(self: Any, *args: Any, _init: Any = init, **kwargs: Any) -> None:
            settings = kwargs.get("httpx_settings")
            if settings is None or "verify" not in settings:
                kwargs["httpx_settings"] = {**(settings or {}), "verify": context()}
            _init(self, *args, **kwargs)

        shared.teamflow_shared_tls = True  # type: ignore[attr-defined]  # a marker on the function
        cls.__init__ = shared  # type: ignore[method-assign]  # the patch
