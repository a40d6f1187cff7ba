"""Approval links through Prefect's own notification machinery: a notification block saved
on a real Prefect server (a custom webhook one, whose receiver is a fake on a real socket)
gets the waiting plan and each decider's link as text, and the link decides the plan."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from api_world import TEAM, build, client
from cli_runner import teamflow
from test_api_links import Receiver

from models import approval, team

pytestmark = pytest.mark.usefixtures("prefect_api")


def _block(name: str, url: str) -> str:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    CustomWebhookNotificationBlock(
        name=name, url=url, json_data={"text": "{{subject}}\n{{body}}"}
    ).save(name, overwrite=True)
    return f"custom-webhook/{name}"


def test_the_links_reach_a_person_through_a_notification_block(
    db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.plan_notice import notify_deciders

    monkeypatch.setenv("TEAMFLOW_LINK_KEY", "a-test-key-of-the-settings")
    world = build()
    receiver = Receiver(fail_first=1)  # the chat service refuses once: tried again
    try:
        slug = _block("ops-chat", receiver.url)
        set_it = teamflow(["team", "settings", TEAM, "--notify-block", slug])
        assert set_it.returncode == 0, set_it.stderr
        said = notify_deciders(world.plan)
    finally:
        receiver.close()
    assert said == f"notice sent through block {slug} (3 link(s))"
    text = receiver.bodies[0]["text"]
    assert text.startswith("Plan of alice (api-team) waits for a decision\n")
    link = re.search(r"- carol: (\S+)", text).group(1)
    with client() as api:
        page = api.post(link.split("127.0.0.1:4300", 1)[1], data={"decision": "approve"})
    assert page.status_code == 200, page.text
    row = approval.get_request(world.plan)
    assert (row.status, row.decided_identity) == ("approved", "link:carol")


def test_a_missing_or_wrong_block_is_said_and_refused(db_url: str, home: Path) -> None:
    from flows.plan_notice import notify_deciders

    world = build()
    bad = teamflow(["team", "settings", TEAM, "--notify-block", "../x"])
    assert bad.returncode == 1
    assert "notify_block must be a block's TYPE/NAME" in bad.stderr
    from models.db import session_scope

    with session_scope() as s:
        assert "notify_block" not in (team.get_team(TEAM, session=s).settings or {})
    team.update_settings(TEAM, {"notify_block": "custom-webhook/nobody-saved-this"})
    said = notify_deciders(world.plan)
    assert said.startswith("notice not sent through block custom-webhook/nobody-saved-this:")
