"""Agent runtimes answer a step with a `002` Chimera response: the scripted playbook (driving
the real built-in tools), an external program, and an OpenAI-compatible endpoint (a real
HTTP server on a local port)."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

import pytest
from fakes.openai_server import FakeOpenAI

from flows.demo_data import write_all
from flows.runtimes import (
    ResultPending,
    StepError,
    StepRequest,
    step_message,
    tool_result_message,
)
from flows.runtimes.command import CommandRuntime
from flows.runtimes.kinds import runtime_for
from flows.runtimes.openai import OpenAIRuntime
from flows.runtimes.scripted import ScriptedRuntime
from flows.tools import builtin_tools, run_tool
from models.chimera_response import ChimeraResponse, ChimeraStatus
from models.conversation import ConversationMessage
from models.tool import ToolResult

TOOLS = {t.tool_id: t for t in builtin_tools()}


def system(prompt: str) -> ConversationMessage:
    return ConversationMessage.model_validate(
        {
            "index": 0,
            "turn": 0,
            "timestamp": "2026-01-05T09:00:00Z",
            "role": "system",
            "content": prompt,
        }
    )


def user(index: int, text: str, turn: int = 0) -> ConversationMessage:
    return ConversationMessage.model_validate(
        {
            "index": index,
            "turn": turn,
            "timestamp": "2026-01-05T09:00:01Z",
            "role": "user",
            "content": {"userid": "coordinator", "text": text},
        }
    )


def request(**changes: Any) -> StepRequest:
    fields: dict[str, Any] = {
        "team": "research-team",
        "member": "analyst-1",
        "agent_id": "analyst-1@research-team",
        "model": "haiku",
        "prompt": "You are data analyst 1. Analyze data carefully.",
        "task": {
            "id": "task-1",
            "title": "Analyze Q4 sales",
            "description": "Find the top revenue trends",
            "params": {"sales_path": "/data/q4-sales.csv", "out": "/artifacts/q4.md"},
        },
        "conversation": [
            system("You are data analyst 1. Analyze data carefully."),
            user(1, "Please analyze the Q4 sales data."),
        ],
        "tools": list(TOOLS.values()),
        "inbox": [],
    }
    fields.update(changes)
    return StepRequest(**fields)


def chimera(**changes: Any) -> dict[str, Any]:
    return {
        "status": "EXECUTING",
        "thoughts": [{"type": "PLAN", "content": "Analyze the sales file."}],
        "actions": [],
        "stop": False,
        "response": None,
        **changes,
    }


class Conversation:
    """What the team-task flow keeps: the 003 messages it appends, one step at a time."""

    def __init__(self, req: StepRequest) -> None:
        self.req = req
        self.turn = 1

    def add_step(self, response: ChimeraResponse) -> None:
        msgs = self.req.conversation
        msgs.append(step_message(response, index=len(msgs), turn=self.turn))

    def add_result(self, result: ToolResult) -> None:
        msgs = self.req.conversation
        msgs.append(tool_result_message(result, index=len(msgs), turn=self.turn))
        self.turn += 1


# --- scripted -----------------------------------------------------------------------------


def test_the_default_runtime_is_scripted_and_unknown_kinds_are_refused() -> None:
    assert isinstance(runtime_for({}), ScriptedRuntime)
    assert isinstance(runtime_for({"kind": "command", "argv": ["true"]}), CommandRuntime)
    assert isinstance(runtime_for({"kind": "openai", "base_url": "http://x/v1"}), OpenAIRuntime)
    with pytest.raises(ValueError, match="unknown runtime kind 'llama'"):
        runtime_for({"kind": "llama"})


def test_a_playbook_plays_one_step_per_assistant_message_with_params_filled_in() -> None:
    runtime = runtime_for(
        {
            "kind": "scripted",
            "playbook": [
                chimera(
                    actions=[
                        {
                            "action": "analyze_sales",
                            "type": "tool",
                            "execution": "SYNC",
                            "params": {"sales_path": "{sales_path}"},
                        }
                    ],
                ),
                chimera(
                    status="SUCCESS",
                    thoughts=[{"type": "OBSERVATION", "content": "{result.analyze_sales.n}"}],
                    stop=True,
                    response="Done with {task.title} for {agent_id}; {{literal}}",
                ),
            ],
        }
    )
    req = request()
    flow = Conversation(req)

    first = runtime.step(req)
    flow.add_step(first.response)
    flow.add_result(
        ToolResult(tool_name="analyze_sales", status="SUCCESS", result={"n": 7}, error_message=None)
    )
    second = runtime.step(req)

    assert first.tokens == 0
    assert first.response.actions[0].params == {"sales_path": "/data/q4-sales.csv"}
    assert second.response.status is ChimeraStatus.SUCCESS
    assert second.response.thoughts[0].content == "7"
    assert second.response.response == (
        "Done with Analyze Q4 sales for analyst-1@research-team; {literal}"
    )


def test_a_lone_placeholder_keeps_the_value_and_lists_of_text_become_lines() -> None:
    runtime = ScriptedRuntime.from_config(
        {
            "playbook": [
                chimera(
                    actions=[
                        {
                            "action": "write_file",
                            "type": "tool",
                            "params": {
                                "path": "{params.out}",
                                "content": "{result.analyze_sales.top}",
                            },
                        }
                    ],
                    response="Findings:\n{result.analyze_sales.summary}\nFirst: "
                    "{result.analyze_sales.top.0.product}",
                )
            ]
        }
    )
    result = ToolResult(
        tool_name="analyze_sales",
        status="SUCCESS",
        result={"top": [{"product": "Cloud Storage"}], "summary": ["grows", "shrinks"]},
        error_message=None,
    )
    req = request()
    req.conversation.append(tool_result_message(result, index=2, turn=0))

    step = runtime.step(req).response

    assert step.actions[0].params == {
        "path": "/artifacts/q4.md",
        "content": [{"product": "Cloud Storage"}],
    }
    assert step.response == "Findings:\n- grows\n- shrinks\nFirst: Cloud Storage"


def test_a_playbook_can_be_a_file(tmp_path: Path) -> None:
    file = tmp_path / "analyst.json"
    file.write_text(json.dumps({"playbook": [chimera(status="SUCCESS", stop=True)]}))

    runtime = runtime_for({"kind": "scripted", "playbook": str(file)})

    assert runtime.step(request()).response.stop is True
    with pytest.raises(ValueError, match="no such file"):
        runtime_for({"kind": "scripted", "playbook": str(tmp_path / "missing.json")})


def test_a_task_named_in_tasks_plays_its_own_playbook_and_others_the_default(
    tmp_path: Path,
) -> None:
    config = {
        "playbook": [chimera(status="SUCCESS", stop=True, response="default")],
        "tasks": {"Q1 brief": [chimera(status="SUCCESS", stop=True, response="brief")]},
    }
    file = tmp_path / "analyst.json"
    file.write_text(json.dumps(config))
    for runtime in (runtime_for({"kind": "scripted", **config}),
                    runtime_for({"kind": "scripted", "playbook": str(file)})):  # fmt: skip
        brief = request(task={"id": "t-2", "title": "Q1 brief", "params": {}})
        assert runtime.step(brief).response.response == "brief"
        assert runtime.step(request()).response.response == "default"
    with pytest.raises(ValueError, match="tasks maps task titles to playbooks"):
        runtime_for({"kind": "scripted", "playbook": [], "tasks": {"Q1 brief": "x"}})


def test_scripted_steps_that_cannot_be_played_say_why() -> None:
    one = {"kind": "scripted", "playbook": [chimera()]}
    req = request()
    req.conversation.append(step_message(ChimeraResponse(**chimera()), index=2, turn=1))

    with pytest.raises(StepError, match="has no playbook"):
        runtime_for({}).step(request())
    with pytest.raises(StepError, match="has 1 steps and all were played"):
        runtime_for(one).step(req)
    with pytest.raises(StepError, match=r"\{regionz\} is not a task param"):
        runtime_for({"playbook": [chimera(response="{regionz}")]}).step(request())
    with pytest.raises(StepError, match=r"step 1 is not a valid Chimera response: status:"):
        runtime_for({"playbook": [chimera(status="DONE")]}).step(request())
    with pytest.raises(StepError, match=r"\{task.params.nope\} has no 'nope'"):
        runtime_for({"playbook": [chimera(response="{task.params.nope}")]}).step(request())


def test_a_result_not_yet_arrived_is_pending_and_a_failed_one_is_an_error() -> None:
    runtime = runtime_for({"playbook": [chimera(response="{result.build_tool.status}")]})
    failed = ToolResult(
        tool_name="build_tool", status="FAILURE", result=None, error_message="compiler crashed"
    )
    req = request()

    with pytest.raises(ResultPending) as pending:
        runtime.step(req)
    assert pending.value.tool == "build_tool"
    req.conversation.append(tool_result_message(failed, index=2, turn=0))
    with pytest.raises(StepError, match="tool build_tool failed: compiler crashed"):
        runtime.step(req)


def test_an_async_result_from_the_inbox_and_a_plan_decision_fill_the_next_step() -> None:
    runtime = runtime_for(
        {
            "playbook": [
                chimera(
                    response="{result.build_tool.artifact} / "
                    "{inbox.plan_approval_response.feedback}"
                )
            ]
        }
    )
    payload = {
        "tool_name": "build_tool",
        "status": "SUCCESS",
        "result": {"artifact": "app.tar"},
        "error_message": None,
    }
    decision = {
        "type": "plan_approval_response",
        "requestId": "plan-1",
        "approve": True,
        "feedback": "Go ahead",
    }
    inbox = [
        {
            "from": "system",
            "text": json.dumps(payload),
            "summary": "tool result",
            "timestamp": "2026-01-05T09:01:00.000Z",
            "color": "system",
            "read": False,
            "type": "tool_result",
        },
        {
            "from": "coordinator",
            "text": json.dumps(decision),
            "summary": "approved",
            "timestamp": "2026-01-05T09:02:00.000Z",
            "color": "yellow",
            "read": False,
            "type": "plan_approval_response",
        },
    ]

    step = runtime.step(request(inbox=inbox)).response

    assert step.response == "app.tar / Go ahead"


def test_a_denied_plan_plays_the_on_denial_step_then_the_playbook_goes_on() -> None:
    ask = {"action": "request_plan_approval", "type": "internal"}
    runtime = runtime_for(
        {
            "playbook": [
                chimera(actions=[{**ask, "params": {"plan": "v1"}}]),
                chimera(response="working", stop=True),
            ],
            "on_denial": chimera(
                actions=[{**ask, "params": {"plan": "v{denial.revision}+ {denial.feedback}"}}]
            ),
        }
    )
    req = request()
    talk = Conversation(req)

    def decided(status: str, revision: int) -> None:
        talk.add_result(
            ToolResult.success(
                "request_plan_approval",
                {"requestId": f"plan-{revision}", "status": status, "revision": revision,
                 "feedback": f"add Q3 ({revision})", "approve": status == "approved"},
            )
        )  # fmt: skip

    first = runtime.step(req).response
    assert first.actions[0].params["plan"] == "v1"
    talk.add_step(first)
    decided("denied", 1)
    req.conversation.append(user(len(req.conversation), "Plan plan-1 was denied: add Q3"))
    revised = runtime.step(req).response
    assert revised.actions[0].params["plan"] == "v1+ add Q3 (1)"
    talk.add_step(revised)
    decided("denied", 2)
    again = runtime.step(req).response
    assert again.actions[0].params["plan"] == "v2+ add Q3 (2)"
    talk.add_step(again)
    decided("approved", 3)
    assert runtime.step(req).response.response == "working"  # entry 2, after 3 steps


def test_without_on_denial_a_playbook_plays_on_by_position() -> None:
    runtime = runtime_for({"playbook": [chimera(), chimera(response="second")]})
    req = request()
    talk = Conversation(req)
    talk.add_step(runtime.step(req).response)
    talk.add_result(ToolResult.success("request_plan_approval", {"status": "denied"}))
    assert runtime.step(req).response.response == "second"
    with pytest.raises(StepError, match="no plan was denied"):
        runtime_for(
            {"playbook": [chimera(response="{denial.feedback}")], "on_denial": chimera()}
        ).step(request())


def test_a_step_message_records_the_whole_step_in_003_form() -> None:
    response = ChimeraResponse.model_validate(
        chimera(
            actions=[
                {"action": "analyze_sales", "type": "tool", "params": {"sales_path": "a.csv"}},
                {"action": "build_tool", "type": "tool", "params": {}, "execution": "ASYNC"},
            ],
            status="TASK_STARTED",
            response="Started",
        )
    )

    message = step_message(response, index=3, turn=2)
    wire = message.to_wire()

    assert wire["role"] == "assistant"
    assert wire["content"]["toolCall"] == "analyze_sales, build_tool"
    assert wire["content"]["reasoning"] == "Analyze the sales file."
    assert wire["content"]["text"] == "Started"
    assert ChimeraResponse.model_validate(wire["content"]["chimera"]) == response
    finish = step_message(ChimeraResponse(**chimera(stop=True)), index=4, turn=2)
    assert finish.to_wire()["content"]["toolCall"] == "finishRequest"


def test_a_scripted_analyst_does_the_q4_analysis_with_the_real_tools(tmp_path: Path) -> None:
    sales, satisfaction = write_all(tmp_path / "data")
    report = tmp_path / "artifacts" / "q4-report.md"
    playbook = [
        chimera(
            thoughts=[{"type": "PLAN", "content": "Check the file, then analyze it."}],
            actions=[
                {"action": "read_csv_summary", "type": "tool", "params": {"path": "{sales_path}"}}
            ],
        ),
        chimera(
            thoughts=[
                {"type": "OBSERVATION", "content": "{result.read_csv_summary.row_count} rows"}
            ],
            actions=[
                {
                    "action": "analyze_sales",
                    "type": "tool",
                    "params": {"sales_path": "{sales_path}"},
                },
                {
                    "action": "cross_reference_satisfaction",
                    "type": "tool",
                    "params": {
                        "sales_path": "{sales_path}",
                        "satisfaction_path": "{satisfaction_path}",
                    },
                },
            ],
        ),
        chimera(
            actions=[
                {
                    "action": "write_file",
                    "type": "tool",
                    "params": {
                        "path": "{report_path}",
                        "content": "# Q4 sales\n\n{result.analyze_sales.summary}\n\n"
                        "{result.cross_reference_satisfaction.summary}\n",
                    },
                }
            ],
        ),
        chimera(status="SUCCESS", stop=True, response="Report written to {result.write_file.path}"),
    ]
    runtime = runtime_for({"kind": "scripted", "playbook": playbook})
    params = {
        "sales_path": str(sales),
        "satisfaction_path": str(satisfaction),
        "report_path": str(report),
    }
    req = request(task={"id": "t1", "title": "Q4", "description": "", "params": params})
    flow = Conversation(req)

    for _ in range(10):  # the flow's loop: step, run the actions, hand back the results
        response = runtime.step(req).response
        flow.add_step(response)
        if response.stop:
            break
        for action in response.actions:
            run = run_tool(TOOLS[action.action], action.params)
            assert run.ok, run.result.error_message
            flow.add_result(run.result)

    assert response.response == f"Report written to {report}"
    text = report.read_text()
    assert text.startswith("# Q4 sales\n\n- Cloud Storage revenue is growing: +")
    assert "- revenue and satisfaction show a strong positive correlation" in text
    assert req.steps_taken == 4


# --- command ------------------------------------------------------------------------------


def agent_program(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_an_external_program_gets_the_request_on_stdin_and_answers_a_step(
    tmp_path: Path,
) -> None:
    argv = agent_program(
        tmp_path,
        """
        import json, sys
        request = json.load(sys.stdin)
        conversation = request["conversation"]
        answer = {
            "status": "EXECUTING",
            "thoughts": [{"type": "OBSERVATION",
                          "content": f"{len(conversation)} messages, last from "
                                     f"{conversation[-1]['content']['userid']}"}],
            "actions": [{"action": "analyze_sales", "type": "tool", "execution": "SYNC",
                         "params": {"sales_path": request["task"]["params"]["sales_path"]}}],
            "stop": False,
            "response": f"{request['agent_id']} knows {len(request['tools'])} tools",
        }
        print(json.dumps(answer))
        """,
    )

    result = runtime_for({"kind": "command", "argv": argv}).step(request())

    assert result.tokens == 0
    assert result.response.thoughts[0].content == "2 messages, last from coordinator"
    assert result.response.actions[0].params == {"sales_path": "/data/q4-sales.csv"}
    assert result.response.response == f"analyst-1@research-team knows {len(TOOLS)} tools"


def test_a_shell_agent_may_report_its_tokens(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text(
        "#!/bin/sh\ncat > /dev/null\n"
        'echo \'{"chimera": {"status": "SUCCESS", "thoughts": [], "actions": [], '
        '"stop": true, "response": "ok"}, "tokens": 321}\'\n'
    )
    script.chmod(0o755)

    result = runtime_for({"kind": "command", "argv": [str(script)]}).step(request())

    assert result.tokens == 321
    assert result.response.status is ChimeraStatus.SUCCESS


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "print('I think we should analyze the data')",
            r"did not print JSON .*its output starts: 'I think we should",
        ),
        (
            "import json; print(json.dumps({'status': 'DONE', 'thoughts': [], 'actions': [], "
            "'stop': True, 'response': None}))",
            r"is not a valid Chimera response: status: Input should be 'SUCCESS'",
        ),
        (
            "import json; print(json.dumps({'status': 'SUCCESS', 'thoughts': [], 'actions': "
            "[{'action': 'x', 'type': 'tool', 'params': {}, 'execution': 'LATER'}], 'stop': True,"
            " 'response': None}))",
            r"actions\.0\.execution: Input should be 'SYNC' or 'ASYNC'",
        ),
        (
            "import sys; print('model not loaded', file=sys.stderr); sys.exit(2)",
            # The agent's program is named, not the interpreter that runs it.
            r"agent command \S*agent\.py exited with code 2: model not loaded",
        ),
    ],
)
def test_a_program_that_does_not_answer_a_chimera_response_is_a_step_error(
    tmp_path: Path, body: str, message: str
) -> None:
    argv = agent_program(tmp_path, body)
    with pytest.raises(StepError, match=message):
        runtime_for({"kind": "command", "argv": argv}).step(request())


def test_a_program_past_its_timeout_is_killed(tmp_path: Path) -> None:
    argv = agent_program(tmp_path, "import time; time.sleep(30)")
    runtime = runtime_for({"kind": "command", "argv": argv, "timeout": 0.5})
    with pytest.raises(StepError, match=r"timed out after 0.5s and was killed"):
        runtime.step(request())


def test_a_missing_program_is_a_step_error() -> None:
    runtime = runtime_for({"kind": "command", "argv": ["/no/such/agent"]})
    with pytest.raises(StepError, match="cannot run agent command /no/such/agent"):
        runtime.step(request())
    with pytest.raises(ValueError, match='needs "argv"'):
        runtime_for({"kind": "command"})


# --- openai -------------------------------------------------------------------------------

KEY = "sk-test-5f1c0d9e8b7a6c5d4e3f2a1b0c9d8e7f"
STEP = chimera(
    actions=[
        {
            "action": "analyze_sales",
            "type": "tool",
            "params": {"sales_path": "a.csv"},
            "execution": "SYNC",
        }
    ],
)


@pytest.fixture
def server() -> Any:
    with FakeOpenAI(api_key=KEY) as fake:
        yield fake


@pytest.fixture
def openai(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> OpenAIRuntime:
    monkeypatch.setenv("TEAMFLOW_TEST_OPENAI_KEY", KEY)
    return runtime_for(
        {
            "kind": "openai",
            "base_url": server.base_url,
            "model": "gpt-4o-mini",
            "api_key_env": "TEAMFLOW_TEST_OPENAI_KEY",
            "timeout": 5,
            "temperature": 0,
        }
    )


def test_an_openai_endpoint_is_sent_the_conversation_and_its_reply_is_the_step(
    openai: OpenAIRuntime, server: FakeOpenAI
) -> None:
    server.reply(json.dumps(STEP), prompt_tokens=900, completion_tokens=85)
    req = request()
    Conversation(req).add_step(ChimeraResponse(**chimera()))

    result = openai.step(req)

    assert result.response == ChimeraResponse.model_validate(STEP)
    assert result.tokens == 985
    [sent] = server.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"
    body = sent["body"]
    assert body["model"] == "gpt-4o-mini"
    assert body["temperature"] == 0
    roles = [m["role"] for m in body["messages"]]
    # prompt, answer format; the conversation (its system prompt is the prompt, sent once);
    # then the ask for the next step
    assert roles == ["system", "system", "user", "assistant", "user"]
    assert body["messages"][0]["content"] == req.prompt
    assert "Chimera response" in body["messages"][1]["content"]
    assert "analyze_sales" in body["messages"][1]["content"]
    assert json.loads(body["messages"][2]["content"])["content"]["text"] == (
        "Please analyze the Q4 sales data."
    )
    assert json.loads(body["messages"][3]["content"]) == chimera()
    assert "next step" in body["messages"][4]["content"]


def test_a_reply_in_a_fenced_json_block_is_accepted(
    openai: OpenAIRuntime, server: FakeOpenAI
) -> None:
    server.reply(f"Here is my next step:\n\n```json\n{json.dumps(STEP, indent=2)}\n```\n")
    assert openai.step(request()).response.actions[0].action == "analyze_sales"


def test_without_a_model_in_the_config_the_members_model_is_asked(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMFLOW_TEST_OPENAI_KEY", KEY)
    runtime = runtime_for(
        {"kind": "openai", "base_url": server.base_url, "api_key_env": "TEAMFLOW_TEST_OPENAI_KEY"}
    )
    server.reply(json.dumps(STEP))
    runtime.step(request(model="llama3.1:8b"))
    assert server.requests[0]["body"]["model"] == "llama3.1:8b"


def test_an_endpoint_without_a_key_gets_no_authorization_header() -> None:
    with FakeOpenAI(api_key=None) as server:
        server.reply(json.dumps(STEP))
        runtime_for({"kind": "openai", "base_url": server.base_url}).step(request())
        assert "authorization" not in server.requests[0]["headers"]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            {
                "status": 500,
                "body": {"error": {"message": "The server had an error", "type": "server_error"}},
            },
            r"answered HTTP 500: The server had an error",
        ),
        (
            {"status": 429, "body": {"error": {"message": "Rate limit reached"}}},
            r"answered HTTP 429: Rate limit reached",
        ),
        (
            {"content": "Sure! I will analyze the sales data now."},
            r"is not a JSON object \(nor a ```json block\): 'Sure! I will",
        ),
        (
            {"content": json.dumps(chimera(stop="yes"))},
            r"is not a valid Chimera response: stop: Input should be a valid boolean",
        ),
        ({"content": json.dumps([STEP])}, r"is not a valid Chimera response: \(root\)"),
        ({"content": ""}, r"answered with an empty message"),
    ],
)
def test_http_errors_and_bad_replies_are_step_errors(
    openai: OpenAIRuntime, server: FakeOpenAI, reply: dict[str, Any], message: str
) -> None:
    server.reply(**reply)
    with pytest.raises(StepError, match=message):
        openai.step(request())


def test_a_slow_endpoint_is_a_step_error(server: FakeOpenAI, monkeypatch: Any) -> None:
    monkeypatch.setenv("TEAMFLOW_TEST_OPENAI_KEY", KEY)
    runtime = runtime_for(
        {
            "kind": "openai",
            "base_url": server.base_url,
            "model": "m",
            "timeout": 0.3,
            "api_key_env": "TEAMFLOW_TEST_OPENAI_KEY",
        }
    )
    server.reply(json.dumps(STEP), delay=1.5)
    with pytest.raises(StepError, match=r"did not answer within 0.3s"):
        runtime.step(request())


def test_an_unreachable_endpoint_is_a_step_error() -> None:
    with FakeOpenAI() as server:
        url = server.base_url
    with pytest.raises(StepError, match=r"cannot reach http://127\.0\.0\.1"):
        runtime_for({"kind": "openai", "base_url": url, "model": "m"}).step(request())


def test_the_api_key_is_in_no_log_error_or_repr(
    server: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("TEAMFLOW_TEST_OPENAI_KEY", KEY)
    runtime = runtime_for(
        {
            "kind": "openai",
            "base_url": server.base_url,
            "model": "m",
            "api_key_env": "TEAMFLOW_TEST_OPENAI_KEY",
        }
    )
    server.reply(json.dumps(STEP))
    runtime.step(request())
    # Now the server expects another key: it answers 401 and echoes the key it was sent.
    server.api_key = "sk-the-right-one"

    with pytest.raises(StepError) as refused:
        runtime.step(request())

    assert server.requests[1]["headers"]["authorization"] == f"Bearer {KEY}"
    assert "answered HTTP 401: Incorrect API key provided: ***" in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__context__ is None
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    assert "POST" in caplog.text  # httpx did log the request, at DEBUG/INFO
    for text in (
        str(refused.value),
        repr(refused.value),
        "".join(traceback.format_exception(refused.value)),
        repr(runtime),
        logged,
        json.dumps([r["body"] for r in server.requests]),
    ):
        assert KEY not in text
        assert KEY[3:19] not in text


def test_a_missing_key_variable_is_a_step_error_that_names_the_variable(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEAMFLOW_TEST_OPENAI_KEY", raising=False)
    runtime = runtime_for(
        {"kind": "openai", "base_url": server.base_url, "api_key_env": "TEAMFLOW_TEST_OPENAI_KEY"}
    )
    with pytest.raises(StepError, match="TEAMFLOW_TEST_OPENAI_KEY is not set"):
        runtime.step(request())
    assert server.requests == []


def test_a_key_written_into_the_config_is_refused() -> None:
    with pytest.raises(ValueError, match='takes no "api_key"'):
        runtime_for({"kind": "openai", "base_url": "http://x/v1", "api_key": KEY})


def test_the_key_can_come_from_a_prefect_secret_block(
    prefect_api: str, server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    from prefect.blocks.system import Secret

    caplog.set_level(logging.DEBUG)
    Secret(value=KEY).save("teamflow-test-openai-key", overwrite=True)
    runtime = runtime_for(
        {
            "kind": "openai",
            "base_url": server.base_url,
            "model": "m",
            "api_key_secret": "teamflow-test-openai-key",
        }
    )
    missing = runtime_for(
        {"kind": "openai", "base_url": server.base_url, "api_key_secret": "no-such-block"}
    )
    server.reply(json.dumps(STEP))

    assert runtime.step(request()).response.actions[0].action == "analyze_sales"
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    with pytest.raises(StepError, match="cannot read the Prefect Secret block 'no-such-block'"):
        missing.step(request())
    assert KEY not in caplog.text
