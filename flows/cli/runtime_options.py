"""A member's runtime from `teamflow member add|set` options: built, checked, never a secret.

    --runtime command --command "python3 my_agent.py" [--timeout S] [--env K=V]... [--cwd DIR]
    --runtime openai --base-url URL --llm-model NAME [--api-key-env VAR | --api-key-secret BLOCK]
    --runtime scripted --playbook FILE          (the file's playbook is read and stored)

Every option is checked before anything is written; a wrong one is a `RuntimeOptionError`
whose message is one line naming it. An API key is never taken: only the name of the
environment variable or of the Prefect Secret block that holds it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flows.runtimes import StepError, parse_chimera
from flows.runtimes.kinds import KIND_KEYS, KINDS, runtime_for
from flows.runtimes.scripted import ScriptedRuntime

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BLOCK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
TOOL_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")

SET_HINT = (
    'teamflow member set {team} {name} --runtime command --command "python3 my_agent.py" '
    "(or --runtime openai|scripted, see teamflow member set --help)"
)


class RuntimeOptionError(ValueError):
    """A runtime option teamflow refuses; one line."""


@dataclass
class RuntimeOptions:
    """What `member add|set` was given about the runtime (None: not given)."""

    kind: str | None = None
    command: str | None = None
    timeout: float | None = None
    env: list[str] | None = None
    cwd: Path | None = None
    base_url: str | None = None
    llm_model: str | None = None
    api_key_env: str | None = None
    api_key_secret: str | None = None
    playbook: Path | None = None
    tools: list[str] | None = None
    all_tools: bool = False
    resources: list[dict[str, Any]] | None = None
    """The member's resources (`models.knowledge.resource_grants`); replace the ones before."""

    def _tools_given(self) -> bool:
        return self.tools is not None or self.all_tools

    def _kind_options(self) -> dict[str, str]:
        """The kind-specific options given, by option name, with the kind each belongs to."""
        found = {}
        for option, value, kind in (
            ("--command", self.command, "command"),
            ("--env", self.env, "command"),
            ("--cwd", self.cwd, "command"),
            ("--base-url", self.base_url, "openai"),
            ("--llm-model", self.llm_model, "openai"),
            ("--api-key-env", self.api_key_env, "openai"),
            ("--api-key-secret", self.api_key_secret, "openai"),
            ("--playbook", self.playbook, "scripted"),
        ):
            if value is not None:
                found[option] = kind
        return found


def build_runtime(current: dict[str, Any] | None, options: RuntimeOptions) -> dict[str, Any]:
    """The runtime config `options` make of `current` (a new member: None).

    With `--runtime` of another kind than `current`'s, the kind's settings start afresh (the
    member's tools, resources and security level stay); otherwise the options change only
    what they name.
    """
    current = dict(current or {})
    all_kind_keys = {k for keys in KIND_KEYS.values() for k in keys}
    has_kind = "kind" in current or any(k in current for k in all_kind_keys)
    current_kind = current.get("kind", "scripted") if has_kind else None
    kind = options.kind if options.kind is not None else current_kind
    if kind is not None and kind not in KINDS:
        raise RuntimeOptionError(f"--runtime {kind!r} is unknown: use {', '.join(KINDS)}")
    for option, belongs in options._kind_options().items():
        if kind != belongs:
            now = f", not {kind}" if kind else ""
            raise RuntimeOptionError(f"{option} is for --runtime {belongs}{now}")
    if options.timeout is not None:
        if kind not in ("command", "openai"):
            raise RuntimeOptionError("--timeout is for --runtime command or openai")
        from models.team_settings import SECONDS_RANGE, is_seconds

        if not is_seconds(options.timeout):
            raise RuntimeOptionError(f"--timeout must be {SECONDS_RANGE}, not {options.timeout}")
    if options.api_key_env is not None and options.api_key_secret is not None:
        raise RuntimeOptionError("give --api-key-env or --api-key-secret, not both")

    config = dict(current)
    if kind != current_kind:
        # A new kind: its own settings start afresh, the member's others stay.
        config = {k: v for k, v in current.items() if k not in all_kind_keys and k != "kind"}
    if kind is not None:
        config["kind"] = kind

    if kind == "command":
        _command(config, options)
    elif kind == "openai":
        _openai(config, options)
    elif kind == "scripted" and options.playbook is not None:
        config["playbook"] = read_playbook(options.playbook)
    if options.timeout is not None:
        config["timeout"] = options.timeout

    if options.all_tools:
        if options.tools:
            raise RuntimeOptionError("give --tool or --all-tools, not both")
        config.pop("tools", None)
    elif options.tools is not None:
        for tool in options.tools:
            if not TOOL_ID.fullmatch(tool):
                raise RuntimeOptionError(f"--tool {tool!r} is not a tool id")
        config["tools"] = list(dict.fromkeys(options.tools))

    if options.resources is not None:
        config["resources"] = options.resources

    if kind == "command" and not config.get("argv"):
        raise RuntimeOptionError('--runtime command needs --command "PROGRAM ARGS"')
    if kind == "openai":
        if not config.get("base_url"):
            raise RuntimeOptionError("--runtime openai needs --base-url URL")
        if not config.get("model"):
            raise RuntimeOptionError("--runtime openai needs --llm-model NAME")
    if kind == "scripted" and options.kind is not None and not config.get("playbook"):
        raise RuntimeOptionError("--runtime scripted needs --playbook FILE")
    if kind is not None:
        try:
            runtime_for(config)
        except ValueError as exc:
            raise RuntimeOptionError(str(exc)) from None
    return config


