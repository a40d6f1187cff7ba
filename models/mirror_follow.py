"""The mirror host catching up with the other machines' commits.

With workers on several machines, one host's `TEAMFLOW_HOME` holds the team files that
outside tools read and append (the mirror host, `TEAMFLOW_MIRROR` on); every other host
sets it off and writes no team file after its commits (`models.mirror`). The mirror host's
`teamflow worker` calls `catch_up` every `TEAMFLOW_MIRROR_FOLLOW_SECONDS`, which writes there
what the commit hook would have written after those commits:

- an inbox whose counter version (bumped by every change) is past the version its file was
  written at: `models.inbox_files.refresh_file`, which first takes in what outside tools
  appended or flagged, exactly as after a send on this host;
- a `config.json` or `task-status.json` whose content in the database is not the file's. A
  `config.json` someone else edited is left as it is, for the next change to the team or
  `teamflow sync` to take in (as on one machine).

On one machine every process mirrors into the same home and the commit hooks keep the files
current, so a catch-up finds nothing to write.
"""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, select

from models import db, mirror
from models.inbox_files import refresh_file
from models.inbox_table import InboxCounter
from models.settings import get_settings
from models.task_status import TaskStatusRow
from models.team import Team, config_of


def _differs(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() != data
    except FileNotFoundError:
        return True


def catch_up() -> list[str]:
    """Writes the team files of this home that the database has moved past; returns what
    it wrote (`inbox team/member`, `config team`, `task-status team/member`). Nothing when
    this host does not mirror."""
    if not get_settings().mirror:
        return []
    with Session(db.engine()) as s:
        teams = {
            t.name: mirror.dump_json(config_of(t, session=s).to_wire())
            for t in s.exec(select(Team))
        }
        counters = [(c.team, c.member, c.version) for c in s.exec(select(InboxCounter))]
        statuses = [
            (r.team, r.member, mirror.dump_json(r.to_wire().to_wire()))
            for r in s.exec(select(TaskStatusRow))
        ]
    written: list[str] = []
    for team, config in teams.items():
        path = mirror.config_path(team)
        if not mirror.changed_outside(path) and _differs(path, config):
            mirror.writer("config")(team)
            written.append(f"config {team}")
    for team, member, version in counters:
        if team not in teams:
            continue
        state = mirror.read_state(mirror.inbox_path(team, member))
        if state is None or state.version < version:
            refresh_file(team, member, version=version)
            written.append(f"inbox {team}/{member}")
    for team, member, status in statuses:
        if team in teams and _differs(
            mirror.member_tasks_dir(team, member) / "task-status.json", status
        ):
            mirror.writer("task_status")(team, member)
            written.append(f"task-status {team}/{member}")
    return written
