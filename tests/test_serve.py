"""`webapp serve` as deployed: a real uvicorn process, spoken to over real sockets.

Who the client is comes from X-Forwarded-For only when the connection is from a trusted
proxy; a request must arrive whole in time, or its connection is closed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.catalogs import write_upstream_catalog
from tests.factories import PASSWORD, bearer_header, csrf_from, make_user
from tests.live_server import ServerProcess, h11_serve, serving, webapp_serve
from tests.upstream import FakeUpstream

Serve = Callable[..., str]


@pytest.fixture
def serve(sqlite_url: str, tmp_path: Path) -> Iterator[Serve]:
    """`serve(**settings)` starts `webapp serve` on the test's database; returns its URL."""
    servers = ExitStack()

    def start(parser: str = "httptools", **settings: str) -> str:
        env = {
            **os.environ,
            "WEBAPP_DATABASE_URL": sqlite_url,
            "WEBAPP_SECRET_KEY": "serve-tests-secret-key-0123456789",
            **{f"WEBAPP_{name.upper()}": value for name, value in settings.items()},
        }
        env.pop("FORWARDED_ALLOW_IPS", None)
        command = h11_serve if parser == "h11" else webapp_serve
        return servers.enter_context(serving(env, tmp_path, command))

    with servers:
        yield start


def sign_in(client: httpx.Client, password: str, forwarded_for: str) -> int:
    page = client.get("/login")
    response = client.post(
        "/login",
        data={"username": "alice", "password": password, "_csrf_token": csrf_from(page.text)},
        headers={"X-Forwarded-For": forwarded_for},
    )
    return response.status_code


async def test_a_spoofed_forwarded_for_is_not_believed(serve: Serve, sqlite_url: str) -> None:
    await make_user(sqlite_url, "alice")
    url = serve()
    with httpx.Client(base_url=url) as client:
        statuses = [sign_in(client, "wrong guess", f"203.0.113.{n}") for n in range(6)]
    assert statuses == [400] * 5 + [429], "every guess counted for the one real address"


async def test_a_trusted_proxy_says_who_the_client_is(serve: Serve, sqlite_url: str) -> None:
    await make_user(sqlite_url, "alice")
    url = serve(trusted_proxies="127.0.0.1")
    with httpx.Client(base_url=url) as client:
        assert [sign_in(client, "wrong guess", "203.0.113.7") for _ in range(5)] == [400] * 5
        assert sign_in(client, PASSWORD, "203.0.113.7") == 429
        assert sign_in(client, PASSWORD, "198.51.100.4") == 303, "the owner still gets in"


def closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float:
    """Send `trickle` a byte at a time (a slow client); how long until the server hangs up."""
    start = time.monotonic()
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() - start < seconds:
        if sent < len(trickle):
            try:
                sock.send(trickle[sent : sent + 1])
            except OSError:
                return time.monotonic() - start
            sent += 1
        try:
            if sock.recv(1024) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - start
    return float("inf")


def hung_up_after(port: int, trickle: bytes = b"", first: bytes = b"") -> float:
    """A connection that sends `first` at once, then `trickle` slowly: seconds until the
    server hangs up (`closed_within`)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(first)
        return closed_within(sock, 5, trickle)


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_slow_and_idle_connections_are_closed(serve: Serve, parser: str) -> None:
    url = serve(parser, request_timeout="1", keep_alive_timeout="1")
    port = int(url.rsplit(":", 1)[1])
    slow_headers = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    body = b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    # All three at once, each on a connection (and a deadline) of its own.
    with ThreadPoolExecutor(max_workers=3) as pool:
        headers = pool.submit(hung_up_after, port, slow_headers)
        silent = pool.submit(hung_up_after, port)
        unending = pool.submit(hung_up_after, port, b"username=" + b"a" * 100, body)
        assert headers.result() < 3, "headers sent a byte at a time"
        assert silent.result() < 3, "a connection that never sends anything"
        assert unending.result() < 3, "a body that never ends"
    # A request that arrives in time is answered as usual.
    assert httpx.get(f"{url}/healthz").status_code == 200


async def read_until_closed(response: httpx.Response, opened: asyncio.Event) -> bytes:
    """The stream's bytes until it ends; `opened` is set at the first of its answer's text.
    A stream cut without the body's end raises (httpx: an incomplete chunked read)."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if b'"content"' in body or b"event: delta" in body:
            opened.set()
    return body


