"""What `teamflow up` compares before it runs `prefect deploy --all` again
(`flows.pool_setup.sources_fingerprint`): `prefect.yaml` and the file of each entrypoint it
names, a deployment of the user's own outside `flows/` included. The skip itself, on a
real server, is in tests/test_up.py."""

from __future__ import annotations

from pathlib import Path

from flows import pool_setup


def test_the_fingerprint_follows_prefect_yaml_and_every_entrypoint_file(tmp_path: Path) -> None:
    own = tmp_path / "my_flows.py"
    own.write_text("def report(team: str) -> None: ...\n")
    prefect_file = tmp_path / "prefect.yaml"
    prefect_file.write_text(f"deployments:\n  - name: mine\n    entrypoint: {own}:report\n")
    first = pool_setup.sources_fingerprint(prefect_file)
    assert pool_setup.sources_fingerprint(prefect_file) == first  # nothing changed

    own.write_text("def report(team: str, since: str = '7d') -> None: ...\n")  # a new parameter
    second = pool_setup.sources_fingerprint(prefect_file)
    assert second != first

    prefect_file.write_text(prefect_file.read_text() + "    tags: [reports]\n")
    assert pool_setup.sources_fingerprint(prefect_file) != second
