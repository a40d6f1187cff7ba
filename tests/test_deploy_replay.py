"""`teamflow_workers.register_deployments` deploys a test process's first server with the
README's commands and later servers through the API: both must hold the same pool and
deployments, or the tests on later servers would test something else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import teamflow_workers
import yaml
from prefect_server import ROOT, prefect_server
from teamflow_workers import POOL, register_deployments

pytestmark = pytest.mark.system  # two Prefect servers


def _what_is_deployed(api: str) -> dict[str, Any]:
    """The pool and each deployment by name, without what differs per server (ids, times)."""
    varying = {"id", "created", "updated", "flow_id", "work_queue_id", "last_polled",
               "status", "deployment_id", "default_queue_id"}  # fmt: skip

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if k not in varying}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    with httpx.Client(base_url=api, timeout=30) as http:
        pool = http.get(f"/work_pools/{POOL}").raise_for_status().json()
        rows = http.post("/deployments/filter", json={}).raise_for_status().json()
        flows = {f["id"]: f["name"] for f in http.post("/flows/filter", json={}).json()}
    return {
        "pool": plain(pool),
        "deployments": {f"{flows[r['flow_id']]}/{r['name']}": plain(r) for r in rows},
    }


def test_a_later_server_gets_what_prefect_deploy_made_on_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teamflow_workers, "_DEPLOYED", None)  # this test's first server
    with prefect_server(tmp_path / "first") as first:
        register_deployments(first, tmp_path / "first.log")
        deployed = _what_is_deployed(first.api)
    with prefect_server(tmp_path / "later") as later:
        register_deployments(later, tmp_path / "later.log")
        replayed = _what_is_deployed(later.api)
    assert "replayed" in (tmp_path / "later.log").read_text()
    differ = {k for k in deployed["pool"] if replayed["pool"].get(k) != deployed["pool"][k]}
    assert not differ, {k: (deployed["pool"][k], replayed["pool"].get(k)) for k in differ}
    assert replayed == deployed
    in_yaml = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert len(deployed["deployments"]) == len(in_yaml)
