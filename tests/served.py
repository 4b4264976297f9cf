"""The app on a real port, and the clients that speak to it over real HTTP: uvicorn in a
thread of the test process (the gateway tests, which drive it with the `openai` client),
and the bearer-token API calls the tests of `webapp serve` processes make."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import uvicorn
from litestar.types import LifespanHook

from tests.factories import bearer_header, make_user, parse_sse
from webapp.app import create_app
from webapp.settings import Settings


@dataclass
class Gateway:
    """The app on a free port; `client()` is an OpenAI client for one of its users (closed
    with the app)."""

    url: str
    tokens: dict[str, str]
    clients: list[openai.OpenAI] = field(default_factory=list)

    def client(self, user: str = "alice", *, api_key: str | None = None) -> openai.OpenAI:
        # No retries: a test must see the first answer, 429s and 503s included.
        client = openai.OpenAI(
            base_url=f"{self.url}/v1",
            api_key=api_key or self.tokens[user],
            max_retries=0,
            timeout=20,
        )
        self.clients.append(client)
        return client

    def http(self, user: str | None = "alice") -> httpx.Client:
        headers = bearer_header(self.tokens[user]) if user else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=20)


def serve_in_thread(
    settings: Settings, on_startup: Sequence[LifespanHook] = ()
) -> tuple[uvicorn.Server, threading.Thread, int]:
    """The app on `settings`, served by uvicorn (on its own loop, in a thread) on a free
    port; once it has started. `on_startup` runs on that loop after the app's own start-up
    (a test's probe of the loop)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(settings)
    app.on_startup.extend(on_startup)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", loop="asyncio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the app did not start")
        time.sleep(0.01)
    return server, thread, port


@contextmanager
def gateway_on(
    settings: Settings,
    users: Iterable[str] = ("alice",),
    on_startup: Sequence[LifespanHook] = (),
) -> Iterator[Gateway]:
    """The app on `settings` on a free port (serve_in_thread), for `users`, made first with
    their tokens; stopped, and its clients closed, at the end."""
    tokens = {name: asyncio.run(make_user(settings.database_url, name)) for name in users}
    server, thread, port = serve_in_thread(settings, on_startup)
    gateway = Gateway(f"http://127.0.0.1:{port}", tokens)
    try:
        yield gateway
    finally:
        for client in gateway.clients:
            client.close()
        server.should_exit = True
        thread.join(timeout=10)


def webapp_of(model: Any) -> dict[str, Any]:
    """The `webapp` object of an answer parsed by the openai client (an extra field)."""
    extra = model.model_extra or {}
    assert "webapp" in extra, f"no webapp object in {model}"
    return extra["webapp"]


def bearer(url: str, token: str) -> httpx.AsyncClient:
    """An API client of the server at `url`, signed in by `token`."""
    return httpx.AsyncClient(base_url=url, headers=bearer_header(token), timeout=30)


async def streaming_answer(api: httpx.AsyncClient, conversation: str) -> int:
    """The id of the answer being written in a conversation, read through the API."""
    for _ in range(100):
        messages = (await api.get(f"/api/conversations/{conversation}")).json()["messages"]
        streaming = [m for m in messages if m["role"] == "assistant" and m["status"] == "streaming"]
        if streaming:
            return int(streaming[-1]["id"])
        await asyncio.sleep(0.02)
    raise AssertionError(f"no answer is being written: {messages}")


async def send(writer: httpx.AsyncClient, conversation: str) -> list[tuple[str, Any, Any]]:
    """Sends a message through the API and reads its answer's whole event stream."""
    body = {"content": "Tell me something long."}
    headers = {"Accept": "text/event-stream"}
    path = f"/api/conversations/{conversation}/messages"
    async with writer.stream("POST", path, json=body, headers=headers) as response:
        assert response.status_code == 201, await response.aread()
        return parse_sse((await response.aread()).decode())
