"""Every status vocabulary is mapped in one place, completely."""

from __future__ import annotations

import pytest

from models import status


@pytest.mark.parametrize("name", sorted(status.MAPPINGS))
def test_every_value_of_the_vocabulary_is_mapped(name: str) -> None:
    mapping, vocabulary = status.MAPPINGS[name]
    assert set(mapping) == set(vocabulary), f"{name} misses {set(vocabulary) - set(mapping)}"


def test_every_status_vocabulary_is_the_source_of_some_mapping() -> None:
    from models.agent import AgentStateStatus
    from models.knowledge import ElmoStatus
    from models.task import TaskState
    from models.task_status import ExecutionStatus

    sources = {vocabulary for _, vocabulary in status.MAPPINGS.values()}
    assert {TaskState, ElmoStatus, ExecutionStatus, AgentStateStatus} <= sources


def test_a_task_round_trips_through_the_000_vocabulary_where_it_can() -> None:
    for state, elmo in status.TASK_TO_ELMO.items():
        back = status.ELMO_TO_TASK[elmo]
        assert back == state or state.value == "archived"
