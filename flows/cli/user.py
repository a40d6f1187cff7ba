"""`teamflow user`: people with a token and a role: add, list, revoke."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit

user_app = typer.Typer(
    help="People with a token (REST API, MCP, the CLI): add, list, revoke, login, logout.",
    no_args_is_help=True,
)


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    role: Annotated[str, typer.Option("--role", help="lead, approver or viewer.")],
    team: Annotated[
        str | None, typer.Option("--team", help="The team the role is for (default: every team).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Adds a person with a role and prints its token, once (teamflow keeps its hash).

    A viewer reads; an approver decides the plans of the teams that list it
    (`teamflow team settings TEAM --approvers NAME`); a lead does what the team's lead does.
    """
    from models.users import add_user

    row, token = add_user(name, role, team=team)
    if as_json:
        emit({**row.to_json(), "token": token})
    else:
        typer.echo(token)


@user_app.command("list")
def user_list(as_json: JsonFlag = False) -> None:
    """Lists the users: name, role, team, and whether revoked (never their tokens)."""
    from models.users import list_users

    rows = list_users()
    if as_json:
        emit([r.to_json() for r in rows])
        return
    for r in rows:
        state = "revoked" if r.revoked_at else "active"
        typer.echo(f"{r.name:<20} {r.role:<9} {r.team or '(every team)':<24} {state}")
    if not rows:
        typer.echo("no users")


@user_app.command("revoke")
def user_revoke(name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Ends the user's token at once."""
    from models.users import revoke_user

    revoke_user(name)
    typer.echo(f"revoked the token of user {name}")


@user_app.command("login")
def user_login() -> None:
    """Keeps your token (read from stdin) in your token file, mode 0600, so the CLI decides
    as you without TEAMFLOW_TOKEN: `teamflow user add NAME --role lead | teamflow user login`.

    The file is `TEAMFLOW_TOKEN_FILE` (default ~/.config/teamflow/token). It keeps other
    accounts out, not programs that run as you: see docs/api.md, "What a token proves".
    """
    import sys

    from models.users import save_own_token, token_file

    token = sys.stdin.readline().strip()
    if not token:
        raise typer.BadParameter("no token on stdin: pipe it in (teamflow user login < FILE)")
    who = save_own_token(token)
    typer.echo(f"logged in as {who.describe()}; token kept in {token_file()}")


@user_app.command("logout")
def user_logout() -> None:
    """Removes your token file; the CLI acts as the local user again."""
    from models.users import token_file

    path = token_file()
    path.unlink(missing_ok=True)
    typer.echo(f"logged out; {path} removed")
