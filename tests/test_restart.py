"""A server killed mid-answer (`kill -9`: no shutdown hook runs) and started again, on
both databases: the answer it left streaming is marked interrupted the moment the new
process starts, not `stale_stream_after` (30 s) later, and the conversation takes a send
at once. A starting process never interrupts what another live process is writing: each
holds a lease on the database while it lives (webapp.chat.answering.reaping.Liveness)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.catalogs import write_upstream_catalog
from tests.factories import make_user
from tests.live_server import ServerProcess
from tests.served import bearer
from tests.upstream import FakeUpstream
from webapp.chat.answering.reaping import Liveness

REPLY = " ".join(f"w{n}" for n in range(200))
"""Two hundred chunks: ten seconds at 50 ms each, far longer than the test waits."""
Server = Callable[[str], ServerProcess]


@pytest.fixture
def server(database_url: str, upstream: FakeUpstream, tmp_path: Path) -> Iterator[Server]:
    """`server(name)` makes (without starting) a `webapp serve` on the test's database."""
    # An answer held by `upstream.stall` sends nothing while the newcomer starts, which on a
    # loaded machine takes longer than the usual 5 s without data that fails an answer.
    catalog = write_upstream_catalog(tmp_path / "catalog.toml", upstream, timeout=120)
    env = {
        **os.environ,
        "WEBAPP_DATABASE_URL": database_url,
        "WEBAPP_CONFIG": str(catalog),
        "WEBAPP_SECRET_KEY": "restart-tests-secret-key-0123456789",
        "WEBAPP_STREAM_FLUSH_INTERVAL": "0.1",
        "WEBAPP_STALE_STREAM_AFTER": "30",
    }
    with ExitStack() as servers:

        def make(name: str) -> ServerProcess:
            process = ServerProcess(name=name, env=env, log=tmp_path / f"{name}.log")
            servers.callback(process.stop)
            return process

        yield make


async def stream_send(client: httpx.AsyncClient, conversation: str) -> None:
    """A streamed send that runs until its server dies (or the answer ends)."""
    path = f"/api/conversations/{conversation}/messages"
    headers = {"Accept": "text/event-stream"}
    with contextlib.suppress(httpx.HTTPError):
        async with client.stream("POST", path, json={"content": "Go on"}, headers=headers) as sent:
            assert sent.status_code == 201
            async for _ in sent.aiter_bytes():
                pass


async def answer(client: httpx.AsyncClient, conversation: str) -> dict[str, Any]:
    messages = (await client.get(f"/api/conversations/{conversation}")).json()["messages"]
    return [m for m in messages if m["role"] == "assistant"][-1]


async def written(client: httpx.AsyncClient, conversation: str) -> dict[str, Any]:
    """The answer being written, once some of its text is stored."""
    for _ in range(200):
        messages = (await client.get(f"/api/conversations/{conversation}")).json()["messages"]
        streaming = [m for m in messages if m["role"] == "assistant"]
        if streaming and streaming[-1]["status"] == "streaming" and streaming[-1]["content"]:
            return streaming[-1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no answer is being written: {messages}")


async def test_an_answer_left_by_a_killed_server_is_interrupted_at_restart(
    server: Server, database_url: str, upstream: FakeUpstream
) -> None:
    upstream.set_reply(REPLY)
    upstream.chunk_delay = 0.05
    token = await make_user(database_url, "alice")
    process = server("webapp")
    process.start()
    async with bearer(process.url, token) as client:
        conversation = (await client.post("/api/conversations", json={})).json()["id"]
        sending = asyncio.create_task(stream_send(client, conversation))
        left = await written(client, conversation)
        process.kill()
        await sending
    process.start()
    async with bearer(process.url, token) as client:
        after = await answer(client, conversation)
        assert after["id"] == left["id"]
        assert after["status"] == "interrupted", after
        assert after["content"].startswith(left["content"]), "the text so far is kept"
        upstream.set_reply("Back again.")
        upstream.chunk_delay = 0
        again = await client.post(
            f"/api/conversations/{conversation}/messages", json={"content": "Still there?"}
        )
        assert again.status_code == 201, again.text
        assert again.json()["assistant"]["status"] == "complete"


async def test_a_starting_server_leaves_another_live_servers_answer_alone(
    server: Server, database_url: str, upstream: FakeUpstream
) -> None:
    upstream.set_reply(REPLY)
    upstream.stall(120, before_first_chunk=False)  # held after its first word until ended
    token = await make_user(database_url, "alice")
    writer, newcomer = server("writer"), server("newcomer")
    writer.start()
    async with bearer(writer.url, token) as client:
        conversation = (await client.post("/api/conversations", json={})).json()["id"]
        sending = asyncio.create_task(stream_send(client, conversation))
        await written(client, conversation)
        newcomer.start()
        async with bearer(newcomer.url, token) as other:
            seen = await answer(other, conversation)
            assert seen["status"] == "streaming", seen  # its error says who ended it
        upstream.end_stalls()  # the newcomer has started and reaped: the rest at once
        await asyncio.wait_for(sending, 60)
        finished = await answer(client, conversation)
    assert finished["status"] == "complete", finished
    assert finished["content"] == REPLY


async def test_the_lease_tells_a_lone_starter_from_one_among_others(database_url: str) -> None:
    first, second, third = (Liveness(database_url) for _ in range(3))
    try:
        assert await first.start() is True, "nobody else holds the database"
        # Until the first has reaped and shares its lease, nobody else starts.
        starting = asyncio.create_task(second.start())
        await asyncio.sleep(0.3)
        assert not starting.done()
        await first.share()
        assert await asyncio.wait_for(starting, 5) is False, "the first one is alive"
        await first.stop()
        assert await third.start() is False, "the second one is alive"
        await second.stop()
        await third.stop()
        again = Liveness(database_url)
        assert await again.start() is True, "everyone before has stopped"
        await again.stop()
    finally:
        for liveness in (first, second, third):
            await liveness.stop()
