"""httpcore's network layer on plain asyncio, for the provider's streams.

httpcore reaches asyncio through anyio: every socket read runs inside
`anyio.fail_after` (a cancel scope entered and left, a timer armed) and anyio's stream
first yields to the event loop once before it looks at its buffer. An answer arrives in
one read per chunk, so with hundreds of answers streaming that bookkeeping is paid tens
of thousands of times a second. Here a connection is an `asyncio.Protocol` with a buffer:
a read takes what has arrived, or waits on one future with one timer for the read
timeout. HTTP itself stays httpcore's and httpx's; only the bytes move differently.

Errors are httpcore's own (`ConnectError`, `ReadTimeout`, ...), so httpx maps them as it
maps the default backend's, and callers see the same `httpx` exceptions.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.request
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpx

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


READ_AHEAD = 128 * 1024
"""Bytes taken from the socket before anyone asks for them; past this the connection
stops reading, so a reader slower than its server holds the rest in the kernel."""


class _Connection(asyncio.Protocol):
    """What has arrived on one connection, and who waits for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reading = True
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None

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
        self.error = exc
        self._wake()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def pause_writing(self) -> None:
        if self.drained is None or self.drained.done():
            self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

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
        drained = connection.drained
        if drained is not None and not drained.done():
            try:
                await _wait(drained, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("the server did not take the request") from None
            if connection.error is not None:  # lost while the request was on its way
                raise httpcore.WriteError(str(connection.error))

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                self._transport,
                self._connection,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
        except TimeoutError:
            self._transport.close()
            raise httpcore.ConnectTimeout("the TLS handshake timed out") from None
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from None
        except BaseException:  # cancelled mid-handshake: the socket is nobody's now
            self._transport.close()
            raise
        assert transport is not None
        self._connection.transport = transport
        return AsyncioStream(self._connection, transport)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
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
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await loop.create_connection(
                    _Connection, host, port, local_addr=local
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection to {host}:{port} in time") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(connection, transport)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await loop.create_unix_connection(_Connection, path)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection to {path} in time") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        return AsyncioStream(connection, transport)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def proxied_by_environment(url: httpx.URL) -> bool:
    """Whether HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (less NO_PROXY) name a proxy for
    `url`. httpx honours those only on its own transport, so a provider reached through
    one keeps httpx's, proxy and all."""
    proxies = urllib.request.getproxies()
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(url.host)


def transport_for(
    url: httpx.URL, *, verify: ssl.SSLContext, limits: httpx.Limits
) -> AsyncioTransport | None:
    """The transport a provider's client at `url` should get: this module's, or None for
    httpx's own when the environment sends that URL through a proxy."""
    if proxied_by_environment(url):
        return None
    return AsyncioTransport(verify=verify, limits=limits)


class AsyncioTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport with the connection pool on `AsyncioBackend`.

    httpx builds its pool without a way to name the network backend, so the pool is
    built again here with the same settings; everything else (request and response
    mapping, error mapping, proxies from the environment) stays httpx's.
    """

    def __init__(self, *, verify: ssl.SSLContext, limits: httpx.Limits) -> None:
        super().__init__(verify=verify, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncioBackend(),
        )
