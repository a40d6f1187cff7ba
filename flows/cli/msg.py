"""`teamflow msg`: inboxes: send, broadcast, read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from flows.cli.output import JsonFlag, emit

if TYPE_CHECKING:
    from models.identity import Principal


def _local() -> Principal:
    """Who the CLI acts as: the local user (imported late, so `--help` loads no table)."""
    from models.identity import Principal

    return Principal.local()


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
        row = inbox.send_payload(
            team_name, to=to, sender=sender, payload=payload, summary=summary, who=_local()
        )
    else:
        row = inbox.send(
            team_name, to=to, sender=sender, text=text, summary=summary, type=kind, who=_local()
        )
    if as_json:
        emit(row.entry_dict())
    else:
        typer.echo(row.message_id)


@msg_app.command("ask")
def msg_ask(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    text: Annotated[str, typer.Option("--text", help="What you say to the member.")],
    session_id: Annotated[
        str | None, typer.Option("--session", help="Your device session id.")
    ] = None,
    content_type: Annotated[
        str, typer.Option("--content-type", help="text, voice_transcript or image_id.")
    ] = "text",
    sender: Annotated[
        str | None, typer.Option("--from", help="Speak as this member (default: the lead).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Says something to a member as a person: a `001` user_message."""
    from models import notify

    row = notify.user_message(
        team_name, to=name, text=text, content_type=content_type, session_id=session_id,
        sender=sender,
    )  # fmt: skip
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

    rows = inbox.broadcast(team_name, sender=sender, text=text, summary=summary, who=_local())
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
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="004 inbox entries, 001 notifications or 000 Messages (as JSON)."
        ),
    ] = "004",
    as_json: JsonFlag = False,
) -> None:
    """Shows a member's inbox, oldest first.

    `--format 001` and `--format 000` print the same messages as `001` notifications or
    `000` Messages (JSON); `--json` prints the `004` entries.
    """
    from models import inbox

    if fmt not in inbox.VIEW_FORMATS:
        raise inbox.InboxError(f"unknown format {fmt!r}; formats: {', '.join(inbox.VIEW_FORMATS)}")
    rows = inbox.messages(
        team_name, name, unread=unread, sender=sender, mark_read=mark_read, who=_local()
    )
    if as_json or fmt != "004":
        emit(inbox.view(rows, fmt))
        return
    for r in rows:
        flag = " " if r.read else "*"
        kind = f" [{r.type}]" if r.type else ""
        stamp = r.timestamp.strftime("%Y-%m-%d %H:%M:%S")
        typer.echo(f"{flag} {stamp} {r.sender}{kind}: {r.summary}")
    if not rows:
        typer.echo("no messages")


@msg_app.command("mark")
def msg_mark(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    name: str,
    message_id: Annotated[str, typer.Argument(metavar="ID")],
    junk: Annotated[
        bool, typer.Option("--junk/--not-junk", help="Set (or clear) the 000 status junk.")
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Marks a message of a member's inbox as junk (`000` status `junk`)."""
    from models import inbox

    row = inbox.mark_junk(team_name, name, message_id, junk=junk)
    if as_json:
        emit(row.to_message().model_dump(mode="json"))
    else:
        typer.echo(f"{row.message_id} {'junk' if row.junk else 'not junk'}")
