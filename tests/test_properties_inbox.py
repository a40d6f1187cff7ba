"""Generated `001` notifications and `000` messages round-trip through the inbox table."""

from __future__ import annotations

from factories import DB_SETTINGS
from hypothesis import given
from sqlmodel import Session, delete, select
from strategies import elmo_messages, notifications

from models import db
from models.inbox_table import InboxRow
from models.notification import Message, NotificationAdapter


@DB_SETTINGS
@given(data=notifications())
def test_a_notification_round_trips_through_an_inbox_row(
    session: Session, db_url: str, data: dict
) -> None:
    wire = NotificationAdapter.validate_python(data)
    session.add(InboxRow.from_notification("a-team", wire))
    session.commit()
    try:
        with Session(db.engine(db_url)) as fresh:
            row = fresh.exec(select(InboxRow)).one()
            back = NotificationAdapter.dump_python(row.to_notification(), mode="json")
            assert back == NotificationAdapter.dump_python(wire, mode="json")
    finally:
        session.exec(delete(InboxRow))
        session.commit()


@DB_SETTINGS
@given(data=elmo_messages)
def test_a_000_message_round_trips_through_an_inbox_row(
    session: Session, db_url: str, data: dict
) -> None:
    wire = Message.model_validate(data)
    session.add(InboxRow.from_message("a-team", wire))
    session.commit()
    try:
        with Session(db.engine(db_url)) as fresh:
            row = fresh.exec(select(InboxRow)).one()
            assert row.to_message().to_wire() == wire.to_wire()
    finally:
        session.exec(delete(InboxRow))
        session.commit()
