"""`teamflow demo`: the seed `004` research team, end to end, on the embedded default.

The story: the coordinator creates `research-team` with `analyst-1` (haiku, sales trends,
plans need approval) and `analyst-2` (sonnet, customer behaviour), writes sample Q4 sales and
satisfaction data, sends the two task messages of `004`'s example, and hands them one team
task. The scripted agents work it with real tools: analyst-1 asks for its plan to be
approved (the lead decides by policy, or a person does with `--interactive`), then finds the
top revenue trends, segment performance and regional variations; analyst-2 starts the
satisfaction cross-reference as an ASYNC action and, meanwhile, looks at segments. Both
write `analysis.csv` and `report.md`, and analyst-1 remembers its top finding as a shared
memory. A follow-up task, the Q1 planning brief, has analyst-2 recall that finding and write
`brief.md` from it. Then both are shut down through the handshake, and the
demo prints what happened and where to look.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from models import db, membership
from models import team as teams
from models.settings import get_settings

TEAM = "research-team"
LEAD = "coordinator"
# The prompts and the plan of seed 004's examples.
PROMPTS = {
    "analyst-1": "You are a data analyst specializing in sales trends. Analyze data carefully "
    "and provide actionable insights with supporting evidence.",
    "analyst-2": "You are a data analyst specializing in customer behavior patterns. Focus on "
    "qualitative insights and behavioral trends.",
}
PLAN = (
    "## Analysis Plan\n\n1. Load Q4 sales data\n2. Calculate revenue trends\n"
    "3. Segment by customer type\n4. Generate visualization\n5. Write summary report\n\n"
    "Estimated time: 30 minutes"
)
APPROVAL_FEEDBACK = "Looks good. Also include comparison with Q3 data."
REVISED_PLAN = PLAN + "\n\n### Revised after the lead's feedback\n\n{denial.feedback}"


def _step(status: str, thought: str, actions: list[dict], *, stop: bool = False,
          response: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "status": status,
        "thoughts": [{"type": "PLAN" if actions else "OBSERVATION", "content": thought}],
        "actions": actions,
        "stop": stop,
        "response": response,
    }


def _tool(name: str, params: dict[str, Any], execution: str = "SYNC") -> dict[str, Any]:
    return {"action": name, "type": "tool", "params": params, "execution": execution}


REPORT_1 = """# Q4 sales analysis (analyst-1)

## Top 3 revenue trends
{result.analyze_sales.top_trends.0.summary}
{result.analyze_sales.top_trends.1.summary}
{result.analyze_sales.top_trends.2.summary}

## Key insights
{result.analyze_sales.summary}

## Recommendation
Invest behind {result.analyze_sales.top_trends.0.product}; review the pricing of declining lines.
"""

REPORT_2 = """# Customer behaviour and satisfaction (analyst-2)

## Segments
{result.analyze_sales.summary}

