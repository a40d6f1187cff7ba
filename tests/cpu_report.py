"""`--cpu-report=N`: the N test modules that cost the most CPU, at the end of the run.

The suite is CPU-bound on a 2-core machine: its wall time is about its CPU seconds over
the cores, and a test's wall time (`--durations`) says more about what ran beside it than
about what it costs. This counts, per module, the CPU of the test process while its tests
ran (setup and teardown included) and of the child processes it started and reaped in that
time (servers, workers, CLI commands), those its fork server reaped for it included
(`forkserver`), with what a forked `teamflow up` had forked for it. A process reaped later
(the test process's shared Prefect server, at the end) counts where it is reaped; one left
to init (a killed process group's grandchildren) is not counted, nor are the fork servers'
own imports. With xdist each worker counts its
own modules and the controller prints them together.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

_KEY = "cpu_report_counter"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        type=int,
        default=0,
        metavar="N",
        help="print the N test modules that cost the most CPU (their process and children)",
    )


def _forked_cpu() -> float:
    """The CPU of the children the fork server (`forkserver`) reaped for this process."""
    forkserver = sys.modules.get("forkserver")
    return forkserver.reaped_cpu() if forkserver is not None else 0.0


class _Counter:
    def __init__(self) -> None:
        self.modules: dict[str, list[float]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Any:
        before, forked_before = os.times(), _forked_cpu()
        yield
        after = os.times()
        own = (after.user - before.user) + (after.system - before.system)
        children = (after.children_user - before.children_user) + (
            after.children_system - before.children_system
        )
        children += _forked_cpu() - forked_before
        totals = self.modules.setdefault(item.nodeid.split("::")[0], [0.0, 0.0])
        totals[0] += own
        totals[1] += children


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--cpu-report") > 0:
        config.pluginmanager.register(_Counter(), _KEY)


def pytest_sessionfinish(session: pytest.Session) -> None:
    counter = session.config.pluginmanager.get_plugin(_KEY)
    workeroutput = getattr(session.config, "workeroutput", None)
    if counter is not None and workeroutput is not None:  # an xdist worker: to the controller
        workeroutput[_KEY] = json.dumps(counter.modules)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    counter = node.config.pluginmanager.get_plugin(_KEY)
    sent = getattr(node, "workeroutput", {}).get(_KEY)
    if counter is not None and sent:
        for module, (own, children) in json.loads(sent).items():
            totals = counter.modules.setdefault(module, [0.0, 0.0])
            totals[0] += own
            totals[1] += children


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    counter = config.pluginmanager.get_plugin(_KEY)
    if counter is None or hasattr(config, "workeroutput"):
        return
    rows = sorted(counter.modules.items(), key=lambda row: -sum(row[1]))
    total = sum(sum(cpu) for _, cpu in rows)
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU of the {config.getoption('--cpu-report')} costliest modules")
    write(f"{'cpu s':>8} {'pytest':>8} {'children':>9}  (of {total:.0f} s counted in all modules)")
    for module, (own, children) in rows[: config.getoption("--cpu-report")]:
        write(f"{own + children:8.1f} {own:8.1f} {children:9.1f}  {module}")
