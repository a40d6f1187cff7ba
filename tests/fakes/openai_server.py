"""A fake OpenAI-compatible chat completions server: real HTTP on 127.0.0.1, a free port.

    with FakeOpenAI(api_key="sk-test") as server:
        server.reply(content='{"status": "SUCCESS", ...}', total_tokens=42)
        ... OpenAIRuntime(base_url=server.base_url, ...) ...
        server.requests[0]["body"]["messages"]

It answers `POST /v1/chat/completions` like the real API: 401 with an `invalid_api_key` error
when the `Authorization: Bearer` header is not the key, 404 on other paths (not recorded),
else the next queued reply as a `chat.completion` object with `choices[0].message.content`
and `usage` (or a queued error status). Like some real servers, its 401 echoes the key it was sent.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One queued answer: a completion with `content`, or an error `status` with `body`."""

    content: str | None = None
    status: int = 200
    body: Any = None
    prompt_tokens: int = 120
    completion_tokens: int = 30
    delay: float = 0.0


class FakeOpenAI:
    """The server; a context manager that starts and stops it."""

    def __init__(self, *, api_key: str | None = "sk-fake-key") -> None:
        self.api_key = api_key
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reply(self, content: str | None = None, **kwargs: Any) -> None:
        """Queues the next answer (see `Reply`)."""
        self.replies.append(Reply(content=content, **kwargs))

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if path != "/v1/chat/completions":
            # Not recorded: a client of another test may reach a port this server reused.
            return 404, {"error": {"message": f"Unknown path {path}", "type": "not_found"}}
        body = json.loads(raw or b"null")
        self.requests.append({"path": path, "headers": headers, "body": body})
        sent = headers.get("authorization", "")
        if self.api_key is not None and sent != f"Bearer {self.api_key}":
            token = sent.removeprefix("Bearer ")
            return 401, {
                "error": {
                    "message": f"Incorrect API key provided: {token}.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
        if not self.replies:
            return 500, {"error": {"message": "fake server: no reply queued", "type": "server"}}
        reply = self.replies.pop(0)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            return reply.status, reply.body
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            },
            "system_fingerprint": "fp_fake",
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload = fake._answer(self.path, headers, raw)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output quiet

        return Handler
