"""teamflow's command line run inside the test process, for data-only commands (issue 29).

A `teamflow` subprocess costs about 0.7 s of CPU (a new interpreter, SQLAlchemy, pydantic,
typer); the same command in process costs milliseconds. `teamflow(args, env)` runs the
command as `python -m flows.cli` would, and gives what `subprocess.run` gives (a
`CompletedProcess`: return code, stdout, stderr), so a test's assertions stay as they are:

- the environment is exactly `env` for the call (TEAMFLOW_HOME, TEAMFLOW_DATABASE_URL, ...),
  and so are `sys.argv` (`--json` is read from it), the working directory and stdin (empty);
- output goes to strings; the exit code is what `main` exits with;
- afterwards the environment, argv, cwd and streams are the test's again, and the engines
  the command opened are closed, as a process that ends closes them.

The commands that start or resume runs talk to Prefect's REST API with plain httpx
(`flows.runner.PrefectApi`), reading the Prefect settings of the call's environment, so they
run in process too. Commands that run Prefect itself (`up`, `worker`, `demo`) and `db`
(Alembic sets up logging) still run as real subprocesses. So does everything when
`TEAMFLOW_TEST_CLI_SUBPROCESS=1`, to compare. A few tests (`test_cli.py`, `--help`, start-up
time, `sys.modules`) always run the real `teamflow` process.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import traceback
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import forkserver

ROOT = Path(__file__).resolve().parent.parent

# Command lines (their leading words) that run Prefect or set up logging: run as subprocesses.
SUBPROCESS_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("up",), ("worker",), ("demo",), ("db",),
)  # fmt: skip


def needs_subprocess(args: Sequence[str]) -> bool:
    """Whether `args` must run as a real `teamflow` process (see `SUBPROCESS_COMMANDS`)."""
    if os.environ.get("TEAMFLOW_TEST_CLI_SUBPROCESS") == "1":
        return True
    words = [a for a in args if not a.startswith("-")]
    if not words or "--help" in args or "-h" in args:
        return True  # the help and usage: as a user sees them, from a real process
    return any(tuple(words[: len(c)]) == c for c in SUBPROCESS_COMMANDS)


def subprocess_teamflow(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: Path | str | None = None,
    timeout: float = 120,
    stdin_devnull: bool = True,
) -> subprocess.CompletedProcess:
    """The real `python -m flows.cli ...` process (forked from the tests' fork server)."""
    return subprocess.run(
        forkserver.command(forkserver.TEAMFLOW, "flows.cli", args, children_forked=True),
        env=dict(os.environ if env is None else env), cwd=cwd,
        stdin=subprocess.DEVNULL if stdin_devnull else None,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def teamflow(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: Path | str | None = None,
    timeout: float = 120,
    stdin_devnull: bool = True,
) -> subprocess.CompletedProcess:
    """`teamflow *args` with environment `env` (default: this process's), in process for
    data-only commands, as a subprocess for the others; a `CompletedProcess` either way."""
    args = [str(a) for a in args]
    if needs_subprocess(args):
        return subprocess_teamflow(args, env, cwd=cwd, timeout=timeout, stdin_devnull=stdin_devnull)
    return in_process(args, env, cwd=cwd)


def _become(env: Mapping[str, str]) -> None:
    """Makes this process's environment `env`, touching only the variables that differ: a
    run another thread of the test works meanwhile (a team task waiting for the decision
    the command makes) must never see a variable missing, as it would if the environment
    were cleared and filled again (it once opened the default database: "no such table")."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


@contextlib.contextmanager
def _as_a_process(
    args: list[str], env: Mapping[str, str], cwd: Path | str | None
) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    saved_env = dict(os.environ)
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_main = sys.modules["__main__"]
    out, err = io.StringIO(), io.StringIO()
    # What click names the program in usage lines: `python -m flows.cli`, as for the process.
    main = types.ModuleType("__main__")
    main.__package__ = "flows.cli"
    main.__file__ = str(ROOT / "flows" / "cli" / "__main__.py")
    try:
        _become(env)
        sys.argv = [main.__file__, *args]
        sys.modules["__main__"] = main
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), out, err
        # A process with no logging set up prints warnings bare on stderr (`lastResort`).
        last_resort = logging.StreamHandler(err)
        last_resort.setLevel(logging.WARNING)
        logging.getLogger().addHandler(last_resort)
        try:
            yield out, err
        finally:
            logging.getLogger().removeHandler(last_resort)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.modules["__main__"] = saved_main
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        _become(saved_env)
        if "models.db" in sys.modules:
            sys.modules["models.db"].dispose_engines()  # as the process closes them at exit


def in_process(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, cwd: Path | str | None = None
) -> subprocess.CompletedProcess:
    """`teamflow *args` run by `flows.cli.app.main` in this process (see the module's doc)."""
    from flows.cli.app import main

    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    code: object = 0
    with _as_a_process(args, env, cwd) as (out, err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        except Exception:  # what Python does with an uncaught exception: traceback, exit 1
            traceback.print_exc(file=err)
            code = 1
    if code is None:
        code = 0
    if not isinstance(code, int):  # sys.exit("message"): Python prints it and exits 1
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "flows.cli", *args], code, out.getvalue(), err.getvalue()
    )
