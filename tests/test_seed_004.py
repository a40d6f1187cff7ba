"""Seed 004: team config, members, inbox entries and the typed team messages."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError
from sqlmodel import Session, select

from models import db
from models.inbox_message import InboxMessage, TeamPayloadAdapter
from models.inbox_table import InboxRow
from models.team import Member, Team
from models.team_config import TeamConfig, TeamMember

FIXTURES = Path(__file__).parent / "fixtures"
InboxFile = TypeAdapter(list[InboxMessage])


def load(name: str):
    return json.loads((FIXTURES / name).read_text())


def dump_inbox(entries: list[InboxMessage]) -> list[dict]:
    return [e.to_wire() for e in entries]


@pytest.mark.parametrize("name", ["004_config_empty.json", "004_config_members.json"])
def test_team_config_examples_round_trip(name: str) -> None:
    data = load(name)
    assert TeamConfig.model_validate(data).to_wire() == data


def test_shutdown_member_example_round_trips() -> None:
    data = load("004_member_shutdown.json")
    member = TeamMember.model_validate(data)
    assert member.is_active is False
    assert member.metadata == {
        "tasks_completed": 5,
        "total_tokens": 12500,
        "shutdown_reason": "tasks_complete",
    }
    assert member.to_wire() == data


@pytest.mark.parametrize(
    "name", ["004_inbox_initial.json", "004_inbox_regular.json", "004_inbox_shutdown_request.json"]
)
def test_inbox_examples_round_trip(name: str) -> None:
    data = load(name)
    assert dump_inbox(InboxFile.validate_python(data)) == data


@pytest.mark.parametrize(
    "name",
    [
        "004_idle_available.json",
        "004_idle_waiting.json",
        "004_idle_complete.json",
        "004_shutdown_approved.json",
        "004_plan_approval_request.json",
        "004_plan_approval_response_approved.json",
        "004_plan_approval_response_denied.json",
    ],
)
def test_typed_message_examples_round_trip(name: str) -> None:
    data = load(name)
    payload = TeamPayloadAdapter.validate_python(data)
    assert payload.type == data["type"]
    assert payload.to_wire() == data


def test_config_without_schema_version_reads_as_1_0_0() -> None:
    data = load("004_config_empty.json")
    del data["schemaVersion"]
    config = TeamConfig.model_validate(data)
    assert config.version == "1.0.0"
    assert "schemaVersion" not in config.to_wire()


def test_unknown_fields_are_kept_and_written_back() -> None:
    data = load("004_config_members.json")
    data["leadAgentId"] = "team-lead@research-team"
    data["members"][0]["joinedAt"] = 1771238100000
    data["members"][0]["cwd"] = "/work/q4"
    data["members"][1]["planModeRequired"] = True
    config = TeamConfig.model_validate(data)
    assert config.members[1].plan_mode_required is True
    assert config.to_wire() == data


def test_a_team_may_widen_its_models() -> None:
    data = load("004_config_members.json")
    data["members"][0]["model"] = "gpt-4o"
    with pytest.raises(ValidationError, match="model"):
        TeamConfig.model_validate(data)
    data["allowedModels"] = ["gpt-4o"]
    assert TeamConfig.model_validate(data).members[0].model == "gpt-4o"


def _member(**changes):
    data = copy.deepcopy(load("004_config_members.json")["members"][0])
    data.update(changes)
    return data


def _config(**changes):
    data = load("004_config_members.json")
    data.update(changes)
    return data


def _entry(**changes):
    data = load("004_inbox_regular.json")[1]
    data.update(changes)
    return data


# Each case: the model, the input, and a field name the error must name.
BAD = [
    ("config", _config(name="Research_Team"), "name"),
    ("config", _config(name="ab"), "name"),
    ("config", _config(name="a" * 65), "name"),
    ("config", _config(name="../etc"), "name"),
    ("config", _config(name="-research"), "name"),
    ("config", _config(description=""), "description"),
    ("config", _config(description="x" * 501), "description"),
    ("config", _config(createdAt="16/02/2026"), "createdAt"),
    ("config", _config(createdAt="2026-02-16T10:30:00.000"), "createdAt"),
    ("config", {k: v for k, v in _config().items() if k != "members"}, "members"),
    ("config", _config(members=[_member(agentId="analyst-1@other-team")]), "agentId"),
    ("config", _config(members=[_member(), _member()]), "name"),
    ("member", _member(agentId="analyst-2@research-team"), "agentId"),
    ("member", _member(agentId="analyst-1"), "agentId"),
    ("member", _member(model="gpt-9"), "model"),
    ("member", _member(tmuxPaneId="88"), "tmuxPaneId"),
    ("member", _member(tmuxPaneId="%x1"), "tmuxPaneId"),
    ("member", {k: v for k, v in _member().items() if k != "tmuxPaneId"}, "tmuxPaneId"),
    ("member", _member(color="purple"), "color"),
    ("member", _member(agentType="wizard"), "agentType"),
    ("member", _member(backendType="ssh"), "backendType"),
    ("member", _member(isActive="maybe"), "isActive"),
    ("member", _member(name="../x", agentId="../x@research-team"), "name"),
    ("member", _member(spawnedAt="yesterday"), "spawnedAt"),
    ("entry", _entry(color="purple"), "color"),
    ("entry", _entry(read="no"), "read"),
    ("entry", _entry(type="gossip"), "type"),
    ("entry", _entry(timestamp="2026-02-16 10:40"), "timestamp"),
    ("entry", {k: v for k, v in _entry().items() if k != "summary"}, "summary"),
    ("entry", _entry(**{"from": "../../etc/passwd"}), "from"),
    ("payload", {**load("004_idle_available.json"), "idleReason": "sleeping"}, "idleReason"),
    ("payload", {**load("004_shutdown_approved.json"), "paneId": "88"}, "paneId"),
    ("payload", {**load("004_plan_approval_response_denied.json"), "approve": "nah"}, "approve"),
    ("payload", {**load("004_plan_approval_request.json"), "requestId": ""}, "requestId"),
    ("payload", {**load("004_idle_available.json"), "type": "nap_notification"}, "type"),
]
MODELS = {
    "config": TeamConfig.model_validate,
    "member": TeamMember.model_validate,
    "entry": InboxMessage.model_validate,
    "payload": TeamPayloadAdapter.validate_python,
}


def _named(exc: ValidationError) -> str:
    """Every error's location and message, as `teamflow validate` prints them."""
    return "\n".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors())


