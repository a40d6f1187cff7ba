"""A fake OpenAI-compatible embeddings server: real HTTP on 127.0.0.1, a free port.

    with FakeEmbeddings() as server:
        OpenAIEmbedder(server.base_url, "nomic-embed-text").embed(["dark mode"])
        server.requests[0]["body"]  # {"model": "nomic-embed-text", "input": ["dark mode"]}

It answers `POST /v1/embeddings` as OpenAI and Ollama do: `{"object": "list", "data":
[{"object": "embedding", "index": i, "embedding": [...]}], "model": ..., "usage": ...}`.
A vector counts the text's words by meaning: words of one `SYNONYMS` group add to the same
coordinate (so "night theme" is close to "dark mode" without a word in common); other words
to a coordinate of their own (a stable hash). `fail_with` makes it answer that status.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SYNONYMS = [
    {"dark", "night", "black"},
    {"mode", "theme", "appearance"},
    {"deploy", "deployment", "release", "ship"},
    {"friday", "weekend"},
]


def vector_of(text: str, dimension: int) -> list[float]:
    vector = [0.0] * dimension
    for word in re.findall(r"\w+", text.lower()):
        group = next((i for i, g in enumerate(SYNONYMS) if word in g), None)
        slot = (
            group
            if group is not None
            else len(SYNONYMS) + zlib.crc32(word.encode()) % (dimension - len(SYNONYMS))
        )
        vector[slot] += 1.0
    return vector


class FakeEmbeddings:
    """The server; a context manager that starts and stops it."""

    def __init__(self, *, dimension: int = 768) -> None:
        self.dimension = dimension
        self.fail_with: int | None = None
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeEmbeddings:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _answer(self, path: str, raw: bytes) -> tuple[int, Any]:
        if path != "/v1/embeddings":
            # Not recorded: a client of another test may reach a port this server reused.
            return 404, {"error": {"message": f"Unknown path {path}", "type": "not_found"}}
        body = json.loads(raw or b"null")
        self.requests.append({"path": path, "body": body})
        if self.fail_with:
            return self.fail_with, {"error": {"message": "fake failure", "type": "server"}}
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return 200, {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": vector_of(t, self.dimension)}
                for i, t in enumerate(texts)
            ],
            "model": body.get("model"),
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, payload = fake._answer(self.path, self.rfile.read(length))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
