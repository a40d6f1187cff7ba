"""Generated seed 004 documents round-trip JSON -> model -> database row -> model -> JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import Session, delete, select

from models import db
from models.inbox_message import InboxMessage, TeamPayloadAdapter
from models.inbox_table import InboxRow
from models.team import Member, Team
from models.team_config import TeamConfig

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)
kebab = st.from_regex(r"[a-z0-9]{3,10}(-[a-z0-9]{1,8}){0,2}", fullmatch=True)
member_names = st.from_regex(r"[a-z][a-z0-9_-]{0,15}", fullmatch=True)
js_times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S") + f".{d.microsecond // 1000:03d}Z")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
metadata = st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), json_values, max_size=3)
colors = st.sampled_from(["blue", "green", "yellow", "magenta", "cyan", "red"])


def optional(draw, data: dict, key: str, strategy) -> None:
    if draw(st.booleans()):
        data[key] = draw(strategy)


@st.composite
def members(draw, team: str, name: str) -> dict:
    backend = draw(st.sampled_from(["tmux", "in-process", "docker", "k8s"]))
    data = {
        "agentId": f"{name}@{team}",
        "name": name,
        "agentType": draw(st.sampled_from(["general-purpose", "specialized"])),
        "model": draw(st.sampled_from(["haiku", "sonnet", "opus"])),
        "prompt": draw(text),
        "color": draw(colors),
    }
    if backend == "tmux" or draw(st.booleans()):
        data["tmuxPaneId"] = f"%{draw(st.integers(0, 10**6))}"
    data["backendType"] = backend
    data["isActive"] = draw(st.booleans())
    optional(draw, data, "spawnedAt", js_times)
    optional(draw, data, "shutdownAt", js_times)
    optional(draw, data, "metadata", metadata)
    optional(draw, data, "planModeRequired", st.booleans())
    optional(draw, data, "cwd", text)  # a field teamflow does not know: kept as it is
    return data


@st.composite
def configs(draw) -> dict:
    team = draw(kebab)
    names = draw(st.lists(member_names, max_size=4, unique=True))
    data = {
        "name": team,
        "description": draw(st.text(min_size=1, max_size=500).filter(lambda s: "\x00" not in s)),
        "members": [draw(members(team, n)) for n in names],
        "createdAt": draw(js_times),
    }
    optional(draw, data, "schemaVersion", st.sampled_from(["1.0.0", "1.1.0"]))
    optional(draw, data, "metadata", metadata)
    optional(draw, data, "leadAgentId", st.just(f"team-lead@{team}"))
    return data


@st.composite
def entries(draw) -> dict:
    data = {
        "from": draw(st.one_of(st.just("system"), member_names)),
        "text": draw(text),
        "summary": draw(text),
        "timestamp": draw(js_times),
        "color": draw(
            st.sampled_from(["blue", "green", "yellow", "magenta", "cyan", "red", "system"])
        ),
        "read": draw(st.booleans()),
    }
    optional(draw, data, "messageId", st.uuids().map(lambda u: f"msg-{u}"))
    optional(draw, data, "type", st.sampled_from(["system_init", "user_message", "agent_message"]))
    optional(draw, data, "metadata", metadata)
    return data


@st.composite
def team_messages(draw) -> dict:
    kind = draw(st.sampled_from(["idle", "request", "response", "approved", "shutdown"]))
    ts = draw(js_times)
    rid = draw(st.from_regex(r"[a-z]{2,6}-[a-z0-9]{3,12}", fullmatch=True))
    if kind == "idle":
        data = {"type": "idle_notification", "from": draw(member_names)}
        data["idleReason"] = draw(
            st.sampled_from(["available", "waiting_response", "task_complete"])
        )
        optional(draw, data, "timestamp", st.just(ts))
    elif kind == "request":
        data = {
            "type": "plan_approval_request",
            "from": draw(member_names),
            "plan": draw(text.filter(bool)),
            "summary": draw(text),
            "timestamp": ts,
            "requestId": rid,
        }
    elif kind == "response":
        data = {"type": "plan_approval_response", "requestId": rid, "approve": draw(st.booleans())}
        optional(draw, data, "feedback", text)
        optional(draw, data, "timestamp", st.just(ts))
    elif kind == "approved":
        data = {"type": "shutdown_approved", "requestId": rid}
        data["paneId"] = f"%{draw(st.integers(0, 999))}"
        data["backendType"] = "tmux"
        optional(draw, data, "timestamp", st.just(ts))
    else:
        data = {"type": "shutdown_request", "requestId": rid, "from": draw(member_names)}
        optional(draw, data, "reason", text)
        optional(draw, data, "timestamp", st.just(ts))
    return data


@given(configs())
def test_config_json_round_trips(data: dict) -> None:
    assert TeamConfig.model_validate(data).to_wire() == data


@given(team_messages())
def test_team_message_json_round_trips(data: dict) -> None:
    assert TeamPayloadAdapter.validate_python(data).to_wire() == data


@SETTINGS
@given(data=configs())
def test_config_round_trips_through_the_database(session: Session, db_url: str, data: dict) -> None:
    config = TeamConfig.model_validate(data)
    session.add(Team.from_wire(config))
    session.flush()
    for i, member in enumerate(config.members):
        session.add(Member.from_wire(config.name, member, position=i))
    session.commit()
    try:
        with Session(db.engine(db_url)) as fresh:
            team = fresh.get(Team, config.name)
            rows = fresh.exec(
                select(Member).where(Member.team == config.name).order_by(Member.position)
            ).all()
            assert team.to_wire(list(rows)).to_wire() == data
    finally:
        session.exec(delete(Member))
        session.exec(delete(Team))
        session.commit()


@SETTINGS
@given(data=st.lists(entries(), min_size=1, max_size=4, unique_by=lambda e: e.get("messageId")))
def test_inbox_entries_round_trip_through_the_database(
    session: Session, db_url: str, data: list[dict]
) -> None:
    for seq, entry in enumerate(data, start=1):
        row = InboxRow.from_entry("a-team", "analyst-1", InboxMessage.model_validate(entry))
        row.seq = seq
        session.add(row)
    session.commit()
    try:
        with Session(db.engine(db_url)) as fresh:
            rows = fresh.exec(select(InboxRow).order_by(InboxRow.id)).all()
            assert [r.to_entry().to_wire() for r in rows] == data
    finally:
        session.exec(delete(InboxRow))
        session.commit()


@SETTINGS
@given(data=team_messages(), read=st.booleans())
def test_typed_message_round_trips_inside_an_inbox_entry(
    session: Session, db_url: str, data: dict, read: bool
) -> None:
    entry = InboxMessage.model_validate(
        {
            "from": "team-lead",
            "text": json.dumps(data),
            "summary": data["type"],
            "timestamp": "2026-02-16T10:40:00.000Z",
            "color": "yellow",
            "read": read,
            "messageId": "msg-typed",
            "type": data["type"],
        }
    )
    session.add(InboxRow.from_entry("a-team", "analyst-1", entry))
    session.commit()
    try:
        with Session(db.engine(db_url)) as fresh:
            row = fresh.exec(select(InboxRow)).one()
            assert TeamPayloadAdapter.validate_python(row.payload).to_wire() == data
            assert json.loads(row.to_entry().text) == data
    finally:
        session.exec(delete(InboxRow))
        session.commit()
