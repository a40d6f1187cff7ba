"""Moving a team in and out: back it up, restore it (and, from `models.team_folder`, import
a `004` folder and export it).

- `backup(NAME, FILE)`: a `.tar.gz` of `teams/{team}` and `tasks/{team}` and a dump of every
  database row of the team (`teamflow-backup.json`), with the places of its tasks in projects
  (their `000` contexts) and the definitions of those projects.
- `restore(FILE)`: the reverse; refuses to overwrite an existing team without `force`, and
  refuses any archive member that would land outside the team's folders.

Projects are global: other teams' tasks may be in them. A restore puts each task back in its
project; a project the database does not have is restored from the backup's definition (a
backup restored into a new database keeps its projects), one it has is left as it is. A task
whose milestone that project no longer has goes back in the project without a milestone, and
the restore says so (`Restored.notes`).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import Session, col, select

from models import limits, mirror
from models.base import UTCDateTime, check_team_name, table_of, utcnow
from models.db import session_scope
from models.inbox_files import refresh_file
from models.inbox_message import InboxError, check_text
from models.inbox_table import InboxRow
from models.knowledge import ContextRow
from models.limits import LimitError, loads_json
from models.membership import delete_team
from models.memory import MemoryRow, memories_changed, vector_bytes
from models.project import ProjectDefinition, ProjectRow
from models.restore_rows import RowError, check_rows
from models.runtime_trust import untrusted
from models.settings import get_settings
from models.tables import clear_rows, metadata, team_rows
from models.task import TaskPriority, TaskState
from models.team import Member, Team, TeamError, _write_config, get_team
from models.team_folder import (  # noqa: F401  (import and export: `models.team_folder`)
    BackupError,
    export_team,
    import_team,
    read_team_folder,
)
from models.wire_support import error_lines

DUMP = "teamflow-backup.json"
MEMORIES: sa.Table = table_of(MemoryRow)
CONTEXTS: sa.Table = table_of(ContextRow)
BACKUP_FORMAT = 1


@dataclass(frozen=True)
class Restored:
    """What `restore` did: the team, the projects it added, what it could not put back as
    it was (one line each)."""

    team: str
    projects_added: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)
    """Members restored without their runtime (`models.runtime_trust`), one line each."""


# --- backup and restore --------------------------------------------------------------------


def _team_rows(session: Session, team: str) -> dict[str, list[dict[str, Any]]]:
    """Every database row that belongs to `team`, by table, in dependency order."""
    dump: dict[str, list[dict[str, Any]]] = {}
    for table, where in team_rows(team, session=session):
        # Not `memories.vector`: bytes, the embedding's copy, made again on restore.
        columns = [c for c in table.c if c is not MEMORIES.c.vector]
        rows = [dict(r._mapping) for r in session.execute(sa.select(*columns).where(where))]
        if rows:
            dump[table.name] = [{k: _jsonable(v) for k, v in r.items()} for r in rows]
    return dump


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _from_json(column: sa.Column, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, UTCDateTime):
        return datetime.fromisoformat(value)
    if isinstance(column.type, sa.Uuid):
        return uuid.UUID(value)
    return value


def backup(name: str, out: Path, *, session: Session | None = None) -> Path:
    """Writes `out` (.tar.gz): the team's folders, a dump of its database rows (its tasks'
    places in projects among them) and the `000` definitions of the projects its tasks are in.
    """
    out = Path(out)
    with session_scope(session) as s:
        get_team(name, session=s)
        rows = _team_rows(s, name)
        projects = _projects_of(s, rows.get(CONTEXTS.name, []))
    dump = {
        "format": BACKUP_FORMAT, "team": name, "created": utcnow().isoformat(), "rows": rows,
        "projects": projects,
    }  # fmt: skip
    root = mirror.home()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mirror.FILE_MODE)
    os.fchmod(fd, mirror.FILE_MODE)  # private, like everything under teams/ and tasks/
    with os.fdopen(fd, "wb") as file, tarfile.open(fileobj=file, mode="w:gz") as tar:
        for folder in (mirror.team_dir(name), mirror.tasks_dir(name)):
            if folder.exists():
                tar.add(folder, arcname=str(folder.relative_to(root)), filter=_no_links)
        data = json.dumps(dump, indent=2, ensure_ascii=False).encode()
        info = tarfile.TarInfo(DUMP)
        info.size = len(data)
        info.mtime = int(utcnow().timestamp())
        info.mode = 0o600
        tar.addfile(info, io.BytesIO(data))
    return out


def _projects_of(session: Session, contexts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `000` Project Definitions of the projects `contexts` (dumped rows) name."""
    ids = sorted({c["project_id"] for c in contexts})
    if not ids:
        return []
    found = session.exec(select(ProjectRow).where(col(ProjectRow.project_id).in_(ids)))
    return [row.to_wire().to_wire() for row in found]


