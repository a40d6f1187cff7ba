"""Deciding plans in the Prefect UI, as a person does it: headless Chromium, a real server.

One Prefect server (its UI served at its root), the deployments of `prefect.yaml` and one
`teamflow worker` for the module, teamflow's database on SQLite. Each test asks for a plan
with `teamflow plan request`, opens the page the CLI printed, presses Resume, fills the
form and submits it, and checks what the user would: the run goes on (or waits again,
with the reason in its logs) and the member's inbox gets its `plan_approval_response`.

A deployed run waits in process first; a decision the run refuses makes it wait again, and
its second wait suspends (the worker is free), so the next decision in the form resumes a
suspended run. Screenshots of each step go to `screenshots/` under the test's tmp_path
(the path is printed; pytest keeps the folders of the last runs, failing ones included).

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them); skipped, saying
so, where they are missing.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import forkserver
import pytest
from cli_runner import subprocess_teamflow
from factories import TEAM, research_team
from prefect_server import ROOT, Server, prefect_server, talk_to, wait_until
from teamflow_workers import register_deployments, teamflow_workers

from models import approval, db, inbox

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PLAN = "## Analysis plan\n\n1. Load the **Q4** sales data\n2. Compare regions"
LONG = 120  # seconds: a bound against a hang only (a loaded machine is slow, not stuck)

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        f"browser tests need {CHROMIUM} and {CHROMEDRIVER} "
        "(Debian: apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="browser tests need selenium")

from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@dataclass
class Served:
    server: Server
    env: dict[str, str]
    browser: Any


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A Prefect server with its UI, teamflow's deployments, a worker, and a browser."""
    tmp = tmp_path_factory.mktemp("ui")
    url = f"sqlite:///{tmp / 'teamflow.db'}"
    with pytest.MonkeyPatch.context() as patch, prefect_server(tmp) as server:
        patch.setenv("TEAMFLOW_DATABASE_URL", url)
        patch.setenv("TEAMFLOW_HOME", str(tmp / "teamflow-home"))
        db.dispose_engines()
        db.upgrade(url)
        research_team()
        env = {
            **server.env,
            "TEAMFLOW_DATABASE_URL": url,
            "TEAMFLOW_HOME": str(tmp / "teamflow-home"),
            # The first wait stays in process (no race with the browser); a second one
            # suspends, as it does for a user.
            "TEAMFLOW_SUSPEND_AFTER_SECONDS": "3600",
        }
        env.pop("PREFECT_API_DATABASE_CONNECTION_URL")
        register_deployments(server, tmp / "deploy.log")
        with teamflow_workers(server, tmp, count=1, env=env), chromium(tmp) as browser:
            yield Served(server, env, browser)
        db.dispose_engines()


@contextlib.contextmanager
def chromium(tmp: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # No software GPU: with it, Chromium's GPU process drew the run graph's canvas in
    # software all along, most of a core (169 s of CPU in one run of this module). The
    # graph stays blank; the tests read the form, the logs and the state badges.
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--disable-software-rasterizer",
                     "--disable-gpu-compositing", "--window-size=1280,1400",
                     f"--user-data-dir={tmp / 'chromium-profile'}"):  # fmt: skip
        options.add_argument(argument)
    service = webdriver.ChromeService(
        executable_path=str(CHROMEDRIVER), log_output=str(tmp / "chromedriver.log")
    )
    browser = webdriver.Chrome(service=service, options=options)
    try:
        browser.set_page_load_timeout(LONG)
        yield browser
    finally:
        browser.quit()


