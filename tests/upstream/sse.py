"""Server-sent events as the fake writes them: a raw ASGI response that can end abruptly,
the data framing (short or the long way), and the pieces a reply streams in."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive, Scope, Send


class _Abort(Exception):
    """Raised inside an event stream to cut the connection without finishing the body."""


class _QuietAbort(logging.Filter):
    """Uvicorn logs an error when a response is left unfinished; here that is the point."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "without completing response" not in record.getMessage()


class _EventStream:
    """A raw ASGI response for SSE, so a stream can end abruptly: returning without the
    final empty body makes uvicorn close the connection mid-chunked-body, which is what
    a crashed or killed server looks like to the client."""

    def __init__(self, events: AsyncIterator[bytes]) -> None:
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            async for chunk in self._events:
                if gone.is_set():
                    return  # the client left: stop writing into a closed socket
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await asyncio.sleep(0)  # let the loop notice a closed connection
        except _Abort:
            return
        finally:
            watcher.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _sse(data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


async def _verbose(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The same events framed the long way (see FakeUpstream.frame_streams_verbosely)."""
    number = 0
    async for event in events:
        payload = event.decode().removeprefix("data: ").removesuffix("\n\n")
        if payload != "[DONE]":
            payload = json.dumps(json.loads(payload), indent=1)
        number += 1
        lines = [": keep-alive", "", f"id: {number}", *(f"data: {p}" for p in payload.split("\n"))]
        if number == 1:
            lines[2:2] = ["retry: 3000", ""]
        yield ("\r\n".join(lines) + "\r\n\r\n").encode()


def _pieces(text: str) -> list[str]:
    """Stream pieces: word by word (each with its trailing space), at least three."""
    pieces = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    if len(pieces) < 3 and len(text) >= 3:
        pieces = list(text)  # a short forced reply still streams in several chunks
    return pieces