## Satisfaction cross-reference
{result.cross_reference_satisfaction.summary}
"""

# A denied plan: analyst-1 revises it with the lead's feedback and asks again.
ON_DENIAL: dict[str, dict[str, Any]] = {
    "analyst-1": _step("EXECUTING", "The lead denied my plan: revise it with the feedback.", [
        {"action": "request_plan_approval", "type": "internal",
         "params": {"plan": REVISED_PLAN, "summary": "Q4 analysis plan (revised)"},
         "execution": "SYNC"},
    ]),
}  # fmt: skip

PLAYBOOKS: dict[str, list[dict[str, Any]]] = {
    "analyst-1": [
        _step("EXECUTING", "My plans need the lead's approval first.", [
            {"action": "request_plan_approval", "type": "internal",
             "params": {"plan": PLAN, "summary": "Q4 analysis plan"}, "execution": "SYNC"},
        ]),
        _step("EXECUTING", "Plan approved: compute trends, segments and regions.",
              [_tool("analyze_sales", {"sales_path": "{sales_path}"})]),
        _step("EXECUTING", "Write the regional table and the report.", [
            _tool("write_csv", {"path": "artifacts/analysis.csv",
                                "rows": "{result.analyze_sales.by_region}",
                                "columns": ["region", "revenue", "share_pct", "vs_average_pct",
                                            "quarter_change_pct"]}),
            _tool("write_file", {"path": "artifacts/report.md", "content": REPORT_1}),
        ]),
        _step("EXECUTING", "For the team's later tasks: remember the top finding, shared.", [
            {"action": "remember", "type": "internal", "execution": "SYNC",
             "params": {"content": "Q4 top revenue trend: "
                                   "{result.analyze_sales.top_trends.0.summary}",
                        "memory_type": "knowledge", "scope": "shared", "importance": 0.9,
                        "tags": ["q4", "sales"]}},
        ]),
        _step("SUCCESS", "Report written.", [], stop=True,
              response="Top trend: {result.analyze_sales.top_trends.0.summary}"),
    ],
    "analyst-2": [
        _step("TASK_STARTED", "The cross-reference takes longer: start it in the background.", [
            _tool("cross_reference_satisfaction",
                  {"sales_path": "{sales_path}", "satisfaction_path": "{satisfaction_path}"},
                  "ASYNC"),
        ]),
        _step("EXECUTING", "Meanwhile: segment performance.",
              [_tool("analyze_sales", {"sales_path": "{sales_path}"})]),
        _step("EXECUTING", "Both results are in: write the table and the report.", [
            _tool("write_csv", {"path": "artifacts/analysis.csv",
                                "rows": "{result.cross_reference_satisfaction.pairs}",
                                "columns": ["region", "segment", "revenue", "score",
                                            "responses"]}),
            _tool("write_file", {"path": "artifacts/report.md", "content": REPORT_2}),
        ]),
        _step("SUCCESS", "Report written.", [], stop=True,
              response="Satisfaction vs revenue: "
                       "{result.cross_reference_satisfaction.correlation.revenue_vs_score}"),
    ],
}  # fmt: skip


FOLLOW_UP = "Q1 planning brief"
BRIEF = """# Q1 planning brief (analyst-2)

What the team found in Q4, recalled from its memory:
{result.recall.memories.0.content}
"""
# The follow-up task: analyst-2 recalls what analyst-1 remembered during the first task.
TASK_PLAYBOOKS: dict[str, dict[str, list[dict[str, Any]]]] = {
    "analyst-2": {FOLLOW_UP: [
        _step("EXECUTING", "What did the team learn about Q4 revenue?", [
            {"action": "recall", "type": "internal", "execution": "SYNC",
             "params": {"query": "q4 revenue trend", "memory_type": "knowledge", "limit": 3}},
        ]),
        _step("EXECUTING", "Write the brief from the recalled finding.",
              [_tool("write_file", {"path": "artifacts/brief.md", "content": BRIEF})]),
        _step("SUCCESS", "Brief written.", [], stop=True,
              response="{result.recall.memories.0.content}"),
    ]},
}  # fmt: skip


def messages(sales: Path, satisfaction: Path) -> list[dict[str, Any]]:
    """The coordinator's task messages of seed 004, pointing at the demo's files."""
    return [
        {
            "to": "analyst-1",
            "text": f"Please analyze the sales data in {sales}. Focus on:\n1. Top 3 revenue "
            "trends\n2. Customer segment performance\n3. Regional variations\n\nProvide a "
            "summary with key insights and recommendations.",
            "summary": "Q4 sales analysis request",
            "metadata": {"priority": "high", "estimated_time": "30min"},
        },
        {
            "to": "analyst-1",
            "text": f"Also cross-reference with customer satisfaction scores from {satisfaction}",
            "summary": "Additional analysis requirement",
            "metadata": {"related_to": "Q4 sales analysis request"},
        },
    ]


def runtime(name: str) -> dict[str, Any]:
    """The member's scripted runtime: its playbook, and how it revises a denied plan."""
    config: dict[str, Any] = {"kind": "scripted", "playbook": PLAYBOOKS[name]}
    if name in ON_DENIAL:
        config["on_denial"] = ON_DENIAL[name]
    if name in TASK_PLAYBOOKS:
        config["tasks"] = TASK_PLAYBOOKS[name]
    return config


