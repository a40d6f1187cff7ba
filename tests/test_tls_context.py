"""Prefect's API clients in teamflow's processes share one TLS context per setting
(`flows.compat.prefect_client.share_tls_context`): flow runs and commands stop loading the
CA bundle for every client, and the TLS settings still decide what the context verifies.

Flow runs on a real Prefect server; the CA bundle loads are counted as they happen.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import certifi
import pytest

from flows.compat.prefect_client import share_tls_context


def _context(client: Any) -> ssl.SSLContext:
    """The TLS context a Prefect client's connections use."""
    return client._client._transport._pool._ssl_context


def _bundle_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A list that gets an entry each time a CA bundle is loaded into a TLS context."""
    loads: list[Any] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> Any:
        loads.append(args or kwargs)
        return load(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    return loads


def test_flow_runs_and_clients_load_the_ca_bundle_once(
    prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio
    from prefect import flow
    from prefect.client.orchestration import get_client

    @flow(name="tls-shared")
    async def empty() -> int:
        return 1

    share_tls_context()
    anyio.run(empty)  # the context for these settings exists from here on
    loads = _bundle_loads(monkeypatch)
    for _ in range(3):
        assert anyio.run(empty) == 1
    with get_client(sync_client=True) as sync:
        assert _context(sync) is _context(get_client())  # an async one too (not entered)
        assert _context(sync).verify_mode == ssl.CERT_REQUIRED
        assert _context(sync).check_hostname
    assert loads == []


def test_the_tls_settings_still_decide_what_is_verified(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import (
        PREFECT_API_SSL_CERT_FILE,
        PREFECT_API_TLS_INSECURE_SKIP_VERIFY,
        temporary_settings,
    )

    share_tls_context()
    with get_client(sync_client=True) as client:
        default = _context(client)
    bundle = certifi.contents()
    first = bundle[: bundle.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
    one_ca = tmp_path / "ca.pem"
    one_ca.write_text(first[first.index("-----BEGIN CERTIFICATE-----") :] + "\n")

    with (
        temporary_settings({PREFECT_API_SSL_CERT_FILE: str(one_ca)}),
        get_client(sync_client=True) as client,
    ):
        own = _context(client)
    assert own is not default
    assert own.cert_store_stats()["x509_ca"] == 1
    assert default.cert_store_stats()["x509_ca"] > 100  # certifi's bundle

    with (
        temporary_settings({PREFECT_API_TLS_INSECURE_SKIP_VERIFY: True}),
        get_client(sync_client=True) as client,
    ):
        insecure = _context(client)
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname
    assert default.verify_mode == ssl.CERT_REQUIRED  # the shared one is left as it was

    # A client given its own `verify` keeps it.
    mine = ssl.create_default_context()
    with get_client(sync_client=True, httpx_settings={"verify": mine}) as client:
        assert _context(client) is mine
