"""A fault proxy: a real HTTP proxy on a real socket that fails a stated share of requests.

`FaultProxy(upstream)` listens on 127.0.0.1 and forwards each request to `upstream` (a
`host:port`), except every `every`-th request, which it fails as `fault` says: `"503"`
answers `503 Service Unavailable` (what a busy Prefect server on SQLite answers), `"drop"`
closes the connection without an answer, before the request reached the server; `"mix"`
alternates the two (a 503 first). Without an
upstream it answers `200 ok` itself. The count is deterministic: the same run of requests
meets the same faults. With `once_per_request`, a request faulted once (same line, same
body) passes when it is sent again, so a client's own single retry takes a shared fault;
`burst` faults one kind of request several times running, past such a retry. Each
forwarded request is sent with `Connection: close`, so each request of a keep-alive client
opens a new connection and is counted. A websocket upgrade (Prefect's events) is passed
through untouched.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class FaultProxy:
    upstream: str | None = None
    every: int = 0
    """Fail each `every`-th request (0: none)."""
    fault: str = "503"
    status: int = 200
    body: str = "ok"
    """What the proxy answers itself without an upstream."""
    requests: int = 0
    faults: int = 0
    faulted: list[str] = field(default_factory=list)
    retry_after: bytes = b""
    """A `Retry-After` header line for the 503s (e.g. `b"retry-after: 0.5\\r\\n"`): a
    client that honours it (Prefect's) waits that long, not its own 2 s and more."""
    once_per_request: bool = False
    """Fault a request (same line, same body) once only: it passes when sent again."""
    burst: tuple[str, bytes] | None = None
    """`(request line part, body part)`: the first `burst_left` requests that match are
    answered 503, one after another (more than a client's own retries take)."""
    burst_left: int = 0
    port: int = 0
    _faulted: set[tuple[str, bytes]] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in lines[1:] if line)
        }
        if headers.get("upgrade", "").lower() == "websocket" and self.upstream:
            await self._tunnel(head, reader, writer)
            return
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        self.requests += 1
        signature = (lines[0], body)
        burst = self.burst is not None and self.burst_left > 0
        burst = burst and self.burst[0] in lines[0] and self.burst[1] in body  # type: ignore[index]
        if burst:
            self.burst_left -= 1
        elif self.every and self.requests % self.every == 0 and signature not in self._faulted:
            if self.once_per_request:
                self._faulted.add(signature)
        else:
            burst = None  # type: ignore[assignment]
        if burst is not None:
            self.faults += 1
            self.faulted.append(lines[0])
            answer = burst or self.fault == "503" or (self.fault == "mix" and self.faults % 2 == 1)
            if answer:
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                    b"content-length: 33\r\nconnection: close\r\n" + self.retry_after + b"\r\n"
                    b'{"detail":"injected by the test"}'
                )
                await writer.drain()
            writer.close()
            return
        if self.upstream is None:
            text = (
                f"HTTP/1.1 {self.status} X\r\ncontent-length: {len(self.body)}\r\n"
                f"connection: close\r\n\r\n{self.body}"
            )
            writer.write(text.encode())
            await writer.drain()
            writer.close()
            return
        kept = [lines[0]] + [
            line for line in lines[1:] if line and not line.lower().startswith("connection:")
        ]
        request = ("\r\n".join([*kept, "Connection: close"]) + "\r\n\r\n").encode("latin-1")
        await self._forward(request + body, reader, writer)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert self.upstream is not None
        host, _, port = self.upstream.rpartition(":")
        return await asyncio.open_connection(host, int(port))

    async def _forward(
        self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await self._open()
        except OSError:
            writer.close()
            return
        up_writer.write(request)
        await up_writer.drain()
        await self._pipe(up_reader, writer)
        up_writer.close()

    async def _tunnel(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await self._open()
        except OSError:
            writer.close()
            return
        up_writer.write(head)
        await up_writer.drain()
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            sink.close()


@contextmanager
def fault_proxy(upstream: str | None = None, **options: object) -> Iterator[FaultProxy]:
    """A running `FaultProxy` (in a thread of its own) for the block."""
    proxy = FaultProxy(upstream, **options)  # type: ignore[arg-type]
    started = threading.Event()
    stopping: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stopping
        stopping = asyncio.Event()
        server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
        proxy.port = server.sockets[0].getsockname()[1]
        started.set()
        async with server:
            await stopping.wait()
        # The connections still open (a websocket of a client not closed yet) end here.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for each in others:
            each.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield proxy
    finally:
        assert stopping is not None
        loop.call_soon_threadsafe(stopping.set)
        thread.join(10)
