"""The provider's plain-HTTP network layer (webapp/llm/providers/network.py, and the
httpx transport over it, transport.py) on real sockets, on asyncio's loop and on uvloop:
what httpcore relies on it for that the provider's own tests do not reach (addresses
that never answer, a server that stops reading, the proxy rule), the httpx exceptions
its faults surface as (the same as httpx's own transport's), and the setting that falls
back to httpx's own transport."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpcore
import httpx
import pytest

from tests.upstream import FakeUpstream, upstream  # noqa: F401
from webapp.llm.providers.network import (
    HAPPY_EYEBALLS_DELAY,
    AddressInfo,
    AsyncioBackend,
    AsyncioStream,
    connect_first,
)
from webapp.llm.providers.openai import OpenAIProvider
from webapp.llm.providers.transport import (
    AsyncioTransport,
    proxied_by_environment,
    transport_for,
)
from webapp.settings import Settings


def address(host: str, port: int) -> AddressInfo:
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))


@pytest.fixture
def dead_address() -> Iterator[AddressInfo]:
    """An address whose connects hang: a listener whose backlog is full drops every
    further SYN, as a route to nowhere (an IPv6 that goes nowhere) does."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling = []
    for _ in range(3):
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):  # it goes on connecting
            sock.connect(("127.0.0.2", port))
        filling.append(sock)
    time.sleep(0.1)
    yield address("127.0.0.2", port)
    for sock in [*filling, listener]:
        sock.close()


