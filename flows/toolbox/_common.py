"""Shared by the built-in tool programs: params from stdin, CSV reading, one JSON answer.

Each program is run by teamflow as `{python} {tools_dir}/NAME.py` with its params as JSON on
stdin; it prints one JSON object on stdout, or a one-line reason on stderr and exits 1.
Standard library only.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any, NoReturn


def fail(message: str) -> NoReturn:
    """Prints `message` on stderr and exits 1."""
    print(message, file=sys.stderr)
    sys.exit(1)


def params() -> dict[str, Any]:
    """The params teamflow sent as JSON on stdin."""
    try:
        data = json.load(sys.stdin)
    except ValueError as exc:
        fail(f"params on stdin are not JSON: {exc}")
    if not isinstance(data, dict):
        fail("params on stdin must be a JSON object")
    return data


def answer(result: dict[str, Any]) -> None:
    """Prints the result object as JSON."""
    json.dump(result, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


def read_rows(path: str, required: tuple[str, ...] = ()) -> tuple[list[str], list[dict[str, str]]]:
    """The columns and rows of the CSV at `path`; fails if a `required` column is missing."""
    file = Path(path)
    if not file.is_file():
        fail(f"{path}: no such file")
    with file.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        columns = [c.strip() for c in reader.fieldnames or []]
        reader.fieldnames = columns
        rows = list(reader)
    missing = [c for c in required if c not in columns]
    if missing:
        fail(f"{path}: missing column(s) {', '.join(missing)}; it has {', '.join(columns)}")
    return columns, rows


def number(row: dict[str, str], column: str, line: int, path: str) -> float:
    """The row's `column` as a number; fails naming the line when it is not one."""
    text = (row.get(column) or "").strip()
    try:
        return float(text)
    except ValueError:
        fail(f"{path}: line {line}: {column} {text!r} is not a number")


def pct(new: float, old: float) -> float | None:
    """Percent change from `old` to `new`, rounded to 0.1; None when `old` is 0."""
    if old == 0:
        return None
    return round((new - old) / old * 100, 1)


def money(value: float) -> float:
    return round(value, 2)
