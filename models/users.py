"""People with a token: the users of the REST API and the CLI (`TEAMFLOW_TOKEN`), their store.

`teamflow user add NAME --role lead|approver|viewer [--team T]` makes a user with one token,
shown once and kept only as its SHA-256 (as member tokens are, `models.identity`);
`list_users` and `revoke_user` do the rest. `principal_of_bearer` turns any bearer token, a
user's (`tfu_...`) or a member's (`tft_...`), into the `Principal` that `authorize` judges.

What each role may do is in `models.identity.RULES`, with every other caller's rules.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.base import utcnow
from models.db import session_scope
from models.identity import (
    Door,
    Principal,
    PrincipalKind,
    Unauthorized,
    User,
    _digest,
    principal_of_token,
    team_has_users,
)
from models.team import check_member_name, get_team

USER_TOKEN_PREFIX = "tfu_"
"""Every user token starts with this (member tokens start with `tft_`)."""

ROLES = tuple(k.value for k in sorted(PrincipalKind.users()))
"""The roles a user may have: approver, lead, viewer."""


class UserError(ValueError):
    """A user that cannot be added, found or revoked; the message says why."""


def add_user(
    name: str, role: str, *, team: str | None = None, session: Session | None = None
) -> tuple[User, str]:
    """A new user `name` with `role` (in `team`, or every team), and its token, returned
    once. A revoked user's name may be given again (a new token); a live one is refused."""
    if role not in ROLES:
        raise UserError(f"role {role!r} is not one of {', '.join(ROLES)}")
    check_member_name(name)
    token = USER_TOKEN_PREFIX + secrets.token_urlsafe(32)
    with session_scope(session) as s:
        if team is not None:
            get_team(team, session=s)
        row = s.get(User, name)
        if row is not None and row.is_active:
            raise UserError(f"user {name!r} exists; revoke it first: teamflow user revoke {name}")
        if row is None:
            row = User(name=name, role=role, team=team, token_hash=_digest(token))
        else:
            row.role, row.team, row.token_hash = role, team, _digest(token)
            row.created_at, row.revoked_at = utcnow(), None
        s.add(row)
        s.flush()
        return row, token


def list_users(*, team: str | None = None, session: Session | None = None) -> list[User]:
    """Every user, by name; with `team`, those whose role holds there (theirs or every team)."""
    with session_scope(session) as s:
        query = select(User).order_by(User.name)
        if team is not None:
            query = query.where(sa.or_(col(User.team).is_(None), col(User.team) == team))
        return list(s.exec(query))


def revoke_user(name: str, *, session: Session | None = None) -> User:
    """Ends the user's token at once; `UserError` if there is no such user."""
    with session_scope(session) as s:
        row = s.get(User, name)
        if row is None:
            raise UserError(f"no user named {name!r}")
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            s.add(row)
            s.flush()
        return row


def principal_of_bearer(
    token: str, door: Door = Door.API, *, session: Session | None = None
) -> Principal:
    """The caller a bearer token names: a user (`tfu_...`) or a member (`tft_...`);
    `Unauthorized` if it is unknown or revoked (the message never repeats the token)."""
    token = (token or "").strip()
    if not token.startswith(USER_TOKEN_PREFIX):
        return principal_of_token(token, door, session=session)
    with session_scope(session) as s:
        row = s.exec(select(User).where(User.token_hash == _digest(token))).first()
        if row is None:
            raise Unauthorized("the token is not a teamflow user token (or was mistyped)")
        if not row.is_active:
            raise Unauthorized(
                f"the token of user {row.name} was revoked; ask for a new one: "
                f"teamflow user add {row.name} --role {row.role}"
            )
        return Principal.user(row.role, row.name, row.team, door)


def token_file() -> Path:
    """Where the person's own token is kept (`TEAMFLOW_TOKEN_FILE`)."""
    from models.settings import get_settings

    return get_settings().token_file.expanduser()


def own_token() -> str | None:
    """The token the CLI acts with: `TEAMFLOW_TOKEN`, else the one in the person's token
    file, else none (the local user). A file others may read is refused: it no longer
    proves who decides."""
    from models.settings import get_settings

    if token := get_settings().token:
        return token
    path = token_file()
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.getuid():
        raise UserError(
            f"{path} may be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"make it yours alone: chmod 600 {path}"
        )
    return path.read_text(encoding="utf-8").strip() or None


def save_own_token(token: str, *, session: Session | None = None) -> Principal:
    """Checks `token` (a live user's or member's) and keeps it in the token file, mode 0600,
    written whole or not at all. Returns whom it names."""
    who = principal_of_bearer(token, Door.CLI, session=session)
    path = token_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token.strip() + "\n").encode())
    finally:
        os.close(fd)
    os.replace(partial, path)
    return who


__all__ = [
    "User",
    "UserError",
    "add_user",
    "list_users",
    "own_token",
    "principal_of_bearer",
    "revoke_user",
    "save_own_token",
    "team_has_users",
    "token_file",
]  # fmt: skip
