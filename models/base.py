"""What every teamflow data type is built on: wire bases, timestamps, names, the UTC column.

Two wire bases, because the seeds use two casings on the wire:

- `WireModel`: camelCase on the wire (`004` team files), snake_case in Python.
- `SnakeWireModel`: snake_case on the wire (`000`, `001`, `002`, `003`).

Both drop optional fields that are `None` and were never set, so a seed example that leaves a
field out serialises without it, while one that writes `null` explicitly keeps its `null`.

Timestamps are always timezone-aware UTC in Python. On the wire they are ISO 8601 with `Z`;
`004` files use JavaScript's `toISOString()` form (`2026-02-16T10:30:00.000Z`, milliseconds),
the other seeds whole seconds (`2024-01-01T00:00:00Z`, with a fraction only when there is one).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, cast

import sqlalchemy as sa
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
)
from pydantic.alias_generators import to_camel
from sqlmodel import SQLModel

# Every table's constraints and indexes get predictable names, so migrations can alter them
# on SQLite (batch mode) and PostgreSQL alike.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
SQLModel.metadata.naming_convention = NAMING_CONVENTION


def table_of(model: type[SQLModel]) -> sa.Table:
    """The table a SQLModel table class maps (SQLModel sets `__table__` without typing it)."""
    return cast(sa.Table, model.__table__)  # type: ignore[attr-defined]  # set, untyped, by SQLModel


def rowcount(result: sa.Result[Any]) -> int:
    """How many rows an UPDATE or DELETE matched (`Session.exec` types its result as `Result`)."""
    assert isinstance(result, sa.CursorResult), "only an UPDATE or DELETE has a rowcount"
    return result.rowcount


_ISO_8601 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$", re.IGNORECASE
)


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC (freezegun moves it in tests)."""
    return datetime.now(UTC)


def parse_timestamp(value: Any) -> datetime:
    """Reads an ISO 8601 timestamp with a timezone into an aware UTC datetime.

    Accepts `str` (`...Z` or `...+02:00`) and aware `datetime`. Rejects naive values, numbers
    and anything that is not ISO 8601, because a timestamp without a zone is a guess.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("timestamp must carry a timezone (e.g. a trailing Z)")
        return value.astimezone(UTC)
    if not isinstance(value, str) or not _ISO_8601.fullmatch(value):
        raise ValueError("timestamp must be ISO 8601 with a timezone, e.g. 2026-02-16T10:30:00Z")
    text = value
    # Python 3.11 parses at most 6 fractional digits.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        parsed = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"timestamp is not a valid date or time: {exc}") from None
    return parsed.astimezone(UTC)


def format_timestamp(value: datetime) -> str:
    """`2024-01-01T00:00:00Z`, with microseconds only when there are some."""
    value = value.astimezone(UTC)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"


def format_js_timestamp(value: datetime) -> str:
    """`2026-02-16T10:30:00.000Z`: JavaScript's `toISOString()`, as `004` files use."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S") + f".{value.microsecond // 1000:03d}Z"


def _to_milliseconds(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


Timestamp = Annotated[
    datetime,
    BeforeValidator(parse_timestamp),
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
]
"""An aware UTC datetime, `2024-01-01T00:00:00Z` on the wire (`000`-`003`)."""

JsTimestamp = Annotated[
    datetime,
    BeforeValidator(parse_timestamp),
    AfterValidator(_to_milliseconds),
    PlainSerializer(format_js_timestamp, return_type=str, when_used="json"),
]
"""An aware UTC datetime with millisecond precision, `2026-02-16T10:30:00.000Z` (`004`)."""

KEBAB_CASE = r"^[a-z0-9]+(-[a-z0-9]+)*$"
# Names become path components (teams/{team}/inboxes/{member}.json): no dots, no slashes.
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


def check_team_name(name: str) -> str:
    """Returns `name` if it is a valid team name, else raises `ValueError` naming the rule."""
    if not (3 <= len(name) <= 64) or not re.fullmatch(KEBAB_CASE, name):
        raise ValueError(f"{name!r} is not a team name: kebab-case, 3-64 characters")
    return name


def check_member_name(name: str) -> str:
    """Returns `name` if it is a valid member name, else raises `ValueError` naming the rule."""
    if not re.fullmatch(SAFE_NAME, name):
        raise ValueError(
            f"{name!r} is not a member name: 1-64 letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return name


TeamName = Annotated[
    str,
    AfterValidator(check_team_name),
    WithJsonSchema({"type": "string", "pattern": KEBAB_CASE, "minLength": 3, "maxLength": 64}),
]
"""`004`: kebab-case, 3-64 characters."""

MemberName = Annotated[
    str,
    AfterValidator(check_member_name),
    WithJsonSchema({"type": "string", "pattern": SAFE_NAME}),
]
"""A member (or sender) name: letters, digits, `-` and `_`, at most 64; safe as a file name."""


class _DropUnsetNones:
    """Mixin: on dump, leave out optional fields that are None and were never set."""

    @model_serializer(mode="wrap")
    def _drop_unset_nones(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        fields = type(self).model_fields  # type: ignore[attr-defined]  # mixed into BaseModels
        for name, field in fields.items():
            if name in self.model_fields_set or getattr(self, name) is not None:  # type: ignore[attr-defined]  # mixed into BaseModels
                continue
            key = field.serialization_alias or field.alias or name
            data.pop(key if info.by_alias else name, None)
        return data


class SnakeWireModel(_DropUnsetNones, BaseModel):
    """Base of the snake_case wire formats (`000`, `001`, `002`, `003`)."""

    model_config = ConfigDict(
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_enum_values=False,
        # Validators are built on first use, not at import: commands start faster.
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict, exactly as the seed writes it."""
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self, **kwargs: Any) -> str:
        return self.model_dump_json(by_alias=True, **kwargs)


class WireModel(SnakeWireModel):
    """Base of the camelCase wire formats (`004`); snake_case attribute names in Python."""

    model_config = ConfigDict(alias_generator=to_camel)


class UTCDateTime(sa.types.TypeDecorator):
    """A timestamp column that only takes aware datetimes and gives back UTC on both databases.

    SQLite stores no zone, so values are normalised to UTC on the way in and UTC is attached
    again on the way out. PostgreSQL stores `timestamptz`.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r} refused: timestamps must be aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class JSONValue(sa.types.TypeDecorator):
    """JSON; JSONB on PostgreSQL, whose dialect is imported only when a PostgreSQL database
    is used (importing it costs a command line a noticeable part of its start)."""

    impl = sa.JSON(none_as_null=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(sa.JSON(none_as_null=True))


def json_column(name: str | None = None, **kwargs: Any) -> sa.Column:
    """A JSON column (JSONB on PostgreSQL); `name` when the attribute is named otherwise."""
    kind = JSONValue()
    return sa.Column(name, kind, **kwargs) if name else sa.Column(kind, **kwargs)


def utc_column(
    name: str | None = None, *, nullable: bool = True, index: bool = False, **kwargs: Any
) -> sa.Column:
    """A `UTCDateTime` column."""
    kind = UTCDateTime()
    if name:
        return sa.Column(name, kind, nullable=nullable, index=index, **kwargs)
    return sa.Column(kind, nullable=nullable, index=index, **kwargs)