Decider = Callable[[Any], tuple[bool, str | None]]
"""Given a pending `PlanApproval`, the lead's decision: (approve, feedback)."""


def by_policy(request: Any) -> tuple[bool, str | None]:
    """The lead's policy in the demo: approve, with a remark."""
    return True, APPROVAL_FEEDBACK


def set_up(home: Path, echo: Callable[[str], None]) -> tuple[str, Path, Path]:
    """The team, its tools and data, the messages and the task; returns the task id."""
    from flows.demo_data import write_all
    from flows.tools import install_builtin_tools
    from models import inbox
    from models.task import create_task

    db.upgrade()
    if any(t.name == TEAM for t in teams.list_teams()):
        echo(f"  replacing the {TEAM} of an earlier demo")
        membership.delete_team(TEAM)
    sales, satisfaction = write_all(home / "demo" / "data")
    echo(f"  sample data: {sales} and {satisfaction.name}")
    install_builtin_tools()
    membership.create_team(TEAM, description="Q4 sales analysis team", lead=LEAD)
    for name, model, plan_mode in (("analyst-1", "haiku", True), ("analyst-2", "sonnet", None)):
        membership.add_member(
            TEAM, name, model=model, prompt=PROMPTS[name], plan_mode_required=plan_mode,
            runtime=runtime(name),
        )  # fmt: skip
    echo(f"  team {TEAM}: {LEAD} (lead), analyst-1 (haiku), analyst-2 (sonnet)")
    for message in messages(sales, satisfaction):
        to = message.pop("to")
        inbox.send(TEAM, to=to, sender=LEAD, **message)
    task = create_task(
        TEAM, title="Q4 sales analysis", creator=LEAD, assignees=["analyst-1", "analyst-2"],
        description="Top 3 revenue trends, customer segment performance, regional variations, "
        "and the cross-reference with customer satisfaction.", priority="high",
        params={"sales_path": str(sales), "satisfaction_path": str(satisfaction)},
    )  # fmt: skip
    echo(f"  task {task.id}: {task.title}")
    return str(task.id), sales, satisfaction


class Lead(threading.Thread):
    """The coordinator's side: decides plans (by policy, or waits for a person) and answers
    for the agents when they are asked to shut down."""

    def __init__(
        self, interactive: bool, echo: Callable[[str], None], decide: Decider = by_policy
    ) -> None:
        super().__init__(name="demo-lead", daemon=True)
        self.interactive, self.echo, self.done = interactive, echo, threading.Event()
        self.decide = decide
        self.decided: set[str] = set()
        self.ui: str | None = None  # the Prefect UI the runs go to (None: the user's)
        self.api: str | None = None  # the Prefect API the runs go to (None: the user's)

    def run(self) -> None:
        from flows.decisions import plan_decision_input
        from flows.runner import resume, run_url
        from models import approval

        while not self.done.wait(0.1):
            for request in approval.list_requests(TEAM, pending=True):
                if request.request_id in self.decided:
                    continue
                self.decided.add(request.request_id)
                self.echo(f"  plan {request.request_id} from {request.member}: {request.summary}")
                if self.interactive:
                    where = "the Prefect UI"
                    if request.flow_run_id and self.ui:
                        where = run_url(request.flow_run_id, self.ui)
                    elif request.flow_run_id:  # a temporary server: its address is its own
                        where = f"the Prefect UI (run {request.flow_run_id})"
                    self.echo(
                        f"    approve it at {where}, or: teamflow plan approve "
                        f"{request.request_id} --feedback '...'"
                    )
                    continue
                # As `teamflow plan approve|deny` does: record the decision, resume the run.
                approve, feedback = self.decide(request)
                row = approval.decide(
                    request.request_id, approve=approve, decider=LEAD, feedback=feedback
                )
                if request.flow_run_id:
                    # If the resume fails, the run still finds the decision in the database.
                    run_input = plan_decision_input(approve, feedback, LEAD)
                    resume(request.flow_run_id, run_input, api=self.api)
                why = "the lead's policy" if approve else f"feedback: {feedback}"
                self.echo(f"    {row.status} by {LEAD} ({why})")
            self.answer_shutdowns()

    def answer_shutdowns(self) -> None:
        """An idle scripted agent agrees to shut down, as a member would: its answer goes to
        the lead's inbox as `shutdown_approved`."""
        from models import inbox
        from models.inbox_message import ShutdownApproved

        for name in ("analyst-1", "analyst-2"):
            try:
                unread = inbox.messages(TEAM, name, unread=True)
            except ValueError:
                continue
            # Only its shutdown requests: the agent's other messages are its own to read.
            for entry in unread:
                if entry.type == "shutdown_request" and entry.payload:
                    inbox.mark_read(TEAM, name, [entry.message_id])
                    answer = ShutdownApproved.model_validate(
                        {"requestId": entry.payload["requestId"], "backendType": "in-process"}
                    )
                    inbox.send_payload(TEAM, to=LEAD, sender=name, payload=answer)


