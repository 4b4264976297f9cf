"""uvicorn's HTTP/1.1 protocols with a deadline for reading each request.

uvicorn times out a connection only while it sits idle between requests, and the timer
stops at the first byte: a client that sends its headers (or its body) a byte at a time
holds a connection, and a file descriptor, for ever. Here every request, from the moment
the connection opens or the previous response ends, must arrive whole within
`WEBAPP_REQUEST_TIMEOUT` seconds, or the connection is closed. Responses are not timed:
a streamed answer may run as long as it runs.

`webapp serve` runs on httptools (C parsing, one `write` per chunk) when it is
installed, and falls back to h11, which is pure Python: with hundreds of answers
streaming, h11's per-chunk bookkeeping was a good part of the server's CPU.
"""

from __future__ import annotations

import asyncio
from functools import cache
from typing import TYPE_CHECKING

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from webapp.settings import Settings

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

STILL_ARRIVING = (h11.IDLE, h11.SEND_BODY)
"""The client's states (h11) while its request (headers, then body) is not complete."""


@cache
def request_timeout() -> float:
    """Read once per worker process (uvicorn builds a protocol object per connection)."""
    return Settings().request_timeout


class _Deadline(asyncio.Protocol):
    """The timer and the hooks that run it, for both protocols; `_arriving` says whether
    a request is incomplete. It comes first in each protocol's bases, so `super()` is
    uvicorn's protocol; `asyncio.Protocol`, after uvicorn's in the MRO, only types it."""

    _deadline: asyncio.TimerHandle | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
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
        if not self.transport.is_closing() and self._arriving():
            self.transport.close()

    def _arriving(self) -> bool:
        raise NotImplementedError


class DeadlineH11Protocol(_Deadline, H11Protocol):
    def _arriving(self) -> bool:
        return self.conn.their_state in STILL_ARRIVING


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: h11 it is
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


if HttpToolsProtocol is not None:
    # At module level: with --workers, uvicorn pickles the class into each worker.
    class DeadlineHttpToolsProtocol(_Deadline, HttpToolsProtocol):
        def _arriving(self) -> bool:
            # The newest request is whole once its body has ended (`more_body` False);
            # until a new one begins after a response, the newest is the answered one.
            cycle: RequestResponseCycle | None = self.cycle  # None until a request begins
            return cycle is None or cycle.response_complete or cycle.more_body


def http_protocol() -> type:
    """The protocol class `webapp serve` gives uvicorn: httptools where it is installed."""
    if HttpToolsProtocol is not None:
        return DeadlineHttpToolsProtocol
    return DeadlineH11Protocol
