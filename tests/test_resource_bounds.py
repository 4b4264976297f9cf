"""Resources a client could hold without bound (issues 22 and 43): followers of a streaming
answer, pages waiting for a title and exports in flight are capped per user (and per
answer); a client that stops reading a response is dropped and what it held is freed
(exports are streamed a batch at a time); imported left-out spans are checked, merged and
capped, so the admin review of an import stays small.

The caps and the write deadline are tested on `webapp serve` itself, over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import select
from sqlmodel import col

from tests.catalogs import write_upstream_catalog
from tests.factories import api_client, make_user
from tests.live_server import ServerProcess, free_port, h11_serve, webapp_serve
from tests.served import bearer, send, streaming_answer
from tests.upstream import FakeUpstream
from webapp.admin import queries
from webapp.admin.web import review_turns
from webapp.chat.stored.models import Message
from webapp.db import Database, create_engine
from webapp.settings import Settings

Serve = Callable[..., ServerProcess]


@pytest.fixture
def serve(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Serve]:
    """`serve(database_url, parser, **settings)`: `webapp serve` (or its h11 fallback)
    started on the database with `WEBAPP_*` settings; stopped at the end."""
    catalog = write_upstream_catalog(tmp_path / "catalog.toml", upstream)
    servers = ExitStack()

    def start(database_url: str, parser: str = "httptools", **settings: str) -> ServerProcess:
        env = {
            **os.environ,
            "WEBAPP_DATABASE_URL": database_url,
            "WEBAPP_CONFIG": str(catalog),
            "WEBAPP_SECRET_KEY": "resource-bounds-secret-0123456789",
            **{f"WEBAPP_{name.upper()}": value for name, value in settings.items()},
        }
        port = free_port()
        server = ServerProcess(
            name=f"webapp serve ({parser})",
            env=env,
            log=tmp_path / f"serve-{port}.log",
            port=port,
            command=h11_serve if parser == "h11" else webapp_serve,
        )
        server.start()
        servers.callback(server.stop)
        return server

    with servers:
        yield start


# ---- followers of an answer -------------------------------------------------------------


async def open_stream(
    stack: AsyncExitStack, client: httpx.AsyncClient, conversation: str, answer: int
) -> httpx.Response:
    path = f"/c/{conversation}/answers/{answer}/stream"
    return await stack.enter_async_context(client.stream("GET", path))


async def test_followers_are_capped_per_answer_and_per_user(
    serve: Serve, database_url: str, upstream: FakeUpstream
) -> None:
    upstream.set_reply(" ".join(["word"] * 40))
    upstream.chunk_delay = 0.25  # a ten-second answer
    token = await make_user(database_url, "alice")
    server = serve(database_url, watchers_per_answer="3", watchers_per_user="4")
    async with bearer(server.url, token) as api, AsyncExitStack() as streams:
        first = (await api.post("/api/conversations", json={"configuration": "small"})).json()
        sending = [asyncio.create_task(send(api, first["id"]))]
        try:
            answer = await streaming_answer(api, first["id"])
            followers = [await open_stream(streams, api, first["id"], answer) for _ in range(3)]
            assert [f.status_code for f in followers] == [200] * 3
            async with api.stream("GET", f"/c/{first['id']}/answers/{answer}/stream") as refused:
                assert refused.status_code == 429
                assert refused.headers["retry-after"] == "5"
                assert "3 pages following it" in (await refused.aread()).decode()
            # One leaves: its place is given back as soon as the server hears of it.
            await followers[0].aclose()
            for _ in range(50):
                async with api.stream("GET", f"/c/{first['id']}/answers/{answer}/stream") as again:
                    if again.status_code == 200:
                        break
                await asyncio.sleep(0.05)
            assert again.status_code == 200
            await open_stream(streams, api, first["id"], answer)  # three again
            # The user's fourth follower may follow another answer, not a fifth.
            other = (await api.post("/api/conversations", json={"configuration": "small"})).json()
            sending.append(asyncio.create_task(send(api, other["id"])))
            second = await streaming_answer(api, other["id"])
            assert (await open_stream(streams, api, other["id"], second)).status_code == 200
            async with api.stream("GET", f"/c/{other['id']}/answers/{second}/stream") as over:
                assert over.status_code == 429
                assert "4 pages following answers" in (await over.aread()).decode()
            health = await api.get("/healthz")
            assert health.status_code == 200
        finally:
            for task in sending:
                task.cancel()
            await asyncio.gather(*sending, return_exceptions=True)


# ---- pages waiting for a title -----------------------------------------------------------


async def test_pages_waiting_for_a_title_are_capped_per_user_and_woken_by_a_rename(
    serve: Serve, database_url: str
) -> None:
    """3,000 held title requests of one user stalled the server (issue 43): each read the
    database every second for 45 s. Now a user holds at most `title_waits_per_user` in a
    worker (a clear 429 past it), and a waiting page reads nothing until the notice that
    goes with a title written (here a rename) wakes it."""
    token = await make_user(database_url, "alice")
    server = serve(database_url, title_waits_per_user="2", model_titles="true")
    async with bearer(server.url, token) as api:
        made = await api.post("/api/conversations", json={"title": "Draft"})
        conversation = made.json()["id"]
        path = f"/c/{conversation}/title?was=Draft"
        # No title call runs for it: two wait until its title changes, the third is refused.
        pages = [asyncio.create_task(api.get(path)) for _ in range(3)]
        try:
            done, waiting = await asyncio.wait(pages, return_when=asyncio.FIRST_COMPLETED)
            refused = done.pop().result()
            assert refused.status_code == 429 and not done and len(waiting) == 2
            assert refused.headers["retry-after"] == "5"
            assert "already have 2 pages waiting for a title" in refused.text
            renamed = await api.patch(
                f"/api/conversations/{conversation}", json={"title": "Lisbon"}
            )
            assert renamed.status_code == 200
            woken = await asyncio.wait_for(asyncio.gather(*waiting), 20)
        finally:
            for task in pages:
                task.cancel()
        assert all(page.status_code == 200 and 'value="Lisbon"' in page.text for page in woken)
        again = await api.get(path)  # their places are given back; the title is not Draft
        assert again.status_code == 200 and 'value="Lisbon"' in again.text


# ---- clients that stop reading ------------------------------------------------------------


def vm_kib(pid: int, field: str) -> int:
    """A /proc/PID/status figure in KiB (VmRSS: now, VmHWM: the peak so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def stalled_request(port: int, path: str, token: str) -> socket.socket:
    """A client that asks for `path` and then takes nothing: a receive window of a few
    KiB, never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    return sock


def held(port: int, clients: Sequence[socket.socket]) -> int:
    """How many of `clients` the server on `port` still holds: its end of the connection
    is still established (/proc/net/tcp), which the client cannot see without reading."""
    ports = {sock.getsockname()[1] for sock in clients}
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if int(local.rsplit(":", 1)[1], 16) == port and state == "01":  # ESTABLISHED
            count += int(remote.rsplit(":", 1)[1], 16) in ports
    return count


def drain(clients: Sequence[socket.socket], seconds: float) -> list[tuple[int, bool]]:
    """Read every client at once for up to `seconds`: for each, (bytes read, whether the
    server closed or reset it)."""
    received = dict.fromkeys(clients, 0)
    closed: set[socket.socket] = set()
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        for sock in clients:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, sock)
        while len(closed) < len(clients) and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock = key.data
                try:
                    data = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    received[sock] += len(data)
                else:
                    closed.add(sock)
                    selector.unregister(sock)
    return [(received[sock], sock in closed) for sock in clients]


def big_export(messages: int, chars: int) -> dict[str, Any]:
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Big"},
        "messages": [
            {"seq": seq, "role": "user" if seq % 2 else "assistant", "content": "word " * chars}
            for seq in range(1, messages + 1)
        ],
    }


STALLED = 12


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_a_client_that_stops_reading_is_dropped_and_frees_what_it_held(
    serve: Serve, sqlite_url: str, parser: str
) -> None:
    token = await make_user(sqlite_url, "alice")
    server = serve(
        sqlite_url,
        parser,
        write_timeout="1",
        keep_alive_timeout="30",
        request_timeout="30",
        import_limit="0",
        import_limit_bytes="0",
        exports_per_user="0",  # twelve of one user: what each holds, not the cap
    )
    assert server.process is not None
    pid = server.process.pid
    async with bearer(server.url, token) as api:
        body = json.dumps(big_export(24, 60_000)).encode()  # about 7 MB
        imported = await api.post(
            "/api/conversations/import",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert imported.status_code == 201, imported.text
        path = f"/api/conversations/{imported.json()['id']}/export"
        whole = await api.get(path)  # read in full: the export works, and warms the server
        assert whole.status_code == 200 and len(whole.json()["messages"]) == 24
    size = len(whole.content)
    await asyncio.sleep(0.5)
    before = vm_kib(pid, "VmHWM")
    port = server.port
    clients = [stalled_request(port, path, token) for _ in range(STALLED)]
    try:
        # The write deadline is 1 s; twelve exports built at once on a busy machine take
        # longer than that to reach it, so the wait is for the drop itself (or 30 s).
        dropped_by = time.monotonic() + 30
        while held(port, clients) and time.monotonic() < dropped_by:
            time.sleep(0.05)
        peak = vm_kib(pid, "VmHWM")
        outcomes = drain(clients, 10)
    finally:
        for sock in clients:
            sock.close()
    assert all(dropped and received < size for received, dropped in outcomes), (
        f"{size:,} bytes each; read and dropped: {outcomes}"
    )
    grown_mb = (peak - before) / 1024
    # Built whole, every stalled client held the export several times over (rows, JSON,
    # the unsent bytes) until it went away: some 20 MB each here.
    assert grown_mb < STALLED * size / 2**20 / 2, f"the peak grew by {grown_mb:.0f} MB"
    # The server is fine, and serves the next client whole.
    async with bearer(server.url, token) as api:
        assert len((await api.get(path)).content) == size


async def test_a_slow_reader_that_keeps_reading_is_not_dropped(
    serve: Serve, sqlite_url: str
) -> None:
    """Only a client that takes nothing for the whole deadline is dropped."""
    token = await make_user(sqlite_url, "alice")
    server = serve(sqlite_url, write_timeout="1", import_limit="0", import_limit_bytes="0")
    async with bearer(server.url, token) as api:
        imported = await api.post("/api/conversations/import", json=big_export(16, 60_000))
        assert imported.status_code == 201, imported.text
        path = f"/api/conversations/{imported.json()['id']}/export"
        size = len((await api.get(path)).content)
    sock = stalled_request(server.port, path, token)
    try:
        sock.settimeout(5)
        received = 0
        slow_until = time.monotonic() + 3  # a few KiB a quarter second, for three deadlines
        while received < size:
            data = sock.recv(4096 if time.monotonic() < slow_until else 1 << 20)
            assert data, f"dropped after {received:,} of {size:,} bytes"
            received += len(data)
            if time.monotonic() < slow_until:
                time.sleep(0.25)
    finally:
        sock.close()


async def imported_export(api: httpx.AsyncClient, export: dict[str, Any]) -> str:
    """The export path of a conversation imported from `export`."""
    imported = await api.post("/api/conversations/import", json=export)
    assert imported.status_code == 201, imported.text
    return f"/api/conversations/{imported.json()['id']}/export"


def dropped_within(port: int, clients: Sequence[socket.socket], seconds: float) -> bool:
    """Whether the server lets go of every one of `clients` within `seconds`."""
    until = time.monotonic() + seconds
    while held(port, clients):
        if time.monotonic() > until:
            return False
        time.sleep(0.05)
    return True


async def test_a_client_that_never_reads_is_timed_from_the_response_start(
    serve: Serve, sqlite_url: str
) -> None:
    """A response small enough to fit in the socket's buffers never filled the transport's:
    its client, which read nothing, was held until it left (issue 43). Now the clock runs
    from the first byte."""
    token = await make_user(sqlite_url, "alice")
    server = serve(sqlite_url, write_timeout="1", keep_alive_timeout="60", request_timeout="60")
    async with bearer(server.url, token) as api:
        path = await imported_export(api, big_export(8, 4_000))  # some 160 KB
    client = stalled_request(server.port, path, token)
    try:
        assert dropped_within(server.port, [client], 6), "a client that reads nothing is held"
    finally:
        client.close()


async def test_exports_in_flight_are_capped_per_user(serve: Serve, sqlite_url: str) -> None:
    """A user may have `exports_per_user` exports on their way at once in a worker (each
    holds a connection and a batch until its client reads it); the next is a clear 429,
    another user is not affected, and a place comes back when an export's client goes."""
    alice = await make_user(sqlite_url, "alice")
    bob = await make_user(sqlite_url, "bob")
    server = serve(sqlite_url, exports_per_user="2", write_timeout="60")
    export = big_export(24, 60_000)  # about 7 MB: far more than the buffers hold
    async with bearer(server.url, alice) as api, bearer(server.url, bob) as other:
        path = await imported_export(api, export)
        stalled = [stalled_request(server.port, path, alice) for _ in range(2)]
        try:
            for _ in range(100):  # both have begun (their headers are on their way)
                if all(sock.recv(1, socket.MSG_PEEK) for sock in stalled):
                    break
            refused = await api.get(path)
            assert refused.status_code == 429, refused.status_code
            assert refused.headers["retry-after"] == "5"
            assert "already have 2 exports on their way" in refused.text
            assert (await api.get(path + "?format=markdown")).status_code == 429
            # Another user's export is not refused for alice's.
            theirs = await imported_export(other, big_export(2, 10))
            assert (await other.get(theirs)).status_code == 200
            # One of alice's clients goes: its place comes back.
            stalled.pop().close()
            for _ in range(100):
                again = await api.get(path)
                if again.status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert again.status_code == 200 and len(again.json()["messages"]) == 24
        finally:
            for sock in stalled:
                sock.close()


# ---- imported spans -----------------------------------------------------------------------


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    """root's API client: these tests import and review as an admin."""
    async with api_client(settings, "root", admin=True) as test_client:
        yield test_client


def trimmed_export(messages: int, spans: Callable[[int], Sequence[Sequence[int]]]) -> bytes:
    """`messages` rows; each user row after the first left out `spans(seq)`."""
    rows: list[dict[str, Any]] = []
    for seq in range(1, messages + 1):
        row: dict[str, Any] = {
            "seq": seq,
            "role": "user" if seq % 2 else "assistant",
            "content": f"turn {seq}",
        }
        if seq % 2 and seq > 1:
            row["dropped_turns"] = 1
            row["fit"] = {"model": "small", "left_out": spans(seq)}
        rows.append(row)
    body = {"format": "webapp.conversation", "version": 1, "conversation": {}, "messages": rows}
    return json.dumps(body, separators=(",", ":")).encode()


async def post_import(client: AsyncTestClient, body: bytes) -> Any:
    return await client.post(
        "/api/conversations/import", content=body, headers={"Content-Type": "application/json"}
    )


async def stored_spans(database_url: str) -> list[list[list[int]]]:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            found = await connection.execute(
                select(col(Message.fit_left_out))
                .where(col(Message.fit_left_out).is_not(None))
                .order_by(col(Message.seq))
            )
            return [spans for spans in found.scalars() if spans]
    finally:
        await engine.dispose()


async def test_an_import_of_a_million_duplicate_spans_is_refused(
    client: AsyncTestClient, database_url: str
) -> None:
    body = trimmed_export(4, lambda seq: [[1, 2]] * 1_400_000)
    assert len(body) < 10_000_000, "under the request limit: the spans are what is refused"
    refused = await post_import(client, body)
    assert refused.status_code == 400, refused.text[:200]
    assert "spans" in refused.json()["detail"]
    assert (await client.get("/api/conversations")).json() == []


async def test_imported_spans_are_merged_one_per_left_out_run(
    client: AsyncTestClient, database_url: str
) -> None:
    """Duplicates and overlaps, as many as a row has messages before it, are merged: the
    review walks one span per run, not one per copy."""
    messages = 400
    body = trimmed_export(messages, lambda seq: [[1, 2]] * (seq // 2 - 1) + [[2, 2], [1, 1]])
    imported = await post_import(client, body)
    assert imported.status_code == 201, imported.text
    spans = await stored_spans(database_url)
    assert spans == [[[1, 2]]] * (messages // 2 - 1)
    # What the admin review page reads and shows of it.
    db = Database(database_url)
    try:
        review = await db.read(queries.review, imported.json()["id"])
    finally:
        await db.dispose()
    assert sum(len(turn.spans) for turn in review.trimmed) == messages // 2 - 1
    shown = review_turns(review)
    assert [turn.left_out_spans for turn in shown if turn.trimmed] == [[(1, 1)]] * (
        messages // 2 - 1
    )
    assert review.left_out_by()[1].count == messages // 2 - 1


@pytest.mark.parametrize(
    ("spans", "detail"),
    [
        ([[3, 3]], "seqs before 3"),
        ([[2, 9]], "seqs before 3"),
        ([[0, 1]], "seqs before 3"),
        ([[1, 1], [2, 2], [1, 2]], "more spans than there are messages"),
    ],
)
async def test_imported_spans_lie_before_their_row(
    client: AsyncTestClient, spans: list[list[int]], detail: str
) -> None:
    refused = await post_import(client, trimmed_export(4, lambda seq: spans))
    assert refused.status_code == 400, refused.text
    assert detail in refused.json()["detail"]


async def test_an_import_is_capped_in_spans_over_all_its_rows(client: AsyncTestClient) -> None:
    # 1,400 user rows, each with as many copies as it may have: over 100,000 in all.
    body = trimmed_export(2_800, lambda seq: [[1, 1]] * (seq // 2 + 1))
    refused = await post_import(client, body)
    assert refused.status_code == 400, refused.text
    assert "at most 100,000 left-out spans" in refused.json()["detail"]
