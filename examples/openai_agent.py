#!/usr/bin/env python3
"""An agent program for teamflow's `command` runtime, backed by any OpenAI-compatible
chat completions endpoint (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, ...).

    teamflow member add my-team writer --model sonnet --prompt "You write short summaries." \\
        --runtime command --command \\
        "python3 examples/openai_agent.py --base-url http://127.0.0.1:11434/v1 --model llama3.2"

The protocol (what `flows/runtimes/command.py` does once per step):

- stdin: the step request as JSON: `team`, `member`, `agent_id`, `model` (haiku/sonnet/opus),
  `prompt`, `task`, `conversation` (the `003` messages so far), `tools` (the `000` tool
  definitions the member may use) and `inbox` (its unread messages);
- stdout: one `002` Chimera response, here wrapped as `{"chimera": {...}, "tokens": N}` so
  teamflow records the tokens the endpoint counted;
- exit code 0; anything else (and the last line of stderr) is the step's error.

Settings, from the arguments or else the environment:

    --base-url   OPENAI_BASE_URL   default https://api.openai.com/v1
    --model      OPENAI_MODEL      the endpoint's model name (required)
    --api-key-env NAME             the variable that holds the key (default OPENAI_API_KEY);
                                   no key set: no Authorization header (local servers)
    --timeout    seconds per request (default 120)

The key is read from the environment (set it where `teamflow up` / `teamflow worker` runs:
agent programs inherit that environment) and never printed. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request

ANSWER_FORMAT = """\
Answer every turn with exactly one JSON object and nothing else: a Chimera response.
{
  "status": "EXECUTING" while you still have work to do, "SUCCESS" when the task is done,
            "ERROR" when you cannot do it,
  "thoughts": [{"type": "PLAN" | "OBSERVATION" | "DECISION", "content": "..."}],
  "actions": [{"action": "<tool_id>", "type": "tool", "params": {...}, "execution": "SYNC"}],
  "stop": true when you have nothing more to do, else false,
  "response": "what to tell the requester" or null
}
A tool action's params must match the tool's input_schema. Results of SYNC actions come
back before your next turn as user messages from "tool:<tool_id>" whose text is a ToolResult
(status SUCCESS with result, or FAILURE with error_message)."""

FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)\n?```", re.DOTALL)


class AgentError(Exception):
    """Why this step failed; printed as the last line of stderr."""


def messages(request: dict) -> list[dict[str, str]]:
    """The chat messages for one step: prompt, setting, the conversation, the next turn."""
    prompt = request.get("prompt") or ""
    found = [{"role": "system", "content": prompt}] if prompt else []
    setting = [
        ANSWER_FORMAT,
        f"You are {request.get('agent_id')}, a member of team {request.get('team')}.",
        "Your task:\n" + json.dumps(request.get("task"), ensure_ascii=False, indent=2),
        "Tools you may use:\n"
        + json.dumps(
            [
                {k: t.get(k) for k in ("tool_id", "description", "input_schema")}
                for t in request.get("tools") or []
            ],
            ensure_ascii=False,
        ),
    ]
    found.append({"role": "system", "content": "\n\n".join(setting)})
    for message in request.get("conversation") or []:
        role, content = message.get("role"), message.get("content")
        if role == "system":
            if content != prompt:
                found.append({"role": "system", "content": str(content)})
        elif role == "user":
            found.append({"role": "user", "content": json.dumps(content, ensure_ascii=False)})
        elif isinstance(content, dict):
            step = content.get("chimera", content)
            found.append({"role": "assistant", "content": json.dumps(step, ensure_ascii=False)})
    turn = {"next": "Answer with your next step: one Chimera response JSON object."}
    if request.get("inbox"):
        turn = {"inbox": request["inbox"], **turn}
    found.append({"role": "user", "content": json.dumps(turn, ensure_ascii=False)})
    return found


def ask(base_url: str, model: str, key: str | None, body_messages: list, timeout: float) -> dict:
    """POSTs `{base_url}/chat/completions`; the decoded reply."""
    url = base_url.rstrip("/") + "/chat/completions"
    data = json.dumps({"model": model, "messages": body_messages}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise AgentError(f"{url} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise AgentError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError:
        raise AgentError(f"{url} did not answer JSON") from None


def chimera_in(content: str) -> dict:
    """The Chimera JSON object in the model's message (alone, or in a ```json block)."""
    text = content.strip()
    candidates = [text] + [m.group(1) for m in FENCE.finditer(text)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise AgentError(f"the model did not answer a JSON object: {text[:120]!r}")


def tokens_of(usage: object) -> int:
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        return total
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL"))
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    base_url = args.base_url or "https://api.openai.com/v1"
    key = os.environ.get(args.api_key_env) or None
    try:
        if not args.model:
            raise AgentError("no model: give --model NAME or set OPENAI_MODEL")
        try:
            request = json.load(sys.stdin)
        except ValueError as exc:
            raise AgentError(f"the step request on stdin is not JSON: {exc}") from None
        reply = ask(base_url, args.model, key, messages(request), args.timeout)
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise AgentError("the reply has no choices[0].message.content") from None
        if not isinstance(content, str) or not content.strip():
            raise AgentError("the model answered an empty message")
        step = chimera_in(content)
    except AgentError as exc:
        message = str(exc)
        if key:
            message = message.replace(key, "***")
        print(f"openai_agent: {message}", file=sys.stderr)
        return 1
    json.dump({"chimera": step, "tokens": tokens_of(reply.get("usage"))}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
