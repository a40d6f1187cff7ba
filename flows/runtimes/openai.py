"""The `openai` runtime: any OpenAI-compatible chat completions endpoint is the agent.

    {"kind": "openai", "base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini",
     "api_key_env": "OPENAI_API_KEY"}              # or "api_key_secret": "<Prefect Secret block>"

Optional: `timeout` (s, default 60), `temperature`, `max_tokens`, `json_mode` (sends
`response_format: {"type": "json_object"}`), `instructions` (added to the system message,
e.g. the internal actions the team flow understands). Without a key setting no
`Authorization` header is sent (local servers such as Ollama or vLLM need none). Without
`model` the member's model is asked for.

Each step POSTs `{base_url}/chat/completions` with: the member's prompt (system), the
Chimera answer format, the task and the tools (system), the `003` conversation (each entry
as its own message: system text; user entries as their `003` JSON; assistant steps as the
Chimera response they were), and a last user message with the unread inbox that asks for
the next step. The reply's `choices[0].message.content` must be one Chimera JSON object
(alone, or in a fenced ```json block); `usage.total_tokens` is what the step cost.

The API key is read when a step is sent and kept nowhere: it is not an attribute, so it is in
no repr, and it is scrubbed from every error message (a server may echo it back).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import httpx

from flows.runtimes import MEMBER_KEYS, StepError, StepRequest, StepResult, parse_chimera
from models.conversation import ConversationRole

DEFAULT_TIMEOUT = 60.0
_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)\n?```", re.DOTALL)

ANSWER_FORMAT = """\
Answer every turn with exactly one JSON object and nothing else: a Chimera response.
{
  "status": "EXECUTING" while you still have work to do, "SUCCESS" when the task is done,
            "ERROR" when you cannot do it, "TASK_STARTED" when you start an ASYNC action,
  "thoughts": [{"type": "PLAN" | "OBSERVATION" | "DECISION", "content": "..."}],
  "actions": [{"action": "<tool_id or internal action>", "type": "tool" | "internal",
               "params": {...}, "execution": "SYNC" | "ASYNC"}],
  "stop": true when you have nothing more to do, else false,
  "response": "what to tell the requester" or null
}
A tool action's params must match the tool's input_schema. SYNC actions run before your
next turn; their results come back as user messages from "tool:<tool_id>" whose text is a
ToolResult (status SUCCESS with result, or FAILURE with error_message). ASYNC actions
start at once; their results arrive later in your inbox as tool_result messages."""


@dataclass(frozen=True)
class OpenAIRuntime:
    """Asks an OpenAI-compatible endpoint for each step (see the module docstring)."""

    base_url: str
    model: str | None = None
    api_key_env: str | None = None
    api_key_secret: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    temperature: float | None = None
    max_tokens: int | None = None
    json_mode: bool = False
    instructions: str | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OpenAIRuntime:
        """The runtime for `{"kind": "openai", "base_url": ..., ...}`; `ValueError` if unusable."""
        base_url = config.get("base_url")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError('openai runtime needs "base_url", e.g. https://api.openai.com/v1')
        if "api_key" in config:
            # A key written into the member's config would land in the database and files.
            raise ValueError(
                'openai runtime takes no "api_key": name an environment variable '
                '("api_key_env") or a Prefect Secret block ("api_key_secret")'
            )
        known = {f for f in cls.__dataclass_fields__ if f != "base_url"}
        unknown = sorted(set(config) - known - {"kind", "base_url"} - MEMBER_KEYS)
        if unknown:
            raise ValueError(f"openai runtime does not know {', '.join(unknown)}")
        timeout = config.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError('openai runtime "timeout" must be a positive number of seconds')
        return cls(base_url=base_url.rstrip("/"), **{k: config[k] for k in known if k in config})

    # -- the step --------------------------------------------------------------------------

    def step(self, request: StepRequest) -> StepResult:
        """Sends the conversation; the reply as a Chimera response, or a `StepError`."""
        key = self._api_key()
        try:
            return self._step(request, key)
        except StepError as exc:
            message = _scrub(str(exc), key)
        # Raised outside the handler, so the unscrubbed error is not kept as its context.
        raise StepError(message)

    def _step(self, request: StepRequest, key: str | None) -> StepResult:
        url = f"{self.base_url}/chat/completions"
        body: dict[str, Any] = {
            "model": self.model or request.model,
            "messages": self.messages(request),
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            with httpx.Client(timeout=self.timeout) as client:
                reply = client.post(url, json=body, headers=headers)
        except httpx.TimeoutException:
            raise StepError(f"{url} did not answer within {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise StepError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from None
        if reply.status_code >= 400:
            raise StepError(f"{url} answered HTTP {reply.status_code}: {_error_text(reply)}")
        try:
            data = reply.json()
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise StepError(
                f"{url} answered without choices[0].message.content: {reply.text[:200]!r}"
            ) from None
        if not isinstance(content, str) or not content.strip():
            raise StepError(f"{url} answered with an empty message (model {body['model']})")
        response = parse_chimera(
            _json_in(content, source=f"the reply of {url}"), source=f"the reply of {url}"
        )
        return StepResult(response=response, tokens=_tokens(data.get("usage")))

    def messages(self, request: StepRequest) -> list[dict[str, str]]:
        """The chat messages sent for `request` (the key is not in them)."""
        messages: list[dict[str, str]] = []
        if request.prompt:
            messages.append({"role": "system", "content": request.prompt})
        setting = [
            ANSWER_FORMAT,
            f"You are {request.agent_id}, a member of team {request.team}.",
            "Your task:\n" + json.dumps(request.task, ensure_ascii=False, indent=2),
            "Tools you may use (tool_id, description, input_schema):\n"
            + json.dumps(
                [
                    {
                        "tool_id": t.tool_id,
                        "description": t.description,
                        "input_schema": t.input_schema,
                    }
                    for t in request.tools
                ],
                ensure_ascii=False,
                indent=2,
            ),
        ]
        if self.instructions:
            setting.append(self.instructions)
        messages.append({"role": "system", "content": "\n\n".join(setting)})
        for message in request.conversation:
            if message.role is ConversationRole.SYSTEM:
                if message.content != request.prompt:
                    messages.append({"role": "system", "content": str(message.content)})
            elif message.role is ConversationRole.USER:
                messages.append({"role": "user", "content": json.dumps(message.to_wire())})
            else:
                content = message.content.to_wire()  # type: ignore[union-attr]  # an assistant's content
                step = content.get("chimera", content)
                messages.append({"role": "assistant", "content": json.dumps(step)})
        turn: dict[str, Any] = {"inbox": request.inbox} if request.inbox else {}
        turn["next"] = "Answer with your next step: one Chimera response JSON object."
        messages.append({"role": "user", "content": json.dumps(turn, ensure_ascii=False)})
        return messages

    def _api_key(self) -> str | None:
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise StepError(
                    f"the API key variable {self.api_key_env} is not set in the environment"
                )
            return key
        if self.api_key_secret:
            return _secret(self.api_key_secret)
        return None


def _secret(block: str) -> str:
    # Prefect only when a Secret block is named: data commands must not import it.
    try:
        from prefect.blocks.system import Secret

        value = Secret.load(block).get()  # type: ignore[union-attr]  # sync caller: a block, not a coroutine
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise StepError(
            f"cannot read the Prefect Secret block {block!r}: {type(exc).__name__}: {reason}"
        ) from None
    if not isinstance(value, str) or not value:
        raise StepError(f"the Prefect Secret block {block!r} holds no API key string")
    return value


def _json_in(content: str, *, source: str) -> Any:
    text = content.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    fenced = _FENCE.search(text)
    if fenced:
        try:
            return json.loads(fenced.group(1))
        except ValueError:
            pass
    raise StepError(f"{source} is not a JSON object (nor a ```json block): {text[:120]!r}")


def _tokens(usage: Any) -> int:
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool):
        return total
    parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return sum(p for p in parts if isinstance(p, int) and not isinstance(p, bool))


def _error_text(reply: httpx.Response) -> str:
    try:
        error = reply.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message[:300]
    except (ValueError, AttributeError):
        pass
    return reply.text[:300] or reply.reason_phrase


def _scrub(text: str, key: str | None) -> str:
    if not key:
        return text
    text = text.replace(key, "***")
    # Servers often echo a key shortened (sk-abc...wxyz); hide any long piece of it too.
    for size in (16, 12, 8):
        if len(key) > size:
            for start in range(0, len(key) - size + 1):
                piece = key[start : start + size]
                if piece in text:
                    text = text.replace(piece, "***")
    return text