async def _run(
    task_id: str, echo: Callable[[str], None]
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """The task; once it is done, the follow-up that recalls its finding; the shutdowns."""
    from flows.shutdown import shutdown_member
    from flows.team_task import run_team_task
    from models.task import create_task

    result = await run_team_task(task_id, team=TEAM)
    follow_up = None
    if result["status"] == "completed":
        task = create_task(
            TEAM, title=FOLLOW_UP, creator=LEAD, assignees=["analyst-2"],
            description="Brief the Q1 plan on what the team learned in Q4.",
        )  # fmt: skip
        echo(f"  task {task.id}: {task.title} (recalls what analyst-1 remembered)")
        follow_up = await run_team_task(str(task.id), team=TEAM)
    shutdowns = [
        await shutdown_member(TEAM, name, reason="tasks_complete", timeout_s=60)
        for name in ("analyst-1", "analyst-2")
    ]
    return result, follow_up, shutdowns


def run(
    *,
    interactive: bool = False,
    echo: Callable[[str], None] = print,
    decide: Decider = by_policy,
) -> dict[str, Any]:
    """Runs the demo; returns what happened (the task result, shutdowns, files).

    `decide` is the lead's decision on each plan (default: approve); `interactive` leaves
    the decisions to a person instead. Raises `flows.runner.NoServer` (one line) before
    anything is written when `PREFECT_API_URL` is set and no Prefect server answers there.
    """
    # The terminal shows warnings only; the runs' INFO lines still reach the Prefect UI.
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    home = get_settings().home
    started = time.monotonic()
    server = _server()  # before anything is written: no server, no task left behind
    echo("1/4 setting up the team, its data and its task")
    task_id, _, _ = set_up(home, echo)
    echo("2/4 starting Prefect (the first start takes a few seconds)")
    echo(f"  Prefect: {server or 'a temporary local server, stopped at the end'}")
    with _temporary_server(home, echo) if server is None else contextlib.nullcontext(server) as api:
        echo("3/4 the agents work on the task (team-task flow)")
        lead = Lead(interactive, echo, decide)
        lead.ui, lead.api = _ui(api), api
        lead.start()
        try:
            with _on(api):
                result, follow_up, shutdowns = asyncio.run(_run(task_id, echo))
        finally:
            lead.done.set()
            lead.join(timeout=5)
    echo("4/4 done")
    files = {
        name: sorted(
            str(p) for p in (home / "tasks" / TEAM / name / "artifacts").glob("*") if p.is_file()
        )
        for name in ("analyst-1", "analyst-2")
    }
    summary = {
        "task": result,
        "follow_up": follow_up,
        "shutdowns": [{k: s.get(k) for k in ("member", "status", "forced")} for s in shutdowns],
        "files": files,
        "home": str(home),
        "database": db.redact(get_settings().database_url),
        "prefect": _ui(server),
        "seconds": round(time.monotonic() - started, 1),
    }
    _report(summary, echo)
    return summary


def failures(summary: dict[str, Any]) -> list[str]:
    """What went wrong in a demo run, one clause per failed task (empty: all completed)."""
    found = []
    for key, title in (("task", "Q4 sales analysis"), ("follow_up", FOLLOW_UP)):
        outcome = summary.get(key)
        if outcome is None or outcome["status"] == "completed":
            continue
        why = "; ".join(
            f"{name}: {o['error']}" for name, o in outcome["members"].items() if not o["ok"]
        )
        found.append(f"task {outcome['task_id']} ({title}) {outcome['status']}: {why or '?'}")
    return found


def _server() -> str | None:
    """The API of a Prefect server that answers (started by `teamflow up`), else None: a
    temporary server is started then. `PREFECT_API_URL` set (environment or profile) where
    nothing answers is an error (`runner.NoServer`, one line): the user meant that server."""
    from flows import runner

    api = runner.api_url()
    answer = runner.probe(api, timeout=1.0)
    if answer == "prefect":
        return api
    if runner.user_setting("PREFECT_API_URL"):
        try:
            runner.check_server(api)
        except runner.NoServer:
            raise runner.NoServer(
                f"no Prefect server answers at {api} (PREFECT_API_URL); start one with "
                "`teamflow up`, or unset PREFECT_API_URL to let the demo start a temporary one"
            ) from None
    return None


@contextlib.contextmanager
def _temporary_server(home: Path, echo: Callable[[str], None]) -> Iterator[str]:
    """A Prefect server of the demo's own on a free local port, its database under `home`,
    stopped at the end. Its start is awaited with progress, for `SERVER_START_TIMEOUT`
    seconds (a busy machine is slow to start one); past that, one line says what to do."""
    import socket

    from flows import runner
    from flows.up_processes import SERVER_START_TIMEOUT, UpError, start_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = f"http://127.0.0.1:{port}/api"
    echo(f"  waiting for it for up to {SERVER_START_TIMEOUT:g} s")
    try:
        child = start_server(api, "127.0.0.1", home, lambda line: echo(f"  {line.strip()}"))
    except UpError as exc:
        raise runner.NoServer(
            f"the demo's temporary Prefect server did not start: {exc}; start `teamflow up` "
            "in another terminal and run the demo again with PREFECT_API_URL pointing at it"
        ) from None
    try:
        yield api
    finally:
        if child is not None:
            child.stop(grace=15)


def _on(api: str | None) -> contextlib.AbstractContextManager[Any]:
    """Runs go to the server found (so the UI shows them), else to a temporary one."""
    if api is None:
        return contextlib.nullcontext()
    from flows import runner

    return runner.connected(api)


def _ui(api: str | None) -> str | None:
    if api is None:
        return None
    from flows import runner

    return runner.ui_url(api)


def _report(summary: dict[str, Any], echo: Callable[[str], None]) -> None:
    task = summary["task"]
    echo("")
    echo(f"Task {task['task_id']}: {task['status']} in {summary['seconds']} s")
    for name, outcome in task["members"].items():
        echo(f"  {name}: {outcome['response'] or outcome['error']}")
    follow_up = summary.get("follow_up")
    if follow_up is not None:
        echo(f"Task {follow_up['task_id']} ({FOLLOW_UP}): {follow_up['status']}")
        for name, outcome in follow_up["members"].items():
            echo(f"  {name} recalled: {outcome['response'] or outcome['error']}")
    for shutdown in summary["shutdowns"]:
        how = "forced" if shutdown.get("forced") else "approved"
        echo(f"  {shutdown.get('member')} shut down ({how})")
    echo("")
    echo("Where to look:")
    for paths in summary["files"].values():
        for path in paths:
            echo(f"  {path}")
    echo(f"  team files: {summary['home']}/teams/{TEAM}/ (config.json, inboxes/)")
    echo(f"  database: {summary['database']}")
    echo(f"  conversations: teamflow log {TEAM} analyst-1")
    if summary["prefect"]:
        echo(f"  Prefect UI: {summary['prefect']}")
    else:
        echo("  Prefect UI: run `teamflow up` first to keep a server and watch runs there")
