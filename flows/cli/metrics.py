"""`teamflow metrics TEAM`: the headline figures of a team's work, and its main plot.

Every figure comes from `models.metrics` (pandas); the plot is drawn with matplotlib's Agg
backend, so it needs no display. Neither is imported before the command runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.output import JsonFlag, emit, fail

if TYPE_CHECKING:
    from rich.console import JustifyMethod

COLUMNS: list[tuple[str, str, JustifyMethod]] = [
    ("member", "member", "left"),
    ("tasks", "tasks", "right"),
    ("failed", "failed", "right"),
    ("p50_duration_s", "p50 duration", "right"),
    ("tokens", "tokens", "right"),
    ("tool_calls", "tool calls", "right"),
    ("tool_failures", "tool failures", "right"),
    ("plans", "plans", "right"),
    ("p50_plan_wait_s", "p50 plan wait", "right"),
    ("unread", "unread", "right"),
    ("busy_s", "busy", "right"),
    ("idle_s", "idle", "right"),
    ("offline_s", "offline", "right"),
]

ALERT_COLUMNS: list[tuple[str, str, JustifyMethod]] = [
    ("alert_type", "alert type", "left"),
    ("firings", "firings", "right"),
    ("delivered", "delivered", "right"),
    ("missed", "missed", "right"),
    ("p50_lateness_s", "p50 late", "right"),
    ("p95_lateness_s", "p95 late", "right"),
    ("max_lateness_s", "max late", "right"),
]


def _seconds(value: float | None) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    if value < 120:
        return f"{value:.1f}s"
    if value < 7200:
        return f"{value / 60:.1f}m"
    if value < 172800:
        return f"{value / 3600:.1f}h"
    return f"{value / 86400:.1f}d"


def metrics(
    team_name: Annotated[str, typer.Argument(metavar="TEAM")],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="Only work started (plans asked) in the last DURATION: 90s, 30m, 12h, 7d, 2w."
            " Default: all history.",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE.png",
            help="Also write the main plot (tokens and tasks per day, per member) as a PNG.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Per member: tasks, failures, p50 duration, tokens, tool calls, plan wait, unread, time
    busy / idle / offline; per alert type: firings, delivered, missed, lateness."""
    from models import metric_frames
    from models import metrics as m
    from models.member_policy import budget_spend

    try:
        window = m.parse_duration(since) if since is not None else None
    except metric_frames.MetricsError as exc:
        fail(f"--since: {exc}")
    if plot is not None:
        if plot.suffix.lower() != ".png":
            fail(f"--plot {plot}: the file name must end in .png")
        if not plot.parent.is_dir():
            fail(f"--plot {plot}: no directory {str(plot.parent)!r}")
    m.check_team(team_name)
    start = metric_frames.window_start(window)
    frame = m.headline(team_name, start)
    alerts = m.alert_lateness(team_name, start)
    budgets = budget_spend(team_name)
    if plot is not None:
        write_plot(team_name, start, plot)
    if as_json:
        emit(
            {
                "team": team_name,
                "since": start.isoformat() if start else None,
                "members": m.records(frame),
                "alerts": m.records(alerts),
                "budgets": budgets,
                "plot": str(plot) if plot is not None else None,
            }
        )
        return
    from rich.console import Console
    from rich.table import Table

    title = f"{team_name}: " + (f"since {start:%Y-%m-%d %H:%M} UTC" if start else "all history")
    table = Table(title=title)
    for _, header, justify in COLUMNS:
        table.add_column(header, justify=justify)
    _fill(table, COLUMNS, frame)
    console = Console()
    if not console.is_terminal:
        console.width = 180  # piped: whole rows, not folded at 80 columns
    console.print(table)
    alert_table = Table(title=f"{team_name}: alerts fired (lateness: fired minus due time)")
    for _, header, justify in ALERT_COLUMNS:
        alert_table.add_column(header, justify=justify)
    _fill(alert_table, ALERT_COLUMNS, alerts)
    if alerts.empty:
        console.print(f"{team_name}: no alerts fired")
    else:
        console.print(alert_table)
    for b in budgets:
        spent = []
        if b["budget_tokens"]:
            share = b["spent_tokens"] / b["budget_tokens"]
            spent.append(
                f"{b['spent_tokens']} of {b['budget_tokens']} budget tokens ({100 * share:.0f}%)"
            )
        if b["budget_seconds"]:
            share = b["spent_seconds"] / b["budget_seconds"]
            seconds = f"{b['spent_seconds']:g} of {b['budget_seconds']} budget seconds"
            spent.append(f"{seconds} ({100 * share:.0f}%)")
        console.print(
            f"{b['member']}: spent {' and '.join(spent)} on its latest task"
            + (", budget exhausted" if b["exhausted"] else "")
        )
    if plot is not None:
        typer.echo(f"plot written to {plot}")


def _fill(table, columns: Sequence[tuple[str, str, str]], frame) -> None:
    for row in frame.to_dict("records"):
        table.add_row(
            *(_seconds(row[key]) if key.endswith("_s") else str(row[key]) for key, _, _ in columns)
        )


def write_plot(team: str, start, path: Path) -> None:
    """The main plot: tokens per day per member, and tasks finished (and failed) per day."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plot_figure(team, start)
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)


def plot_figure(team: str, start) -> Any:
    """The figure `write_plot` saves: its time axis spans the days of the data, an empty
    plot says so in words (`models.metric_plots`)."""
    import matplotlib.pyplot as plt

    from models import metrics as m
    from models.metric_plots import nothing, time_axis

    work = m.work_over_time(team, start, freq="day")
    done = m.throughput(team, start, freq="day")
    figure, (tokens_ax, tasks_ax) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    if work.empty:
        nothing(tokens_ax, "task metrics")
    else:
        per_member = work.pivot_table(
            index="bucket", columns="member", values="tokens", aggfunc="sum", fill_value=0
        )
        for name in per_member.columns:
            tokens_ax.plot(per_member.index, per_member[name], marker="o", label=name)
        tokens_ax.legend()
    tokens_ax.set_title(f"{team}: tokens per day, per member")
    tokens_ax.set_ylabel("tokens")
    if done.empty:
        nothing(tasks_ax, "finished tasks")
    else:
        tasks_ax.bar(done["bucket"], done["tasks"], width=0.8, label="tasks finished")
        tasks_ax.bar(done["bucket"], done["failed"], width=0.8, label="failed executions")
        tasks_ax.legend()
    tasks_ax.set_title("tasks finished per day")
    tasks_ax.set_ylabel("tasks")
    days = [*work.get("bucket", []), *done.get("bucket", [])]
    if days:
        time_axis(tasks_ax, days)  # shared: both plots span the days of the data
    figure.tight_layout()
    return figure
