"""The fingerprints of the library parts `flows.compat`'s patches lean on, on the pinned
versions: path -> (sha256 of the normalised source, first 16 hex digits; signature).
Written by `python -m flows.compat`; `tests/test_compat.py` compares them with what is
installed."""

# ruff: noqa: E501

FINGERPRINTS: dict[str, tuple[str, str | None]] = {
    "prefect.client.orchestration.base:BaseAsyncClient.request": (
        "6be3f0ecac9b4f70",
        "(self, method: 'HTTP_METHODS', path: \"'ServerRoutes'\", params: 'dict[str, Any] | None' = None, path_params: 'dict[str, Any] | None' = None, **kwargs: 'Any') -> \"'Response'\"",
    ),
    "prefect.exceptions:Abort": ("33f000b0c799ad13", None),
    "prefect.exceptions:Pause": (
        "0e4249cee289d17a",
        "(*args: Any, state: Optional[ForwardRef('State[Any]')] = None, **kwargs: Any) -> None",
    ),
    "prefect.flow_engine:AsyncFlowRunEngine.initialize_run": ("89ffd1b7fffd5509", "(self)"),
    "prefect.flow_engine:FlowRunEngine.initialize_run": ("6ce8fec6ee30abeb", "(self)"),
    "prefect.flow_runs:apause_flow_run": (
        "b6cbed201d47f08c",
        "(wait_for_input: 'Type[T] | None' = None, timeout: 'int' = 3600, poll_interval: 'int' = 10, key: 'str | None' = None) -> 'T | None'",
    ),
    "prefect.flow_runs:suspend_flow_run": (
        "2caa415a947c77fb",
        "(wait_for_input: 'Type[T] | None' = None, flow_run_id: 'UUID | None' = None, timeout: 'int | None' = None, key: 'str | None' = None) -> 'T | None'",
    ),
    "prefect.input:keyset_from_paused_state": (
        "18cd8b79f0ed30eb",
        "(state: \"'State'\") -> 'Keyset'",
    ),
    "prefect.server.api.flow_runs:bulk_set_flow_run_state": (
        "f47439ed0fd1085a",
        "(request: starlette.requests.Request, flow_runs: Optional[prefect.server.schemas.filters.FlowRunFilter] = Body(None), state: prefect.server.schemas.actions.StateCreate = Body(PydanticUndefined), force: bool = Body(False), limit: int = Body(50), db: prefect.server.database.interface.PrefectDBInterface = Depends(dependency=<function provide_database_interface>, use_cache=True, scope=None), flow_policy: type[prefect.server.orchestration.policies.FlowRunOrchestrationPolicy] = Depends(dependency=<function provide_flow_policy>, use_cache=True, scope=None), orchestration_parameters: Dict[str, Any] = Depends(dependency=<function provide_flow_orchestration_parameters>, use_cache=True, scope=None), api_version: str = Depends(dependency=<function provide_request_api_version>, use_cache=True, scope=None), client_version: Optional[str] = Depends(dependency=<function get_prefect_client_version>, use_cache=True, scope=None)) -> prefect.server.schemas.responses.FlowRunBulkSetStateResponse",
    ),
    "prefect.server.api.flow_runs:resume_flow_run": (
        "6e976967624f5c23",
        "(response: starlette.responses.Response, flow_run_id: uuid.UUID = Path(PydanticUndefined), db: prefect.server.database.interface.PrefectDBInterface = Depends(dependency=<function provide_database_interface>, use_cache=True, scope=None), run_input: Optional[dict[str, Any]] = Body(None), flow_policy: type[prefect.server.orchestration.policies.FlowRunOrchestrationPolicy] = Depends(dependency=<function provide_flow_policy>, use_cache=True, scope=None), task_policy: type[prefect.server.orchestration.policies.TaskRunOrchestrationPolicy] = Depends(dependency=<function provide_task_policy>, use_cache=True, scope=None), orchestration_parameters: Dict[str, Any] = Depends(dependency=<function provide_flow_orchestration_parameters>, use_cache=True, scope=None), api_version: str = Depends(dependency=<function provide_request_api_version>, use_cache=True, scope=None), client_version: Optional[str] = Depends(dependency=<function get_prefect_client_version>, use_cache=True, scope=None)) -> prefect.server.schemas.responses.OrchestrationResult",
    ),
    "prefect.utilities.engine:propose_state": (
        "e3af3956e8a6538b",
        "(client: 'PrefectClient', state: prefect.utilities.engine.State[Any], flow_run_id: uuid.UUID, force: bool = False) -> prefect.utilities.engine.State[Any]",
    ),
}
