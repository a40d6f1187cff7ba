"""Test helper: store a row, read it back in a fresh session, and remove it again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, SQLModel


def store_and_reload(
    engine: sa.Engine, row: SQLModel, read: Callable[[Any], Any] = lambda loaded: loaded
) -> Any:
    """Commits `row`, loads it in a fresh session, returns `read(loaded)`, then deletes it.

    Each step has its own session, so nothing is served from an identity map: what `read`
    sees came from the database.
    """
    with Session(engine) as writer:
        writer.add(row)
        writer.commit()
        key = sa.inspect(row).identity
    with Session(engine) as reader:
        loaded = reader.get(type(row), key)
        assert loaded is not None, f"{type(row).__name__} {key} was not stored"
        result = read(loaded)
        reader.delete(loaded)
        reader.commit()
    return result
