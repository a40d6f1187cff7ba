"""A member's steps made durable: what a resumed run takes from the step journal.

`Journal` is one member's records on one attempt of a team task (`models.journal`), read
once when its work begins, and written through as its steps go (every write checks the
run's lease: `models.task_lease.Superseded` stops a run that was declared dead and came
back). `flows/steps.py` asks it, step by step:

- `restore`: where the member's work stood after its last completed step (its counters,
  whether its plan is approved), so a resumed run goes on from there;
- `response`: a step's recorded Chimera response, so it is not asked for again;
- `action`: a step's action as recorded: `done` (its outcome is given back, it does not
  run again) or `started` (it was running when the worker died: it runs again, unless its
  tool declares itself unsafe to repeat, `x-teamflow-once`, and then the member is told it
  may have run);
- `orphans`: the ASYNC actions started on this attempt whose result never arrived (their
  run died with the worker): started again with the same `task_id`, or failed as above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio

from flows.runtimes import StepResult
from models import journal as store
from models.chimera_response import ChimeraResponse
from models.db import session_scope
from models.retry import retrying

WORK_FIELDS = (
    "steps", "tokens", "tool_calls", "tool_failures", "approval_wait_s", "response",
    "plan_approved", "denied_request", "feedback_id", "stopped",
)  # fmt: skip
"""What a member's `Work` carries from one step to the next (restored on resume)."""

ONCE_KEYWORD = "x-teamflow-once"
"""A tool whose `input_schema` says `"x-teamflow-once": true` is unsafe to repeat: if it was
running when its worker died, the resumed member is told it may have run instead."""


def snapshot(work: Any) -> dict[str, Any]:
    """The fields of `work` a resumed run needs (see `WORK_FIELDS`)."""
    return {name: getattr(work, name) for name in WORK_FIELDS}


def run_once(tool_id: str) -> bool:
    """Whether the tool declares itself unsafe to repeat (`x-teamflow-once`)."""
    from models.tool import get_tool

    try:
        return get_tool(tool_id).input_schema.get(ONCE_KEYWORD) is True
    except ValueError:
        return False


def may_have_run(tool_id: str) -> dict[str, Any]:
    """The FAILURE a member gets for a once-only call that was running when its worker died."""
    from models.tool import ToolResult

    return ToolResult.failure(
        tool_id,
        f"{tool_id} may have run: its worker died while it ran, and the tool is unsafe to "
        "repeat (x-teamflow-once), so it was not run again; check its effects before "
        "calling it again",
    ).to_wire()


@dataclass
class Journal:
    """One member's step journal on one attempt of a team task (see the module docstring)."""

    task_id: str
    attempt: int
    lease: int | None
    member: str
    records: dict[tuple[int, str], tuple[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, info: dict[str, Any], member: str, *, session: Any = None) -> Journal:
        """The member's records on the task's current attempt (none for a run without a
        lease: `run_team_task` called without a claim, as some tests do)."""
        attempt, lease = int(info.get("attempt") or 0), info.get("lease")
        records = (
            store.load(info["id"], attempt, member, session=session) if lease is not None else {}
        )
        return cls(info["id"], attempt, lease, member, records)

    @property
    def durable(self) -> bool:
        return self.lease is not None

    def restore(self, work: Any) -> bool:
        """Sets `work` as it stood after the member's last recorded step; True if any was."""
        done = [step for (step, part) in self.records if part == store.STEP]
        if not done:
            return False
        for name, value in self.records[(max(done), store.STEP)][1].items():
            if name in WORK_FIELDS:
                setattr(work, name, value)
        return True

    def response(self, step: int) -> StepResult | None:
        """Step `step`'s recorded response, if it was recorded."""
        found = self.records.get((step, store.RESPONSE))
        if found is None:
            return None
        data = found[1]
        return StepResult(
            response=ChimeraResponse.model_validate(data["response"]), tokens=data["tokens"]
        )

    def action(self, step: int, position: int) -> tuple[str, dict[str, Any]] | None:
        """The action's record (`started` or `done`, and its data), if any."""
        return self.records.get((step, store.action_part(position)))

    def write(
        self, step: int, part: str, state: str, data: dict[str, Any], session: Any = None
    ) -> None:
        """Records one part of a step (through to the database if the run holds a lease)."""
        if self.durable:
            write = partial(
                store.write, self.task_id, self.attempt, self.lease, self.member, step, part,  # type: ignore[arg-type]  # durable: an int
                state, data, session=session,
            )  # fmt: skip
            if session is None:  # a transaction of its own: tried again whole if need be
                retrying(f"recording step {step} ({part}) of {self.member}", write)
            else:
                write()
        self.records[(step, part)] = (state, data)

    async def record(self, step: int, part: str, state: str, data: dict[str, Any]) -> None:
        """`write`, from the flow's event loop."""
        await anyio.to_thread.run_sync(partial(self.write, step, part, state, data))

    def orphans(self, team: str) -> list[dict[str, Any]]:
        """The ASYNC actions of this attempt whose result never reached the member."""
        started = [
            data for (_, part), (_, data) in sorted(self.records.items())
            if part.startswith("action-") and data.get("async_task_id")
        ]  # fmt: skip
        if not started:
            return []
        with session_scope() as s:
            arrived = store.delivered(
                team, self.member, [d["async_task_id"] for d in started], session=s
            )
        return [d for d in started if d["async_task_id"] not in arrived]