@pytest.fixture
def live_listener() -> Iterator[socket.socket]:
    """A server that accepts connections (the kernel does) and never reads them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield listener
    listener.close()


@pytest.fixture
async def connected(
    live_listener: socket.socket,
) -> AsyncIterator[tuple[httpcore.AsyncNetworkStream, socket.socket]]:
    """A stream of the backend's to `live_listener`, and the server's end of it."""
    host, port = live_listener.getsockname()
    stream = await AsyncioBackend().connect_tcp(host, port, timeout=5)
    accepted, _ = live_listener.accept()
    with accepted:
        yield stream, accepted
        await stream.aclose()


def closed_address() -> AddressInfo:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return address("127.0.0.1", sock.getsockname()[1])


async def test_a_dead_first_address_costs_the_happy_eyeballs_delay_not_the_timeout(
    dead_address: AddressInfo, live_listener: socket.socket
) -> None:
    started = time.monotonic()
    sock = await connect_first([dead_address, address(*live_listener.getsockname())])
    elapsed = time.monotonic() - started
    with sock:
        assert sock.getpeername() == live_listener.getsockname()
    assert HAPPY_EYEBALLS_DELAY <= elapsed < HAPPY_EYEBALLS_DELAY + 0.5


async def test_a_refused_address_lets_the_next_start_at_once(
    live_listener: socket.socket,
) -> None:
    started = time.monotonic()
    sock = await connect_first([closed_address(), address(*live_listener.getsockname())])
    sock.close()
    assert time.monotonic() - started < HAPPY_EYEBALLS_DELAY


async def test_when_no_address_answers_every_reason_is_told() -> None:
    first, second = closed_address(), closed_address()
    with pytest.raises(OSError) as caught:
        await connect_first([first, second])
    message = str(caught.value)
    assert "no address answered" in message
    assert str(first[4][1]) in message and str(second[4][1]) in message


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1"])
async def test_a_name_is_resolved_and_an_address_taken_as_it_is(
    live_listener: socket.socket, name: str
) -> None:
    stream = await AsyncioBackend().connect_tcp(name, live_listener.getsockname()[1], timeout=5)
    assert stream.get_extra_info("server_addr") == live_listener.getsockname()
    await stream.aclose()


async def test_a_connect_timeout_is_a_connect_timeout(dead_address: AddressInfo) -> None:
    host, port = dead_address[4]
    with pytest.raises(httpcore.ConnectTimeout):
        await AsyncioBackend().connect_tcp(host, port, timeout=0.3)


async def test_closing_with_bytes_a_server_never_read_closes_the_socket(
    connected: tuple[httpcore.AsyncNetworkStream, socket.socket],
) -> None:
    """A request the server stopped taking (write timeout, then close): the socket is
    closed at once, not kept until the unsent bytes drain, which would be never."""
    stream, accepted = connected
    with pytest.raises(httpcore.WriteTimeout):
        await stream.write(b"x" * 50_000_000, timeout=0.3)
    await stream.aclose()
    await asyncio.sleep(0.05)  # the loop closes the socket on its next turn
    assert _read_all(accepted) < 50_000_000  # the rest was dropped, and the read saw the end


async def test_tls_is_never_spoken_by_it() -> None:
    """https providers keep httpx's own transport; were one ever asked to start TLS,
    it refuses rather than send anything in the clear."""
    url = httpx.URL("https://api.example.com/v1")
    limits = httpx.Limits(max_connections=1)
    assert transport_for(url, verify=ssl.create_default_context(), limits=limits) is None


@pytest.mark.parametrize(
    ("environment", "url", "proxied"),
    [
        ({}, "http://10.0.0.5:8000/v1", False),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://10.0.0.5:8000/v1", True),
        ({"ALL_PROXY": "http://proxy:3128"}, "http://10.0.0.5:8000/v1", True),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://10.0.0.5:8000/v1", False),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.5"}, "http://10.0.0.5/v1", False),
        # As httpx reads NO_PROXY (curl's rules), not as urllib does: "localhost" is that
        # host, not every name ending in it; ".example.com" is its subdomains only.
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "localhost"},
            "http://vllm.localhost:8000/v1",
            True,
        ),
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": ".example.com"},
            "http://example.com/v1",
            True,
        ),
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": ".example.com"},
            "http://api.example.com/v1",
            False,
        ),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "foo,*"}, "http://example.com/", False),
        # A name covers itself and its subdomains, not a name that merely ends like it.
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"},
            "http://a.example.com/",
            False,
        ),
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"},
            "http://wwwexample.com/",
            True,
        ),
        # A port, an IPv6 address, a scheme: each narrows the entry.
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.5:9000"},
            "http://10.0.0.5:8000/v1",
            True,
        ),
        ({"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "::1"}, "http://[::1]:8000/v1", False),
        ({"ALL_PROXY": "http://proxy:3128", "NO_PROXY": "https://vllm"}, "http://vllm/v1", True),
        # Lower case wins over upper case; under CGI, HTTP_PROXY is the client's header.
        ({"HTTP_PROXY": "http://proxy:3128", "http_proxy": ""}, "http://10.0.0.5/v1", False),
        ({"HTTP_PROXY": "http://proxy:3128", "REQUEST_METHOD": "GET"}, "http://10.0.0.5/", False),
    ],
)
def test_the_proxy_rule_is_httpx_s(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], url: str, proxied: bool
) -> None:
    """A provider the environment sends through a proxy keeps httpx's transport, which
    honours it; the decision must be the one httpx itself makes."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert proxied_by_environment(httpx.URL(url)) is proxied
    chosen = transport_for(
        httpx.URL(url), verify=ssl.create_default_context(), limits=httpx.Limits()
    )
    assert isinstance(chosen, AsyncioTransport) is not proxied


