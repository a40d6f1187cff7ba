"""Every status vocabulary of the seeds, and how they translate, in one place.

- `TaskState` (`001` task, `tasks.status`): pending, in_progress, completed, archived
- `ExecutionStatus` (`004` task-status.json): running, idle, complete, error
- `ElmoStatus` (`000` context, project, agent): ready, running, pending, finished
- `AgentStateStatus` (`001` agent_state): idle, thinking, executing_tools, offline
- `AgentActivity` (`001` status_update): idle, busy, offline, error

A test checks that every value of every vocabulary is mapped.
"""

from __future__ import annotations

from models.agent import AgentStateStatus
from models.knowledge import ElmoStatus
from models.notification import AgentActivity
from models.task import CONTEXT_STATUS, TaskState
from models.task_status import ExecutionStatus

TASK_TO_ELMO: dict[TaskState, ElmoStatus] = {
    state: ElmoStatus(value) for state, value in CONTEXT_STATUS.items()
}
"""A `001` task's status as the `000` context status of the work on it."""

ELMO_TO_TASK: dict[ElmoStatus, TaskState] = {
    ElmoStatus.READY: TaskState.PENDING,
    ElmoStatus.PENDING: TaskState.PENDING,
    ElmoStatus.RUNNING: TaskState.IN_PROGRESS,
    ElmoStatus.FINISHED: TaskState.COMPLETED,
}
"""A `000` status as the `001` task status it corresponds to."""

EXECUTION_TO_AGENT: dict[ExecutionStatus, AgentStateStatus] = {
    ExecutionStatus.RUNNING: AgentStateStatus.THINKING,
    ExecutionStatus.IDLE: AgentStateStatus.IDLE,
    ExecutionStatus.COMPLETE: AgentStateStatus.IDLE,
    ExecutionStatus.ERROR: AgentStateStatus.IDLE,
}
"""A member's `004` execution status as its `001` agent_state (an errored agent is idle)."""

AGENT_TO_ACTIVITY: dict[AgentStateStatus, AgentActivity] = {
    AgentStateStatus.IDLE: AgentActivity.IDLE,
    AgentStateStatus.THINKING: AgentActivity.BUSY,
    AgentStateStatus.EXECUTING_TOOLS: AgentActivity.BUSY,
    AgentStateStatus.OFFLINE: AgentActivity.OFFLINE,
}
"""An agent_state as the status a `001` status_update notification reports."""

EXECUTION_TO_ACTIVITY: dict[ExecutionStatus, AgentActivity] = {
    ExecutionStatus.RUNNING: AgentActivity.BUSY,
    ExecutionStatus.IDLE: AgentActivity.IDLE,
    ExecutionStatus.COMPLETE: AgentActivity.IDLE,
    ExecutionStatus.ERROR: AgentActivity.ERROR,
}
"""A member's `004` execution status as a `001` status_update status."""

MAPPINGS = {
    "task_to_elmo": (TASK_TO_ELMO, TaskState),
    "elmo_to_task": (ELMO_TO_TASK, ElmoStatus),
    "execution_to_agent": (EXECUTION_TO_AGENT, ExecutionStatus),
    "agent_to_activity": (AGENT_TO_ACTIVITY, AgentStateStatus),
    "execution_to_activity": (EXECUTION_TO_ACTIVITY, ExecutionStatus),
}
"""Every mapping with the vocabulary it maps from (a test checks each covers it)."""
