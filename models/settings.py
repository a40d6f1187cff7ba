"""Every `TEAMFLOW_*` setting, declared once: its type, its default and what it is for.

Nothing else in teamflow reads `TEAMFLOW_*` variables from the environment; code asks
`get_settings()`. The object is cached per value of the environment's `TEAMFLOW_*`
variables, so a test (or `teamflow up` handing settings to its children) that changes one
sees the change at the next call, and a process whose environment does not change builds
the object once. The table in `docs/settings.md` is generated from this class
(`python -m models.settings`), and a test keeps the two equal.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.durations import parse_duration

PREFIX = "TEAMFLOW_"


def _seconds(text: object) -> object:
    """A duration as people type it (`90s`, `5m`) or a number of seconds."""
    if isinstance(text, str):
        return parse_duration(text).total_seconds()
    return text


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0, le=366 * 86400)]
"""A period: `90s`, `10m`, `1h30m` or a plain number of seconds, at most 366 days."""


def _at_least(least: float):
    return AfterValidator(lambda value: max(least, value))


class SettingsError(ValueError):
    """A `TEAMFLOW_*` variable holds a value teamflow cannot use; one line naming it."""


class Settings(BaseSettings):
    """teamflow's settings, read from `TEAMFLOW_*` environment variables."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True)

    home: Path = Field(
        default=Path("~/.teamflow"),
        description="Where teamflow keeps its files: the SQLite database, the 004 team "
        "files, task artifacts, `teamflow up`'s Prefect database and logs.",
    )
    database_url: str = Field(
        default="",
        description="teamflow's database (a SQLAlchemy URL, e.g. "
        "`postgresql+psycopg://user@host/db`); unset: SQLite at `$TEAMFLOW_HOME/teamflow.db`.",
    )
    mirror: bool = Field(
        default=True,
        description="Whether this process writes the 004 team files under `TEAMFLOW_HOME` "
        "and takes in what outside tools wrote there. With workers on several machines, one "
        "host mirrors (on) and every other host sets `off` (docs/beyond-one-machine.md).",
    )
    mirror_follow_seconds: Annotated[Seconds, _at_least(0.05)] = Field(
        default=2.0,
        description="How often a worker on the mirror host writes the team files that "
        "changes committed on other machines made stale.",
    )
    max_message_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        le=64 * 1024 * 1024,
        description="The largest message text an inbox accepts, in bytes (UTF-8).",
    )
    embeddings_url: str | None = Field(
        default=None,
        description="An OpenAI-compatible embeddings endpoint (base URL ending in `/v1`) "
        "for semantic memory search; unset: memory search is by words only.",
    )
    embeddings_model: str = Field(
        default="nomic-embed-text", description="The embeddings model to ask for."
    )
    embeddings_key: str | None = Field(
        default=None,
        description="A bearer token for the embeddings endpoint, if it wants one (never logged).",
        repr=False,
    )
    watchdog_every: Seconds = Field(
        default=30.0,
        le=86400,
        description="How often `teamflow up`'s watchdog looks for offline members, overdue "
        "tasks and crashed runs (`10s`, `1m`, ...; at most a day).",
    )
    crash_after_seconds: Seconds = Field(
        default=90.0,
        description="How long a run's heartbeats may stop before the crash automation that "
        "`teamflow up` installs marks it Crashed.",
    )
    resume_attempts: int = Field(
        default=3,
        ge=0,
        le=100,
        description="How many times a team task whose run died is resumed from its last "
        "completed step before it is closed as failed (0: never).",
    )
    resume_backoff_seconds: Seconds = Field(
        default=5.0,
        description="How long after its run died a task's first resume starts; each further "
        "resume waits twice as long as the one before.",
    )
    retry_seconds: Seconds = Field(
        default=60.0,
        description="How long teamflow tries a call again while it fails with a transient "
        "error (Prefect API 5xx, a timeout or dropped connection, SQLite locked, a PostgreSQL "
        "serialization or connection error) before it gives up with one line saying what it tried.",
    )
    worker_alive_seconds: Seconds = Field(
        default=60.0,
        description="How long a teamflow worker's own heartbeat (in teamflow's database) may "
        "be silent before its runs can be declared dead; a slow but live worker keeps them.",
    )
    worker_beat_seconds: Seconds = Field(
        default=5.0,
        description="How often a teamflow worker records its own heartbeat in teamflow's database.",
    )
    pause_poll_seconds: Annotated[Seconds, _at_least(0.05)] = Field(
        default=10.0,
        description="The fallback poll of waiting runs when Prefect's event stream is away "
        "(decisions normally arrive by event, well under a second).",
    )
    pause_check_seconds: Annotated[Seconds, _at_least(0.05)] = Field(
        default=2.0,
        description="How often a run waiting in process for a plan decision also reads "
        "teamflow's database for it.",
    )
    suspend_after_seconds: Annotated[Seconds, _at_least(0.05)] = Field(
        default=60.0,
        description="How long a deployed run waits in process for a decision before it "
        "suspends and frees its worker.",
    )
    deadline_poll_seconds: Annotated[Seconds, _at_least(0.05)] = Field(
        default=1.0,
        description="How often the timer clock looks for due timers and plan deadlines.",
    )
    shutdown_check_seconds: Annotated[Seconds, _at_least(0.02)] = Field(
        default=0.25,
        description="How often a shutdown handshake reads teamflow's database for the "
        "member's answer.",
    )
    outside_check_seconds: Annotated[Seconds, _at_least(0.05)] = Field(
        default=0.5,
        description="How often the run of a task given to an outside (MCP) member looks in "
        "teamflow's database for the member's report.",
    )
    mcp_port: int = Field(
        default=4310,
        ge=1,
        le=65535,
        description="The port of the MCP server over streamable HTTP that `teamflow up` starts "
        "(`teamflow mcp --http`, at `http://127.0.0.1:PORT/mcp`).",
    )
    api_port: int = Field(
        default=4300,
        ge=1,
        le=65535,
        description="The port of teamflow's REST API (`teamflow api`, and the one `teamflow up` "
        "starts, at `http://127.0.0.1:PORT/api/v1/`).",
    )
    public_url: str | None = Field(
        default=None,
        description="Where people reach the REST API, for the approval links it sends "
        "(e.g. `https://teamflow.example.com`); unset: `http://127.0.0.1:TEAMFLOW_API_PORT`.",
    )
    link_key: str | None = Field(
        default=None,
        description="The secret that signs approval links (HMAC-SHA256); unset: a random key "
        "kept in `$TEAMFLOW_HOME/link.key` (0600). Never logged.",
        repr=False,
    )
    token: str | None = Field(
        default=None,
        description="The token the CLI and an MCP session over stdio act with: a member's "
        "(`teamflow member token`) or a person's (`teamflow user add`); unset: the one in "
        "`TEAMFLOW_TOKEN_FILE`, else the local user. Never logged.",
        repr=False,
    )
    token_file: Path = Field(
        default=Path("~/.config/teamflow/token"),
        description="A person's token, kept in a file only its owner may read (mode 0600; "
        "`teamflow user login` writes it), used when `TEAMFLOW_TOKEN` is unset.",
    )
    agent_command: str | None = Field(
        default=None,
        description="The agent program `teamflow member spawn` and `spawn_teammate` start when "
        "none is given (e.g. `claude`; a `{prompt}` placeholder takes the first prompt).",
    )
    tmux_socket: str | None = Field(
        default=None,
        description="The tmux server of the members' panes: a socket name (`tmux -L`) or a "
        "path (`tmux -S`); unset: the default server.",
    )


