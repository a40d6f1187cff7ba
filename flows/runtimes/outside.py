"""The runtime of an outside member (`--runtime mcp`): its own agent works through
`teamflow mcp`, and its team-task runs wait for its report (`flows.outside`)."""

from __future__ import annotations

from flows.runtimes import StepError, StepRequest, StepResult


class OutsideRuntime:
    """Never stepped: an outside member's agent runs on its own and reports through MCP."""

    @classmethod
    def from_config(cls, config: dict) -> OutsideRuntime:
        return cls()

    def step(self, request: StepRequest) -> StepResult:
        raise StepError(f"{request.member} works through MCP; teamflow does not step it")
