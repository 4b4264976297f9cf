"""Server-Sent Events responses: the chat's answer streams, JSON (API) or HTML (pages).

sse-starlette's response, not Litestar's own stream: it pings idle connections, bounds
how long a send may block, and does not hold up a server shutting down. (Litestar does
not apply layer headers or cookies to it; the app's `before_send` hook still runs.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

from litestar.types import ASGIApp
from sse_starlette import EventSourceResponse

PING_SECONDS = 15
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
"""Never cached; not buffered by a reverse proxy (nginx reads `X-Accel-Buffering`)."""


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
