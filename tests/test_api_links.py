"""Approval links: a signed one-time link per decider opens the decision page (the plan as
Markdown, approve, deny with feedback) served by the API; a used, expired or altered link
is refused; the decision is on record as the link's (via `link`, identity `link:NAME`)."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from api_world import TEAM, build, client

from models import approval, approval_links


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setenv("TEAMFLOW_LINK_KEY", "a-test-key-of-the-settings")


def _path(url: str) -> str:
    return url.split("127.0.0.1:4300", 1)[1]


def refusal(answer) -> str:
    """The reason a link's page gives a person for not deciding (a page, not JSON)."""
    assert answer.headers["content-type"].startswith("text/html"), answer.text
    found = re.search(r'<p id="refused">(.*?)</p>', answer.text, re.S)
    assert found, answer.text
    return html.unescape(found.group(1))


def links_of(world) -> str:
    request = approval.get_request(world.plan)
    return approval_links.links_for(world.plan, ["carol"], request.deadline)["carol"]


def test_a_link_opens_the_page_and_decides_once_as_its_decider(db_url: str, home: Path) -> None:
    world = build()
    request = approval.get_request(world.plan)
    links = approval_links.links_for(world.plan, ["carol", "ada"], request.deadline)
    with client() as api:
        page = api.get(_path(links["carol"]))
        assert page.status_code == 200
        assert "<ol>" in page.text and "read the logs" in page.text  # the plan as Markdown
        assert "You decide as <strong>carol</strong>" in page.text
        empty = api.post(_path(links["carol"]), data={"decision": "deny", "feedback": " "})
        assert empty.status_code == 422 and "a denial needs feedback" in refusal(empty)
        done = api.post(_path(links["carol"]), data={"decision": "deny", "feedback": "tests?"})
        assert done.status_code == 200 and "denied by carol" in done.text
        again = api.post(_path(links["carol"]), data={"decision": "approve"})
        assert again.status_code == 409 and "already denied by carol" in refusal(again)
        other = api.post(_path(links["ada"]), data={"decision": "approve"})
        assert other.status_code == 409  # used: the plan is decided once
        shown = api.get(_path(links["ada"]))
        assert "already denied by carol" in shown.text and "<form" not in shown.text
    row = approval.get_request(world.plan)
    assert (row.status, row.decided_by, row.decided_via, row.decided_identity) == (
        "denied", "carol", "link", "link:carol",
    )  # fmt: skip


def test_an_altered_or_expired_link_is_refused(db_url: str, home: Path) -> None:
    world = build()
    soon = datetime.now(UTC) + timedelta(hours=1)
    token = approval_links.sign(world.plan, "carol", soon)
    payload, signature = token.split(".")
    forged = approval_links.sign(world.plan, "team-lead", soon, key=b"guessed")
    expired = approval_links.sign(world.plan, "carol", datetime.now(UTC) - timedelta(seconds=1))
    with client() as api:
        for bad, why in (
            (payload + "." + signature[::-1], "altered"),
            (forged, "altered"),
            (expired, "expired"),
            ("nonsense", "malformed"),
        ):
            answer = api.post(f"/api/v1/links/{bad}", data={"decision": "approve"})
            assert answer.status_code == 403, answer.text
            assert why in refusal(answer)
        # A link for someone who is no decider of the team decides nothing.
        bob = approval_links.sign(world.plan, "bob", soon)
        refused = api.post(f"/api/v1/links/{bob}", data={"decision": "approve"})
        assert refused.status_code == 403 and "no longer a decider" in refusal(refused)
        unknown = api.post(_path(links_of(world)), data={"decision": "maybe"})
        assert unknown.status_code == 422 and "approve or deny" in refusal(unknown)
    assert approval.get_request(world.plan).status == "pending"


def test_without_a_key_setting_a_private_key_file_is_made(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEAMFLOW_LINK_KEY")
    key = approval_links.link_key()
    path = home / "link.key"
    assert path.stat().st_mode & 0o777 == 0o600 and approval_links.link_key() == key
    assert TEAM


class Receiver:
    """A fake webhook receiver on a real socket: it refuses its first `fail_first` posts
    (500), then keeps the JSON bodies it gets."""

    def __init__(self, fail_first: int = 0) -> None:
        import http.server
        import json
        import threading

        self.bodies: list[dict] = []
        self.tries = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.tries += 1
                data = self.rfile.read(int(self.headers["Content-Length"]))
                if outer.tries <= fail_first:
                    self.send_response(500)
                else:
                    outer.bodies.append(json.loads(data))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_plan_is_decided_through_a_link_that_arrived_by_webhook(db_url: str, home: Path) -> None:
    from flows.plan_notice import notify_deciders
    from models import team

    world = build()
    receiver = Receiver(fail_first=1)
    try:
        assert notify_deciders(world.plan).startswith("no notice: the team has no webhook")
        team.update_settings(TEAM, {"notify_webhook": receiver.url})
        said = notify_deciders(world.plan)
        assert said == f"notice posted to {receiver.url} (3 link(s))", said
    finally:
        receiver.close()
    assert receiver.tries == 2  # the first post was refused, and tried again
    [notice] = receiver.bodies
    assert (notice["event"], notice["summary"]) == ("plan_waiting", "fix the build")
    assert notice["plan"]["requestId"] == world.plan
    assert sorted(notice["links"]) == ["ada", "carol", "team-lead"]  # never alice herself
    with client() as api:
        done = api.post(_path(notice["links"]["ada"]), data={"decision": "approve"})
    assert done.status_code == 200, done.text
    row = approval.get_request(world.plan)
    assert (row.status, row.decided_by, row.decided_identity) == ("approved", "ada", "link:ada")
    with pytest.raises(ValueError, match="http"):
        team.update_settings(TEAM, {"notify_webhook": "ftp://x"})


def test_an_unreachable_webhook_is_said_so_without_failing(db_url: str, home: Path) -> None:
    from flows import plan_notice
    from models import team

    world = build()
    team.update_settings(TEAM, {"notify_webhook": "http://127.0.0.1:9/hook"})
    said = plan_notice.notify_deciders(world.plan)
    assert said.startswith("notice not delivered to http://127.0.0.1:9/hook after 3 tries")
