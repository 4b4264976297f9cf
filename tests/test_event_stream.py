"""The one SSE response every stream goes out as (`webapp.web.events.EventStream`), driven
as uvicorn drives an ASGI app: frames in order then the end, pings while quiet, a client
that goes ends the stream (its frames' generator is closed), and a server shutting down
ends the streams of its own loop with the body's end."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from webapp.web import events

END = {"type": "http.response.body", "body": b"", "more_body": False}


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


async def serve(frames: AsyncIterator[bytes], client: Client, **options: Any) -> None:
    app = events.EventStream(frames, **options)
    await app({"type": "http", "method": "POST"}, client.receive, client.send)  # type: ignore[arg-type]


async def an_answer_still_being_written(closed: asyncio.Event) -> AsyncIterator[bytes]:
    try:
        yield events.frame("{}", "fit")
        await asyncio.sleep(60)
        yield b"never"
    finally:
        closed.set()


async def test_frames_then_the_end() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for n in range(3):
            await asyncio.sleep(0)
            yield events.frame(str(n), "delta")

    client = Client()
    await serve(frames(), client, status_code=201, headers={"X-Dropped-Turns": "2"})
    start = client.messages[0]
    assert start["status"] == 201
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"x-accel-buffering"] == b"no"
    assert headers[b"x-dropped-turns"] == b"2"
    assert client.body == b"".join(f"event: delta\ndata: {n}\n\n".encode() for n in range(3))
    assert client.messages[-1] == END


async def test_each_stream_has_headers_of_its_own() -> None:
    """The app's `before_send` hook adds headers to the start message in place (an embed's
    stream may be framed, a page's may not): what one stream got, the next must not."""

    async def nothing() -> AsyncIterator[bytes]:
        none: list[bytes] = []
        for frame in none:
            yield frame

    first, second = Client(), Client()
    await serve(nothing(), first)
    first.messages[0]["headers"].append((b"x-frame-options", b"DENY"))
    await serve(nothing(), second)
    assert b"x-frame-options" not in dict(second.messages[0]["headers"])


def test_a_frame_of_many_lines_is_a_data_line_each() -> None:
    assert (
        events.frame("a\r\nb\nc", "turn", "7")
        == b"event: turn\nid: 7\ndata: a\ndata: b\ndata: c\n\n"
    )


async def test_pings_while_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "PING_SECONDS", 0.02)

    async def frames() -> AsyncIterator[bytes]:
        yield b"event: fit\ndata: {}\n\n"
        await asyncio.sleep(0.15)
        yield b"event: done\ndata: {}\n\n"

    client = Client()
    await serve(frames(), client)
    body = client.body
    assert body.startswith(b"event: fit") and body.endswith(b"event: done\ndata: {}\n\n")
    assert body.count(b"\n: ping - ") >= 2, "a comment line, after a frame's blank line"


async def test_a_client_that_goes_ends_the_stream() -> None:
    closed = asyncio.Event()
    client = Client()
    serving = asyncio.create_task(serve(an_answer_still_being_written(closed), client))
    await asyncio.sleep(0.01)
    client.gone.set()
    await asyncio.wait_for(serving, 2)  # ends by itself, without an error
    assert closed.is_set()
    assert b"never" not in client.body
    assert client.messages[-1] != END, "nothing is written to a client that went"
    assert not events._OPEN


async def test_a_server_cancelling_it_is_not_swallowed() -> None:
    closed = asyncio.Event()
    serving = asyncio.create_task(serve(an_answer_still_being_written(closed), Client()))
    await asyncio.sleep(0.01)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert closed.is_set()


async def test_a_server_shutting_down_ends_its_loops_streams_with_the_end() -> None:
    """Two servers in one process, each on its loop (as the tests run uvicorn in threads):
    the one shutting down ends its own streams, cleanly, and not the other's."""
    elsewhere_started = threading.Event()
    elsewhere_closed = asyncio.Event()
    release = threading.Event()
    other = Client()

    async def the_other_server() -> None:
        serving = asyncio.create_task(serve(an_answer_still_being_written(elsewhere_closed), other))
        await asyncio.sleep(0.01)
        elsewhere_started.set()
        await asyncio.to_thread(release.wait)
        assert not serving.done(), "a stream on another loop was ended"
        serving.cancel()

    thread = threading.Thread(target=asyncio.run, args=(the_other_server(),))
    thread.start()
    try:
        assert await asyncio.to_thread(elsewhere_started.wait, 5)
        closed = asyncio.Event()
        client = Client()
        serving = asyncio.create_task(serve(an_answer_still_being_written(closed), client))
        await asyncio.sleep(0.01)
        events.end_streams()
        await asyncio.wait_for(serving, 2)  # without an error
        assert closed.is_set()
        assert client.body == events.frame("{}", "fit")
        assert client.messages[-1] == END
    finally:
        release.set()
        await asyncio.to_thread(thread.join, 5)
    assert other.messages[-1] != END
