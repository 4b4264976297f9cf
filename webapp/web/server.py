"""uvicorn's HTTP/1.1 protocol with a deadline for reading each request.

uvicorn times out a connection only while it sits idle between requests, and the timer
stops at the first byte: a client that sends its headers (or its body) a byte at a time
holds a connection, and a file descriptor, for ever. Here every request, from the moment
the connection opens or the previous response ends, must arrive whole within
`WEBAPP_REQUEST_TIMEOUT` seconds, or the connection is closed. Responses are not timed:
a streamed answer may run as long as it runs.
"""

from __future__ import annotations

import asyncio
from functools import cache

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from webapp.settings import Settings

STILL_ARRIVING = (h11.IDLE, h11.SEND_BODY)
"""The client's states while its request (headers, then body) is not complete."""


@cache
def request_timeout() -> float:
    """Read once per worker process (uvicorn builds a protocol object per connection)."""
    return Settings().request_timeout


class DeadlineH11Protocol(H11Protocol):
    _deadline: asyncio.TimerHandle | None = None

    # Typed as uvicorn's own H11Protocol types it (narrower than asyncio's BaseTransport).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(request_timeout(), self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing() and self.conn.their_state in STILL_ARRIVING:
            self.transport.close()