@pytest.mark.parametrize(
    ("kind", "data", "field"), BAD, ids=[f"{k}-{f}-{i}" for i, (k, _, f) in enumerate(BAD)]
)
def test_bad_input_is_rejected_naming_the_field(kind: str, data, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        MODELS[kind](data)
    assert field in _named(info.value)


# --- through the database ------------------------------------------------------------------


def _store_config(session: Session, config: TeamConfig) -> None:
    session.add(Team.from_wire(config))
    session.flush()
    for i, member in enumerate(config.members):
        session.add(Member.from_wire(config.name, member, position=i))
    session.commit()


def _load_config(url: str, name: str) -> TeamConfig:
    with Session(db.engine(url)) as fresh:
        team = fresh.get(Team, name)
        members = fresh.exec(select(Member).where(Member.team == name).order_by(Member.position))
        return team.to_wire(list(members))


@pytest.mark.parametrize("name", ["004_config_empty.json", "004_config_members.json"])
def test_team_config_round_trips_through_the_database(
    session: Session, db_url: str, name: str
) -> None:
    data = load(name)
    data["leadAgentId"] = "team-lead@research-team"
    _store_config(session, TeamConfig.model_validate(data))
    assert _load_config(db_url, data["name"]).to_wire() == data


@pytest.mark.parametrize(
    "name", ["004_inbox_initial.json", "004_inbox_regular.json", "004_inbox_shutdown_request.json"]
)
def test_inbox_entries_round_trip_through_the_database(
    session: Session, db_url: str, name: str
) -> None:
    data = load(name)
    for seq, entry in enumerate(InboxFile.validate_python(data), start=1):
        row = InboxRow.from_entry("research-team", "analyst-1", entry)
        row.seq = seq
        session.add(row)
    session.commit()
    with Session(db.engine(db_url)) as fresh:
        rows = fresh.exec(select(InboxRow).order_by(InboxRow.id)).all()
        assert dump_inbox([r.to_entry() for r in rows]) == data


def test_structured_entry_keeps_its_typed_payload(session: Session) -> None:
    request = load("004_plan_approval_request.json")
    entry = InboxMessage.model_validate(
        {
            "from": "analyst-1",
            "text": json.dumps(request),
            "summary": "Q4 analysis plan",
            "timestamp": request["timestamp"],
            "color": "blue",
            "read": False,
            "messageId": "msg-plan-1",
            "type": "plan_approval_request",
        }
    )
    session.add(InboxRow.from_entry("research-team", "team-lead", entry))
    session.commit()
    row = session.exec(select(InboxRow)).one()
    assert TeamPayloadAdapter.validate_python(row.payload).request_id == "plan-xyz789"
