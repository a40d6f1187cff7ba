"""Plots people can read at any size of data: the helpers the metrics notebooks and
`teamflow metrics --plot` draw with (matplotlib, imported by the caller's choice of backend).

- an empty plot says so in words (`nothing`), it is never bare axes;
- a time axis spans the data it shows (one day of data is a day's axis, not 2025-2029), with
  concise date labels (`time_axis`);
- category labels that would collide are turned and right-aligned (`category_labels`);
- seconds are labelled as durations people read (`90 s`, `15 min`, `2 h`), never in powers
  of ten; a log scale only where the values span more than a decade (`seconds_axis`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import matplotlib.dates as mdates
import pandas as pd
from matplotlib import ticker

PAD = timedelta(hours=12)
"""Room either side of the data on a time axis (half a bucket of a day)."""


def nothing(ax: Any, what: str) -> None:
    """An empty plot that says so: `no {what} yet` in the middle, no ticks."""
    ax.text(0.5, 0.5, f"no {what} yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def time_axis(ax: Any, times: Iterable[datetime], pad: timedelta = PAD) -> None:
    """Fits the x axis to `times` (padded by `pad` each side) with concise date labels."""
    stamps = pd.to_datetime(pd.Series(list(times)), utc=True).dropna()
    if stamps.empty:
        return
    first, last = stamps.min().tz_localize(None), stamps.max().tz_localize(None)
    ax.set_xlim(first - pad, last + pad)
    locator = mdates.AutoDateLocator(minticks=2, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def category_labels(ax: Any, labels: Iterable[Any] | None = None) -> None:
    """Category labels on x that do not overlap: turned 30° and right-aligned when there are
    several or long ones, upright (90°) when there are many."""
    texts = [str(t) for t in labels] if labels is not None else None
    if texts is None:
        texts = [t.get_text() for t in ax.get_xticklabels()]
    if len(texts) > 6:  # many: upright text would touch its neighbours' even turned 30°
        for label in ax.get_xticklabels():
            label.set_rotation(90)
            label.set_horizontalalignment("center")
    elif len(texts) > 3 or any(len(t) > 10 for t in texts):
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")
    else:
        ax.tick_params(axis="x", rotation=0)


def duration(seconds: float) -> str:
    """`0.5 s`, `90 s`, `15 min`, `2 h`, `3 d`: a tick label of a duration."""
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    if seconds < 172800:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


def seconds_axis(ax: Any, values: Iterable[float], axis: str = "y") -> None:
    """Labels an axis of seconds as durations; log scale only when the positive values span
    more than a decade (a narrower range on a log scale gets unreadable minor labels)."""
    positive = [v for v in values if v is not None and v == v and v > 0]
    which = ax.yaxis if axis == "y" else ax.xaxis
    if positive and max(positive) / min(positive) > 10:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        which.set_minor_formatter(ticker.NullFormatter())
    which.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: duration(v) if v > 0 else "0"))