def _no_links(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if info.issym() or info.islnk():
        return None
    if info.name.endswith((".state", ".lock", ".spare")):
        return None  # teamflow's own bookkeeping (and an inbox's spare copy); rebuilt on restore
    return info


def restore(archive: Path, *, force: bool = False, trust_runtimes: bool = False) -> Restored:
    """Restores a team from a `backup` archive, its tasks' places in projects included (see
    the module docstring); says what it did.

    Refuses an existing team unless `force` (which replaces it), and any archive member that
    is a link, a device, absolute, or outside `teams/{team}` and `tasks/{team}`. A member's
    runtime that runs a program or calls an endpoint this database does not hold for it is
    left out unless `trust_runtimes` (a note says which, `models.runtime_trust`).

    Refused, writing nothing, where `TEAMFLOW_MIRROR` is off: the archive's files (the
    members' artifacts among them) belong on the mirror host, whose catch-up rewrites only
    what the database holds (`models.mirror_follow`).
    """
    if not get_settings().mirror:
        raise BackupError(
            f"{archive}: a restore writes the team's files (teams/, tasks/); run it on the "
            "mirror host (TEAMFLOW_MIRROR is off here)"
        )
    try:
        tar = tarfile.open(Path(archive), "r:gz")  # noqa: SIM115 (closed by the `with` below)
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(f"{archive}: not a teamflow backup: {exc}") from None
    with tar:
        infos = _sized_members(tar, archive)  # sizes checked before anything is extracted
        dump_info = next((i for i in infos if i.name == DUMP and i.isfile()), None)
        try:
            dump = loads_json(tar.extractfile(dump_info).read(), what=f"{archive}: {DUMP}")  # type: ignore[union-attr, arg-type]  # a regular file of ours
        except LimitError as exc:
            raise BackupError(str(exc)) from None
        except (KeyError, AttributeError, ValueError, tarfile.TarError, OSError, EOFError):
            raise BackupError(f"{archive}: has no readable {DUMP}") from None
        if not isinstance(dump, dict) or dump.get("format") != BACKUP_FORMAT:
            found = dump.get("format") if isinstance(dump, dict) else None
            raise BackupError(f"{archive}: backup format {found!r} is unknown")
        name = check_team_name(str(dump.get("team", "")))
        members = _checked_members(infos, name, archive)
        rows_by_table = _checked_rows(dump.get("rows"), name, archive)
        try:  # every row held to what its store holds it to, before anything is written
            check_rows(rows_by_table, skip=frozenset({"memories.vector"}))
        except RowError as exc:
            raise BackupError(f"{archive}: {DUMP}: {exc}") from None
        projects = _checked_projects(dump.get("projects", []), archive)
        # One transaction: the old team goes only if the backup's rows go in.
        try:
            with session_scope() as s:
                exists = s.get(Team, name) is not None
                if exists and not force:
                    raise TeamError(f"team {name!r} exists; restore with --force to replace it")
                member_rows = rows_by_table.get("members", [])
                runtimes = [(str(m.get("name")), m.get("runtime")) for m in member_rows]
                refused = untrusted(name, runtimes, trust=trust_runtimes, session=s)
                for row in member_rows:
                    if row.get("name") in refused:
                        row["runtime"] = {}
                if exists:
                    delete_team(name, session=s)
                clear_rows(name, session=s)  # rows of a team deleted before, keyed by agent id
                restored = Restored(name)
                for table in metadata.sorted_tables:
                    rows = [
                        {k: _from_json(table.c[k], v) for k, v in r.items()}
                        for r in rows_by_table.get(table.name, [])
                    ]
                    if table is CONTEXTS:
                        restored = _restore_places(s, name, rows, projects)
                        continue
                    if table is MEMORIES:
                        for memory in rows:
                            memory["vector"] = vector_bytes(memory.get("embedding"))
                    if rows:
                        s.execute(table.insert(), rows)
                        _advance_id_sequence(s, table)
                if MEMORIES.name in rows_by_table:  # no process's cached vectors of it hold
                    memories_changed(name, session=s)
                _check_restored_config(s, name, archive)
                restored.untrusted.extend(refused.values())
        except (sa.exc.StatementError, TypeError, ValueError) as exc:
            if isinstance(exc, TeamError | BackupError):
                raise
            reason = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"])[0]
            raise BackupError(f"{archive}: its rows cannot be restored: {reason}") from None
        root = mirror.home()
        for info in members:
            target = root / info.name
            if info.isdir():
                mirror.ensure_dir(target)
            else:
                mirror.write_atomic(target, tar.extractfile(info).read())  # type: ignore[union-attr]  # a regular file of ours
    # The files now match the restored rows; record that, so no outside change is seen.
    _write_config(name)
    for member in dump["rows"].get("members", []):
        refresh_file(name, member["name"])
    return restored


def _checked_projects(projects: Any, archive: Path) -> dict[str, ProjectDefinition]:
    """The backup's project definitions by id, each a valid `000` Project Definition."""
    if not isinstance(projects, list):
        raise BackupError(f"{archive}: {DUMP}: projects is not a list")
    found: dict[str, ProjectDefinition] = {}
    for i, project in enumerate(projects):
        try:
            definition = ProjectDefinition.model_validate(project)
        except ValidationError as exc:
            raise BackupError(f"{archive}: {DUMP}: projects[{i}].{error_lines(exc)[0]}") from None
        found[definition.project_id] = definition
    return found


def _restore_places(
    session: Session,
    team: str,
    contexts: list[dict[str, Any]],
    carried: dict[str, ProjectDefinition],
) -> Restored:
    """Puts the team's tasks back in their projects (`contexts` rows): into the project the
    database has, else the backup's definition of it, which is added."""
    added: list[str] = []
    notes: list[str] = []
    for context in contexts:
        project_id, milestone = context["project_id"], context.get("milestone_id")
        row = session.get(ProjectRow, project_id)
        if row is None and project_id in carried:
            row = ProjectRow.from_wire(carried[project_id])
            session.add(row)
            session.flush()
            added.append(project_id)
        task = context["task_id"]
        if row is None:
            notes.append(f"task {task} is in no project now: project {project_id!r} is neither "
                         "in this database nor in the backup")  # fmt: skip
            continue
        if milestone is not None and milestone not in row.milestones:
            notes.append(f"task {task} is in project {project_id!r} without a milestone: the "
                         f"project has no milestone {milestone!r} here")  # fmt: skip
            parent = dict(context.get("parent_context") or {})
            if parent.get("milestone_id") == milestone:
                parent["milestone_id"] = None
            context = {**context, "milestone_id": None, "parent_context": parent or None}
        session.execute(CONTEXTS.insert(), [context])
    return Restored(team, added, notes)


def _check_restored_config(session: Session, team: str, archive: Path) -> None:
    """Refuses restored rows that do not make a valid `config.json`, naming the field.

    Runs inside the restore's transaction, before its commit: a refusal writes nothing.
    """
    row = session.exec(
        select(Team).where(col(Team.name) == team).execution_options(populate_existing=True)
    ).one_or_none()
    if row is None:
        raise BackupError(f"{archive}: {DUMP} has no row of team {team!r}")
    members = list(
        session.exec(
            select(Member)
            .where(col(Member.team) == team)
            .order_by(col(Member.position))
            .execution_options(populate_existing=True)
        )
    )
    for i, member in enumerate(members):
        try:
            member.to_wire()
        except ValidationError as exc:
            raise BackupError(f"{archive}: {DUMP}: members[{i}].{error_lines(exc)[0]}") from None
    try:
        row.to_wire(members)
    except ValidationError as exc:
        raise BackupError(f"{archive}: {DUMP}: {error_lines(exc)[0]}") from None


def _checked_rows(rows: Any, team: str, archive: Path) -> dict[str, list[dict[str, Any]]]:
    """The dump's rows, if every one is a row of a known table and belongs to `team`."""
    if not isinstance(rows, dict) or not all(isinstance(r, list) for r in rows.values()):
        raise BackupError(f"{archive}: {DUMP} has no rows by table")
    tasks = {r.get("id") for r in rows.get("tasks", []) if isinstance(r, dict)}
    for table_name, table_rows in rows.items():
        table = metadata.tables.get(table_name)
        if table is None:
            raise BackupError(f"{archive}: {DUMP} has rows of an unknown table {table_name!r}")
        for row in table_rows:
            if not isinstance(row, dict):
                raise BackupError(f"{archive}: {DUMP}: a row of {table_name} is not an object")
            unknown = [k for k in row if k not in table.c]
            if unknown:
                raise BackupError(f"{archive}: {DUMP}: {table_name} has no column {unknown[0]!r}")
            if table_name == "teams":
                ours = row.get("name") == team
            elif "team" in table.c:
                ours = row.get("team") == team
            elif table_name in ("task_assignees", "task_dependencies", CONTEXTS.name):
                ours = row.get("task_id") in tasks
            elif "agent_id" in table.c:
                ours = str(row.get("agent_id")).endswith(f"@{team}")
            else:
                ours = False
            if not ours:
                raise BackupError(
                    f"{archive}: {DUMP}: a row of {table_name} belongs to another team, "
                    f"not {team!r}"
                )
            if table_name == InboxRow.__tablename__:
                _check_message_row(row, archive)
            if table_name == "tasks":
                _check_task_row(row, archive)
            if table_name == CONTEXTS.name and not isinstance(row.get("project_id"), str):
                raise BackupError(f"{archive}: {DUMP}: a row of {table_name} has no project_id")
    return rows


def _check_task_row(row: dict[str, Any], archive: Path) -> None:
    """A restored task is held to what the task store holds a task to (its status, priority,
    title and description)."""
    where = f"{archive}: {DUMP}: task {row.get('id')!r}"
    for key, enum in (("status", TaskState), ("priority", TaskPriority)):
        value = row.get(key)
        if value is not None and value not in {e.value for e in enum}:
            choices = ", ".join(e.value for e in enum)
            raise BackupError(f"{where}: {key} {value!r} is not one of {choices}")
    title, description = row.get("title"), row.get("description")
    if not isinstance(title, str) or not 1 <= len(title) <= limits.MAX_NAME_CHARS:
        raise BackupError(f"{where}: title must be 1-{limits.MAX_NAME_CHARS} characters")
    if description is not None and (
        not isinstance(description, str) or len(description) > limits.MAX_DESCRIPTION_CHARS
    ):
        raise BackupError(f"{where}: description over {limits.MAX_DESCRIPTION_CHARS} characters")


def _check_message_row(row: dict[str, Any], archive: Path) -> None:
    """A restored message is held to what a send is held to (its text's size)."""
    text = row.get("text")
    where = f"{archive}: {DUMP}: message {row.get('message_id')!r}"
    if not isinstance(text, str):
        raise BackupError(f"{where}: text is not a string")
    try:
        check_text(text)
    except InboxError as exc:
        raise BackupError(f"{where}: {exc}") from None


def _advance_id_sequence(session: Session, table: sa.Table) -> None:
    """On PostgreSQL, moves a serial id's sequence past the ids just restored.

    Otherwise a database the backup is restored into hands out those ids again.
    """
    if session.get_bind().dialect.name != "postgresql" or "id" not in table.c:
        return
    if not isinstance(table.c.id.type, sa.Integer):
        return
    sequence = session.execute(
        sa.text("SELECT pg_get_serial_sequence(:table, 'id')"), {"table": table.name}
    ).scalar()
    if sequence:
        session.execute(
            sa.text(
                "SELECT setval(CAST(:seq AS regclass), GREATEST("
                f"(SELECT MAX(id) FROM {table.name}), "
                "COALESCE(pg_sequence_last_value(CAST(:seq AS regclass)), 1)))"
            ),
            {"seq": sequence},
        )


def _sized_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """The archive's members, if their count and sizes are within teamflow's limits.

    Reads the headers only (one pass over the stream); nothing is extracted or kept.
    """
    infos: list[tarfile.TarInfo] = []
    total = 0
    try:
        while (info := tar.next()) is not None:
            if len(infos) >= limits.MAX_ARCHIVE_MEMBERS:
                raise BackupError(
                    f"{archive}: more than teamflow's limit of {limits.MAX_ARCHIVE_MEMBERS} files"
                )
            if info.size > limits.MAX_ARCHIVE_MEMBER_BYTES:
                raise BackupError(
                    f"{archive}: member {info.name!r} is {info.size} bytes, over teamflow's "
                    f"limit of {limits.MAX_ARCHIVE_MEMBER_BYTES} bytes"
                )
            total += info.size
            if total > limits.MAX_ARCHIVE_BYTES:
                raise BackupError(
                    f"{archive}: its files are over teamflow's limit of "
                    f"{limits.MAX_ARCHIVE_BYTES} bytes together"
                )
            infos.append(info)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"{archive}: not a teamflow backup: {exc}") from None
    return infos


def _checked_members(
    infos: list[tarfile.TarInfo], team: str, archive: Path
) -> list[tarfile.TarInfo]:
    allowed = (f"teams/{team}", f"tasks/{team}")
    members = []
    for info in infos:
        if info.name == DUMP:
            continue
        path = Path(info.name)
        if (
            info.name.startswith("/")
            or ".." in path.parts
            or not (info.isfile() or info.isdir())
            or not any(info.name == a or info.name.startswith(a + "/") for a in allowed)
        ):
            raise BackupError(
                f"{archive}: refusing member {info.name!r}: "
                "outside the team's folders, or not a plain file or folder"
            )
        members.append(info)
    return members
