"""Where teamflow steers Prefect's flow engine (3.8.8) from inside a run.

Each function is a patch (`flows.compat.PATCHES` lists it with the fingerprint of what it
leans on; `tests/test_compat.py` fails when that changes): re-check it when Prefect moves.
"""

from __future__ import annotations

from typing import Any, NoReturn


def abort_with_state(message: str, state: Any) -> NoReturn:
    """Ends the run's flow function with `Abort` carrying the run's final `state`.

    Written against Prefect 3.8.8: the engine (`FlowRunEngine.run_context` and its async
    twin) takes an `Abort`/`Pause` that has a `state` attribute as "the state is set
    already" and keeps it, instead of proposing its own. A cancelled run waiting in process
    has no worker process to kill, so it finishes its own cancellation this way. Without
    it, the engine marks the cancelled run Failed or Crashed. Upstream: not reported
    (`Abort` takes no `state`; `Pause` does).
    """
    from prefect.exceptions import Abort

    aborted = Abort(message)
    aborted.state = state  # type: ignore[attr-defined]  # read by the engine, see above
    raise aborted


def leave_suspended(state: Any) -> NoReturn:
    """Ends the run's flow function, leaving the run in the Suspended `state` it is in.

    Written against Prefect 3.8.8: `suspend_flow_run` ends its run the same way
    (`raise Pause(state=state)`), and the engine keeps the state it carries. Without it, a
    suspended run's process would report the run as failed. Upstream: not reported.
    """
    from prefect.exceptions import Pause

    raise Pause(state=state)


def refused_as_repeat(refused: BaseException, pause_key: str) -> Any:
    """The paused state a refused pause proposal carries, when it is this wait's own pause.

    Written against Prefect 3.8.8: a loaded server can answer 503 to a pause it made; the
    client retries, and the engine's `propose_state` turns the server's refusal of the
    repeat ("already paused") into `Pause(state=the paused state)`. Without this, the wait
    would fail its run although the run is paused by it. None: not ours (re-raise).
    Upstream: not reported.
    """
    state = getattr(refused, "state", None)
    if state is None or state.state_details.pause_key != pause_key:
        return None
    return state
