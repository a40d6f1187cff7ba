"""`config.json` both ways: edits others made to a team's `config.json` (the `004` "Updating
Config" jq recipes, a folder restored with `tar -xzf`) are taken in before teamflow writes
the file again, and by `teamflow sync`, so they are never silently overwritten.

- A member added to `members` joins the team (with its inbox). Its `metadata.runtime` is not
  taken (a program named in someone else's edit never runs unasked): it joins with the
  default runtime.
- `isActive: false` (or a `shutdownAt` added) marks the member inactive, `shutdownAt` as
  written (now when missing). It does not start a shutdown handshake: the `004` recipe is
  what a tool writes once the member has stopped, so the edit is the record of a shutdown
  that happened, not a request for one.
- An edit that does not validate as a `004` TeamConfig of this team is refused in one line;
  the file is kept aside as `config.json.bad-{time}` and `config.json` is written again from
  the database.

Other edits to known fields are not taken in (the database stays the source of truth); the
file is written again with them undone, which `take_in` reports as `ignored`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError
from sqlmodel import Session

from models import mirror
from models.base import utcnow
from models.db import session_scope
from models.inbox import create_inbox
from models.team import Member, Team, config_of
from models.team_config import DEFAULT_MODELS, TeamConfig
from models.wire_support import error_lines


@dataclass
class ConfigIntake:
    """What taking in a team's `config.json` did."""

    joined: list[str] = field(default_factory=list)
    inactive: list[str] = field(default_factory=list)
    refused: str | None = None
    kept_as: Path | None = None

    def lines(self) -> list[str]:
        out = [f"{name} joined (added to config.json)" for name in self.joined]
        out += [f"{name} is inactive (config.json says so)" for name in self.inactive]
        return out


def take_in(team: str, *, session: Session | None = None) -> ConfigIntake:
    """Takes in the edits others made to `teams/{team}/config.json` since teamflow wrote it
    (see the module docstring); a file teamflow wrote last is left alone."""
    with session_scope(session) as s:
        result = _take(s, team)
        if result is not None:
            mirror.mark("config", (team,), session=s)  # written again: as the database now says
    return result or ConfigIntake()


def _take(s: Session, team: str) -> ConfigIntake | None:
    result = ConfigIntake()
    path = mirror.config_path(team)
    if not mirror.changed_outside(path):
        return None
    row = s.get(Team, team)
    if row is None:
        return None
    config = _read(path, row, result)
    if config is None:
        return result
    position = len(config_of(row, session=s).members)
    for wire in config.members:
        member = s.get(Member, (team, wire.name))
        if member is None:
            joined = Member.from_wire(team, wire, position=position)
            joined.runtime = {}  # a program named in someone else's edit never runs unasked
            position += 1
            s.add(joined)
            s.flush()
            create_inbox(team, wire.name, session=s)
            result.joined.append(wire.name)
        elif member.is_active and (not wire.is_active or wire.shutdown_at):
            member.is_active = False
            member.shutdown_at = wire.shutdown_at or utcnow()
            s.add(member)
            result.inactive.append(wire.name)
    return result


def _read(path: Path, team: Team, result: ConfigIntake) -> TeamConfig | None:
    """The file as a TeamConfig of `team`, or None: refused, kept aside as `.bad-{time}`."""
    try:
        data = json.loads(path.read_bytes())
        allowed = tuple(DEFAULT_MODELS) + tuple(team.allowed_models or ())
        config = TeamConfig.model_validate(data, context={"allowed_models": allowed})
        if config.name != team.name:
            raise ValueError(f"name {config.name!r} is not the team's name {team.name!r}")
        return config
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        why = "; ".join(error_lines(exc))
    except ValueError as exc:  # not JSON (JSONDecodeError), or another team's file
        why = str(exc).splitlines()[0]
    kept = path.with_name(f"config.json.bad-{utcnow():%Y%m%dT%H%M%S%fZ}")
    os.replace(path, kept)
    result.refused = f"config.json of {team.name} refused: {why} (kept as {kept.name})"
    result.kept_as = kept
    return None


def _take_in_then_write(team: str) -> None:
    """The `config` mirror writer: takes in others' edits first, then writes the file."""
    try:
        with session_scope() as s:
            _take(s, team)
    finally:
        if _write is not None:
            _write(team)


_write = mirror._writers.get("config")
if _write is not None and _write is not _take_in_then_write:
    mirror.register("config", _take_in_then_write)
