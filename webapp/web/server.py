"""uvicorn's HTTP/1.1 protocols with a deadline for reading each request, and one for
writing each response.

uvicorn times out a connection only while it sits idle between requests, and the timer
stops at the first byte: a client that sends its headers (or its body) a byte at a time
holds a connection, and a file descriptor, for ever. Here every request, from the moment
the connection opens or the previous response ends, must arrive whole within
`Deadlines.request` seconds (`WEBAPP_REQUEST_TIMEOUT`), or the connection is closed.

A response is not timed as a whole (a streamed answer may run as long as it runs), but
its client must keep taking its bytes, from the response's first byte on: whenever the
server has written bytes the client has not taken (in the transport's buffer or the
socket's queue), the client must take some of them within `Deadlines.write` seconds
(`WEBAPP_WRITE_TIMEOUT`), or it is dropped, at once (`abort`: the buffer is discarded,
not flushed), and whatever the response held is freed. The clock starts with the first
byte, not when the buffers are full: a client that never reads was otherwise given the
deadline only after the kernel's buffers and the transport's had filled (megabytes, while
the app kept reading and encoding for it), and one whose response fit in those buffers
was never dropped at all. A client with nothing left to take (an event stream between
events) is never timed.

`webapp serve` runs on httptools (C parsing, one `write` per chunk) when it is
installed, and falls back to h11, which is pure Python: with hundreds of answers
streaming, h11's per-chunk bookkeeping was a good part of the server's CPU.

When uvicorn begins a graceful shutdown it tells each connection (`shutdown`); here that
also ends the event streams still open (`webapp.web.events.end_streams`), which would
otherwise hold the shutdown until its timeout.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from webapp.web.events import end_streams

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

if sys.platform == "linux":
    import fcntl
    import termios

    _OUTQ: int | None = termios.TIOCOUTQ
    """SIOCOUTQ: the bytes in a TCP socket's send queue not yet acknowledged."""
else:  # the transport's buffer alone says how far the client has read
    _OUTQ = None

STILL_ARRIVING = (h11.IDLE, h11.SEND_BODY)
"""The client's states (h11) while its request (headers, then body) is not complete."""


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Seconds a request may take to arrive whole (`request`), and a response's client may
    take none of its bytes (`write`): the settings `webapp serve` reads, given to each
    connection's protocol."""

    request: float
    write: float


class _Deadline(asyncio.Protocol):
    """The timer and the hooks that run it, for both protocols; `_arriving` says whether
    a request is incomplete. It comes first in each protocol's bases, so `super()` is
    uvicorn's protocol; `asyncio.Protocol`, after uvicorn's in the MRO, only types it."""

    _deadline: asyncio.TimerHandle | None = None
    _write_deadline: asyncio.TimerHandle | None = None
    _taken = 0
    """The bytes the client had taken when the write deadline was last armed."""
    _counted: _CountingTransport
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def __init__(self, *args: Any, deadlines: Deadlines, **kwargs: Any) -> None:
        self._deadlines = deadlines
        super().__init__(*args, **kwargs)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._counted = _CountingTransport(transport, self._wrote)
        # uvicorn's protocol (and each request's cycle) writes through the counting one.
        super().connection_made(cast("asyncio.Transport", self._counted))
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_write()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """uvicorn begins a graceful shutdown: the event streams still open end now (with
        the body's end, see webapp.web.events), so it has no stream to wait for."""
        super().shutdown()  # type: ignore[misc]
        end_streams()

    def _wrote(self) -> None:
        """The response wrote bytes: the client has `write` seconds to take some, unless
        the clock already runs."""
        if self._write_deadline is None:
            self._arm_write()

    def _arm_write(self) -> None:
        self._taken = self._counted.written - self._unsent_bytes()
        self._write_deadline = self.loop.call_later(self._deadlines.write, self._write_expired)

    def _disarm_write(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _write_expired(self) -> None:
        """A client with nothing left to take is not timed until the next write; one that
        took some bytes meanwhile gets another period; one that took none is dropped."""
        self._write_deadline = None
        unsent = self._unsent_bytes()
        if unsent == 0 or self.transport.is_closing():
            return
        if self._counted.written - unsent > self._taken:
            self._arm_write()
        else:
            self.transport.abort()

    def _unsent_bytes(self) -> int:
        """What the client has yet to take: the transport's buffer, and on Linux the
        socket's own queue (sent but not acknowledged, or not sent yet). A client that
        reads slowly drains the socket's queue (megabytes on a fast link) long before
        the transport may write to it again, so the transport's buffer alone would
        call it stalled."""
        unsent = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if _OUTQ is not None and sock is not None:
            try:
                queued = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
            except (OSError, ValueError):
                return unsent
            unsent += int.from_bytes(queued, sys.byteorder, signed=True)
        return unsent

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self._deadlines.request, self._expire)

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


class _CountingTransport:
    """A connection's transport that counts the bytes written to it and says when: what
    the write deadline needs to tell a client that takes nothing from one that is behind.
    Everything else is the transport's own."""

    __slots__ = ("_on_write", "_transport", "written")

    def __init__(self, transport: asyncio.Transport, on_write: Callable[[], None]) -> None:
        self._transport = transport
        self._on_write = on_write
        self.written = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)
        self._transport.write(data)
        self._on_write()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


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


def with_deadlines(protocol: type[_Deadline], deadlines: Deadlines) -> type[asyncio.Protocol]:
    """What uvicorn is given as its `http` protocol: it only ever calls it, with a
    connection's arguments, and with --workers pickles it into each worker, which a
    partial of a module-level class survives and a class made here would not. uvicorn's
    signature asks for a class, hence the cast."""
    return cast("type[asyncio.Protocol]", partial(protocol, deadlines=deadlines))


def http_protocol(deadlines: Deadlines) -> type[asyncio.Protocol]:
    """The protocol `webapp serve` gives uvicorn: httptools where it is installed."""
    if HttpToolsProtocol is not None:
        return with_deadlines(DeadlineHttpToolsProtocol, deadlines)
    return with_deadlines(DeadlineH11Protocol, deadlines)
