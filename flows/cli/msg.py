"""`teamflow msg`: inboxes: send, broadcast, read."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.output import JsonFlag, emit

msg_app = typer.Typer(help="Inboxes: send, broadcast, read.", no_args_is_help=True)


@msg_app.command("send")
def msg_send(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    to: Annotated[str, typer.Option("--to", help="Recipient member.")],
    sender: Annotated[str, typer.Option("--from", help="Sending member, or system.")],
    text: Annotated[str, typer.Option("--text", help="The message.")],
    summary: Annotated[str | None, typer.Option("--summary", help="Short summary.")] = None,
    kind: Annotated[
        str | None, typer.Option("--type", help="Message type, e.g. shutdown_approved.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sends a message to one member's inbox.

    A typed message (`--type shutdown_approved`, `plan_approval_response`, ...) carries its
    JSON as `--text`; it is checked against its format.
    """
    from models import inbox, inbox_message

    if kind in inbox_message.PAYLOAD_TYPES:
        payload = inbox_message.parse_payload(kind, text)
        row = inbox.send_payload(team_name, to=to, sender=sender, payload=payload, summary=summary)
    else:
        row = inbox.send(team_name, to=to, sender=sender, text=text, summary=summary, type=kind)
    if as_json:
        emit(row.entry_dict())
    else:
        typer.echo(row.message_id)


@msg_app.command("broadcast")
def msg_broadcast(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    sender: Annotated[str, typer.Option("--from", help="Sending member, or system.")],
    text: Annotated[str, typer.Option("--text", help="The message.")],
    summary: Annotated[str | None, typer.Option("--summary", help="Short summary.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Sends a message to every active member but the sender."""
    from models import inbox

    rows = inbox.broadcast(team_name, sender=sender, text=text, summary=summary)
    if as_json:
        emit([{"to": r.recipient, **r.entry_dict()} for r in rows])
    else:
        typer.echo(f"sent to {len(rows)} members: {', '.join(r.recipient for r in rows)}")


@msg_app.command("inbox")
def msg_inbox(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    unread: Annotated[bool, typer.Option("--unread", help="Only unread messages.")] = False,
    sender: Annotated[str | None, typer.Option("--from", help="Only from this sender.")] = None,
    mark_read: Annotated[
        bool, typer.Option("--mark-read", help="Mark the shown messages read.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Shows a member's inbox, oldest first."""
    from models import inbox

    rows = inbox.messages(team_name, name, unread=unread, sender=sender, mark_read=mark_read)
    if as_json:
        emit([r.entry_dict() for r in rows])
        return
    for r in rows:
        flag = " " if r.read else "*"
        kind = f" [{r.type}]" if r.type else ""
        stamp = r.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        typer.echo(f"{flag} {stamp} {r.sender}{kind}: {r.summary}")
    if not rows:
        typer.echo("no messages")
