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


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key, and the key (PEM files)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "server.pem", tmp_path / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_over_a_real_tls_socket_each_setting_gets_its_own_verification(tmp_path: Path) -> None:
    """An HTTPS server with a self-signed certificate: Prefect's client refuses it by
    default (certifi's bundle), reaches it with the certificate as `PREFECT_API_SSL_CERT_FILE`
    or with `PREFECT_API_TLS_INSECURE_SKIP_VERIFY`, and refuses it again by default after."""
    import http.server
    import threading

    from prefect.client.orchestration import get_client
    from prefect.settings import (
        PREFECT_API_SSL_CERT_FILE,
        PREFECT_API_TLS_INSECURE_SKIP_VERIFY,
        PREFECT_API_URL,
        temporary_settings,
    )

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name for it
            body = b"true"
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    cert_file, key_file = _self_signed(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert_file, key_file)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    server.socket = served.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"https://127.0.0.1:{server.server_address[1]}/api"

    def health(settings: dict[Any, Any] | None = None) -> Exception | None:
        with (
            temporary_settings({PREFECT_API_URL: api, **(settings or {})}),
            get_client(sync_client=True) as client,
        ):
            return client.api_healthcheck()

    share_tls_context()
    try:
        refused = health()
        assert refused is not None and "CERTIFICATE_VERIFY_FAILED" in str(refused)
        assert health({PREFECT_API_SSL_CERT_FILE: str(cert_file)}) is None
        assert health({PREFECT_API_TLS_INSECURE_SKIP_VERIFY: True}) is None
        again = health()
        assert again is not None and "CERTIFICATE_VERIFY_FAILED" in str(again)
    finally:
        server.shutdown()
        server.server_close()
