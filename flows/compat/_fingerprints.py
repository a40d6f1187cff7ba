"""The fingerprints of the library parts `flows.compat`'s patches lean on, on the pinned
versions: path -> (sha256 of the normalised source, first 16 hex digits; signature).
Written by `python -m flows.compat`; `tests/test_compat.py` compares them with what is
installed."""

# ruff: noqa: E501

FINGERPRINTS: dict[str, tuple[str, str | None]] = {
    "burner_redis.pubsub:PubSub.__init__": (
        "247d1f8c596b5b06",
        "(self, client, ignore_subscribe_messages=False)",
    ),
    "burner_redis.pubsub:PubSub._queue_get": ("47ac1fb113e16218", "(self, timeout)"),
    "docket.worker:Worker.__init__": (
        "02616b049b5ef32c",
        "(self, docket: 'Docket', name: 'str | None' = None, concurrency: 'int' = 10, redelivery_timeout: 'timedelta' = datetime.timedelta(seconds=300), reconnection_delay: 'timedelta' = datetime.timedelta(seconds=5), minimum_check_interval: 'timedelta' = datetime.timedelta(microseconds=250000), scheduling_resolution: 'timedelta' = datetime.timedelta(microseconds=250000), schedule_automatic_tasks: 'bool' = True, enable_internal_instrumentation: 'bool' = False, fallback_task: 'TaskFunction | None' = None, dependencies: 'Mapping[str, Any] | Sequence[Any] | None' = None, message_batch: 'int' = 1000) -> 'None'",
    ),
    "docket.worker:Worker._cancellation_listener": ("f81ccb5e5240c74d", "(self) -> 'None'"),
    "prefect.client.orchestration._deployments.client:DeploymentAsyncClient.read_deployment": (
        "6a711d1015cb14b8",
        "(self, deployment_id: 'Union[UUID, str]') -> \"'DeploymentResponse'\"",
    ),
    "prefect.client.orchestration._flows.client:FlowAsyncClient.read_flow": (
        "89fc6f626d25c8eb",
        "(self, flow_id: \"'UUID'\") -> \"'Flow'\"",
    ),
    "prefect.client.orchestration.base:BaseAsyncClient.request": (
        "6be3f0ecac9b4f70",
        "(self, method: 'HTTP_METHODS', path: \"'ServerRoutes'\", params: 'dict[str, Any] | None' = None, path_params: 'dict[str, Any] | None' = None, **kwargs: 'Any') -> \"'Response'\"",
    ),
    "prefect.client.orchestration:PrefectClient.__init__": (
        "83de7e758c49e653",
        "(self, api: 'Union[str, ASGIApp]', *, auth_string: 'Optional[str]' = None, api_key: 'Optional[str]' = None, api_version: 'Optional[str]' = None, httpx_settings: 'Optional[dict[str, Any]]' = None, server_type: 'Optional[ServerType]' = None) -> 'None'",
    ),
    "prefect.client.orchestration:SyncPrefectClient.__init__": (
        "acda3b6e5ccdb657",
        "(self, api: 'Union[str, ASGIApp]', *, auth_string: 'Optional[str]' = None, api_key: 'Optional[str]' = None, api_version: 'Optional[str]' = None, httpx_settings: 'Optional[dict[str, Any]]' = None, server_type: 'Optional[ServerType]' = None) -> 'None'",
    ),
    "prefect.exceptions:Abort": ("33f000b0c799ad13", None),
    "prefect.exceptions:Pause": (
        "0e4249cee289d17a",
        "(*args: Any, state: Optional[ForwardRef('State[Any]')] = None, **kwargs: Any) -> None",
    ),
    "prefect.flow_engine:AsyncFlowRunEngine.initialize_run": ("89ffd1b7fffd5509", "(self)"),
    "prefect.flow_engine:AsyncFlowRunEngine.set_state": (
        "d602f07c37896a1c",
        "(self, state: 'State', force: 'bool' = False) -> 'State'",
    ),
    "prefect.flow_engine:FlowRunEngine.initialize_run": ("6ce8fec6ee30abeb", "(self)"),
    "prefect.flow_engine:_flow_parameters": (
        "f085d1fc15dc4656",
        "(flow: 'Flow[P, R]', flow_run: 'Optional[FlowRun]', parameters: 'Optional[Dict[str, Any]]') -> 'Dict[str, Any]'",
    ),
    "prefect.flow_engine:run_flow_async": (
        "2ae14584de86059e",
        "(flow: 'Flow[P, R]', flow_run: 'Optional[FlowRun]' = None, parameters: 'Optional[Dict[str, Any]]' = None, wait_for: 'Optional[Iterable[PrefectFuture[Any]]]' = None, return_type: \"Literal['state', 'result']\" = 'result', context: 'Optional[dict[str, Any]]' = None) -> 'Union[R, State, None]'",
    ),
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
    "prefect.results:_aread_server_default_result_storage_block_id": (
        "a041bff45c2b8a06",
        "() -> 'UUID | None'",
    ),
    "prefect.results:_get_default_result_storage": (
        "1ed5abae8e78babb",
        "() -> '_DefaultResultStorage'",
    ),
    "prefect.results:_read_server_default_result_storage_block_id": (
        "860caec936fe9bff",
        "() -> 'UUID | None'",
    ),
    "prefect.server.api.background_workers:background_worker": (
        "99a1bbdfeee332ff",
        "(docket: docket.docket.Docket, ephemeral: bool = False, webserver_only: bool = False) -> AsyncGenerator[NoneType, NoneType]",
    ),
    "prefect.server.api.flow_runs:bulk_set_flow_run_state": (
        "f47439ed0fd1085a",
        "(request: starlette.requests.Request, flow_runs: Optional[prefect.server.schemas.filters.FlowRunFilter] = Body(None), state: prefect.server.schemas.actions.StateCreate = Body(PydanticUndefined), force: bool = Body(False), limit: int = Body(50), db: prefect.server.database.interface.PrefectDBInterface = Depends(dependency=<function provide_database_interface>, use_cache=True, scope=None), flow_policy: type[prefect.server.orchestration.policies.FlowRunOrchestrationPolicy] = Depends(dependency=<function provide_flow_policy>, use_cache=True, scope=None), orchestration_parameters: Dict[str, Any] = Depends(dependency=<function provide_flow_orchestration_parameters>, use_cache=True, scope=None), api_version: str = Depends(dependency=<function provide_request_api_version>, use_cache=True, scope=None), client_version: Optional[str] = Depends(dependency=<function get_prefect_client_version>, use_cache=True, scope=None)) -> prefect.server.schemas.responses.FlowRunBulkSetStateResponse",
    ),
    "prefect.server.api.flow_runs:resume_flow_run": (
        "6e976967624f5c23",
        "(response: starlette.responses.Response, flow_run_id: uuid.UUID = Path(PydanticUndefined), db: prefect.server.database.interface.PrefectDBInterface = Depends(dependency=<function provide_database_interface>, use_cache=True, scope=None), run_input: Optional[dict[str, Any]] = Body(None), flow_policy: type[prefect.server.orchestration.policies.FlowRunOrchestrationPolicy] = Depends(dependency=<function provide_flow_policy>, use_cache=True, scope=None), task_policy: type[prefect.server.orchestration.policies.TaskRunOrchestrationPolicy] = Depends(dependency=<function provide_task_policy>, use_cache=True, scope=None), orchestration_parameters: Dict[str, Any] = Depends(dependency=<function provide_flow_orchestration_parameters>, use_cache=True, scope=None), api_version: str = Depends(dependency=<function provide_request_api_version>, use_cache=True, scope=None), client_version: Optional[str] = Depends(dependency=<function get_prefect_client_version>, use_cache=True, scope=None)) -> prefect.server.schemas.responses.OrchestrationResult",
    ),
    "prefect.server.database.configurations:AioSqliteConfiguration.begin_transaction": (
        "7762e51eada28c76",
        "(self, session: 'AsyncSession', with_for_update: 'bool' = False) -> 'AsyncGenerator[AsyncSessionTransaction, None]'",
    ),
    "prefect.server.database.configurations:AioSqliteConfiguration.session": (
        "620d1c8bf45439f2",
        "(self, engine: 'AsyncEngine') -> 'AsyncSession'",
    ),
    "prefect.server.events.storage.database:_in_safe_batches": (
        "cd1ccfe3837802f1",
        "(events: list[prefect.server.events.schemas.events.ReceivedEvent]) -> Generator[list[prefect.server.events.schemas.events.ReceivedEvent], NoneType, NoneType]",
    ),
    "prefect.server.events.storage.database:_write_sqlite_events": (
        "8f10ea644aabe647",
        "(db: prefect.server.database.interface.PrefectDBInterface, session: sqlalchemy.ext.asyncio.session.AsyncSession, events: list[prefect.server.events.schemas.events.ReceivedEvent]) -> None",
    ),
    "prefect.server.events.storage.database:write_events": (
        "8de8c274c1a9dbd1",
        "(session: sqlalchemy.ext.asyncio.session.AsyncSession, events: list[prefect.server.events.schemas.events.ReceivedEvent]) -> None",
    ),
    "prefect.server.models.deployments:_generate_scheduled_flow_runs": (
        "5f775fd6e42f6f39",
        "(db: 'PrefectDBInterface', session: 'AsyncSession', deployment_id: 'UUID', start_time: 'datetime.datetime', end_time: 'datetime.datetime', min_time: 'datetime.timedelta', min_runs: 'int', max_runs: 'int', auto_scheduled: 'bool' = True) -> 'list[dict[str, Any]]'",
    ),
    "prefect.server.models.events:flow_run_state_change_event": (
        "2b96eb1eee73f00a",
        "(session: sqlalchemy.ext.asyncio.session.AsyncSession, occurred: datetime.datetime, flow_run: prefect.server.database.orm_models.FlowRun, initial_state_id: Optional[uuid.UUID], initial_state: Optional[prefect.server.schemas.states.State], validated_state_id: Optional[uuid.UUID], validated_state: prefect.server.schemas.states.State) -> prefect.server.events.schemas.events.Event",
    ),
    "prefect.server.orchestration.instrumentation_policies:InstrumentFlowRunStateTransitions.after_transition": (
        "baa74d016814a111",
        "(self, context: 'OrchestrationContext[orm_models.FlowRun, core.FlowRunPolicy]') -> 'None'",
    ),
    "prefect.server.utilities.subscriptions:accept_prefect_socket": (
        "68cee41a403e1d77",
        "(websocket: starlette.websockets.WebSocket, *, require_prefect_subprotocol: bool = False, authentication_failed_reason: str | None = None) -> Optional[starlette.websockets.WebSocket]",
    ),
    "prefect.server.utilities.subscriptions:still_connected": (
        "580ceaa256e5c125",
        "(websocket: starlette.websockets.WebSocket) -> bool",
    ),
    "prefect.server.utilities.worker_channel:WorkerChannelConnection._send_loop": (
        "64ba1047263cbaf3",
        "(self, ready: 'WorkerReadyFrame') -> 'None'",
    ),
    "prefect.utilities.engine:propose_state": (
        "e3af3956e8a6538b",
        "(client: 'PrefectClient', state: prefect.utilities.engine.State[Any], flow_run_id: uuid.UUID, force: bool = False) -> prefect.utilities.engine.State[Any]",
    ),
    "prefect.workers.base:BaseJobConfiguration._base_environment": (
        "089162fc66d6a5d0",
        "(cls) -> 'dict[str, str]'",
    ),
    "prefect.workers.base:BaseJobConfiguration.resolve_for_flow_run": (
        "9830a553458aae4a",
        "(cls, flow_run: \"'FlowRun'\", *, client: 'PrefectClient', work_pool: 'WorkPool', worker_name: 'str', worker_id: 'UUID | None' = None, deployment: \"'DeploymentResponse | None'\" = None) -> 'Self'",
    ),
    "prefect.workers.base:BaseWorker.__init__": (
        "20efca6bf5bf7f6d",
        "(self, work_pool_name: 'str', work_queues: 'list[str] | None' = None, name: 'str | None' = None, prefetch_seconds: 'float | None' = None, create_pool_if_not_found: 'bool' = True, limit: 'int | None' = None, heartbeat_interval_seconds: 'int | None' = None, *, base_job_template: 'dict[str, Any] | None' = None)",
    ),
    "prefect.workers.base:BaseWorker._give_worker_labels_to_flow_run": (
        "f53238039eff1b68",
        "(self, flow_run_id: 'UUID')",
    ),
    "prefect.workers.base:BaseWorker._propose_submitting_state": (
        "71d96e8ddc9db9b3",
        "(self, flow_run: \"'FlowRun'\") -> 'None'",
    ),
    "prefect.workers.base:BaseWorker._submit_run": (
        "67a8818b276872d9",
        "(self, flow_run: \"'FlowRun'\") -> 'None'",
    ),
    "prefect.workers.base:BaseWorker._submit_run_and_capture_errors": (
        "671464407213f5d6",
        "(self, flow_run: \"'FlowRun'\", task_status: 'anyio.abc.TaskStatus[int | Exception] | None' = None) -> 'BaseWorkerResult | Exception'",
    ),
    "prefect.workers.base:BaseWorker._submit_scheduled_flow_runs": (
        "7ae22e0888f9ec2b",
        "(self, flow_run_response: \"list['WorkerFlowRunResponse']\") -> \"list['FlowRun']\"",
    ),
    "prefect.workers.base:BaseWorker._sync_and_initialize": (
        "85e736f8f8657ca5",
        "(self) -> 'None'",
    ),
    "prefect.workers.base:BaseWorker.setup": ("8a002097818265c7", "(self) -> 'None'"),
    "prefect.workers.process:ProcessWorker": (
        "fcdc14bf58a4eeee",
        "(work_pool_name: 'str', work_queues: 'list[str] | None' = None, name: 'str | None' = None, prefetch_seconds: 'float | None' = None, create_pool_if_not_found: 'bool' = True, limit: 'int | None' = None, heartbeat_interval_seconds: 'int | None' = None, *, base_job_template: 'dict[str, Any] | None' = None)",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.close": (
        "4152fe931fa765d8",
        "(self) -> 'None'",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.commit": (
        "c1aa2e1d5108cb01",
        "(self) -> 'None'",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.rollback": (
        "0548606991277d87",
        "(self) -> 'None'",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_connection.terminate": (
        "667fa516eb89d29e",
        "(self) -> 'None'",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_cursor.__init__": (
        "4d6b31b1f6eafdaa",
        "(self, adapt_connection: 'AsyncAdapt_aiosqlite_connection')",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_cursor.execute": (
        "f1ea956cce739683",
        "(self, operation: 'Any', parameters: 'Optional[_DBAPISingleExecuteParams]' = None) -> 'Any'",
    ),
    "sqlalchemy.dialects.sqlite.aiosqlite:AsyncAdapt_aiosqlite_cursor.executemany": (
        "8529ac8e12ac172f",
        "(self, operation: 'Any', seq_of_parameters: '_DBAPIMultiExecuteParams') -> 'Any'",
    ),
    "sqlalchemy.util.concurrency:await_only": (
        "fa1d9eb705845155",
        "(awaitable: 'Awaitable[_T]') -> '_T'",
    ),
    "typer._click.exceptions:ClickException": ("cf701093aec5a546", "(message: str) -> None"),
    "typer._click.exceptions:NoArgsIsHelpError": ("09158dd21847fd35", "(ctx: 'Context') -> None"),
    "typer.core:TyperGroup": (
        "5b21267781e27f03",
        "(*, name: str | None = None, commands: dict[str, typer._click.core.Command] | collections.abc.Sequence[typer._click.core.Command] | None = None, rich_markup_mode: Literal['markdown', 'rich', None] = 'rich', rich_help_panel: str | None = None, suggest_commands: bool = True, invoke_without_command: bool = False, no_args_is_help: bool = False, subcommand_metavar: str | None = None, result_callback: collections.abc.Callable[..., typing.Any] | None = None, **attrs: Any) -> None",
    ),
    "typer.main:Typer.__call__": ("97ecdf9bbb205020", "(self, *args: Any, **kwargs: Any) -> Any"),
    "typer.main:Typer.command": (
        "b649489fcb637108",
        "(self, name: typing.Annotated[str | None, Doc('\\n                The name of this command.\\n                ')] = None, *, cls: typing.Annotated[type[typer.core.TyperCommand] | None, Doc('\\n                The class of this command. Mainly used when [using the Click library underneath](https://typer.tiangolo.com/tutorial/using-click/). Can usually be left at the default value `None`.\\n                Otherwise, should be a subtype of `TyperCommand`.\\n                ')] = None, context_settings: typing.Annotated[dict[typing.Any, typing.Any] | None, Doc(\"\\n                Pass configurations for the [context](https://typer.tiangolo.com/tutorial/commands/context/).\\n                Available configurations can be found in the docs for Click's `Context` [here](https://click.palletsprojects.com/en/stable/api/#context).\\n                \")] = None, help: typing.Annotated[str | None, Doc(\"\\n                Help text for the command.\\n                See [the tutorial about name and help](https://typer.tiangolo.com/tutorial/subcommands/name-and-help) for different ways of setting a command's help,\\n                and which one takes priority.\\n                \")] = None, epilog: typing.Annotated[str | None, Doc('\\n                Text that will be printed right after the help text.\\n                ')] = None, short_help: typing.Annotated[str | None, Doc('\\n                A shortened version of the help text that can be used e.g. in the help table listing subcommands.\\n                When not defined, the normal `help` text will be used instead.\\n                ')] = None, options_metavar: typing.Annotated[str | None, Doc('\\n                In the example usage string of the help text for a command, the default placeholder for various arguments is `[OPTIONS]`.\\n                Set `options_metavar` to change this into a different string. When `None`, the default value will be used.\\n                ')] = <typer.models.DefaultPlaceholder object>, add_help_option: typing.Annotated[bool, Doc(\"\\n                **Note**: you probably shouldn't use this parameter, it is inherited\\n                from Click and supported for compatibility.\\n\\n                ---\\n\\n                By default each command registers a `--help` option. This can be disabled by this parameter.\\n                \")] = True, no_args_is_help: typing.Annotated[bool, Doc('\\n                If this is set to `True`, running a command without any arguments will automatically show the help page.\\n                ')] = False, hidden: typing.Annotated[bool, Doc('\\n                Hide this command from help outputs. `False` by default.\\n                ')] = False, deprecated: typing.Annotated[bool, Doc('\\n                Mark this command as deprecated in the help outputs. `False` by default.\\n                ')] = False, rich_help_panel: typing.Annotated[str | None, Doc('\\n                Set the panel name of the command when the help is printed with Rich.\\n                ')] = <typer.models.DefaultPlaceholder object>) -> collections.abc.Callable[[~CommandFunctionType], ~CommandFunctionType]",
    ),
    "typer.main:get_command_from_info": (
        "188b5f5b9fa26448",
        "(command_info: typer.models.CommandInfo, *, pretty_exceptions_short: bool, rich_markup_mode: Literal['markdown', 'rich', None]) -> typer._click.core.Command",
    ),
    "typer.main:get_group_from_info": (
        "d4615853abb24433",
        "(group_info: typer.models.TyperInfo, *, pretty_exceptions_short: bool, suggest_commands: bool, rich_markup_mode: Literal['markdown', 'rich', None]) -> typer.core.TyperGroup",
    ),
    "typer.models:TyperInfo.__init__": (
        "a49cccff3b80f3c1",
        "(self, typer_instance: Optional[ForwardRef('Typer')] = <typer.models.DefaultPlaceholder object>, *, name: str | None = <typer.models.DefaultPlaceholder object>, cls: type['TyperGroup'] | None = <typer.models.DefaultPlaceholder object>, invoke_without_command: bool = <typer.models.DefaultPlaceholder object>, no_args_is_help: bool = <typer.models.DefaultPlaceholder object>, subcommand_metavar: str | None = <typer.models.DefaultPlaceholder object>, chain: bool = <typer.models.DefaultPlaceholder object>, result_callback: collections.abc.Callable[..., typing.Any] | None = <typer.models.DefaultPlaceholder object>, context_settings: dict[typing.Any, typing.Any] | None = <typer.models.DefaultPlaceholder object>, callback: collections.abc.Callable[..., typing.Any] | None = <typer.models.DefaultPlaceholder object>, help: str | None = <typer.models.DefaultPlaceholder object>, epilog: str | None = <typer.models.DefaultPlaceholder object>, short_help: str | None = <typer.models.DefaultPlaceholder object>, options_metavar: str = <typer.models.DefaultPlaceholder object>, add_help_option: bool = <typer.models.DefaultPlaceholder object>, hidden: bool = <typer.models.DefaultPlaceholder object>, deprecated: bool = <typer.models.DefaultPlaceholder object>, rich_help_panel: str | None = <typer.models.DefaultPlaceholder object>)",
    ),
    "uvicorn.server:HANDLED_SIGNALS": ("0c6ea5c9f43eac38", None),
    "uvicorn.server:Server.capture_signals": (
        "f5efdd178894332d",
        "(self) -> 'Generator[None, None, None]'",
    ),
    "uvicorn.server:Server.main_loop": ("37502fa8d66e9dd9", "(self) -> 'None'"),
    "uvicorn.server:Server.on_tick": ("d5f6bf8c1db268c6", "(self, counter: 'int') -> 'bool'"),
}
