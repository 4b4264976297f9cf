"""Server-Sent Events: the one framing (`frame`) and the one response (`EventStream`) that
every stream here goes out as: a chat page's answer (HTML), a send's answer through the
JSON API, and the gateway's OpenAI-style chunks.

`EventStream` takes frames made already and writes each as it comes, in its request's own
task. One more task waits for the client to go and pings meanwhile: an SSE comment every
`PING_SECONDS`, which clients skip (the official openai client too) and which tells a
proxy the connection is alive. A stream ends

- when its frames do: the body's end;
- when the client goes: the writer is stopped, its frames' generator closed, nothing more
  written;
- when the server shuts down: `end_streams`, which `webapp.web.server`'s protocols call
  the moment uvicorn begins a graceful shutdown, ends each open stream of that server's
  loop with the body's end, so the connection closes cleanly and uvicorn has nothing to
  wait for. A page's stream reconnects (to a worker still up); an API or gateway client
  sees the stream end without its `done` (or [DONE]).

No task group, no cancel scope or lock per write (sse-starlette's response ran four tasks
a stream and took a lock for every write: with hundreds of sends at once, a tenth of what
admitting one cost), and one response class for all three, so every stream gets the same
pings and the same ends.

Handlers return it annotated `ASGIApp`: Litestar then applies no layer headers or cookies
to it (it sets none on these routes); the app's `before_send` hook still runs.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime

from litestar.types import HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send

PING_SECONDS = 15
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
"""Never cached; not buffered by a reverse proxy (nginx reads `X-Accel-Buffering`)."""
_RAW_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    *((name.lower().encode(), value.encode()) for name, value in STREAM_HEADERS.items()),
]
_END: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"", "more_body": False}

_LINES = re.compile(r"\r\n|\r|\n")
_NEXT_LINE = "\ndata: "


def frame(data: str, event: str | None = None, event_id: str | None = None) -> bytes:
    """One SSE message: its name and id when given, then `data`, a `data:` line for each
    of its lines (a client joins them again with newlines). The one framing every stream
    here writes: pages, the JSON API and the gateway."""
    head = "" if event is None else f"event: {event}\n"
    if event_id is not None:
        head += f"id: {event_id}\n"
    if "\n" not in data and "\r" not in data:
        return f"{head}data: {data}\n\n".encode()
    # Each line as `data: <line>\n`, in one substitution (not a Python step per line).
    return f"{head}data: {_LINES.sub(_NEXT_LINE, data)}\n\n".encode()


def ping_frame() -> bytes:
    """An SSE comment: clients ignore it, proxies see the connection is alive."""
    return f": ping - {datetime.now(UTC)}\n\n".encode()


_GONE = "gone"
"""The client disconnected: nothing more is written."""
_STOPPING = "stopping"
"""The server is shutting down: the body's end is written now."""
_DONE = "done"
"""The frames ended (or failed): nothing is left to stop."""


class _Open:
    """One stream being written: its writer task, and what its two tasks share."""

    __slots__ = ("busy", "ending", "writer")

    def __init__(self, writer: asyncio.Task[object]) -> None:
        self.writer = writer
        self.busy = False
        """A frame is being written (a ping waits for the next quiet moment)."""
        self.ending: str | None = None
        """Why the writer was stopped, if it was (`_GONE`, `_STOPPING`), or `_DONE`."""

    def end(self, why: str) -> None:
        """Stop the writer, once: a second cancel would stay pending on its task."""
        if self.ending is None:
            self.ending = why
            self.writer.cancel()


_OPEN: set[_Open] = set()
"""The streams being written in this process (on whichever loop each runs)."""


def end_streams() -> None:
    """End every stream open on the running loop with the body's end: its server is
    shutting down (called from the loop, by `webapp.web.server`'s protocols)."""
    loop = asyncio.get_running_loop()
    for stream in list(_OPEN):
        if stream.writer.get_loop() is loop:
            stream.end(_STOPPING)


class EventStream:
    """`frames` (SSE frames made already: `frame`, `ping_frame`) as an event stream, each
    written as it comes, with `headers` beside the stream's own."""

    __slots__ = ("frames", "headers", "status_code")

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.frames = frames
        self.status_code = status_code
        # A list of its own: a `before_send` hook adds headers to it in place.
        self.headers = [*_RAW_HEADERS]
        if headers:
            self.headers += [
                (name.lower().encode(), value.encode()) for name, value in headers.items()
            ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.current_task()
        assert writer is not None, "an ASGI app runs in a task"
        start: HTTPResponseStartEvent = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.headers,
        }
        await send(start)
        stream = _Open(writer)
        _OPEN.add(stream)
        watch = asyncio.create_task(_watch(receive, send, stream))
        try:
            async for frame in self.frames:
                stream.busy = True
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                stream.busy = False
        except asyncio.CancelledError:
            if stream.ending is None:
                raise  # the server's own cancel (its graceful timeout): not ours to swallow
            writer.uncancel()
        finally:
            _OPEN.discard(stream)
            if stream.ending is None:
                stream.ending = _DONE
            watch.cancel()
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:
                await aclose()
        if stream.ending != _GONE:
            await send(_END)


async def _watch(receive: Receive, send: Send, stream: _Open) -> None:
    """Ping while the client stays; when it goes, end the stream."""
    while True:
        try:
            message = await asyncio.wait_for(receive(), PING_SECONDS)
        except TimeoutError:
            if not stream.busy and stream.ending is None:
                await send({"type": "http.response.body", "body": ping_frame(), "more_body": True})
            continue
        if message["type"] == "http.disconnect":
            stream.end(_GONE)
            return
