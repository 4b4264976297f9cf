"""Server-Sent Events: the one framing (`frame`) and the responses that stream it: the
chat's answers as JSON (API) or HTML (pages), and the gateway's OpenAI-style chunks.

`event_stream` is sse-starlette's response, not Litestar's own stream: it pings idle
connections and does not hold up a server shutting down. (Litestar does not apply layer
headers or cookies to it; the app's `before_send` hook still runs.)

`frame_stream` is the lean one a send's answer streams through (`POST .../messages`):
frames made already, written as they come, with the same pings, and the end of the
stream as soon as the client goes. sse-starlette runs every stream as an anyio task
group of four tasks (the body, pings, a shutdown watch, a disconnect watch) and takes a
cancel scope and a lock for every write; with hundreds of sends at once that set-up was
a tenth of what admitting a send cost. Here a stream is its own request's task plus one
that waits for the client to go and pings meanwhile. A server shutting down cancels it
after uvicorn's graceful timeout (`webapp serve` gives 5 s); an answer ends before that
in all but the longest cases.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, cast

from litestar.types import ASGIApp, Receive, Scope, Send
from sse_starlette import EventSourceResponse

PING_SECONDS = 15
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
"""Never cached; not buffered by a reverse proxy (nginx reads `X-Accel-Buffering`)."""
_RAW_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    *((name.lower().encode(), value.encode()) for name, value in STREAM_HEADERS.items()),
]


def event_stream(
    events: AsyncIterator[dict[str, Any]] | AsyncIterator[bytes], *, status_code: int = 200
) -> ASGIApp:
    """Each item of `events` (`data`, and `event` / `id` when set) as one SSE message;
    bytes are frames already made, written as they are."""
    response = EventSourceResponse(
        events, status_code=status_code, ping=PING_SECONDS, headers=STREAM_HEADERS
    )
    # The same ASGI callable: sse-starlette types scope and messages as Starlette does
    # (MutableMapping), Litestar's ASGIApp as TypedDicts.
    return cast("ASGIApp", response)


_LINES = re.compile(r"\r\n|\r|\n")


def frame(data: str, event: str | None = None, event_id: str | None = None) -> bytes:
    """One SSE message: its name and id when given, then `data`, a `data:` line for each
    of its lines (a client joins them again with newlines). The one framing every stream
    here writes: pages, the JSON API and the gateway."""
    head = "" if event is None else f"event: {event}\n"
    if event_id is not None:
        head += f"id: {event_id}\n"
    if "\n" not in data and "\r" not in data:
        return f"{head}data: {data}\n\n".encode()
    return (head + "".join(f"data: {line}\n" for line in _LINES.split(data)) + "\n").encode()


def ping_frame() -> bytes:
    """An SSE comment: clients ignore it, proxies see the connection is alive."""
    return f": ping - {datetime.now(UTC)}\r\n\r\n".encode()


class _Writing:
    """What the stream's two tasks share."""

    __slots__ = ("busy", "gone")

    def __init__(self) -> None:
        self.busy = False
        """A frame is being written (a ping waits for the next quiet moment)."""
        self.gone = False
        """The client disconnected: the writer was cancelled for that, not by the server."""


def frame_stream(frames: AsyncIterator[bytes], *, status_code: int = 200) -> ASGIApp:
    """`frames` (SSE frames made already) as an event stream, each written as it comes."""

    async def respond(scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.current_task()
        assert writer is not None, "an ASGI app runs in a task"
        writing = _Writing()
        await send({"type": "http.response.start", "status": status_code, "headers": _RAW_HEADERS})
        watch = asyncio.create_task(_watch(receive, send, writer, writing))
        try:
            async for frame in frames:
                writing.busy = True
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                writing.busy = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not writing.gone:
                raise
            writer.uncancel()
        finally:
            watch.cancel()
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:
                await aclose()

    return respond


async def _watch(
    receive: Receive, send: Send, writer: asyncio.Task[Any], writing: _Writing
) -> None:
    """Ping while the client stays; when it goes, end the stream."""
    while True:
        try:
            message = await asyncio.wait_for(receive(), PING_SECONDS)
        except TimeoutError:
            if not writing.busy:
                await send({"type": "http.response.body", "body": ping_frame(), "more_body": True})
            continue
        if message["type"] == "http.disconnect":
            writing.gone = True
            writer.cancel()
            return
