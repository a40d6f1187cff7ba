"""What every metric query shares (`models.metrics`, `models.approval_metrics`): the time
window, a connection that only reads, and a DataFrame straight from the driver's rows.

pandas (the `notebooks` extra) is imported inside the functions, so `models` imports
without it. Timestamps come back as the driver has them (`raw_time`) and are converted all
at once (`as_utc`); SQL that differs between SQLite and PostgreSQL is built here
(`time_bucket`, `seconds_between`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from models import db
from models.base import UTCDateTime

if TYPE_CHECKING:
    import pandas as pd


Since = datetime | timedelta | None
"""A time window's start: a time, how long back from now, or None (all history)."""

FREQS = {"hour": "%Y-%m-%d %H:00:00", "day": "%Y-%m-%d 00:00:00"}


class MetricsError(ValueError):
    """Refused metrics input; the message is one line for the user."""


def window_start(since: Since, now: datetime | None = None) -> datetime | None:
    """The time a window `since` starts at (None: no start)."""
    if since is None or isinstance(since, datetime):
        if since is not None and (since.tzinfo is None or since.utcoffset() is None):
            raise MetricsError(f"naive datetime {since!r} refused: give an aware time")
        return since
    return (now or datetime.now(UTC)) - since


def read_frame(stmt: sa.Select, url: str | None) -> pd.DataFrame:
    """The rows of `stmt` as the database driver gives them.

    The DBAPI cursor is read directly: SQLAlchemy's per-value result processing (and pandas
    probing each Row) cost more than the query at 100,000 rows. So timestamps come back as the
    driver has them (`raw_time` + `as_utc`) and SQLite booleans as 0/1 (`as_bool`). The connection
    only reads: on SQLite it does not take the write lock (`db`), so a long metrics query
    does not hold up heartbeats and messages."""
    import pandas as pd

    with read_only(url) as conn:
        result = conn.execute(stmt)
        keys = list(result.keys())
        rows = result.cursor.fetchall()
        result.close()
    frame = pd.DataFrame.from_records(rows, columns=keys)
    for key in keys:
        if rows and isinstance(frame[key].iloc[0], Decimal):  # PostgreSQL's sum of a bigint
            frame[key] = pd.to_numeric(frame[key].map(plain_number))
    return frame


def read_only(url: str | None) -> sa.Connection:
    return db.engine(url).connect().execution_options(teamflow_read_only=True)


def plain_number(value: Decimal | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


class _RawTime(FunctionElement[Any]):
    """A timestamp as `as_utc` converts it all at once: SQLite's text as it is stored;
    on PostgreSQL microseconds since the epoch, an integer, since its driver would make a
    `datetime` of each value (10 us each: half a second of CPU for 50,000 executions)."""

    inherit_cache = True
    name = "teamflow_raw_time"


@compiles(_RawTime)
def _raw_time_as_stored(element: _RawTime, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(_RawTime, "postgresql")
def _raw_time_in_microseconds(element: _RawTime, compiler: Any, **kw: Any) -> str:
    return (
        f"CAST(EXTRACT(EPOCH FROM {compiler.process(element.clauses, **kw)}) * 1000000 AS BIGINT)"
    )


def raw_time(column: Any, name: str | None = None) -> Any:
    """A timestamp as the database gives it cheapest (`_RawTime`), for `as_utc` to convert
    all at once: much faster than converting each value in Python."""
    return _RawTime(column).label(name or column.key)


def in_window(stmt: sa.Select, table: Any, team: str | None, start: datetime | None, column: Any):
    if team is not None:
        stmt = stmt.where(table.team == team)
    if start is not None:
        stmt = stmt.where(column >= start)
    return stmt


def time_bucket(column: Any, freq: str, url: str | None) -> Any:
    """A timestamp truncated to its hour or day, as text `YYYY-MM-DD HH:00:00` (UTC)."""
    if freq not in FREQS:
        raise MetricsError(f"bad frequency {freq!r}: one of {', '.join(FREQS)}")
    if db.engine(url).dialect.name == "postgresql":
        utc = sa.func.timezone("UTC", column)
        return sa.func.to_char(sa.func.date_trunc(freq, utc), "YYYY-MM-DD HH24:00:00")
    return sa.func.strftime(FREQS[freq], column)


def quantile_columns(
    values: pd.DataFrame, keys: list[str], column: str, prefix: str
) -> pd.DataFrame:
    import pandas as pd

    grouped = values.astype({column: float}).groupby(keys)[column]
    return pd.concat(
        {
            f"p50_{prefix}": grouped.median(),
            f"p95_{prefix}": grouped.quantile(0.95),
            f"max_{prefix}": grouped.max(),
        },
        axis=1,
    )


def as_bool(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    for column in columns:
        frame[column] = frame[column].map({1: True, 0: False}).astype("boolean")
    return frame


def as_utc(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """`raw_time` columns as UTC timestamps: ISO text (SQLite) or microseconds (PostgreSQL)."""
    import pandas as pd
    from pandas.api.types import is_numeric_dtype

    for column in columns:
        values = frame[column]
        if is_numeric_dtype(values) and not values.empty:
            frame[column] = pd.to_datetime(values, unit="us", utc=True)
        else:
            frame[column] = pd.to_datetime(values, utc=True, format="ISO8601")
    return frame


def seconds_between(later: Any, earlier: Any, url: str | None) -> Any:
    """`later - earlier` in seconds (a float), computed by the database."""
    if db.engine(url).dialect.name == "postgresql":
        return sa.cast(sa.extract("epoch", later), sa.Float) - sa.cast(
            sa.extract("epoch", earlier), sa.Float
        )
    return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0


def as_time(value: datetime) -> Any:
    """A time as a bound value of teamflow's timestamp type (compares like the columns)."""
    return sa.literal(value, UTCDateTime())
