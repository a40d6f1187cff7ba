"""A fork server for the processes the tests start most: Prefect servers and teamflow workers.

A Prefect server's start spends about 4 s of CPU importing, a `teamflow worker`'s about
2.5 s, and a run of the suite starts some 55 servers and 70 workers on a 2-core machine.
Here a test process keeps one long-lived process per set of modules (`SERVER`, `TEAMFLOW`)
that imports them once and forks a child per command:

    process = forkserver.popen(SERVER, "flows.server", ["start", ...], env=env, cwd=ROOT,
                               stdout=log_file, stderr=subprocess.STDOUT)

The child is a real process of its own, as `subprocess.Popen` would start it with
`start_new_session=True`: its own session (the test kills its group), the environment and
working directory it was given, the test's files as its standard streams (passed over a
Unix socket), SIGTERM when its fork server ends (which ends with the test process), and
`python -m MODULE ARGS` run as `__main__`. What differs from a process started anew is only
that the modules of its set were imported before its environment was set: Prefect's settings
and logging, which Prefect builds at import, are built again from the child's environment,
and so are its perpetual services, whose intervals Prefect reads at import (`_become`); a
variable that only the interpreter reads at start (`PYTHON*`) makes `popen` start a plain
process instead. `Forked` stands in for the child's `Popen` (pid,
poll, wait, returncode, send_signal, terminate, kill); the fork server reaps the child and
reports its exit status and CPU time (`reaped_cpu`, which `--cpu-report` counts).

With `children_forked`, a forked `teamflow up` (or demo) forks the server, worker, MCP
server and REST API it starts from the same fork servers (`_children_forked`), each tied to
it as `setpriv --pdeathsig TERM` would tie it.

A command line that a test hands to another program (an MCP client that starts
`teamflow mcp` itself, an example agent) goes through the same fork server:

    argv = forkserver.command(TEAMFLOW, "flows.cli", ["mcp"])

is `python tests/forkserver.py --via SOCKET - flows.cli mcp`, a launcher of a few
milliseconds that hands its own standard streams, environment and directory to a child
forked for it, passes on the signals it gets (TERM, INT, HUP, QUIT), and ends as the child
ends, with its exit status; if the launcher is killed outright, the fork server ends the
child.

The tests turn it on (`TEAMFLOW_TEST_FORKSERVER=1`, set by `conftest.py` unless set); a
benchmark run by hand starts its processes anew, and `TEAMFLOW_TEST_FORKSERVER=0 make test`
does too, to compare.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent

# What a fork server imports before it forks: the costly imports of the commands it serves,
# never the `__main__` module itself (run again as `__main__`, it would be a second copy).
SERVER = (
    "prefect.cli",
    "prefect.server.api.server",
    "uvicorn",
    "flows.compat.prefect_server",
    "flows.compat.sqlalchemy_sqlite",
    "flows.compat.uvicorn_server",
    "flows.compat.burner_redis_pubsub",
)
TEAMFLOW = ("flows.cli.app", "flows.worker", "flows.mcp.server", "flows.up")
# Jupyter kernels for the metrics notebooks (`tests/test_notebooks.py`), with what the
# notebooks import. matplotlib takes its backend from the environment when it is imported:
# the fork server's is the inline backend a kernel sets (`_PRELOAD_ENV`).
NOTEBOOK = (
    "ipykernel.kernelapp",
    "matplotlib.pyplot",
    "pandas",
    "models.metric_plots",
    "models.metric_frames",
    "models.approval_metrics",
)
_PRELOAD_ENV = {NOTEBOOK: {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}}

VARIABLE = "TEAMFLOW_TEST_FORKSERVER"
CODE = "-c"
"""In place of a module: `popen(preload, CODE, [source, *args])` is `python -c SOURCE ARGS`."""

_servers: dict[tuple[str, ...], _ForkServer] = {}
_lock = threading.Lock()
_reaped_cpu = 0.0


def enabled() -> bool:
    """Whether processes are forked (`TEAMFLOW_TEST_FORKSERVER=1`) or started anew."""
    return os.environ.get(VARIABLE) == "1"


def reaped_cpu() -> float:
    """CPU seconds of the forked children reaped so far in this process (user + system)."""
    return _reaped_cpu


def popen(
    preload: tuple[str, ...],
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str | None = None,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
    sigint_ignored: bool = False,
    children_forked: bool = False,
) -> Process:
    """`python -m MODULE *args` in a new session, forked from the fork server of `preload`
    (or started anew where it cannot be: see the module's doc). stdin is /dev/null; stdout
    and stderr are open files, DEVNULL or None (this process's); stderr may be STDOUT.
    `children_forked`: the processes it starts through `flows.up_processes` (`teamflow up`'s
    and the demo's) are forked too (`_children_forked`)."""
    command = _plain(module, args)
    if enabled():
        request = {
            "module": module, "argv": list(args), "env": dict(env),
            "cwd": str(cwd or os.getcwd()), "sigint_ignored": sigint_ignored, "tied": False,
        }  # fmt: skip
        if children_forked:
            request["children"] = _children_via(preload)
        with open(os.devnull, "r+b") as devnull:
            out = _fileno(stdout, sys.stdout, devnull)
            err = out if stderr == subprocess.STDOUT else _fileno(stderr, sys.stderr, devnull)
            forked = _request(_server(preload), request, [devnull.fileno(), out, err])
        if forked is not None:
            pid, channel = forked
            return Forked(command, pid, channel)
    from prefect_server import with_the_tests

    return subprocess.Popen(
        command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
        start_new_session=True, preexec_fn=with_the_tests(sigint_ignored=sigint_ignored),
    )  # fmt: skip


def command(
    preload: tuple[str, ...], module: str, args: Sequence[str], *, children_forked: bool = False
) -> list[str]:
    """The command line of `python -m MODULE *args` for another program to start: through
    the fork server of `preload` (the launcher the module's doc describes), or plain.
    `children_forked` as `popen` has it."""
    if not enabled():
        return _plain(module, args)
    # `MODULE=ADDRESS,...` or `-`: words a shell need not quote (`mcp_agent.py` splits them)
    via = _children_via(preload) if children_forked else {}
    children = ",".join(f"{name}={address}" for name, address in via.items()) or "-"
    return [sys.executable, __file__, "--via", _server(preload), children, module, *args]


def _children_via(preload: tuple[str, ...]) -> dict[str, str]:
    """Where a command's own children are forked: a Prefect server from the fork server of
    `SERVER`, anything else from the command's own (`preload`)."""
    return {"flows.server": _server(SERVER), "": _server(preload)}


def _plain(module: str, args: Sequence[str]) -> list[str]:
    """The command line that starts `module` (or `CODE`) with `args` anew."""
    return [sys.executable, *([CODE] if module == CODE else ["-m", module]), *args]


def _server(preload: tuple[str, ...]) -> str:
    """The address of this process's fork server for `preload`, started on first use."""
    with _lock:
        server = _servers.get(preload)
        if server is None or not server.alive():
            server = _servers[preload] = _ForkServer(preload)
        return server.address


def _request(
    address: str, request: dict[str, Any], fds: list[int]
) -> tuple[int, socket.socket] | None:
    """Asks the fork server at `address` for a child: its pid and the channel its exit status
    comes on, or None where it must be started anew (its interpreter settings differ)."""
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel.connect(address)
    socket.send_fds(channel, [json.dumps(request).encode()], fds)
    answer = channel.recv(64)
    assert answer, "the fork server ended"
    if int(answer) == 0:
        channel.close()
        return None
    return int(answer), channel


def _fileno(stream: IO[Any] | int | None, default: IO[Any], devnull: IO[bytes]) -> int:
    if stream is None:
        return default.fileno()
    if stream == subprocess.DEVNULL:
        return devnull.fileno()
    return stream if isinstance(stream, int) else stream.fileno()


def _interpreter_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a Python interpreter reads only when it starts (a fork cannot take them)."""
    return {
        k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONDONTWRITEBYTECODE"
    }


class Forked:
    """A forked child, as its `subprocess.Popen` would show it."""

    def __init__(self, args: list[str], pid: int, channel: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._channel = channel

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._channel], [], [], 0)[0]:
            self._ended()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._channel], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._ended()
        assert self.returncode is not None
        return self.returncode

    def _ended(self) -> None:
        global _reaped_cpu
        data = self._channel.recv(4096)
        self._channel.close()
        if not data:  # the fork server ended: its children got SIGTERM
            self.returncode = -signal.SIGTERM
            return
        report = json.loads(data)
        self.returncode = report["code"]
        _reaped_cpu += report["cpu"]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<Forked pid={self.pid} returncode={self.returncode} args={self.args!r}>"


# What `popen` returns: a forked child or, where it starts one anew, its `Popen`.
Process = Forked | subprocess.Popen


class _ForkServer:
    def __init__(self, preload: tuple[str, ...]) -> None:
        from prefect_server import base_env

        self.folder = Path(tempfile.mkdtemp(prefix="tf-forkserver-"))
        self.address = str(self.folder / "socket")
        env = base_env(self.folder, "http://127.0.0.1:9/api") | _PRELOAD_ENV.get(preload, {})
        # It ends when its stdin does, with this process (however it ends); a parent-death
        # signal would end it with the thread that started it.
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.address, *preload],
            env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        assert ready == b"ready\n", f"the fork server for {preload} did not start: {ready!r}"

    def alive(self) -> bool:
        return self.process.poll() is None


# The fork server itself: `python tests/forkserver.py SOCKET MODULE...`.


def _serve(address: str, preload: list[str]) -> tuple[dict[str, Any], list[int]]:
    """Imports `preload`, then forks a child per request until it ends; in a child, returns
    the child's request and its standard streams."""
    import importlib
    import selectors

    for module in preload:
        importlib.import_module(module)
    global _LOGGING_AS_IMPORTED
    _LOGGING_AS_IMPORTED = _logging_inputs()
    # What the imports made is never collected: out of the collector's sight, a child's
    # collections do not touch (and so copy) the pages it shares with the fork server.
    gc.collect()
    gc.freeze()
    running = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not running, f"importing {preload} started threads, which a fork loses: {running}"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)  # EOF: the test process has ended
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}
    extra_cpu: dict[int, float] = {}  # what a child's own forked children cost (`_report_cpu`)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                channel, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
                request = json.loads(message)
                if "children_cpu" in request:  # a child's report, before it ends
                    if request["pid"] in children:
                        extra_cpu[request["pid"]] = request["children_cpu"]
                    channel.sendall(b"1")
                    channel.close()
                    continue
                if _interpreter_settings(request["env"]) != _interpreter_settings(os.environ):
                    channel.sendall(b"0")  # the child would need a new interpreter
                    channel.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    channel.close()
                    for other in children.values():
                        other.close()
                    return request, fds
                for fd in fds:
                    os.close(fd)
                channel.sendall(str(pid).encode())
                children[pid] = channel
                if request["tied"]:  # its launcher's end (EOF on the channel) ends it
                    selector.register(channel, selectors.EVENT_READ, pid)
            elif key.fileobj is sys.stdin:
                sys.exit(0)  # its children get SIGTERM (their parent-death signal)
            elif key.fileobj is wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(children, selector, extra_cpu)
            else:  # a tied child's launcher has ended
                selector.unregister(key.fileobj)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(key.data, signal.SIGTERM)


def _reap(children: dict[int, socket.socket], selector: Any, extra_cpu: dict[int, float]) -> None:
    """Reports each ended child's exit status and CPU time on its channel (with its own
    forked children's, which it reported)."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = children.pop(pid)
        cpu = usage.ru_utime + usage.ru_stime + extra_cpu.pop(pid, 0.0)
        report = {"code": os.waitstatus_to_exitcode(status), "cpu": cpu}
        with contextlib.suppress(OSError):
            channel.sendall(json.dumps(report).encode())
        with contextlib.suppress(KeyError):
            selector.unregister(channel)
        channel.close()


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """The child: its own session, streams, environment, directory and Prefect settings."""
    import ctypes

    os.setsid()
    signal.signal(
        signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler
    )
    fork_server = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != fork_server:
        os._exit(143)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    if request.get("umask", -1) >= 0:
        os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # as `python -m` has it
    sys.argv = [request["module"], *request["argv"]]
    if "prefect.context" in sys.modules:  # built at import, from the fork server's environment
        import prefect.context
        from prefect.logging.configuration import setup_logging

        prefect.context.refresh_global_settings_context()
        if _logging_inputs() != _LOGGING_AS_IMPORTED:
            setup_logging(incremental=False)
        _perpetual_services_from_settings()
    if request.get("children"):
        _children_forked(request["children"])


def _children_forked(via: dict[str, str]) -> None:
    """In a forked `teamflow` command: the processes `flows.up_processes` starts (`up`'s and
    the demo's Prefect server, worker, MCP server and REST API) are forked too, from the
    test process's fork servers at `via` (by module; "" for any other). Each is tied to the
    command as `setpriv --pdeathsig TERM` ties it (the command's end, however it ends, sends
    it SIGTERM), and has its own pid, session, umask and exit status: a test that kills or
    freezes one by the pid `up` printed hits the process itself, and `up` sees it die as it
    would."""
    import atexit

    import flows.up_processes

    atexit.register(_report_cpu, via[""])

    real = subprocess

    def popen(argv: list[str], **options: Any) -> Any:
        plain = argv[argv.index("--") + 1 :] if argv[0].endswith("/setpriv") else argv
        module = plain[2] if plain[:2] == [sys.executable, "-m"] else None
        if module is None or not options.get("start_new_session"):
            return real.Popen(argv, **options)
        request = {
            "module": module, "argv": plain[3:], "env": dict(options["env"]),
            "cwd": str(options.get("cwd") or os.getcwd()), "tied": True,
            "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
            "umask": options.get("umask", -1),
        }  # fmt: skip
        with open(os.devnull, "r+b") as devnull:
            out = _fileno(options.get("stdout"), sys.stdout, devnull)
            stderr = options.get("stderr")
            err = out if stderr == real.STDOUT else _fileno(stderr, sys.stderr, devnull)
            try:
                forked = _request(via.get(module, via[""]), request, [devnull.fileno(), out, err])
            except OSError:  # the test process's fork server has ended
                forked = None
        if forked is None:
            return real.Popen(argv, **options)
        return Forked(plain, *forked)

    class Subprocess:
        """`subprocess` as `flows.up_processes` sees it: `Popen` forks where it can."""

        Popen = staticmethod(popen)

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    flows.up_processes.subprocess = Subprocess()  # type: ignore[assignment]


def _report_cpu(address: str) -> None:
    """At a forked command's end: the CPU of the children forked for it (which its fork
    server reaps, not it) is added to its own, as a process started anew counts its reaped
    children's, so `--cpu-report` counts what a forked `teamflow up` started. Told to its
    own fork server (at `address`), which answers before the command ends."""
    if not _reaped_cpu:
        return
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(address)
        socket.send_fds(
            s, [json.dumps({"pid": os.getpid(), "children_cpu": _reaped_cpu}).encode()], []
        )
        s.recv(8)


_LOGGING_AS_IMPORTED: tuple[Any, ...] | None = None
"""What the fork server's logging was configured from (`_logging_inputs`), after its imports."""

# What rich, which draws Prefect's console log lines, reads from the environment.
_CONSOLE_VARIABLES = (
    *("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE"),
    *("TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES"),
)


def _logging_inputs() -> tuple[Any, ...] | None:
    """All that Prefect's logging configuration (`setup_logging`) is made of in this process:
    the file it reads (a `logging.yml` in PREFECT_HOME, else Prefect's own), the settings that
    file names and the logging settings (levels, colors, markup, extra loggers), the
    PREFECT_LOGGING_* variables that override it, and the streams rich's console handler
    looks at. A child whose inputs are the fork server's keeps the configuration it inherited,
    which `setup_logging` would build again the same (about 0.05 s of CPU in each child,
    most of it Prefect turning every setting into a variable); any other child builds its
    own. None where Prefect is not imported."""
    if "prefect.logging.configuration" not in sys.modules:
        return None
    try:
        return _prefect_logging_inputs()
    except Exception:  # a file or setting not as expected: configure anew
        return (object(),)  # equal to no other


def _prefect_logging_inputs() -> tuple[Any, ...]:
    import string

    import prefect.settings
    from prefect.logging.configuration import DEFAULT_LOGGING_SETTINGS_PATH

    settings = prefect.settings.get_current_settings()
    path = settings.logging.config_path
    path = path if path is not None and path.exists() else DEFAULT_LOGGING_SETTINGS_PATH
    named = string.Template(path.read_text()).get_identifiers()
    return (
        str(path),
        path.read_text(),
        [(name, getattr(prefect.settings, name).value()) for name in named],
        settings.logging.model_dump(mode="json", exclude={"config_path"}),
        sorted((k, v) for k, v in os.environ.items() if k.startswith("PREFECT_LOGGING_")),
        [os.environ.get(name) for name in _CONSOLE_VARIABLES],
        [os.isatty(fd) for fd in (1, 2)],
    )


def _perpetual_services_from_settings() -> None:
    """Prefect's perpetual services (the scheduler, late runs, the foreman, proactive
    triggers, ...) take their intervals from the settings when their modules are imported:
    `Perpetual(every=...)` is a default argument. Imported by the fork server, they would
    keep its intervals (the defaults: the scheduler's loop every 60 s) whatever the child's
    environment says. Their modules are run again under the child's settings, in place of
    the fork server's (a module registers its services as it runs)."""
    import importlib

    registry = sys.modules.get("prefect.server.services.perpetual_services")
    if registry is None:
        return
    services = registry._PERPETUAL_SERVICES
    modules = list(dict.fromkeys(config.function.__module__ for config in services))
    services.clear()
    for name in modules:
        importlib.reload(sys.modules[name])


def _via(address: str, children: dict[str, str], module: str, args: list[str]) -> None:
    """The launcher: `python -m MODULE ARGS`, forked for it with its streams, environment
    and directory; it passes on its signals and ends as the child does."""
    request = {
        "module": module, "argv": args, "env": dict(os.environ), "cwd": os.getcwd(),
        "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN, "tied": True,
        "children": children,
    }  # fmt: skip
    forked = _request(address, request, [0, 1, 2])
    if forked is None:
        os.execv(sys.executable, _plain(module, args))
    pid, channel = forked

    def pass_on(sig: int, _: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, pass_on)
    report = channel.recv(4096)
    code = json.loads(report)["code"] if report else -signal.SIGTERM
    if code < 0:  # ended by a signal: so does the launcher, for its parent to see
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__" and sys.argv[1] == "--via":
    children = dict(pair.split("=", 1) for pair in sys.argv[3].split(",") if pair != "-")
    _via(sys.argv[2], children, sys.argv[4], sys.argv[5:])
elif __name__ == "__main__":
    import runpy

    sys.path.insert(0, str(ROOT))
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
    request, fds = _serve(sys.argv[1], sys.argv[2:])
    _become(request, fds)
    del request, fds
    if sys.argv[0] == CODE:  # as `python -c SOURCE ARGS` has it: sys.argv is ["-c", ARGS]
        source = sys.argv.pop(1)
        exec(compile(source, "<string>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