@pytest.mark.parametrize("hops", range(5))
async def test_cancelled_as_an_address_wins_no_socket_is_left_open(
    dead_address: AddressInfo, live_listener: socket.socket, hops: int
) -> None:
    """The caller cancelled a few loop turns after the live address connected: it gets
    the socket or a CancelledError, and no socket stays open behind it either way."""
    loop = asyncio.get_running_loop()
    caller: asyncio.Task[socket.socket] | None = None

    def cancel_after(turns: int) -> None:
        if turns == 0:
            assert caller is not None
            caller.cancel()
        else:
            loop.call_soon(cancel_after, turns - 1)

    def watch(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is None:
            cancel_after(hops)

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        if getattr(coro, "__qualname__", "") == "_attempt":
            task.add_done_callback(watch)
        return task

    loop.set_task_factory(factory)
    try:
        caller = asyncio.create_task(
            connect_first([dead_address, address(*live_listener.getsockname())])
        )
        with contextlib.suppress(asyncio.CancelledError):
            (await caller).close()
    finally:
        loop.set_task_factory(None)
    await asyncio.sleep(0.05)
    accepted, _ = live_listener.accept()
    with accepted:
        accepted.settimeout(2)
        assert accepted.recv(1) == b"", "the client's socket was left open"


async def test_a_write_that_timed_out_leaves_the_next_one_waiting_for_the_server(
    connected: tuple[httpcore.AsyncNetworkStream, socket.socket],
) -> None:
    stream, accepted = connected
    with pytest.raises(httpcore.WriteTimeout):
        await stream.write(b"x" * 20_000_000, timeout=0.2)
    # The server starts reading: the next write waits until its bytes are taken.
    reader = asyncio.get_running_loop().run_in_executor(None, _read_all, accepted)
    await stream.write(b"y" * 20_000_000, timeout=10)
    await stream.aclose()
    assert await reader > 20_000_000


def _read_all(sock: socket.socket) -> int:
    sock.settimeout(5)
    total = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 20):
            total += len(chunk)
    return total


async def test_closing_ends_a_waiting_read_as_an_error_not_as_the_server_s_end(
    connected: tuple[httpcore.AsyncNetworkStream, socket.socket],
) -> None:
    stream, _ = connected
    reading = asyncio.create_task(stream.read(1024, timeout=5))
    await asyncio.sleep(0.05)
    await stream.aclose()
    with pytest.raises(httpcore.ReadError, match="closed by this side"):
        await reading


# --------------------------------------------------------------------------------------
# The transport: httpx's exceptions, the trace hook, and the fallback setting.
# --------------------------------------------------------------------------------------


def asyncio_transport(limits: httpx.Limits | None = None) -> httpx.AsyncBaseTransport:
    return AsyncioTransport(verify=ssl.create_default_context(), limits=limits or httpx.Limits())


def httpx_transport(limits: httpx.Limits | None = None) -> httpx.AsyncBaseTransport:
    return httpx.AsyncHTTPTransport(limits=limits or httpx.Limits())


BOTH = pytest.mark.parametrize(
    "make", [asyncio_transport, httpx_transport], ids=["asyncio", "httpx"]
)
"""Each fault is met by both transports: the exception must be the same."""

CHAT = {"model": "small", "messages": [{"role": "user", "content": "Hello"}], "stream": True}


@BOTH
async def test_a_refused_connection_is_a_connect_error(make: Any) -> None:
    _, port = closed_address()[4]
    async with httpx.AsyncClient(transport=make()) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
    assert caught.value.request.url.port == port


@BOTH
async def test_a_silent_server_is_a_read_timeout(make: Any, live_listener: socket.socket) -> None:
    host, port = live_listener.getsockname()
    async with httpx.AsyncClient(transport=make(), timeout=httpx.Timeout(5, read=0.2)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"http://{host}:{port}/")


@BOTH
async def test_a_stream_cut_mid_body_is_a_remote_protocol_error(
    make: Any,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    upstream.break_stream_after(2)
    received = b""
    async with httpx.AsyncClient(transport=make(), timeout=5) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream(
                "POST", f"{upstream.base_url}/chat/completions", json=CHAT
            ) as response:
                async for chunk in response.aiter_bytes():
                    received += chunk
    assert b"Echo " in received  # what arrived before the cut was delivered


@BOTH
async def test_a_full_pool_is_a_pool_timeout(make: Any, live_listener: socket.socket) -> None:
    host, port = live_listener.getsockname()
    url = f"http://{host}:{port}/"
    transport = make(httpx.Limits(max_connections=1))
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5, pool=0.2)) as client:
        waiting = asyncio.create_task(client.get(url))  # holds the one connection
        await asyncio.sleep(0.1)
        try:
            with pytest.raises(httpx.PoolTimeout):
                await client.get(url)
        finally:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting


