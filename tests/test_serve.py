"""`webapp serve` as deployed: a real uvicorn process, spoken to over real sockets.

Who the client is comes from X-Forwarded-For only when the connection is from a trusted
proxy; a request must arrive whole in time, or its connection is closed.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.factories import make_user
from tests.live_server import h11_serve, serving, webapp_serve

PASSWORD = "correct horse battery"

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
    token = re.search(r'name="_csrf_token" value="([0-9a-f]+)"', page.text)
    assert token, page.text
    response = client.post(
        "/login",
        data={"username": "alice", "password": password, "_csrf_token": token[1]},
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
