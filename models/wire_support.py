"""Helpers shared by the wire schemas and tables of `000` and `001` (and `004` task status).

- `row_values` / `wire_from_row`: a table row that stores a wire schema column by column gives
  back exactly the JSON it was built from, including the optional keys the wire set to an
  explicit `null` (recorded in the row's `explicit_nulls` column) and leaving out the ones it
  did not have.
- `tag_error_at`: a discriminated union whose unknown or missing tag is reported at the tag
  field (`loc == ("notification_type",)`) rather than at the union (`loc == ()`), so an error
  message names the key a person must fix.
- `error_lines`: a validation error as one `path: message` line per error.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails, to_jsonable_python

W = TypeVar("W", bound=BaseModel)


def not_null(value: Any) -> Any:
    """For optional fields the seeds never write as null: absent is fine, `null` is not."""
    if value is None:
        raise ValueError("may be left out, but not null")
    return value


def explicit_nulls(wire: BaseModel) -> list[str] | None:
    """The optional fields `wire` set explicitly to null, sorted; None when there are none."""
    names = sorted(name for name in wire.model_fields_set if getattr(wire, name) is None)
    return names or None


def column_value(value: Any) -> Any:
    """A wire field's value as a column stores it: enums as their value, models as JSON."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list | dict):
        # JSON columns: UUIDs, timestamps and enums inside become their JSON form.
        return to_jsonable_python(value, by_alias=True)
    return value


def has_optional_fields(wire_type: type[BaseModel]) -> bool:
    """Whether `wire_type` has fields the wire may leave out (and so may set to null)."""
    return any(not field.is_required() for field in wire_type.model_fields.values())


def row_values(wire: BaseModel, *, exclude: set[str] | frozenset[str] = frozenset()) -> dict:
    """Column values for every field of `wire` (same names), plus its `explicit_nulls` if the
    format has optional fields."""
    values = {
        name: column_value(getattr(wire, name))
        for name in type(wire).model_fields
        if name not in exclude
    }
    if has_optional_fields(type(wire)):
        values["explicit_nulls"] = explicit_nulls(wire)
    return values


def wire_values(
    wire_type: type[BaseModel], values: dict[str, Any], nulls: list[str] | None
) -> dict[str, Any]:
    """`values` without the None of optional fields the wire left out (not those it set to
    null). Keys that are no fields of `wire_type` (unknown keys kept by the format) stay."""
    fields = wire_type.model_fields
    keep = set(nulls or ())
    return {
        name: value
        for name, value in values.items()
        if value is not None or name in keep or name not in fields or fields[name].is_required()
    }


def wire_from_row(wire_type: type[W], row: Any, **overrides: Any) -> W:
    """The wire model of `row`, a table whose columns are named like `wire_type`'s fields."""
    values = {name: getattr(row, name) for name in wire_type.model_fields if name not in overrides}
    values.update(overrides)
    nulls = getattr(row, "explicit_nulls", None)
    return wire_type.model_validate(wire_values(wire_type, values, nulls))


_TAG_ERRORS = frozenset({"union_tag_invalid", "union_tag_not_found"})


def tag_error_at(field: str) -> WrapValidator:
    """Reports a discriminated union's bad or missing tag at `field` instead of at the union."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if not (len(errors) == 1 and errors[0]["type"] in _TAG_ERRORS):
                raise
            if not isinstance(value, dict):
                raise
            error = errors[0]
            if field not in value:
                detail = InitErrorDetails(type="missing", loc=(field,), input=value)
            else:
                expected = error.get("ctx", {}).get("expected_tags", "")
                detail = InitErrorDetails(
                    type="literal_error",
                    loc=(field,),
                    input=value[field],
                    ctx={"expected": expected},
                )
            raise ValidationError.from_exception_data(exc.title, [detail]) from None

    return WrapValidator(validate)


def error_lines(exc: ValidationError) -> list[str]:
    """One `path: message` line per error, paths as `members[0].model`."""
    lines = []
    for error in exc.errors():
        path = ""
        for part in error["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{path or '(document)'}: {message}")
    return lines
