"""`benchmarks/idle.py`, as docs/performance.md shows it (shortened): it measures Prefect's
floor and `teamflow up` side by side, each process by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


def test_the_idle_benchmark_prints_both_setups_by_process() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/idle.py", "--seconds", "3", "--settle", "0", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert set(figures["prefect_floor"]) == {"prefect server", "prefect worker"}
    assert {"prefect server", "teamflow worker", "teamflow mcp", "teamflow api"} <= set(
        figures["teamflow_up"]
    )
    assert figures["prefect_floor"]["prefect server"] > 0
    assert figures["teamflow_up"]["prefect server"] > 0
