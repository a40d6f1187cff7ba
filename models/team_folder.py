"""`004` team folders in and out: `teamflow team import DIR [--replace]` and `team export`.

- `import_team(DIR)`: an existing team folder (`config.json` and `inboxes/*.json`) becomes a
  teamflow team. Everything is validated first; a malformed file aborts the import with the
  file, the field and the reason, and nothing is written.
- `import_team(DIR, replace=True)`: the same for a team that exists (a folder restored with
  the seed's `tar -xzf`, in the home or elsewhere): its `config.json` part and its inboxes
  become the folder's; its other records (tasks, plans, alerts, memories, settings) stay.
- `export_team(NAME, DIR)`: the team's `config.json` and inboxes, as teamflow mirrors them.

Members whose runtime runs a program or calls an endpoint this database does not hold for
them come in without it unless `trust_runtimes` (`models.runtime_trust`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError
from sqlmodel import Session, col, select

from models import mirror
from models.base import check_member_name, utcnow
from models.db import session_scope
from models.inbox_message import InboxError, InboxMessage, check_text
from models.inbox_table import InboxCounter, InboxRow
from models.limits import LimitError, loads_json, read_capped
from models.runtime_trust import untrusted
from models.team import Member, Team, TeamError, config_of, get_team
from models.team_config import TeamConfig
from models.wire_support import error_lines

_Inbox = TypeAdapter(list[InboxMessage])


class BackupError(ValueError):
    """A folder or archive teamflow refuses; says which file and why."""


def _read_json(path: Path) -> Any:
    try:
        return loads_json(read_capped(path).decode("utf-8"), what=str(path))
    except FileNotFoundError:
        raise BackupError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BackupError(f"{path}: a folder, not a file") from None
    except LimitError as exc:
        raise BackupError(str(exc)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BackupError(f"{path}: not valid JSON: {exc}") from None


def read_team_folder(folder: Path) -> tuple[TeamConfig, dict[str, list[InboxMessage]]]:
    """Reads and validates a `004` team folder; `BackupError` names the file and field."""
    config_file = folder / "config.json"
    try:
        config = TeamConfig.model_validate(_read_json(config_file))
    except ValidationError as exc:
        raise BackupError(f"{config_file}: {error_lines(exc)[0]}") from None
    names = {m.name for m in config.members}
    inboxes: dict[str, list[InboxMessage]] = {}
    inbox_folder = folder / "inboxes"
    for path in sorted(inbox_folder.glob("*.json")) if inbox_folder.is_dir() else []:
        if path.is_symlink():
            raise BackupError(f"{path}: a symlink; refusing to follow it")
        member = path.stem
        try:
            check_member_name(member)
        except ValueError as exc:
            raise BackupError(f"{path}: {exc}") from None
        if member not in names:
            raise BackupError(f"{path}: {member!r} is not a member in config.json")
        data = _read_json(path)
        if not isinstance(data, list):
            raise BackupError(f"{path}: an inbox file must be a JSON array")
        try:
            inboxes[member] = _Inbox.validate_python(data)
        except ValidationError as exc:
            raise BackupError(f"{path}: entry {error_lines(exc)[0]}") from None
        seen: set[str] = set()
        for i, entry in enumerate(inboxes[member]):
            if entry.message_id in seen:
                raise BackupError(
                    f"{path}: entry [{i}].messageId: {entry.message_id!r} is a duplicate"
                )
            if entry.message_id is not None:
                seen.add(entry.message_id)
            try:
                check_text(entry.text)
            except InboxError as exc:
                raise BackupError(f"{path}: entry [{i}].text: {exc}") from None
    return config, inboxes


def import_team(
    folder: Path, *, trust_runtimes: bool = False, left_out: list[str] | None = None,
    replace: bool = False, session: Session | None = None,
) -> Team:  # fmt: skip
    """Imports an existing `004` team folder; validates everything before writing anything.

    A team of that name is refused unless `replace`: then its `config.json` part (the team's
    fields, its members) and its inboxes become the folder's, and its other records stay (see
    the module docstring). A member whose runtime runs a program or calls an endpoint this
    database does not hold for it comes in without it unless `trust_runtimes`
    (`models.runtime_trust`); `left_out` receives one line per such member.
    """
    config, inboxes = read_team_folder(Path(folder))
    with session_scope(session) as s:
        old = s.get(Team, config.name)
        if old is not None and not replace:
            raise TeamError(
                f"team {config.name!r} exists already (import with --replace to replace it)"
            )
        rows = [Member.from_wire(config.name, m, position=i) for i, m in enumerate(config.members)]
        # Before the old members go: a runtime this database holds for a member is its own.
        refused = untrusted(config.name, [(m.name, m.runtime) for m in rows],
                            trust=trust_runtimes, session=s)  # fmt: skip
        if left_out is not None:
            left_out.extend(refused.values())
        team = Team.from_wire(config, lead=_lead_of(config, old))
        if old is not None:
            _clear_folder_rows(s, old, team)
            team = old
        else:
            s.add(team)
        s.flush()
        for member, row in zip(config.members, rows, strict=True):
            if member.name in refused:
                row.runtime = {}
            s.add(row)
            entries = inboxes.get(member.name, [])
            s.add(InboxCounter(team=config.name, member=member.name, seq=len(entries)))
            for seq, entry in enumerate(entries, start=1):
                message = InboxRow.from_entry(config.name, member.name, entry)
                message.seq = seq
                s.add(message)
            mirror.mark("inbox", (config.name, member.name), session=s)
        mirror.mark("config", (config.name,), session=s)
        return team


def _clear_folder_rows(s: Session, old: Team, new: Team) -> None:
    """Makes `old` the folder's team `new`: its fields (not its settings) taken over, its
    members, inboxes and counters deleted, and the inbox files in the home marked to be
    dropped (`inbox_files_replaced`) before the mirror writes the new ones."""
    for key in ("description", "created_at", "schema_version", "meta", "allowed_models",
                "lead", "extra"):  # fmt: skip
        setattr(old, key, getattr(new, key))
    old.updated_at = utcnow()
    s.add(old)
    for member in s.exec(select(Member).where(col(Member.team) == old.name)):
        s.delete(member)
    for table in (InboxRow, InboxCounter):
        s.execute(sa.delete(table).where(col(table.team) == old.name))
    s.flush()
    # Marked before the inboxes: the mirror writes kinds in the order first marked.
    mirror.mark("inboxes-replaced", (old.name,), session=s)


def _drop_inbox_files(team: str) -> None:
    """Removes the inbox files of `team` in the home (and teamflow's notes on them): the
    ones of the replaced team, which the mirror writes again from the database."""
    folder = mirror.inbox_dir(team)
    for path in folder.glob("*.json") if folder.is_dir() else []:
        path.unlink(missing_ok=True)
    for path in folder.glob(".*.json.*") if folder.is_dir() else []:
        path.unlink(missing_ok=True)


mirror.register("inboxes-replaced", _drop_inbox_files)


def _lead_of(config: TeamConfig, old: Team | None = None) -> str:
    lead_id = (config.model_extra or {}).get("leadAgentId")
    if isinstance(lead_id, str) and "@" in lead_id:
        return lead_id.split("@", 1)[0]
    if old is not None and old.lead in {m.name for m in config.members}:
        return old.lead
    return "team-lead"


def export_team(name: str, folder: Path, *, session: Session | None = None) -> Path:
    """Writes the team's `config.json` and `inboxes/*.json` into `folder`."""
    folder = Path(folder)
    with session_scope(session) as s:
        team = get_team(name, session=s)
        config = config_of(team, session=s).to_wire()
        inboxes = {}
        for member in config["members"]:
            rows = s.exec(
                select(InboxRow)
                .where(col(InboxRow.team) == name, col(InboxRow.recipient) == member["name"])
                .order_by(col(InboxRow.seq))
            )
            inboxes[member["name"]] = [r.entry_dict() for r in rows]
    mirror.write_atomic(folder / "config.json", mirror.dump_json(config))
    for member, entries in inboxes.items():
        mirror.write_atomic(folder / "inboxes" / f"{member}.json", mirror.dump_json(entries))
    return folder