def _command(config: dict[str, Any], options: RuntimeOptions) -> None:
    if options.command is not None:
        try:
            argv = shlex.split(options.command)
        except ValueError as exc:
            raise RuntimeOptionError(f"--command cannot be split into arguments: {exc}") from None
        if not argv:
            raise RuntimeOptionError("--command is empty: give the program and its arguments")
        config["argv"] = argv
        config.pop("command", None)
        if options.cwd is None and "cwd" not in config:
            # Relative paths in the command mean what they meant where it was given.
            config["cwd"] = str(Path.cwd())
    if options.cwd is not None:
        folder = options.cwd.expanduser().resolve()
        if not folder.is_dir():
            raise RuntimeOptionError(f"--cwd {options.cwd}: no such folder")
        config["cwd"] = str(folder)
    if options.env is not None:
        env: dict[str, str] = {}
        for item in options.env:
            name, sep, value = item.partition("=")
            if not sep:
                raise RuntimeOptionError(f"--env {item!r} is not NAME=VALUE")
            if not ENV_NAME.fullmatch(name):
                raise RuntimeOptionError(f"--env {name!r} is not an environment variable name")
            if SECRET_NAME.search(name):
                raise RuntimeOptionError(
                    f"--env {name}: teamflow stores no secrets; set {name} in the environment "
                    "of `teamflow up` or `teamflow worker` (agent commands inherit it)"
                )
            env[name] = value
        config["env"] = env


def _openai(config: dict[str, Any], options: RuntimeOptions) -> None:
    if options.base_url is not None:
        url = options.base_url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise RuntimeOptionError(
                f"--base-url {options.base_url!r} is not an http(s) URL, "
                "e.g. https://api.openai.com/v1"
            )
        config["base_url"] = url.rstrip("/")
    if options.llm_model is not None:
        if not options.llm_model.strip():
            raise RuntimeOptionError("--llm-model is empty: give the endpoint's model name")
        config["model"] = options.llm_model.strip()
    if options.api_key_env is not None:
        if not ENV_NAME.fullmatch(options.api_key_env):
            raise RuntimeOptionError(
                f"--api-key-env {options.api_key_env!r} is not an environment variable name "
                "(give the variable's name, never the key)"
            )
        config["api_key_env"] = options.api_key_env
        config.pop("api_key_secret", None)
    if options.api_key_secret is not None:
        if not BLOCK_NAME.fullmatch(options.api_key_secret):
            raise RuntimeOptionError(
                f"--api-key-secret {options.api_key_secret!r} is not a Prefect Secret block "
                "name (lowercase letters, digits and dashes)"
            )
        config["api_key_secret"] = options.api_key_secret
        config.pop("api_key_env", None)


def read_playbook(path: Path) -> list[dict[str, Any]]:
    """The playbook in `path` (a list of Chimera response templates, or `{"playbook": [...]}`),
    each entry checked; `RuntimeOptionError` names the file and what is wrong."""
    try:
        runtime = ScriptedRuntime.from_config({"playbook": str(path)})
    except ValueError as exc:
        raise RuntimeOptionError(f"--{exc}") from None
    if not runtime.playbook:
        raise RuntimeOptionError(f"--playbook {path}: the playbook has no steps")
    for number, step in enumerate(runtime.playbook, start=1):
        try:
            parse_chimera(step, source=f"--playbook {path} step {number}")
        except StepError as exc:
            raise RuntimeOptionError(str(exc)) from None
    return list(runtime.playbook)


def describe(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The runtime as (label, value) lines for `member show`; holds no secret (none is stored)."""
    if not config:
        return [("runtime", "none")]
    kind = config.get("kind", "scripted")
    lines = [("runtime", kind)]
    if kind == "command":
        argv = config.get("argv", config.get("command"))
        lines.append(("command", argv if isinstance(argv, str) else shlex.join(argv or [])))
        if config.get("cwd"):
            lines.append(("cwd", str(config["cwd"])))
        for name, value in (config.get("env") or {}).items():
            lines.append(("env", f"{name}={value}"))
    elif kind == "openai":
        lines.append(("base_url", str(config.get("base_url"))))
        lines.append(("llm_model", str(config.get("model") or "(the member's model)")))
        if config.get("api_key_env"):
            lines.append(("api_key", f"from environment variable {config['api_key_env']}"))
        elif config.get("api_key_secret"):
            lines.append(("api_key", f"from Prefect Secret block {config['api_key_secret']}"))
        else:
            lines.append(("api_key", "none sent"))
    else:
        playbook = config.get("playbook")
        if isinstance(playbook, list):
            lines.append(("playbook", f"{len(playbook)} steps"))
        elif playbook:
            lines.append(("playbook", str(playbook)))
    if "timeout" in config:
        lines.append(("timeout", f"{config['timeout']:g}s"))
    return lines