@BOTH
async def test_a_server_that_stops_reading_is_a_write_timeout(
    make: Any, live_listener: socket.socket
) -> None:
    host, port = live_listener.getsockname()
    async with httpx.AsyncClient(transport=make(), timeout=httpx.Timeout(5, write=0.3)) as client:
        with pytest.raises(httpx.WriteTimeout):
            await client.post(f"http://{host}:{port}/", content=b"x" * 50_000_000)


@BOTH
async def test_a_reset_connection_is_a_read_error(make: Any) -> None:
    """The server takes the request and resets the connection (RST, not a clean end)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def reset() -> None:
        accepted, _ = listener.accept()
        accepted.recv(65536)
        accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        accepted.close()

    with listener:
        server = asyncio.get_running_loop().run_in_executor(None, reset)
        async with httpx.AsyncClient(transport=make(), timeout=5) as client:
            with pytest.raises(httpx.ReadError):
                await client.get(f"http://127.0.0.1:{listener.getsockname()[1]}/")
        await server


@BOTH
async def test_a_header_http_cannot_carry_is_a_local_protocol_error(
    make: Any,
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    async with httpx.AsyncClient(transport=make(), timeout=5) as client:
        with pytest.raises(httpx.LocalProtocolError):
            await client.get(f"{upstream.base_url}/models", headers={"X-Bad": "a\r\nb"})


@BOTH
async def test_a_scheme_it_cannot_speak_is_unsupported(make: Any) -> None:
    async with make() as transport:
        with pytest.raises(httpx.UnsupportedProtocol):
            await transport.handle_async_request(httpx.Request("GET", "ftp://127.0.0.1/"))


async def test_a_response_streams_and_the_trace_hook_sees_the_request_go(
    upstream: FakeUpstream,  # noqa: F811
) -> None:
    events: list[str] = []

    async def trace(event: str, info: dict[str, Any]) -> None:
        events.append(event)

    async with (
        httpx.AsyncClient(transport=asyncio_transport(), timeout=5) as client,
        client.stream(
            "POST",
            f"{upstream.base_url}/chat/completions",
            json=CHAT,
            extensions={"trace": trace},
        ) as response,
    ):
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert response.status_code == 200 and response.http_version == "HTTP/1.1"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert isinstance(response.extensions["network_stream"], AsyncioStream)
    assert body.rstrip().endswith(b"data: [DONE]")
    assert "http11.send_request_body.complete" in events
    assert "http11.receive_response_body.complete" in events


@pytest.mark.parametrize("choice", ["asyncio", "httpx"])
async def test_the_setting_chooses_the_transport_and_both_stream_an_answer(
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,  # noqa: F811
    choice: str,
) -> None:
    """End to end, through the provider: the answer streams either way, the request's
    "sent" moment (the trace hook) is reported either way, and only "asyncio" connects
    through this app's backend (whose connects are `_attempt` tasks)."""
    monkeypatch.setenv("WEBAPP_PROVIDER_TRANSPORT", choice)
    loop = asyncio.get_running_loop()
    started: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        started.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=loop, **options)

    sent: list[float] = []
    loop.set_task_factory(factory)
    try:
        # As the app builds it: the setting, read where the settings are, passed down.
        kind = Settings().provider_transport
        async with OpenAIProvider(upstream.base_url, timeout=5, transport_kind=kind) as provider:
            chunks = [
                chunk
                async for chunk in provider.stream_chat(
                    "small",
                    [{"role": "user", "content": "Hello"}],
                    sent=lambda: sent.append(time.monotonic()),
                )
            ]
    finally:
        loop.set_task_factory(None)
    assert "".join(chunk.text for chunk in chunks).startswith("Echo from small: ")
    assert chunks[-1].finish_reason == "stop"
    assert len(sent) == 1
    assert ("_attempt" in started) is (choice == "asyncio")


def test_an_unknown_transport_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBAPP_PROVIDER_TRANSPORT", "curl")
    with pytest.raises(ValueError, match="provider_transport"):
        Settings()
