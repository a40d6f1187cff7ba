"""What every command shares: `--json`, one-line errors, JSON output, checked numbers, runs."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Annotated, NoReturn

import typer

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def json_requested(argv: list[str] | None = None) -> bool:
    """True when the command line asks for `--json` (before any `--`)."""
    args = sys.argv[1:] if argv is None else argv
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def error(message: str, *, code: int = 1, kind: str = "Error") -> None:
    """Reports a failure: `teamflow: error: message` (one line) on stderr; with `--json`
    also the `001` error envelope on stdout (one line), so scripts can read it:
    `{"status": "error", "error": kind, "message": ..., "details": {"exit_code": code}}`.
    """
    line = " ".join(str(message).split()) or kind
    typer.echo(f"teamflow: error: {line}", err=True)
    if json_requested():
        from models.api import ErrorResponse

        envelope = ErrorResponse(error=kind, message=line, details={"exit_code": code})
        typer.echo(json.dumps(envelope.to_wire(), ensure_ascii=False))


def fail(message: str, code: int = 1, *, kind: str = "Error") -> NoReturn:
    """Reports `message` (see `error`) and exits with `code`."""
    error(message, code=code, kind=kind)
    raise typer.Exit(code)


def emit(data: object) -> None:
    """Prints `data` as JSON on stdout."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# --- numbers from the command line: finite and in a stated range ---------------------------


def number_check(
    ok: Callable[[float], bool], stated: str, *, setting: str | None = None
) -> Callable[[typer.CallbackParam, float | None], float | None]:
    """A typer option callback refusing (one line, exit 1) a value `ok` rejects.

    `stated` says the range (`models.team_settings.SECONDS_RANGE`, ...); `setting` names the
    team setting the option changes, if any. NaN, infinities and huge values never pass.
    """

    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        if value is None:
            return None
        if not (isinstance(value, int | float) and math.isfinite(value) and ok(value)):
            name = (param.opts or [param.name or "value"])[0]
            about = f" (setting {setting})" if setting else ""
            fail(f"{name}{about} must be {stated}, not {value}", kind="ValidationError")
        return value

    return check


def seconds_check(setting: str | None = None):
    """Option callback: finite seconds, > 0 and at most `MAX_SECONDS`."""
    from models.team_settings import SECONDS_RANGE, is_seconds

    return number_check(is_seconds, SECONDS_RANGE, setting=setting)


def count_check(setting: str | None = None):
    """Option callback: a whole number from 1 to `MAX_COUNT`."""
    from models.team_settings import COUNT_RANGE, is_count

    return number_check(is_count, COUNT_RANGE, setting=setting)


def start_run(deployment: str, parameters: dict, *, tags: list[str], name: str):
    """Starts a run of one of teamflow's deployments; one clear line when it cannot."""
    from flows import runner

    try:
        return runner.start(deployment, parameters, tags=tags, flow_run_name=name)
    except runner.RunnerError as exc:
        fail(f"cannot start the {deployment.split('/')[0]} run: {exc}")
