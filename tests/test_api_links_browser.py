"""The decision page of an approval link, as a person uses it: headless Chromium against the
API's real server. The link arrived by webhook; the person reads the plan, denies it with
feedback; the same link opened again shows the decision and no form.

Needs Debian's `chromium` and `chromium-driver`; skipped, saying so, where they are missing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_world import TEAM, build
from test_api import free_port
from test_api_links import Receiver
from test_ui_browser import CHROMEDRIVER, CHROMIUM, chromium, wait

from models import approval, team

pytestmark = pytest.mark.system

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("browser tests need chromium and chromium-driver", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402


@pytest.fixture
def served(db_url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    import uvicorn

    from flows.api.app import build as build_app

    port = free_port()
    monkeypatch.setenv("TEAMFLOW_API_PORT", str(port))  # the links point here
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    server = uvicorn.Server(uvicorn.Config(build_app(), host="127.0.0.1", port=port,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the API server did not start"
            threading.Event().wait(0.01)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_person_denies_a_plan_from_the_link_page_in_a_browser(
    served: int, tmp_path: Path
) -> None:
    from flows.plan_notice import notify_deciders

    world = build()
    receiver = Receiver()
    team.update_settings(TEAM, {"notify_webhook": receiver.url})
    try:
        assert notify_deciders(world.plan).startswith("notice posted")
    finally:
        receiver.close()
    link = receiver.bodies[0]["links"]["carol"]
    assert link.startswith(f"http://127.0.0.1:{served}/api/v1/links/")
    with chromium(tmp_path) as browser:
        browser.get(link)
        plan = browser.find_element(By.ID, "plan")
        assert [li.text for li in plan.find_elements(By.TAG_NAME, "li")] == [
            "read the logs", "fix it",
        ]  # fmt: skip
        browser.find_element(By.ID, "feedback").send_keys("Add a test first.")
        browser.find_element(By.CSS_SELECTOR, "button[value=deny]").click()
        # the click posts the form; the answer page comes when the server has decided
        outcome = wait(browser, lambda b: b.find_elements(By.ID, "outcome"), "the answer page")[
            0
        ].text
        assert outcome == f"Plan {world.plan} denied by carol."
        browser.get(link)
        assert "already denied by carol" in browser.find_element(By.ID, "outcome").text
        assert browser.find_elements(By.TAG_NAME, "form") == []
    row = approval.get_request(world.plan)
    assert (row.status, row.feedback, row.decided_identity) == (
        "denied", "Add a test first.", "link:carol",
    )  # fmt: skip