def _environment() -> tuple[bytes | None, ...]:
    """The values of the declared variables now: what `Settings()` reads (`extra="ignore"`).
    Looked up by name in `os.environb` (the same variables as `os.environ`, not decoded), not
    by a scan of `os.environ`, which decodes every variable of the process and took a fifth of
    an inbox send's CPU (`get_settings` runs several times a send).
    """
    return tuple(map(os.environb.get, _NAMES))


_NAMES = tuple(os.fsencode(PREFIX + name.upper()) for name in Settings.model_fields)


@functools.lru_cache(maxsize=32)
def _settings(_env: tuple[bytes | None, ...]) -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        name = PREFIX + str(error["loc"][0]).upper() if error["loc"] else PREFIX
        value = os.environ.get(name, "")
        message = str(error["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"{name}={value!r}: {message}") from None
    home = settings.home.expanduser().resolve()
    url = settings.database_url or f"sqlite:///{home / 'teamflow.db'}"
    return settings.model_copy(update={"home": home, "database_url": url})


def get_settings() -> Settings:
    """The settings in force now.

    Raises:
        SettingsError: A `TEAMFLOW_*` variable is malformed or out of range (one line naming it).
    """
    return _settings(_environment())


def markdown_table() -> str:
    """The settings as the Markdown table of `docs/settings.md`."""
    rows = ["| variable | default | what it is for |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "unset" if default in (None, "") else f"`{default}`"
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{PREFIX}{name.upper()}` | {shown} | {description} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
