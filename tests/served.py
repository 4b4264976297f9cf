"""The app on a real port, and the clients that speak to it over real HTTP: uvicorn in a
thread of the test process (the gateway tests, which drive it with the `openai` client),
and the bearer-token API calls the tests of `webapp serve` processes make."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import uvicorn

from tests.factories import parse_sse
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
        headers = {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=20)


def serve_in_thread(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, int]:
    """The app on `settings`, served by uvicorn (on its own loop, in a thread) on a free
    port; once it has started."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(settings), log_level="warning", access_log=False, lifespan="on", loop="asyncio"
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


def webapp_of(model: Any) -> dict[str, Any]:
    """The `webapp` object of an answer parsed by the openai client (an extra field)."""
    extra = model.model_extra or {}
    assert "webapp" in extra, f"no webapp object in {model}"
    return extra["webapp"]


def bearer(url: str, token: str) -> httpx.AsyncClient:
    """An API client of the server at `url`, signed in by `token`."""
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


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