class Shots:
    """Numbered screenshots of each step, in a folder of the test's own."""

    def __init__(self, browser: Any, folder: Path) -> None:
        self.browser, self.folder, self.count = browser, folder, 0
        folder.mkdir(parents=True, exist_ok=True)
        print(f"screenshots: {folder}")

    def take(self, name: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{name}.png"
        self.browser.save_screenshot(str(path))
        return path


@pytest.fixture
def ui(served: Served, tmp_path: Path) -> Iterator[tuple[Served, Shots]]:
    shots = Shots(served.browser, tmp_path / "screenshots")
    try:
        yield served, shots
    finally:
        # The last thing the browser showed, whatever happened (a failure above all).
        with contextlib.suppress(WebDriverException):
            shots.take("last")
        with contextlib.suppress(WebDriverException):
            (shots.folder / "last.html").write_text(served.browser.page_source)


# --- what a user does -------------------------------------------------------------------


def teamflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess_teamflow(args, env, cwd=ROOT, timeout=LONG, stdin_devnull=False)


def ask(served: Served, summary: str) -> dict[str, Any]:
    """`teamflow plan request ... --json`: the request id, its run, the run's UI page."""
    done = teamflow(
        served.env, "plan", "request", TEAM, "--from", "analyst-1", "--plan", PLAN,
        "--summary", summary, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_state(served: Served, run_id: str) -> Any:
    from prefect.client.orchestration import get_client

    with (
        talk_to(served.server.api),
        get_client(sync_client=True) as client,
    ):
        return client.read_flow_run(UUID(run_id)).state


def wait_state(served: Served, run_id: str, name: str, *, not_id: Any = None) -> Any:
    """The run's state once it is called `name` (and is another state than `not_id`)."""
    return wait_until(
        lambda: (s := run_state(served, run_id)).name == name and s.id != not_id and s,
        LONG,
        f"the run to be {name}",
    )


def wait(browser: Any, condition: Any, what: str) -> Any:
    return WebDriverWait(browser, LONG, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition, f"waiting for {what}"
    )


def text_on_page(text: str) -> Any:
    return lambda browser: text in browser.find_element(By.TAG_NAME, "body").text


def badge(state: str) -> Any:
    """The run's state badge at the top of its page says `state`."""
    return EC.presence_of_element_located(
        (By.XPATH, f"//*[contains(@class, 'state-badge')][normalize-space()='{state}']")
    )


def open_form(browser: Any, url: str, shots: Shots, step: str, member: str = "analyst-1") -> Any:
    """Opens the run's page, presses Resume, and returns the form's dialog."""
    browser.get(url)
    resume = wait(
        browser,
        EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Resume']")),
        "the Resume button",
    )
    wait(browser, text_on_page("Waiting for a decision"), "the run's logs")
    shots.take(f"{step}-run-page")
    resume.click()
    dialog = wait(
        browser,
        EC.visibility_of_element_located(
            (By.XPATH, "//*[@class='p-modal__card'][.//button[normalize-space()='Submit']]")
        ),
        "the resume form",
    )
    wait(browser, text_on_page(f"Plan of {member} (research-team)"), "the plan in the form")
    return dialog


def field(dialog: Any, label: str, tag: str) -> Any:
    """The `tag` control of the form field labelled `label` ("Feedback (Optional)"...)."""
    return dialog.find_element(
        By.XPATH,
        f".//*[contains(concat(' ', @class, ' '), ' schema-form-property ')]"
        f"[.//*[contains(@class, 'schema-form-property__label')][starts-with(., '{label}')]]"
        f"//{tag}",
    )


def fill(dialog: Any, *, decision: str, feedback: str = "", approver: str | None = None) -> None:
    choice = Select(field(dialog, "Decision", "select[not(contains(@class, 'placeholder'))]"))
    choice.select_by_visible_text(decision)
    if feedback:
        field(dialog, "Feedback", "textarea").send_keys(feedback)
    if approver is not None:
        box = field(dialog, "Approver", "textarea")
        box.clear()
        box.send_keys(approver)


SERVER_ERROR_TOAST = "Oops. Something went wrong."
"""What the UI shows when the server refuses the resume (Prefect's SQLite server answers
"database is locked" now and then on a loaded machine); the form stays open, filled."""


def submit(browser: Any, dialog: Any, shots: Shots, step: str, tries: int = 3) -> None:
    """Presses Submit until the form closes; as a person does, again after a server error."""
    shots.take(f"{step}-form-filled")
    for attempt in range(1, tries + 1):
        dialog.find_element(By.XPATH, ".//button[normalize-space()='Submit']").click()
        outcome = wait(
            browser,
            lambda b: (
                (EC.staleness_of(dialog)(b) and "closed")
                or (SERVER_ERROR_TOAST in b.find_element(By.TAG_NAME, "body").text and "error")
            ),
            "the form to close",
        )
        if outcome == "closed":
            break
        shots.take(f"{step}-server-error-{attempt}")
        assert attempt < tries, f"the server refused the form {tries} times"
        for close in browser.find_elements(By.CSS_SELECTOR, ".p-toast__close-btn"):
            with contextlib.suppress(Exception):
                close.click()
        wait(
            browser,
            lambda b: SERVER_ERROR_TOAST not in b.find_element(By.TAG_NAME, "body").text,
            "the error to go",
        )
    shots.take(f"{step}-submitted")


def responses(request_id: str) -> list[dict[str, Any]]:
    return [
        m.payload
        for m in inbox.messages(TEAM, "analyst-1")
        if m.type == "plan_approval_response" and m.payload["requestId"] == request_id
    ]


def see_completed(served: Served, asked: dict[str, Any], shots: Shots, step: str) -> None:
    """The run ends Completed, and its page says so."""
    state = wait_until(
        lambda: (s := run_state(served, asked["flowRunId"])).is_final() and s, LONG, "the end"
    )
    assert state.is_completed(), state
    served.browser.get(asked["url"])
    wait(served.browser, badge("Completed"), "the page to show the run Completed")
    wait(served.browser, text_on_page(f"Plan {asked['requestId']}"), "the outcome in the logs")
    shots.take(f"{step}-completed")


# --- the tests --------------------------------------------------------------------------


def test_a_plan_is_approved_in_the_form_of_its_paused_run(ui: tuple[Served, Shots]) -> None:
    served, shots = ui
    browser = served.browser
    asked = ask(served, "approve me")
    # The page the CLI printed is the run's page in the UI the server serves.
    root = served.server.api.removesuffix("/api")
    assert asked["url"] == f"{root}/runs/flow-run/{asked['flowRunId']}"
    wait_state(served, asked["flowRunId"], "Paused")
    dialog = open_form(browser, asked["url"], shots, "1")
    # The plan, rendered from Markdown, and who may decide, above the form.
    bold = ".//*[contains(@class, 'markdown-renderer__text--strong')][normalize-space()='Q4']"
    assert dialog.find_element(By.XPATH, bold)
    assert "Who may decide: coordinator" in dialog.text
    # Nothing preset for the decision; the approver starts as the lead.
    choice = Select(field(dialog, "Decision", "select[not(contains(@class, 'placeholder'))]"))
    assert [o.text for o in choice.options] == ["approve", "deny"]
    approver = field(dialog, "Approver", "textarea")
    wait(browser, lambda _: approver.get_property("value") == "coordinator", "the lead preset")
    shots.take("1-form")

    fill(dialog, decision="approve", feedback="Looks good")
    submit(browser, dialog, shots, "1")
    see_completed(served, asked, shots, "1")
    [response] = wait_until(lambda: responses(asked["requestId"]), LONG, "the response")
    assert (response["approve"], response["feedback"]) == (True, "Looks good")
    assert approval.get_request(asked["requestId"]).decided_by == "coordinator"


def test_a_denial_needs_feedback_and_then_resumes_the_suspended_run(
    ui: tuple[Served, Shots],
) -> None:
    served, shots = ui
    browser = served.browser
    asked = ask(served, "deny me")
    paused = wait_state(served, asked["flowRunId"], "Paused")
    dialog = open_form(browser, asked["url"], shots, "1")
    fill(dialog, decision="deny")  # no feedback
    submit(browser, dialog, shots, "1")
    # Refused by the run, which says why in its logs, and waits again: suspended now, the
    # worker free.
    wait_state(served, asked["flowRunId"], "Suspended", not_id=paused.id)
    browser.get(asked["url"])
    wait(browser, text_on_page("a denial needs feedback"), "the refusal in the run's logs")
    wait(browser, badge("Suspended"), "the page to show the run Suspended")
    shots.take("2-refused-and-suspended")
    assert responses(asked["requestId"]) == []

    dialog = open_form(browser, asked["url"], shots, "3")
    fill(dialog, decision="deny", feedback="Compare regions first")
    submit(browser, dialog, shots, "3")
    see_completed(served, asked, shots, "3")
    [response] = wait_until(lambda: responses(asked["requestId"]), LONG, "the response")
    assert (response["approve"], response["feedback"]) == (False, "Compare regions first")
    assert approval.get_request(asked["requestId"]).status == "denied"


def test_an_approver_who_may_not_decide_is_refused_and_the_run_waits_again(
    ui: tuple[Served, Shots],
) -> None:
    served, shots = ui
    browser = served.browser
    asked = ask(served, "not yours")
    paused = wait_state(served, asked["flowRunId"], "Paused")
    dialog = open_form(browser, asked["url"], shots, "1")
    fill(dialog, decision="approve", approver="analyst-2")
    submit(browser, dialog, shots, "1")
    wait_state(served, asked["flowRunId"], "Suspended", not_id=paused.id)
    browser.get(asked["url"])
    wait(browser, text_on_page("analyst-2 may not decide plans"), "the refusal in the logs")
    shots.take("2-refused")
    assert responses(asked["requestId"]) == []
    told = [m.text for m in inbox.messages(TEAM, "analyst-2") if m.sender == "system"]
    assert any(t.startswith(f"Decision on plan {asked['requestId']} refused") for t in told)

    dialog = open_form(browser, asked["url"], shots, "3")
    fill(dialog, decision="approve")
    submit(browser, dialog, shots, "3")
    see_completed(served, asked, shots, "3")
    [response] = wait_until(lambda: responses(asked["requestId"]), LONG, "the response")
    assert response["approve"] is True
    assert approval.get_request(asked["requestId"]).decided_by == "coordinator"


def test_the_ui_is_served_with_the_api_it_calls(served: Served) -> None:
    """The UI is the server's own static app, pointed at the server's API."""
    import httpx

    root = served.server.api.removesuffix("/api")
    settings = httpx.get(f"{root}/ui-settings", timeout=10).json()
    assert settings["api_url"] == served.server.api


def test_plans_of_an_outside_member_are_decided_in_the_form_and_from_the_cli(
    ui: tuple[Served, Shots],
) -> None:
    """An outside member (`--runtime mcp`: an MCP client with its token) asks twice with
    `plan_request`: one plan is approved in the form of its paused run, the other with
    `teamflow plan approve`; the member reads both decisions with `plan_status`."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from test_mcp import call

    from models import identity, membership

    served, shots = ui
    membership.add_member(
        TEAM, "outsider", model="sonnet", prompt="p", plan_mode_required=True,
        runtime={"kind": "mcp"},
    )  # fmt: skip
    token = identity.issue_token(TEAM, "outsider")

    async def as_outsider(tool: str, **arguments: Any) -> Any:
        command, *args = forkserver.command(forkserver.TEAMFLOW, "flows.cli", ["mcp"])
        server = StdioServerParameters(
            command=command, args=args, cwd=str(ROOT),
            env={**served.env, "TEAMFLOW_TOKEN": token},
        )  # fmt: skip
        async with Client(server, read_timeout_seconds=LONG) as client:
            return await call(client, tool, **arguments)

    def asks(summary: str) -> dict[str, Any]:
        return anyio.run(
            lambda: as_outsider(
                "plan_request", team_name=TEAM, plan=PLAN, summary=summary, wait_seconds=0
            )
        )

    in_form, by_cli = asks("approve me in the form"), asks("approve me from the CLI")
    assert (in_form["status"], by_cli["status"]) == ("pending", "pending")
    run_id = in_form["url"].rsplit("/", 1)[-1]
    wait_state(served, run_id, "Paused")
    dialog = open_form(served.browser, in_form["url"], shots, "o1", member="outsider")
    fill(dialog, decision="approve", feedback="The form says yes")
    submit(served.browser, dialog, shots, "o1")
    see_completed(
        served, {"flowRunId": run_id, "url": in_form["url"], "requestId": in_form["request_id"]},
        shots, "o1",
    )  # fmt: skip

    approved = teamflow(served.env, "plan", "approve", by_cli["request_id"],
                        "--feedback", "The CLI says yes")  # fmt: skip
    assert approved.returncode == 0, approved.stderr
    for asked, feedback in ((in_form, "The form says yes"), (by_cli, "The CLI says yes")):
        state = wait_until(
            lambda a=asked: (
                (s := anyio.run(lambda: as_outsider("plan_status", request_id=a["request_id"])))
                and s["status"] != "pending"
                and s
            ),
            LONG,
            "the decision, read by the member",
        )
        assert (state["status"], state["decided_by"], state["feedback"]) == (
            "approved", "coordinator", feedback,
        )  # fmt: skip