async def test_a_graceful_stop_ends_open_streams_at_once(
    sqlite_url: str, tmp_path: Path, upstream: FakeUpstream
) -> None:
    """SIGTERM with an API stream and a gateway stream open, each mid-answer (ten seconds
    of it left): both end cleanly, with the body's end and without their last event, and
    the process is gone well before uvicorn's graceful timeout (5 s) would have cut them."""
    upstream.set_reply(" ".join(f"w{n}" for n in range(200)))
    upstream.chunk_delay = 0.05
    token = await make_user(sqlite_url, "alice")
    env = {
        **os.environ,
        "WEBAPP_DATABASE_URL": sqlite_url,
        "WEBAPP_CONFIG": str(write_upstream_catalog(tmp_path / "catalog.toml", upstream)),
        "WEBAPP_SECRET_KEY": "serve-tests-secret-key-0123456789",
    }
    server = ServerProcess(name="webapp serve", env=env, log=tmp_path / "serve.log")
    server.start()
    try:
        auth = bearer_header(token)
        async with httpx.AsyncClient(base_url=server.url, headers=auth, timeout=30) as client:
            conversation = (await client.post("/api/conversations", json={})).json()["id"]
            send = client.stream(
                "POST",
                f"/api/conversations/{conversation}/messages",
                json={"content": "Go on"},
                headers={"Accept": "text/event-stream"},
            )
            call = client.stream(
                "POST",
                "/v1/chat/completions",
                json={
                    "model": "small",
                    "messages": [{"role": "user", "content": "Hi"}],
                    "stream": True,
                },
            )
            async with send as api_stream, call as gateway_stream:
                assert api_stream.status_code == 201 and gateway_stream.status_code == 200
                opened = [asyncio.Event(), asyncio.Event()]
                reading = [
                    asyncio.create_task(read_until_closed(api_stream, opened[0])),
                    asyncio.create_task(read_until_closed(gateway_stream, opened[1])),
                ]
                await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 10)
                assert server.process is not None
                stopping = time.monotonic()
                server.process.terminate()
                api_body, gateway_body = await asyncio.wait_for(asyncio.gather(*reading), 10)
                ended = time.monotonic() - stopping
        exit_code = await asyncio.to_thread(server.process.wait, 10)
        gone = time.monotonic() - stopping
    finally:
        server.kill()
    assert b"event: delta" in api_body and b"event: done" not in api_body
    assert b"data: {" in gateway_body and b"[DONE]" not in gateway_body
    assert ended < 2, f"the streams ended {ended:.1f} s after SIGTERM"
    # uvicorn raises the signal it caught again once it has shut down.
    assert exit_code == -signal.SIGTERM and gone < 4, f"exit {exit_code} {gone:.1f} s after"
    log = server.output()
    assert "graceful shutdown exceeded" not in log and "without completing" not in log, log


def test_a_server_whose_port_was_taken_moves_to_another(sqlite_url: str, tmp_path: Path) -> None:
    """Between `free_port` and the child's bind another process may take the port (other
    suites share the machine): the test server moves to a new port instead of failing."""
    env = {
        **os.environ,
        "WEBAPP_DATABASE_URL": sqlite_url,
        "WEBAPP_SECRET_KEY": "serve-tests-secret-key-0123456789",
    }
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ServerProcess(name="webapp serve", env=env, log=tmp_path / "s.log", port=port)
        server.start()
        try:
            assert server.port != port
            assert httpx.get(server.url + "/healthz").status_code == 200
            assert "address already in use" in server.output()
        finally:
            server.stop()
