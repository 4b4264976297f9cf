"""Two real `webapp serve` processes on one PostgreSQL database, as two machines behind a
load balancer would be: an answer written by one is followed live from the other, and
stopped from the other. They hear each other through LISTEN/NOTIFY, not by polling.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, aclosing
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlmodel import Session

from tests.catalogs import write_upstream_catalog
from tests.conftest import empty_tables
from tests.factories import build_service, close_service, make_user, settings_on
from tests.live_server import serving
from tests.served import bearer, send, streaming_answer
from tests.upstream import FakeUpstream
from webapp.chat.answering.notify import CHANNEL, PostgresNotices
from webapp.chat.stored.models import Conversation
from webapp.chat.web.live import follow_answer

pytestmark = pytest.mark.postgres

REPLY = " ".join(["word"] * 40)
"""Forty tokens, forty chunks."""
FLUSH = 0.1
Serve = Callable[..., str]


@pytest.fixture
def database(postgres_url: str) -> str:
    asyncio.run(empty_tables(postgres_url))
    return postgres_url


@pytest.fixture
def serve(database: str, upstream: FakeUpstream, tmp_path: Path) -> Iterator[Serve]:
    """`serve()` starts one more `webapp serve` on the shared database; returns its URL
    (`serve(WEBAPP_X="...")`: with settings of its own)."""
    catalog = write_upstream_catalog(tmp_path / "catalog.toml", upstream)
    env = {
        **os.environ,
        "WEBAPP_DATABASE_URL": database,
        "WEBAPP_CONFIG": str(catalog),
        "WEBAPP_SECRET_KEY": "cross-worker-tests-secret-0123456789",
        "WEBAPP_STREAM_FLUSH_INTERVAL": str(FLUSH),
    }
    with ExitStack() as servers:
        yield lambda **own: servers.enter_context(serving({**env, **own}, tmp_path))


async def events(response: httpx.Response) -> AsyncIterator[tuple[str, str, str | None]]:
    """(event, data, id) of an SSE response as they arrive."""
    block: list[str] = []
    async for line in response.aiter_lines():
        if line:
            block.append(line)
            continue
        name, data, ident = "message", [], None
        for field in block:
            key, _, value = field.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                ident = value
        block = []
        if data:
            yield name, "\n".join(data), ident


async def test_an_answer_written_by_one_server_is_followed_live_from_another(
    serve: Serve, database: str, upstream: FakeUpstream
) -> None:
    upstream.set_reply(REPLY)
    upstream.chunk_delay = 0.05  # 40 chunks: a two-second answer, some 20 flushes
    token = await make_user(database, "alice")
    writer_url, watcher_url = serve(), serve()
    async with bearer(writer_url, token) as writer, bearer(watcher_url, token) as watcher:
        conversation = await writer.post("/api/conversations", json={"configuration": "small"})
        conversation_id = conversation.json()["id"]
        sending = asyncio.create_task(send(writer, conversation_id))
        answer_id = await streaming_answer(watcher, conversation_id)
        lengths: list[int] = []
        path = f"/c/{conversation_id}/answers/{answer_id}/stream"
        async with watcher.stream("GET", path) as stream:
            assert stream.status_code == 200
            async for name, data, ident in events(stream):
                if name == "done":
                    assert data == "complete"
                    break
                if name == "content":  # what changed of the text, with its length so far
                    assert ident is not None
                    lengths.append(int(ident))
        sent = await sending
    assert sent[-1][0] == "done"
    whole = sent[-1][1]["content"]
    assert whole == REPLY
    assert lengths[-1] == len(whole), "the last snapshot is the whole answer"
    assert lengths == sorted(lengths), "text only grows"
    assert len(set(lengths)) >= 5, f"followed as it grew, not only at the end: {lengths}"


async def test_another_worker_hears_every_piece_once_in_order_even_past_a_lost_notice(
    serve: Serve, database: str, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A follower in this process (a worker of its own) of an answer another server writes,
    flushing its row only every second: the text comes in its writer's text notices, one
    word (one 54 KB) too long for a notice, and the listener loses its connection midway
    (what is said meanwhile is missed): the rows fill what was missed, and no snapshot
    shows text twice or out of order."""
    words = [f"w{n}" for n in range(40)]
    reply = " ".join([*words[:20], "é" * 9000, *words[20:]])
    upstream.set_reply(reply)
    upstream.chunk_delay = 0.05
    # Nothing is written until the follower is on (its first snapshot): on a busy machine
    # it may take a second to get there, and each word must be heard.
    upstream.stall(60)
    token = await make_user(database, "alice")
    writer_url = serve(WEBAPP_STREAM_FLUSH_INTERVAL="1.0")
    chat = await build_service(settings_on(database, tmp_path / "catalog.toml"))
    notices = PostgresNotices(database)
    await notices.start()
    shown: list[str] = []
    try:
        await asyncio.wait_for(notices.listening.wait(), 10)
        async with bearer(writer_url, token) as writer:
            conversation_id = (
                await writer.post("/api/conversations", json={"configuration": "small"})
            ).json()["id"]
            sending = asyncio.create_task(send(writer, conversation_id))
            answer_id = await streaming_answer(writer, conversation_id)
            owner = (await chat.db.read(_owner_of, conversation_id)) or ""
            cut = False
            async with aclosing(
                follow_answer(chat, owner, conversation_id, answer_id, notices=notices)
            ) as snapshots:
                async for snapshot in snapshots:
                    shown.append(snapshot.answer.content)
                    if len(shown) == 1:
                        upstream.end_stalls()
                    if not cut and len(snapshot.answer.content) > 40:
                        cut = True
                        await chat.db.write(_end_listening)
            sent = await sending
    finally:
        await notices.stop()
        await close_service(chat)
    assert sent[-1][1]["content"] == reply == shown[-1]
    assert all(reply.startswith(text) for text in shown), "never a piece twice, nor a hole"
    growing = [len(t) for t in shown[:-1]]  # the final snapshot may only change the status
    assert growing == sorted(set(growing)), "text only grows"
    before_the_cut = next(n for n, text in enumerate(shown) if len(text) > 40)
    assert before_the_cut >= 5, f"heard word by word between flushes: {shown[:8]}"
    assert any("é" in t for t in shown[:-1]), "the long word came before the end"


