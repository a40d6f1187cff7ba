"""The tests' fork server (`tests/forkserver.py`): a forked child is what `subprocess.Popen`
with `start_new_session=True` would start, and the `--via` launcher is what the command it
stands for would be, to whoever starts it (exit status, signals, streams)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
from prefect_server import wait_until

# A small preload set of its own, so these tests start (and test) a fork server of their own.
PRELOAD = ("json",)

PROBE = """
import json, os, signal, sys
print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "cwd": os.getcwd(),
                  "seen": os.environ.get("PROBE_VALUE"), "name": __name__,
                  "session": os.getsid(0) == os.getpid(), "stdin": sys.stdin.read()}),
      flush=True)
if "--wait" in sys.argv:
    signal_file = sys.argv[-1]
    open(signal_file, "w").close()
    while True:
        signal.pause()
if "--burn" in sys.argv:
    sum(i * i for i in range(int(os.environ.get("PROBE_BURN", 3_000_000))))
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def probe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(forkserver.VARIABLE, "1")
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PROBE_VALUE": "from the test", **extra}


def test_a_forked_child_runs_the_module_with_its_environment_directory_and_streams(
    probe_dir: Path,
) -> None:
    out = probe_dir / "out"
    with out.open("wb") as stream:
        child = forkserver.popen(
            PRELOAD, "probe", ["3", "x y"], env=_env(), cwd=probe_dir, stdout=stream,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert isinstance(child, forkserver.Forked)
        assert child.wait(timeout=60) == 3
    seen = json.loads(out.read_text())
    assert seen == {
        "pid": child.pid, "argv": ["3", "x y"], "cwd": str(probe_dir), "seen": "from the test",
        "name": "__main__", "session": True, "stdin": "",
    }  # fmt: skip
    # As the same command started anew says.
    plain = subprocess.run(
        [sys.executable, "-m", "probe", "3", "x y"], env=_env(), cwd=probe_dir,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, start_new_session=True,
    )  # fmt: skip
    assert plain.returncode == 3
    assert {**json.loads(plain.stdout), "pid": child.pid} == seen


def test_a_forked_child_runs_code_as_python_dash_c_does(probe_dir: Path) -> None:
    out = probe_dir / "out"
    with out.open("wb") as stream:
        child = forkserver.popen(
            PRELOAD, forkserver.CODE, [PROBE, "4", "a"], env=_env(), cwd=probe_dir,
            stdout=stream, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert isinstance(child, forkserver.Forked)
        assert child.wait(timeout=60) == 4
    seen = json.loads(out.read_text())
    plain = subprocess.run(
        [sys.executable, "-c", PROBE, "4", "a"], env=_env(), cwd=probe_dir,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, start_new_session=True,
    )  # fmt: skip
    assert plain.returncode == 4
    assert {**json.loads(plain.stdout), "pid": child.pid} == seen
    assert seen["argv"] == ["4", "a"] and seen["name"] == "__main__"


def test_a_forked_child_stopped_by_its_group_reports_the_signal_and_its_cpu(
    probe_dir: Path,
) -> None:
    ready = probe_dir / "ready"
    child = forkserver.popen(
        PRELOAD, "probe", ["0", "--wait", str(ready)], env=_env(), cwd=probe_dir,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(ready.exists, 60, "the child to start")
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.1)
    assert child.poll() is None
    os.killpg(child.pid, signal.SIGTERM)  # its own process group, as the tests stop it
    assert child.wait(timeout=60) == -signal.SIGTERM
    before = forkserver.reaped_cpu()
    burner = forkserver.popen(
        PRELOAD, "probe", ["0", "--burn"], env=_env(), cwd=probe_dir, stdout=subprocess.DEVNULL
    )
    assert burner.wait(timeout=60) == 0
    assert forkserver.reaped_cpu() > before


def test_a_child_needing_other_interpreter_settings_is_started_anew(probe_dir: Path) -> None:
    child = forkserver.popen(
        PRELOAD, "probe", ["0"], env=_env(PYTHONHASHSEED="7"), cwd=probe_dir,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert isinstance(child, subprocess.Popen)
    assert child.wait(timeout=60) == 0
    launched = subprocess.run(
        forkserver.command(PRELOAD, "probe", ["4"]), env=_env(PYTHONHASHSEED="7"),
        cwd=probe_dir, capture_output=True, text=True,
    )  # fmt: skip
    assert launched.returncode == 4 and json.loads(launched.stdout)["seen"] == "from the test"


def test_the_launcher_is_the_command_to_its_starter(probe_dir: Path) -> None:
    argv = forkserver.command(PRELOAD, "probe", ["5"])
    assert argv[:3] == [sys.executable, forkserver.__file__, "--via"]
    launched = subprocess.run(
        argv, env=_env(), cwd=probe_dir, input="typed", capture_output=True, text=True
    )
    assert launched.returncode == 5
    seen = json.loads(launched.stdout)
    assert (seen["stdin"], seen["cwd"], seen["seen"]) == ("typed", str(probe_dir), "from the test")
    # A signal to the launcher reaches the child, and the launcher ends as the child did.
    launcher, child = _launch_waiting(probe_dir)
    launcher.terminate()
    assert launcher.wait(timeout=60) == -signal.SIGTERM
    wait_until(lambda: not _alive(child), 60, "the child to end with its launcher")


def test_a_launcher_killed_outright_takes_its_child_along(probe_dir: Path) -> None:
    launcher, child = _launch_waiting(probe_dir)
    launcher.kill()
    assert launcher.wait(timeout=60) == -signal.SIGKILL
    wait_until(lambda: not _alive(child), 60, "the fork server to end the child")


SPAWNER = """
import json, os, subprocess, sys
from flows import up_processes

ready, log_path, *burn = sys.argv[1:]
with open(log_path, "ab") as log:
    child = up_processes.subprocess.Popen(
        up_processes._ours([sys.executable, "-m", "probe", "0", *(burn or ["--wait", ready])], {}),
        env=dict(os.environ, PROBE_BURN="20000000"), cwd=os.getcwd(),
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, umask=0o077,
    )
print(json.dumps({"pid": child.pid, "kind": type(child).__name__}), flush=True)
code = child.wait()
own = os.times()
print(json.dumps({"code": code, "own_cpu": own.user + own.system}), flush=True)
"""


def _spawning(probe_dir: Path, name: str, *burn: str) -> tuple[forkserver.Process, int, Path]:
    """A command whose child, started as `teamflow up` starts its own, waits for a signal
    (or, `--burn`, spends some CPU and ends)."""
    ready, out = probe_dir / f"{name}.ready", probe_dir / f"{name}.out"
    with out.open("wb") as stream:
        spawner = forkserver.popen(
            PRELOAD, forkserver.CODE,
            [SPAWNER, str(ready), str(probe_dir / f"{name}.log"), *burn],
            env=_env(), cwd=probe_dir, stdout=stream, children_forked=True,
        )  # fmt: skip
    wait_until(lambda: ready.exists() or burn, 60, "the spawned child to start")
    wait_until(lambda: out.read_text(), 60, "the spawner to say what it started")
    seen = json.loads(out.read_text().splitlines()[0])
    assert seen["kind"] == "Forked", seen
    return spawner, seen["pid"], out


def test_what_a_command_starts_as_up_does_is_forked_with_its_own_pid_and_tied_to_it(
    probe_dir: Path,
) -> None:
    """`teamflow up`'s server, worker, MCP server and API, forked: the pid `up` prints is the
    process itself (a test kills or freezes it by that pid), with its own session and the
    umask `up` gave it, and `up` sees how it ended; `up` killed outright takes it along, as
    `setpriv --pdeathsig TERM` does when they are started anew."""
    spawner, child, out = _spawning(probe_dir, "first")
    fork_server = forkserver._servers[PRELOAD].process.pid
    status = Path(f"/proc/{child}/status").read_text()
    assert f"PPid:\t{fork_server}\n" in status and "Umask:\t0077\n" in status, status
    assert os.getsid(child) == child
    os.kill(child, signal.SIGKILL)
    assert spawner.wait(timeout=60) == 0
    assert json.loads(out.read_text().splitlines()[-1])["code"] == -signal.SIGKILL

    spawner, child, _ = _spawning(probe_dir, "second")
    spawner.kill()
    assert spawner.wait(timeout=60) == -signal.SIGKILL
    wait_until(lambda: not _alive(child), 60, "the fork server to end the child with `up`")


def test_the_cpu_of_what_a_command_forked_counts_as_its_own(probe_dir: Path) -> None:
    """As a process started anew counts the CPU of the children it reaped, a forked `teamflow
    up` counts that of the children forked for it (`--cpu-report` counts it)."""
    before = forkserver.reaped_cpu()
    spawner, _, out = _spawning(probe_dir, "burner", "--burn")
    assert spawner.wait(timeout=60) == 0
    ended = json.loads(out.read_text().splitlines()[-1])
    assert ended["code"] == 0
    # The burning child's 20 million squares cost a second or more here; the spawner's own
    # end after it printed costs about 0.15 s.
    assert forkserver.reaped_cpu() - before > ended["own_cpu"] + 0.5


def _launch_waiting(probe_dir: Path) -> tuple[subprocess.Popen, int]:
    """The launcher of a child that waits for a signal, once the child runs; its pid."""
    ready = probe_dir / "ready"
    launcher = subprocess.Popen(
        forkserver.command(PRELOAD, "probe", ["0", "--wait", str(ready)]), env=_env(),
        cwd=probe_dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert launcher.stdout is not None
    with launcher.stdout:
        child = json.loads(launcher.stdout.readline())["pid"]
    wait_until(ready.exists, 60, "the child to start")
    return launcher, child


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped by the fork server, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


SCHEDULER_EVERY = """
import inspect
import prefect.server.events.services.triggers  # registers a service too, as a server does
from prefect.server.services.perpetual_services import get_perpetual_services
from prefect.server.services.scheduler import schedule_deployments

perpetual = inspect.signature(schedule_deployments).parameters["perpetual"].default
served = [c.function for c in get_perpetual_services()]
print(perpetual.every.total_seconds(), schedule_deployments in served, len(served))
"""


def test_a_forked_server_takes_its_service_intervals_from_its_own_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefect reads a perpetual service's interval when its module is imported; a child of
    the server fork server (which imported it under its own environment) has the child's,
    and each service registered once, as a server started anew has them."""
    monkeypatch.setenv(forkserver.VARIABLE, "1")
    env = {**os.environ, "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "7"}
    forked, anew = _forked_and_anew(forkserver.SERVER, SCHEDULER_EVERY, env, tmp_path)
    assert forked.split() == anew.split()
    assert forked.split()[:2] == ["7.0", "True"]


def _forked_and_anew(
    preload: tuple[str, ...], source: str, env: dict[str, str], tmp_path: Path
) -> tuple[str, str]:
    """What `python -c SOURCE` printed forked from the fork server of `preload`, and started
    anew, in the same environment and directory."""
    out = tmp_path / "out"
    with out.open("wb") as stream:
        child = forkserver.popen(
            preload, forkserver.CODE, [source], env=env, cwd=tmp_path,
            stdout=stream, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert isinstance(child, forkserver.Forked)
        assert child.wait(timeout=120) == 0, out.read_text()
    plain = subprocess.run(
        [sys.executable, "-c", source], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    return out.read_text(), plain.stdout


LOGGING = """
import json, logging
from prefect.logging.configuration import ensure_logging_setup

ensure_logging_setup()  # as a command's first log line, or Prefect's CLI, has it configured

def handler(h):
    console = getattr(h, "console", None)
    highlighter = type(getattr(console, "highlighter", None)).__name__
    return [type(h).__name__, logging.getLevelName(h.level), getattr(h.formatter, "_fmt", None),
            getattr(console, "color_system", None), highlighter]

def described(name):
    logger = logging.getLogger(name)
    return [logging.getLevelName(logger.getEffectiveLevel()), logger.propagate,
            [handler(h) for h in logger.handlers]]

names = ("", "prefect", "prefect.flow_runs", "prefect.server", "uvicorn", "prefect._internal")
print(json.dumps({name: described(name) for name in names}))
"""


def prefect_logging_file() -> str:
    from prefect.logging.configuration import DEFAULT_LOGGING_SETTINGS_PATH

    return str(DEFAULT_LOGGING_SETTINGS_PATH)


@pytest.mark.parametrize(
    "variables",
    [{}, {"PREFECT_LOGGING_LEVEL": "DEBUG"}, {"PREFECT_LOGGING_COLORS": "false"},
     {"PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "ERROR"}, {"logging.yml": "own"}],
    ids=["as-the-fork-server", "level", "colors", "override", "own-file"],
)  # fmt: skip
def test_a_forked_childs_prefect_logging_is_what_a_process_started_anew_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    """The teamflow fork server's imports configure Prefect's logging. A child whose logging
    settings are the fork server's keeps the configuration it inherited (it is not built
    again); any other builds its own. Either way each logger's level and handlers are those
    of the same code started anew."""
    monkeypatch.setenv(forkserver.VARIABLE, "1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_LOGGING_")}
    env["PREFECT_HOME"] = str(tmp_path / "home")
    if variables.pop("logging.yml", None):
        (tmp_path / "home").mkdir()
        own = Path(prefect_logging_file())
        text = own.read_text().replace("%(levelname)-7s", "[%(levelname)s]")
        (tmp_path / "home" / "logging.yml").write_text(text.replace("WARNING", "CRITICAL"))
    env |= variables
    forked, anew = _forked_and_anew(forkserver.TEAMFLOW, LOGGING, env, tmp_path)
    assert json.loads(forked) == json.loads(anew)
