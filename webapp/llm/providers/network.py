"""httpcore's network layer on plain asyncio, for providers spoken to in plain HTTP.

httpcore reaches asyncio through anyio: every socket read runs inside
`anyio.fail_after` (a cancel scope entered and left, a timer armed) and anyio's stream
first yields to the event loop once before it looks at its buffer. An answer arrives in
one read per chunk, so with hundreds of answers streaming that bookkeeping is paid tens
of thousands of times a second. Here a connection is an `asyncio.Protocol` with a buffer:
a read takes what has arrived, or waits on one future with one timer for the read
timeout. HTTP itself stays httpcore's and httpx's; only the bytes move differently.

Only plain HTTP: the engines this app streams hundreds of answers from (llama.cpp, vLLM,
Ollama, LM Studio) are served that way, on the machine or the local network. An https
provider, and any provider the environment sends through a proxy, keeps httpx's own
transport (`webapp.llm.providers.transport.transport_for`), whose TLS and proxying are
anyio's and httpx's, unchanged.

Errors are httpcore's own (`ConnectError`, `ReadTimeout`, ...), so the transport over
this backend maps them as httpx's maps the default backend's, and callers see the same
`httpx` exceptions.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Iterable, Sequence
from typing import Any, cast

import httpcore

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)
AddressInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]
"""One of `getaddrinfo`'s answers: family, kind, protocol, canonical name, address."""

READ_AHEAD = 128 * 1024
"""Bytes taken from the socket before anyone asks for them; past this the connection
stops reading, so a reader slower than its server holds the rest in the kernel."""
HAPPY_EYEBALLS_DELAY = 0.25
"""How long one address of a host may try before the next one starts too (RFC 8305's
recommended delay, and anyio's): a dead first address (an IPv6 route that goes nowhere)
costs a quarter of a second, not the whole connect timeout."""


class _Connection(asyncio.Protocol):
    """What has arrived on one connection, and who waits for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reading = True
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drain_waiters: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_AHEAD and self.reading and self.transport is not None:
            self.reading = False
            self.transport.pause_reading()
        self._wake()

    def taken(self) -> None:
        """Called once a read has emptied the buffer (or most of it)."""
        if not self.reading and len(self.buffer) <= READ_AHEAD and self.transport is not None:
            self.reading = True
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # close the transport: HTTP/1.1 has no half-closed use here

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = self.error or exc  # an abort of ours said why already
        self._wake()
        self._drained()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._drained()

    def _drained(self) -> None:
        """Each waiting write has a future of its own, so one timing out or cancelled
        leaves the others' alone."""
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


async def _wait(future: asyncio.Future[None], timeout: float | None) -> None:
    """Wait for `future`, raising TimeoutError after `timeout` seconds (one timer)."""
    if timeout is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future)
    try:
        await future
    finally:
        timer.cancel()


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, connection: _Connection, transport: asyncio.Transport) -> None:
        self._connection = connection
        self._transport = transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        connection = self._connection
        while not connection.buffer:
            if connection.closed:
                if connection.error is not None:
                    raise httpcore.ReadError(str(connection.error) or "connection lost")
                return b""
            connection.waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(connection.waiter, timeout)
            except TimeoutError:
                raise httpcore.ReadTimeout("no data within the read timeout") from None
            finally:
                connection.waiter = None
        if len(connection.buffer) <= max_bytes:
            data = bytes(connection.buffer)
            connection.buffer.clear()
        else:
            data = bytes(connection.buffer[:max_bytes])
            del connection.buffer[:max_bytes]
        connection.taken()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        connection = self._connection
        if connection.closed or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if connection.paused and not connection.closed:
            drained = asyncio.get_running_loop().create_future()
            connection.drain_waiters.append(drained)
            try:
                await _wait(drained, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("the server did not take the request") from None
            finally:
                if drained in connection.drain_waiters:
                    connection.drain_waiters.remove(drained)
            if connection.error is not None:  # lost while the request was on its way
                raise httpcore.WriteError(str(connection.error))

    async def aclose(self) -> None:
        # Abort, not close: close() would wait for unsent bytes to drain into a server
        # that has stopped reading (a write timeout, a cancelled request), for ever.
        # A read or write still waiting then fails as closed, not as the server's end.
        if not self._connection.closed:
            self._connection.error = ConnectionAbortedError("closed by this side")
        self._transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self._transport.abort()
        raise httpcore.ConnectError(
            "this transport speaks plain HTTP only (https providers keep httpx's own)"
        )

    def get_extra_info(self, info: str) -> Any:
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            # Asked of an idle connection before it is reused: anything that arrived,
            # or its end, means the server is done with it.
            return self._connection.closed or bool(self._connection.buffer)
        return None


async def _attempt(address: AddressInfo, local_address: str | None) -> socket.socket:
    family, kind, proto, _, target = address
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        if local_address:
            sock.bind((local_address, 0))
        await asyncio.get_running_loop().sock_connect(sock, target)
    except BaseException:
        sock.close()
        raise
    return sock


def _interleaved(addresses: Sequence[AddressInfo]) -> list[AddressInfo]:
    """The resolver's order, with the families taking turns (RFC 8305, section 4)."""
    first = addresses[0][0]
    preferred = [a for a in addresses if a[0] == first]
    others = [a for a in addresses if a[0] != first]
    mixed: list[AddressInfo] = []
    for index in range(max(len(preferred), len(others))):
        mixed += preferred[index : index + 1] + others[index : index + 1]
    return mixed


async def connect_first(
    addresses: Sequence[AddressInfo], local_address: str | None = None
) -> socket.socket:
    """A connected socket to the first of `addresses` to answer: each starts
    `HAPPY_EYEBALLS_DELAY` after the one before, or at once when that one fails; the
    others are cancelled, and a socket one of them connects anyway is closed. OSError
    when none connects."""
    if not addresses:
        raise OSError("the name resolved to no address")
    waiting = _interleaved(addresses)
    pending: set[asyncio.Task[socket.socket]] = set()
    errors: list[BaseException] = []
    try:
        while waiting or pending:
            if waiting:
                pending.add(asyncio.create_task(_attempt(waiting.pop(0), local_address)))
            done, pending = await asyncio.wait(
                pending,
                timeout=HAPPY_EYEBALLS_DELAY if waiting else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            winners = [task.result() for task in done if task.exception() is None]
            errors += [error for task in done if (error := task.exception()) is not None]
            for loser in winners[1:]:
                loser.close()
            if winners:
                return winners[0]  # no await from here on: nothing can cancel it away
    finally:
        # Not awaited, so a cancellation arriving now cannot lose a socket: each attempt
        # closes its own when cancelled, and one that connected anyway is closed when done.
        for task in pending:
            task.cancel()
            task.add_done_callback(_close_if_connected)
    if len(errors) == 1 and isinstance(errors[0], OSError):
        raise errors[0]
    raise OSError("no address answered: " + "; ".join(str(e) or repr(e) for e in errors))


def _close_if_connected(task: asyncio.Task[socket.socket]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().close()


def _literal(host: str, port: int) -> list[AddressInfo] | None:
    """An address written as one (a local engine's usual 127.0.0.1): no resolver call,
    which would be a trip to a thread for every new connection."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 6:
        return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port, 0, 0))]
    return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                addresses = _literal(host, port) or await loop.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
                sock = await connect_first(addresses, local_address)
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for option in socket_options or ():
                        sock.setsockopt(*option)
                    transport, connection = await loop.create_connection(_Connection, sock=sock)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection to {host}:{port} in time") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        return AsyncioStream(connection, transport)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("Unix sockets go through httpx's own transport")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