def _owner_of(session: Session, conversation_id: str) -> str | None:
    return session.get(Conversation, conversation_id).owner  # type: ignore[union-attr]


def _end_listening(session: Session) -> None:
    session.connection().execute(
        text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN%' AND datname = current_database()"
        )
    )


async def test_a_flush_is_announced_when_it_commits(
    serve: Serve, database: str, upstream: FakeUpstream
) -> None:
    """What another worker's listener hears: a notice for the answer with each flush
    that moved it, and one at its end; none for the heartbeats in between."""
    upstream.set_reply(REPLY)
    upstream.chunk_delay = 0.05
    token = await make_user(database, "alice")
    url = serve()
    heard: list[str] = []
    listener = await asyncpg.connect(
        make_url(database).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    await listener.add_listener(CHANNEL, lambda *args: heard.append(args[-1]))
    try:
        async with bearer(url, token) as api:
            conversation_id = (
                await api.post("/api/conversations", json={"configuration": "small"})
            ).json()["id"]
            sent = await send(api, conversation_id)
            answer_id = sent[-1][1]["id"]
            upstream.stall(1.0)  # an answer that says nothing for a second: heartbeats only
            upstream.set_reply("Quiet.")  # and then little: its flushes are not counted
            quiet = asyncio.create_task(send(api, conversation_id))
            await asyncio.sleep(0.8)
            quiet_answer = await streaming_answer(api, conversation_id)
            during_stall = [n for n in heard if n.split(" ")[1] == str(quiet_answer)]
            await quiet
    finally:
        await listener.close()
    mine = [n.split(" ") for n in heard if n.split(" ")[1] == str(answer_id)]
    assert len(mine) >= 5, heard
    assert {kind for kind, *_ in mine} == {"moved"}
    lengths = [int(length) for *_, length in mine]
    assert lengths == sorted(lengths), "text only grows"
    assert len(set(lengths)) >= len(lengths) - 1, "a flush that moved nothing sends nothing"
    assert lengths[-1] == len(REPLY)
    assert during_stall == [], "a heartbeat that moved nothing wakes nobody"


async def test_an_answer_is_stopped_from_the_other_server_at_once(
    serve: Serve, database: str, upstream: FakeUpstream
) -> None:
    upstream.set_reply(REPLY)
    upstream.chunk_delay = 0.1  # four seconds if nobody stops it
    token = await make_user(database, "alice")
    writer_url, other_url = serve(), serve()
    async with bearer(writer_url, token) as writer, bearer(other_url, token) as other:
        conversation_id = (
            await writer.post("/api/conversations", json={"configuration": "small"})
        ).json()["id"]
        sending = asyncio.create_task(send(writer, conversation_id))
        await streaming_answer(other, conversation_id)
        await asyncio.sleep(0.5)
        stopped = await other.post(f"/api/conversations/{conversation_id}/stop")
        assert stopped.status_code == 200 and stopped.json()["stopped"] is True
        sent = await asyncio.wait_for(sending, 3)
    name, final, _ = sent[-1]
    assert name == "done" and final["status"] == "stopped"
    assert 0 < len(final["content"]) < len(REPLY), "the text so far is kept"


async def test_the_engines_reading_of_the_prompt_reaches_a_page_on_the_other_server(
    serve: Serve, database: str, upstream: FakeUpstream
) -> None:
    """llama.cpp reports its reading of the prompt (`return_progress`), then holds the
    stream: a page served by the other server shows how far it has read, as a page of the
    writer's own would (the writer announces it), and the line goes when the text comes."""
    upstream.set_engine("llamacpp")
    upstream.progress_batch = 2
    upstream.hold_after_progress = True
    upstream.set_reply("The bridge was built in 1820.")
    token = await make_user(database, "alice")
    writer_url, watcher_url = serve(), serve()
    readings: list[str] = []
    after_text: list[str] = []
    async with bearer(writer_url, token) as writer, bearer(watcher_url, token) as watcher:
        conversation_id = (
            await writer.post("/api/conversations", json={"configuration": "small"})
        ).json()["id"]
        sending = asyncio.create_task(send(writer, conversation_id))
        answer_id = await streaming_answer(watcher, conversation_id)
        path = f"/c/{conversation_id}/answers/{answer_id}/stream"
        async with watcher.stream("GET", path) as stream:
            assert stream.status_code == 200
            async with asyncio.timeout(20):
                async for name, data, _ in events(stream):
                    if name == "done":
                        break
                    said = re.findall(r'<p class="prefill" role="status">([^<]*)</p>', data)
                    if "1820" in data:
                        after_text += said
                    elif said:
                        readings += said
                        record = upstream.cache_log[-1]
                        if said[-1].startswith(f"Reading the conversation: {record.prompt_tokens}"):
                            upstream.end_stalls()  # read to its end: the text may come
        sent = await sending
    record = upstream.cache_log[-1]
    whole = f"{record.prompt_tokens:,} of {record.prompt_tokens:,} tokens"
    assert readings and whole in readings[-1], readings
    assert f"{record.cached_tokens:,} from cache" in readings[-1]
    assert after_text == [], "the line goes when the text comes"
    assert sent[-1][0] == "done" and sent[-1][1]["content"] == "The bridge was built in 1820."
    progress = [data for name, data, _ in sent if name == "progress"]
    assert progress, "the writer's own API stream had them too"


def stored_text(notice: str) -> bool:
    """A "moved ANSWER LENGTH" notice that says text was stored."""
    kind, *rest = notice.split(" ")
    return kind == "moved" and len(rest) == 2 and rest[1].isdecimal() and int(rest[1]) > 0


async def test_the_reading_is_announced_again_while_it_stands_and_not_after_the_text(
    serve: Serve, database: str, upstream: FakeUpstream
) -> None:
    """What a listener hears of the engine's reading: each new reading once, the last one
    again every second while the engine holds it (a page that starts following
    meanwhile learns it), and nothing of it once text comes."""
    upstream.set_engine("llamacpp")
    upstream.progress_batch = 2
    upstream.hold_after_progress = True
    upstream.set_reply("The bridge was built in 1820.")
    token = await make_user(database, "alice")
    url = serve()
    heard: list[tuple[float, str]] = []
    listener = await asyncpg.connect(
        make_url(database).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    loop = asyncio.get_running_loop()
    await listener.add_listener(CHANNEL, lambda *args: heard.append((loop.time(), args[-1])))
    try:
        async with bearer(url, token) as api:
            conversation_id = (
                await api.post("/api/conversations", json={"configuration": "small"})
            ).json()["id"]
            sending = asyncio.create_task(send(api, conversation_id))
            answer_id = await streaming_answer(api, conversation_id)
            await asyncio.sleep(2.6)  # the engine holds its last reading meanwhile
            upstream.end_stalls()
            await sending
            await asyncio.sleep(1.2)  # a repeat would have come by now
    finally:
        await listener.close()
    readings = [
        (at, reading)
        for at, notice in heard
        if notice.startswith("progress ")
        for answer, *reading in json.loads(notice.split(" ", 1)[1])
        if answer == answer_id
    ]
    record = upstream.cache_log[-1]
    last = [record.prompt_tokens, record.prompt_tokens, record.cached_tokens]
    assert [reading for _, reading in readings][-1] == last
    repeats = [at for at, reading in readings if reading == last]
    assert len(repeats) >= 3, f"announced again each second while it stood: {readings}"
    # Text is heard as a "text" notice between flushes, or, when the whole answer came
    # within one flush, only as its row's move with the length stored.
    texts = [at for at, notice in heard if notice.startswith("text ") or stored_text(notice)]
    assert texts and max(at for at, _ in readings) < min(texts), "none once text came"
    processed = [reading[0] for _, reading in readings]
    assert processed == sorted(processed), "readings only grow"
