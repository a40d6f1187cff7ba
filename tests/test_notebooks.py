"""The metrics notebooks, executed as `jupyter execute` runs them (a real kernel), against a
real database that teamflow's stores filled, one the demo filled, and a generated larger
history; their figures are checked against values worked out here from what was stored (or
from `models.metrics`), and each executed notebook holds its plots as `image/png`."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import forkserver
import nbformat
import pytest
from freezegun import freeze_time
from nbclient import NotebookClient

from models import alert, approval, approval_metrics, db, inbox, membership, plan_timeout, presence
from models import metrics as m
from models.task import TaskMetricsRow, TaskState, create_task, move_task, record_metrics
from models.task_status import ExecutionStatus, set_member_status

pytestmark = pytest.mark.system  # end to end: `make test-fast` leaves it out

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TEAM = "q4-team"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


BY_NAME = {p.name: p for p in NOTEBOOKS}
KERNEL = "teamflow-tests"


@pytest.fixture(scope="module", autouse=True)
def _kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The notebooks' kernel: `python -m ipykernel_launcher`, as Jupyter's `python3` kernel
    runs it, forked from a fork server that has imported what the notebooks import
    (`forkserver.NOTEBOOK`): about 2 s of CPU less per kernel."""
    jupyter = tmp_path_factory.mktemp("jupyter")
    folder = jupyter / "kernels" / KERNEL
    folder.mkdir(parents=True)
    argv = forkserver.command(
        forkserver.NOTEBOOK, "ipykernel_launcher", ["-f", "{connection_file}"]
    )
    spec = {"argv": argv, "display_name": "Python 3 (teamflow's tests)", "language": "python"}
    (folder / "kernel.json").write_text(json.dumps(spec))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(jupyter))
        yield


