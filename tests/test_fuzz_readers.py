"""Fuzzing every reader of outside data: only clean refusals, never a traceback.

Random bytes, random JSON and deeply nested JSON go to `teamflow validate`, `team import`,
`team restore` and inbox `sync`. A reader may accept the input or refuse it with one of
teamflow's own errors (a `models.*` exception, one line) or a clean CLI exit; any other
exception type is a bug. A few runs go through the real command line as well.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from cli_runner import teamflow as run_teamflow
from factories import TEAM, research_team
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import backup, inbox_files, membership, mirror
from models import team as teams

pytestmark = pytest.mark.usefixtures("db_url")

FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _nested(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"a": ' * depth + b"1" + b"}" * depth


deeply_nested = st.builds(_nested, st.integers(50, 200_000), st.sampled_from(["list", "dict"]))
documents = (
    st.binary(max_size=400) | json_values.map(lambda v: json.dumps(v).encode()) | deeply_nested
)


def clean_refusal(exc: BaseException) -> bool:
    """One of teamflow's own refusals: a `models.*` exception, its message one line."""
    return type(exc).__module__.startswith("models.") and len(str(exc).splitlines()) <= 1


def read_with(reader, *args: Any) -> Any:
    try:
        return reader(*args)
    except Exception as exc:
        assert clean_refusal(exc), f"{type(exc).__module__}.{type(exc).__name__}: {exc!r}"[:600]
        return None


# --- validate ------------------------------------------------------------------------------


@FUZZ
@given(document=documents)
def test_validate_refuses_cleanly(tmp_path: Path, document: bytes) -> None:
    import typer

    from flows.cli.validate import validate

    file = tmp_path / "doc.json"
    file.write_bytes(document)
    try:
        validate(file, None, True)
    except typer.Exit as exit_:
        assert exit_.exit_code in (1, 2)


# --- team import ---------------------------------------------------------------------------


def _config(members: Any) -> bytes:
    return json.dumps(
        {
            "name": "fuzz-team",
            "description": "fuzzed",
            "createdAt": 1771237800000,
            "members": members,
        }
    ).encode()


configs = documents | st.lists(json_values, max_size=3).map(_config)


@FUZZ
@given(config=configs, inbox_file=documents)
def test_import_refuses_cleanly(
    tmp_path: Path, home: Path, config: bytes, inbox_file: bytes
) -> None:
    folder = tmp_path / "in"
    (folder / "inboxes").mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(config)
    (folder / "inboxes" / "team-lead.json").write_bytes(inbox_file)
    row = read_with(backup.import_team, folder)
    if row is not None:
        membership.delete_team(row.name)


# --- team restore --------------------------------------------------------------------------


def _dump(rows: Any) -> bytes:
    return json.dumps({"format": backup.BACKUP_FORMAT, "team": TEAM, "rows": rows}).encode()


dumps = (
    documents
    | json_values.map(_dump)
    | st.dictionaries(
        st.sampled_from(["teams", "members", "inbox_counters", "alerts"]),
        st.lists(st.dictionaries(st.sampled_from(["name", "team", "id", "position"]), json_values)),
        max_size=3,
    ).map(_dump)
)


@FUZZ
@given(dump=dumps, extra=st.binary(max_size=200))
def test_restore_refuses_cleanly(tmp_path: Path, home: Path, dump: bytes, extra: bytes) -> None:
    archive = tmp_path / "fuzz.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in ((backup.DUMP, dump), (f"teams/{TEAM}/config.json", extra)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    if read_with(backup.restore, archive) is not None:
        membership.delete_team(TEAM)


@FUZZ
@given(data=st.binary(max_size=400))
def test_restore_of_random_bytes_refuses_cleanly(tmp_path: Path, home: Path, data: bytes) -> None:
    archive = tmp_path / "fuzz.tar.gz"
    archive.write_bytes(data)
    read_with(backup.restore, archive)


# --- sync of inbox files -------------------------------------------------------------------


@FUZZ
@given(document=documents)
def test_sync_refuses_cleanly(home: Path, document: bytes) -> None:
    if not teams.list_teams():
        research_team()
    mirror.inbox_path(TEAM, "analyst-1").write_bytes(document)
    read_with(inbox_files.sync, TEAM)


# --- a few runs through the command line ---------------------------------------------------


def teamflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_teamflow(args, env)


def test_the_command_line_refuses_hostile_files_in_one_line(
    tmp_path: Path, home: Path, db_url: str
) -> None:
    import os

    env = {**os.environ, "TEAMFLOW_HOME": str(home), "TEAMFLOW_DATABASE_URL": db_url}
    deep = tmp_path / "deep.json"
    deep.write_bytes(_nested(100_000, "dict"))
    noise = tmp_path / "noise.tar.gz"
    noise.write_bytes(bytes(range(256)) * 4)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "config.json").write_bytes(_nested(100_000, "list"))
    for args in (
        ("validate", str(deep)),
        ("validate", str(noise)),
        ("team", "restore", str(noise)),
        ("team", "import", str(folder)),
    ):
        result = teamflow(env, *args)
        assert result.returncode in (1, 2), (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith("teamflow: error: "), (args, line)
