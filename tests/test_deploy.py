"""`deploy/compose.yaml` says what `docs/beyond-one-machine.md` says (no Docker here): it
parses, has the services the doc names, gives every Prefect server process the environment
of the doc's first block, and every setting it names is one Prefect 3.8.8, `prefect-redis`
0.3.0 or teamflow really reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "beyond-one-machine.md"
SERVER = ("prefect-migrate", "prefect-api-1", "prefect-api-2", "prefect-services")
TEAMFLOW = ("teamflow-db-upgrade", "teamflow-up", "teamflow-worker")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())


def doc_exports(block: int) -> dict[str, str]:
    """`NAME=value` of the `export` lines of the doc's `block`-th bash block."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    found: dict[str, str] = {}
    for line in blocks[block].splitlines():
        if line.startswith("export "):
            found |= dict(pair.split("=", 1) for pair in line.split("#")[0].split()[1:])
    return found


def test_the_compose_file_has_the_services_the_doc_names(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "haproxy", *SERVER, *TEAMFLOW}
    doc = DOC.read_text()
    for name in (*services, "deploy/compose.yaml", "deploy/haproxy.cfg", "deploy/Dockerfile",
                 "deploy/postgres-init.sh"):  # fmt: skip
        assert f"`{name}`" in doc, name
    for path in ("Dockerfile", "haproxy.cfg", "postgres-init.sh", "example.env"):
        assert (ROOT / "deploy" / path).is_file(), path
    haproxy = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert "option httpchk GET /api/health" in haproxy
    assert all(f" {name}:4200 check" in haproxy for name in ("prefect-api-1", "prefect-api-2"))


def test_migrations_run_once_then_the_replicas_start_one_at_a_time(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert services["prefect-migrate"]["command"][-4:] == ["server", "database", "upgrade", "-y"]
    first, second = services["prefect-api-1"], services["prefect-api-2"]
    assert first["depends_on"]["prefect-migrate"] == {"condition": "service_completed_successfully"}
    assert second["depends_on"] == {"prefect-api-1": {"condition": "service_healthy"}}
    for name in ("prefect-api-1", "prefect-api-2"):
        assert "--no-services" in services[name]["command"]
        assert "/api/health" in " ".join(services[name]["healthcheck"]["test"])
    assert services["prefect-services"]["command"][-3:] == ["server", "services", "start"]
    assert services["teamflow-up"]["command"] == ["teamflow", "up"]
    assert services["teamflow-worker"]["command"] == ["teamflow", "worker"]


def test_every_server_process_has_the_environment_of_the_doc(compose: dict[str, Any]) -> None:
    documented = doc_exports(0)
    for name in SERVER:
        env = compose["services"][name]["environment"]
        assert set(documented) <= set(env), (name, set(documented) - set(env))
        for key, value in documented.items():
            if value.startswith("prefect_redis.") or value in ("true", "false"):
                assert env[key] == value, (name, key)
        assert env["PREFECT_API_DATABASE_MIGRATE_ON_START"] == "false"


def test_one_mirror_host_and_workers_that_write_no_files(compose: dict[str, Any]) -> None:
    services = compose["services"]
    documented = doc_exports(1)
    for name in TEAMFLOW:
        assert set(documented) <= set(services[name]["environment"]), name
    assert services["teamflow-up"]["environment"]["TEAMFLOW_MIRROR"] == "on"
    assert services["teamflow-worker"]["environment"]["TEAMFLOW_MIRROR"] == "off"
    assert any(v.startswith("team-files:") for v in services["teamflow-up"]["volumes"])


def test_every_setting_named_is_one_that_is_read(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set as the compose file sets them, Prefect's and prefect-redis's settings classes
    (and teamflow's) read each one: a misspelt name would be ignored silently."""
    from prefect.settings import Settings
    from prefect_redis.client import RedisMessagingSettings

    from models.settings import Settings as TeamflowSettings

    env = compose["services"]["prefect-api-1"]["environment"]
    for name in list(__import__("os").environ):
        if name.startswith(("PREFECT_", "TEAMFLOW_")):
            monkeypatch.delenv(name)
    for key, value in env.items():
        monkeypatch.setenv(key, value.replace("${PREFECT_UI_ORIGIN}", "https://x.example"))
    server = Settings().server
    assert server.database.connection_url is not None
    assert server.database.migrate_on_start is False
    assert (
        server.events.messaging_broker
        == server.events.messaging_cache
        == env["PREFECT_MESSAGING_BROKER"]
    )
    assert server.events.causal_ordering == "prefect_redis.ordering"
    assert server.concurrency.lease_storage == "prefect_redis.lease_storage"
    assert server.docket.url == env["PREFECT_SERVER_DOCKET_URL"]
    assert server.api.csrf_protection_enabled is True
    assert RedisMessagingSettings().url == env["PREFECT_REDIS_MESSAGING_URL"]
    fields = {f"TEAMFLOW_{name.upper()}" for name in TeamflowSettings.model_fields}
    for name in TEAMFLOW:
        teamflow_names = {k for k in compose["services"][name]["environment"] if "TEAMFLOW_" in k}
        assert teamflow_names <= fields, teamflow_names - fields