def execute(path: Path, team: str | None, since: str | None = None) -> nbformat.NotebookNode:
    """Runs the notebook with its `parameters` cell set to `TEAM = team`, `SINCE = since`."""
    notebook = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells), f"{path.name} has outputs"
    parameters = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1, f"{path.name} needs one cell tagged `parameters`"
    parameters[0].source = f"TEAM = {team!r}\nSINCE = {since!r}"
    at = notebook.cells.index(parameters[0]) + 1
    notebook.cells.insert(at, nbformat.v4.new_code_cell(KEEP_FIGURES))
    notebook.cells.append(
        nbformat.v4.new_code_cell(DESCRIBE_FIGURES, metadata={"tags": ["figures"]})
    )
    NotebookClient(
        notebook, timeout=120, kernel_name=KERNEL, resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    return notebook


KEEP_FIGURES = """
import matplotlib.pyplot as _plt

_FIGURES = []
_show = _plt.show


def _keep(*args, **kwargs):
    _FIGURES.append(_plt.gcf())
    return _show(*args, **kwargs)


_plt.show = _keep
"""

DESCRIBE_FIGURES = """
import json as _json

from matplotlib import dates as _dates
from matplotlib.backends.backend_agg import FigureCanvasAgg as _FigureCanvasAgg


def _describe(ax, renderer):
    labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in labels]
    fmt = ax.xaxis.get_major_formatter()
    return {
        "title": ax.get_title(),
        "xlim": [float(x) for x in ax.get_xlim()],
        "dates": isinstance(fmt, (_dates.ConciseDateFormatter, _dates.AutoDateFormatter,
                                  _dates.DateFormatter)) or "Date" in type(fmt).__name__,
        "ticks": [t.get_text() for t in labels + ax.get_yticklabels()],
        "texts": [t.get_text() for t in ax.texts],
        "drawn": len(ax.lines) + len(ax.patches) + len(ax.collections),
        "overlap": any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]),
    }


_found = []
for _figure in _FIGURES:
    _canvas = _FigureCanvasAgg(_figure)  # shown figures are closed: draw them again
    _canvas.draw()
    _renderer = _canvas.get_renderer()
    _found += [_describe(ax, _renderer) for ax in _figure.axes]
print(_json.dumps(_found))
"""


def figures_of(notebook: nbformat.NotebookNode) -> list[dict]:
    """Every plot (axes) the notebook drew: title, x limits, tick labels, texts, whether
    anything is drawn and whether x labels overlap."""
    cell = next(c for c in notebook.cells if "figures" in c.metadata.get("tags", []))
    # Its stdout: matplotlib may warn on stderr first (a slow legend on a busy machine), and a
    # warning between two flushes splits the stdout in two outputs: the text is all of them.
    text = "".join(o["text"] for o in cell.outputs if o.get("name") == "stdout")
    return json.loads(text)


def assert_readable(notebook: nbformat.NotebookNode, days: float) -> dict[str, dict]:
    """Every plot is readable: an empty one says so, no tick label in powers of ten, no x
    labels over each other, a time axis no wider than the `days` of the data plus a day.
    Returns the plots by title."""
    plots = figures_of(notebook)
    assert plots
    for ax in plots:
        title = ax["title"]
        if not ax["drawn"]:
            assert any(text.endswith(" yet") for text in ax["texts"]), title
        assert not any("times10" in t or "^{" in t for t in ax["ticks"]), (title, ax["ticks"])
        assert not ax["overlap"], title
        if ax["dates"] and ax["drawn"]:
            span = ax["xlim"][1] - ax["xlim"][0]
            assert span <= days + 1, (title, span)
    return {ax["title"]: ax for ax in plots}


def summary_of(notebook: nbformat.NotebookNode) -> dict:
    cell = next(c for c in notebook.cells if "summary" in c.metadata.get("tags", []))
    return json.loads(cell.outputs[0]["text"])


def plots_of(notebook: nbformat.NotebookNode) -> int:
    """How many `image/png` outputs the executed notebook holds."""
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def test_there_are_the_metrics_notebooks() -> None:
    assert {"team_metrics.ipynb", "approvals.ipynb"} <= set(BY_NAME)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_runs_on_an_empty_database(path: Path, db_url: str, home: Path) -> None:
    notebook = execute(path, None)
    summary = summary_of(notebook)
    assert plots_of(notebook) >= 4  # empty plots that say so
    plots = figures_of(notebook)
    assert plots and all(not p["drawn"] and p["texts"][0].startswith("no ") for p in plots)
    if path.name == "team_metrics.ipynb":
        assert summary["members"] == [] and summary["tasks_by_status"] == []
        assert summary["liveness"] == [] and summary["alerts"] == []
        assert summary["budgets"] == []
    else:
        assert summary["requests"] == 0 and summary["outcomes"] == []


def _metrics(member: str, task_id: uuid.UUID, seconds: float, **counts: int) -> None:
    record_metrics(
        TaskMetricsRow(
            team=TEAM, member=member, task_id=str(task_id), started_at=T0,
            ended_at=T0 + timedelta(seconds=seconds), duration_s=seconds, **counts,
        )
    )  # fmt: skip


def test_team_metrics_shows_what_teamflow_recorded(db_url: str, home: Path) -> None:
    membership.create_team(TEAM, description="Q4 sales analysis", lead="coordinator")
    for name in ("analyst-1", "analyst-2"):
        membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.")
    # Another team's records stay out of TEAM's figures.
    membership.create_team("other-team", description="Other", lead="boss")
    membership.add_member("other-team", "helper", model="haiku", prompt="p")
    create_task("other-team", title="Elsewhere", assignees=["helper"])

    both = create_task(TEAM, title="Q4 trends", assignees=["analyst-1", "analyst-2"])
    solo = create_task(TEAM, title="Regions", assignees=["analyst-1"])
    create_task(TEAM, title="Satisfaction", assignees=["analyst-2"])  # stays pending
    for task in (both, solo):
        move_task(task.id, to=TaskState.COMPLETED)
    durations = {"analyst-1": [4.0, 10.5], "analyst-2": [7.25]}
    _metrics("analyst-1", both.id, 4.0, tokens=120, steps=3, tool_calls=2)
    _metrics("analyst-1", solo.id, 10.5, tokens=80, steps=2, tool_calls=1)
    _metrics("analyst-2", both.id, 7.25, tokens=300, steps=4, tool_calls=3, approval_wait_s=90)
    set_member_status(
        TEAM, "analyst-1", status=ExecutionStatus.COMPLETE, tokens=200, completed=True
    )
    set_member_status(TEAM, "analyst-2", status=ExecutionStatus.ERROR, error_message="tool failed")
    from models.member_policy import set_member_policy

    set_member_policy(TEAM, "analyst-2", {"budget_tokens": 250})  # its latest task spent 300

    with freeze_time(T0) as clock:
        approved = approval.request_plan(TEAM, "analyst-2", "Join the CSVs", "Plan")
        approval.request_plan(TEAM, "analyst-1", "Chart it", "Plan")  # still open
        clock.tick(90)
        approval.decide(approved.request_id, approve=True, decider="coordinator")
        # analyst-1: idle 60 s, thinking 30 s, then idle until now (a repeat changes nothing).
        for status, seconds in (("idle", 0), ("thinking", 60), ("thinking", 10), ("idle", 20)):
            clock.tick(seconds)
            presence.heartbeat(TEAM, "analyst-1", status=status)
    inbox.send(TEAM, to="analyst-2", sender="coordinator", text="Any news?")
    for late in (2.0, 4.0):
        alert.record_firing(
            TEAM, "SCHEDULED_EVENT", "standup", "Standup!", alert_id=None,
            recipients=["analyst-1"], message_ids=[], flow_run_id=None, due_at=T0,
            fired_at=T0 + timedelta(seconds=late),
        )  # fmt: skip

    notebook = execute(BY_NAME["team_metrics.ipynb"], TEAM)
    assert plots_of(notebook) >= 6
    summary = summary_of(notebook)
    assert summary["team"] == TEAM
    (budget,) = summary["budgets"]
    assert (budget["member"], budget["budget_tokens"], budget["spent_tokens"]) == (
        "analyst-2", 250, 300,
    )  # fmt: skip
    assert (budget["share"], budget["exhausted"]) == (1.2, True)

    members = {m["member"]: m for m in summary["members"]}
    assert set(members) == {"analyst-1", "analyst-2"}
    for name, seconds in durations.items():
        assert members[name]["p50_duration_s"] == statistics.median(seconds)
        assert members[name]["max_duration_s"] == max(seconds)
    assert (members["analyst-1"]["tasks"], members["analyst-1"]["tokens"]) == (2, 200)
    assert (members["analyst-1"]["steps"], members["analyst-1"]["tool_calls"]) == (5, 3)
    assert members["analyst-2"]["approval_wait_s"] == 90

    status = {s["member"]: s for s in summary["status"]}
    assert status["analyst-1"]["status"] == "complete"
    assert status["analyst-1"]["tasks_completed"] == 1 and status["analyst-1"]["tokens_used"] == 200
    assert (status["analyst-2"]["status"], status["analyst-2"]["error_message"]) == (
        "error", "tool failed",
    )  # fmt: skip

    assert set(summary["status"][0]) == {
        "team", "member", "status", "tasks_completed", "tokens_used", "avg_response_time",
        "last_active_at", "error_message",
    }  # fmt: skip
    assert sorted(summary["tasks_by_status"], key=lambda t: t["status"]) == [
        {"team": TEAM, "status": "completed", "tasks": 2},
        {"team": TEAM, "status": "pending", "tasks": 1},
    ]
    plans = {p["status"]: p for p in summary["plans"]}
    assert plans["approved"] == {"team": TEAM, "status": "approved", "requests": 1,
                                 "p50_wait_s": 90.0}  # fmt: skip
    assert (plans["pending"]["requests"], plans["pending"]["p50_wait_s"]) == (1, None)

    (alive,) = summary["liveness"]
    assert alive["member"] == "analyst-1"
    assert (alive["thinking_s"], alive["busy_s"], alive["offline_s"]) == (30.0, 30.0, 0.0)
    assert alive["idle_s"] > 60.0  # idle again since T0+180 s, until now
    (fired,) = summary["alerts"]
    assert (fired["alert_type"], fired["firings"], fired["delivered"]) == ("SCHEDULED_EVENT", 2, 2)
    assert fired["p50_lateness_s"] == pytest.approx(3.0, abs=1e-3)
    assert fired["max_lateness_s"] == pytest.approx(4.0, abs=1e-3)

    unread = {u["member"]: u["unread"] for u in summary["unread"]}
    for name in ("coordinator", "analyst-1", "analyst-2"):
        assert unread.get(name, 0) == inbox.unread_count(TEAM, name)
    assert unread["analyst-2"] >= 2  # the plan's response and the lead's question

    everyone = summary_of(execute(BY_NAME["team_metrics.ipynb"], None))
    assert {m["team"] for m in everyone["members"]} == {TEAM}  # other-team has no metrics
    assert {t["team"] for t in everyone["tasks_by_status"]} == {TEAM, "other-team"}


def test_approvals_shows_waits_outcomes_revisions_and_timeouts(db_url: str, home: Path) -> None:
    membership.create_team(TEAM, description="Q4 sales analysis", lead="coordinator")
    for name in ("analyst-1", "analyst-2"):
        membership.add_member(TEAM, name, model="haiku", prompt=f"You are {name}.")
    with freeze_time(T0) as clock:
        first = approval.request_plan(TEAM, "analyst-1", "Chart it", "Plan")
        timed = approval.request_plan(TEAM, "analyst-2", "Map it", "Plan", timeout=60)
        clock.tick(45)
        approval.decide(first.request_id, approve=False, decider="coordinator", feedback="no")
        second = approval.request_plan(
            TEAM, "analyst-1", "Chart it better", "Plan", previous_request_id=first.request_id
        )
        clock.tick(30)
        plan_timeout.apply_timeout(timed.request_id)
        approval.decide(second.request_id, approve=True, decider="coordinator")

    notebook = execute(BY_NAME["approvals.ipynb"], TEAM)
    assert plots_of(notebook) >= 5
    summary = summary_of(notebook)
    assert summary["requests"] == 3
    waits = {w["member"]: w for w in summary["waits"]}
    assert waits["analyst-1"]["requests"] == 2
    assert waits["analyst-1"]["p50_wait_s"] == statistics.median([45.0, 30.0])
    assert waits["analyst-2"]["max_wait_s"] == 75.0
    outcomes = {o["status"]: o["requests"] for o in summary["outcomes"]}
    assert outcomes == {"approved": 1, "denied": 2}
    deciders = {(d["decided_by"], d["status"]): d["requests"] for d in summary["deciders"]}
    assert deciders == {("coordinator", "approved"): 1, ("coordinator", "denied"): 1,
                        ("system", "denied"): 1}  # fmt: skip
    assert {(r["revision"], r["status"]) for r in summary["revisions"]} == {
        (1, "denied"), (2, "approved"),
    }  # fmt: skip
    (deny,) = summary["timeouts"]
    assert (deny["timeout_policy"], deny["requests"], deny["timed_out"]) == ("deny", 3, 1)


# --- the demo's database, and a larger generated history -------------------------------------


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A database the demo filled (`teamflow demo`'s run, once for the module)."""
    from prefect_server import harness

    from flows import demo

    home = tmp_path_factory.mktemp("demo-home")
    env = {
        "TEAMFLOW_HOME": str(home),
        "TEAMFLOW_DATABASE_URL": f"sqlite:///{home / 'teamflow.db'}",
        "PREFECT_API_URL": "",
    }
    patch = pytest.MonkeyPatch()
    for key, value in env.items():
        patch.setenv(key, value)
    try:
        with harness(tmp_path_factory.mktemp("prefect")):
            demo.run(echo=lambda _line: None)
    finally:
        db.dispose_engines()
        patch.undo()
    return env


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_on_the_demo_database(
    path: Path, demo_db: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in demo_db.items():
        monkeypatch.setenv(key, value)
    from flows.demo import TEAM as team

    notebook = execute(path, team)
    assert plots_of(notebook) >= 5
    summary = summary_of(notebook)
    plots = assert_readable(notebook, days=1)  # one day of data: a day's axis, not years
    if path.name == "team_metrics.ipynb":
        tokens = plots["Tokens per day, per member"]
        assert tokens["dates"] and tokens["drawn"]
        assert tokens["xlim"][1] - tokens["xlim"][0] <= 2
        tools = plots["Tool failure rate"]
        assert tools["drawn"] or tools["texts"] == ["no tool calls yet"]
        expected = m.member_work(team)
        assert len(summary["members"]) == len(expected) == 2  # the demo's two analysts
        assert {r["member"]: r["tokens"] for r in summary["members"]} == dict(
            zip(expected["member"], expected["tokens"].astype(int), strict=True)
        )
        assert all(r["done"] == r["tasks"] and r["failed"] == 0 for r in summary["members"])
    else:
        assert summary["requests"] == len(approval_metrics.approvals(team))
        assert plots["Wait until decision"]["drawn"]  # the demo's plan, on a readable axis


def _generator():
    spec = importlib.util.spec_from_file_location("bench_metrics", ROOT / "benchmarks/metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A larger generated history (benchmarks/metrics.py at 1/100 scale: 10,000 task
    metrics and messages, 1,000 plans over 90 days, two teams)."""
    home = tmp_path_factory.mktemp("history-home")
    env = {
        "TEAMFLOW_HOME": str(home),
        "TEAMFLOW_DATABASE_URL": f"sqlite:///{home / 'teamflow.db'}",
    }
    patch = pytest.MonkeyPatch()
    for key, value in env.items():
        patch.setenv(key, value)
    try:
        db.upgrade(env["TEAMFLOW_DATABASE_URL"])
        _generator().generate(["hist-a", "hist-b"], 0.01, datetime.now(UTC))
    finally:
        db.dispose_engines()
        patch.undo()
    return env


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
@pytest.mark.parametrize("since", [None, "7d"])
def test_notebooks_on_a_generated_history(
    path: Path, since: str | None, history_db: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in history_db.items():
        monkeypatch.setenv(key, value)
    notebook = execute(path, "hist-a", since)
    assert plots_of(notebook) >= 5
    summary = summary_of(notebook)
    plots = assert_readable(notebook, days=90 if since is None else 7)
    if path.name == "team_metrics.ipynb":
        assert plots["Tokens per day, per member"]["dates"]
    window = m.parse_duration(since) if since else None
    if path.name == "team_metrics.ipynb":
        expected = m.member_work("hist-a", window)
        assert sum(r["executions"] for r in summary["members"]) == expected["executions"].sum()
        assert 0 < expected["executions"].sum() <= (5000 if since is None else 1000)
        assert {r["team"] for r in summary["members"]} == {"hist-a"}
        assert len(summary["liveness"]) == 8  # the lead and seven analysts
        assert {a["alert_type"] for a in summary["alerts"]} == {
            "ALARM", "SCHEDULED_EVENT", "TIMER",
        }  # fmt: skip
    else:
        assert summary["requests"] == len(approval_metrics.approvals("hist-a", window)) > 0
    assert os.environ["TEAMFLOW_DATABASE_URL"] == history_db["TEAMFLOW_DATABASE_URL"]
