"""The lean SSE response a send's answer streams through (`webapp.web.events.frame_stream`),
driven as uvicorn drives an ASGI app: frames in order then the end, pings while quiet,
and a client that goes ends the stream (its frames' generator is closed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from webapp.web import events


class Client:
    """The ASGI side of one connection: what was sent, and a disconnect on demand."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


async def serve(frames: AsyncIterator[bytes], client: Client) -> None:
    app = events.frame_stream(frames, status_code=201)
    await app({"type": "http", "method": "POST"}, client.receive, client.send)  # type: ignore[arg-type]


async def test_frames_then_the_end() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for n in range(3):
            await asyncio.sleep(0)
            yield f"event: delta\r\ndata: {n}\r\n\r\n".encode()

    client = Client()
    await serve(frames(), client)
    start = client.messages[0]
    assert start["status"] == 201
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-store"
    assert client.body == b"".join(f"event: delta\r\ndata: {n}\r\n\r\n".encode() for n in range(3))
    assert client.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_pings_while_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "PING_SECONDS", 0.02)

    async def frames() -> AsyncIterator[bytes]:
        yield b"event: fit\r\ndata: {}\r\n\r\n"
        await asyncio.sleep(0.15)
        yield b"event: done\r\ndata: {}\r\n\r\n"

    client = Client()
    await serve(frames(), client)
    body = client.body
    assert body.startswith(b"event: fit") and body.endswith(b"event: done\r\ndata: {}\r\n\r\n")
    assert body.count(b": ping - ") >= 2


async def test_a_client_that_goes_ends_the_stream() -> None:
    closed = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"event: fit\r\ndata: {}\r\n\r\n"
            await asyncio.sleep(60)  # an answer still being written
            yield b"never"
        finally:
            closed.set()

    client = Client()
    serving = asyncio.create_task(serve(frames(), client))
    await asyncio.sleep(0.01)
    client.gone.set()
    await asyncio.wait_for(serving, 2)  # ends by itself, without an error
    assert closed.is_set()
    assert b"never" not in client.body


async def test_a_server_cancelling_it_is_not_swallowed() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"event: fit\r\ndata: {}\r\n\r\n"
        await asyncio.sleep(60)
        yield b"never"

    serving = asyncio.create_task(serve(frames(), Client()))
    await asyncio.sleep(0.01)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
