"""Consent before a foreign program runs: the runtimes of imported and restored members.

A member's runtime can run a program (`command`) or send its work to an endpoint (`openai`
with a `base_url`). Sharing a team folder or a backup must not share code execution: such a
runtime, when it comes from files, is taken only if this database already holds the same
runtime for that member of that team (a backup of one's own team restored as it was) or the
user said `--trust-runtimes`. Otherwise the member comes in with no runtime, and the caller
lists each program and endpoint it left out (`teamflow member set` gives one back).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from sqlmodel import Session, select

from models.team import Member


def foreign_part(runtime: Any) -> str | None:
    """What a runtime would run or call (`runs: sh -c '...'`, `calls: http://...`), or None."""
    if not isinstance(runtime, dict):
        return None
    kind = runtime.get("kind")
    if kind == "command":
        argv = runtime.get("argv", runtime.get("command"))
        if isinstance(argv, list):
            argv = shlex.join(str(a) for a in argv)
        return f"runs: {str(argv)[:200]}"
    if kind == "openai" and runtime.get("base_url"):
        return f"calls: {str(runtime['base_url'])[:200]}"
    return None


def untrusted(
    team: str, runtimes: Iterable[tuple[str, Any]], *, trust: bool, session: Session
) -> dict[str, str]:
    """The members of `runtimes` (name, runtime) whose runtime runs or calls something this
    database does not already hold for them, each with a line (`name runs: ...`). Empty
    when `trust`."""
    if trust:
        return {}
    known = {m.name: m.runtime for m in session.exec(select(Member).where(Member.team == team))}
    return {
        name: f"{name} {part}"
        for name, runtime in runtimes
        if (part := foreign_part(runtime)) and known.get(name) != runtime
    }


TRUST_HINT = (
    "not run without your word: imported with no runtime; to keep them, import again with "
    "--trust-runtimes, or give one with teamflow member set {team} NAME --runtime ..."
)
"""What follows the list of left-out runtimes (`{team}`: the team's name)."""
