"""A lean streaming HTTP/1.1 client for the load benchmark.

Hundreds of streams at once must cost the client little, or the benchmark measures the
client: httpx spends more per chunk than the app does. This is an asyncio protocol that
writes one request, reads the status, undoes chunked framing and notes the arrival time
of every event it is told to count, nothing more. A stream either ends with its final
event (ok) or is a failure with the reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

EventKind = Callable[[bytes], str | None]
"""Classifies one SSE event (its lines, CR removed): "token", "end", "fail" or None."""


@dataclass(slots=True)
class Stream:
    started: float = 0.0
    tokens: list[float] = field(default_factory=list)
    """Arrival time of each counted event (perf_counter seconds)."""
    ok: bool = False
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return self.tokens[0] - self.started if self.tokens else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.tokens, self.tokens[1:], strict=False)]


def app_event(event: bytes) -> str | None:
    """The app's events: `delta` counts, `done` ends, `error` fails."""
    if b"event: delta" in event:
        return "token"
    if b"event: done" in event:
        return "end"
    if b"event: error" in event:
        return "fail"
    return None


def admitted_event(event: bytes) -> str | None:
    """The app's `fit` ends it: the send was admitted (its answer is left to run)."""
    if b"event: fit" in event:
        return "end"
    if b"event: error" in event:
        return "fail"
    return None


def upstream_event(event: bytes) -> str | None:
    """An OpenAI-style stream: a chunk with content counts, `[DONE]` ends."""
    if b"data: [DONE]" in event:
        return "end"
    if b'"content": "' in event and b'"content": ""' not in event:
        return "token"
    if b'"error"' in event:
        return "fail"
    return None


class _Protocol(asyncio.Protocol):
    def __init__(
        self, request: bytes, kind: EventKind, stream: Stream, done: asyncio.Future[None]
    ) -> None:
        self.request = request
        self.kind = kind
        self.stream = stream
        self.done = done
        self.head = b""
        self.status: int | None = None
        self.chunked = False
        self.raw = b""
        self.events = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.status is None:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.head[:end].lower(), self.head[end + 4 :]
            self.status = int(head.split(b" ", 2)[1])
            self.chunked = b"transfer-encoding: chunked" in head
            if self.status >= 300:
                self._finish(f"HTTP {self.status}: {data[:200]!r}")
                return
        if self.chunked:
            self.raw += data
            data = self._dechunk()
        self.events += data.replace(b"\r", b"")
        while (cut := self.events.find(b"\n\n")) >= 0:
            event, self.events = self.events[:cut], self.events[cut + 2 :]
            kind = self.kind(event)
            if kind == "token":
                self.stream.tokens.append(now)
            elif kind == "end":
                self.stream.ok = True
                self._finish(None)
                return
            elif kind == "fail":
                self._finish(event.decode(errors="replace")[:300])
                return

    def _dechunk(self) -> bytes:
        out = []
        while True:
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.raw[:line_end].split(b";")[0], 16)
            if len(self.raw) < line_end + 2 + size + 2:
                break
            out.append(self.raw[line_end + 2 : line_end + 2 + size])
            self.raw = self.raw[line_end + 2 + size + 2 :]
            if size == 0:
                break
        return b"".join(out)

    def _finish(self, error: str | None) -> None:
        if self.done.done():
            return
        if error is not None:
            self.stream.ok = False
            self.stream.error = error
        self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(f"connection closed: {exc}" if exc else "connection closed early")


def post_request(host: str, port: int, path: str, body: object, headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Accept: text/event-stream",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def stream(
    host: str, port: int, request: bytes, kind: EventKind, timeout: float = 60.0
) -> Stream:
    """One request, read to its final event; never raises (a failure is in the result)."""
    loop = asyncio.get_running_loop()
    result = Stream(started=time.perf_counter())
    done: asyncio.Future[None] = loop.create_future()
    try:
        transport, _ = await asyncio.wait_for(
            loop.create_connection(lambda: _Protocol(request, kind, result, done), host, port),
            timeout,
        )
    except (OSError, TimeoutError) as error:
        result.error = f"connect: {error!r}"
        return result
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        result.ok, result.error = False, f"no end within {timeout:g} s"
        transport.close()
    return result
