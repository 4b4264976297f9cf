"""Limits that deleting does not reset (issue 22), on SQLite and PostgreSQL: sends and
gateway calls are counted from a record of their own, not from the messages a user can
delete; imports have a quota by count and by size; previews are throttled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
from litestar.testing import AsyncTestClient
from openai.types.chat import ChatCompletionMessageParam
from sqlalchemy import func, insert, select, text

from tests.factories import bearer_header, make_user, new_conversation, settings_for
from tests.served import Gateway
from tests.upstream import FakeUpstream
from webapp.app import create_app
from webapp.chat.stored import budget
from webapp.chat.stored.budget import RECENT_USES
from webapp.chat.stored.models import GatewayCall
from webapp.db import create_engine
from webapp.migrate import upgrade
from webapp.timeutil import utcnow

Client = Callable[..., AsyncTestClient]


@pytest.fixture
async def make_client(
    database_url: str, tmp_path: Path, upstream: FakeUpstream
) -> AsyncIterator[Callable[..., Any]]:
    """`await make_client(**settings)`: the app on `database_url`, signed in as alice by
    token (`tokens["bob"]` is another user's)."""
    clients: list[AsyncTestClient] = []
    tokens = {name: await make_user(database_url, name) for name in ("alice", "bob")}

    async def make(**overrides: Any) -> AsyncTestClient:
        settings = settings_for(database_url, tmp_path, upstream, **overrides)
        client = AsyncTestClient(app=create_app(settings))
        await client.__aenter__()
        client.headers.update(bearer_header(tokens["alice"]))
        clients.append(client)
        return client

    make.tokens = tokens  # type: ignore[attr-defined]
    yield make
    for client in clients:
        await client.__aexit__(None, None, None)


async def rows_of(database_url: str, kind: str | None = None) -> int:
    engine = create_engine(database_url)
    try:
        query = select(func.count()).select_from(GatewayCall)
        if kind is not None:
            query = query.where(GatewayCall.kind == kind)  # type: ignore[arg-type]
        async with engine.connect() as connection:
            return int((await connection.execute(query)).scalar_one())
    finally:
        await engine.dispose()


# ---- sends -------------------------------------------------------------------------------


async def test_deleting_conversations_gives_no_sends_back(
    make_client: Callable[..., Any], database_url: str
) -> None:
    client = await make_client(rate_limit_messages=3, rate_limit_window=60)
    for number in range(3):
        conversation = await new_conversation(client)
        sent = await client.post(
            f"/api/conversations/{conversation['id']}/messages", json={"content": f"hi {number}"}
        )
        assert sent.status_code == 201, sent.text
        assert (await client.delete(f"/api/conversations/{conversation['id']}")).status_code == 204
    fresh = await new_conversation(client)
    refused = await client.post(
        f"/api/conversations/{fresh['id']}/messages", json={"content": "one more"}
    )
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "3 messages" in refused.json()["detail"]
    assert (await client.get(f"/api/conversations/{fresh['id']}")).json()["messages"] == []
    assert await rows_of(database_url, "send") == 3, "a refused send is not counted"


def test_deleting_conversations_gives_no_gateway_calls_back(
    serve: Callable[..., Gateway],
    database_url: str,
) -> None:
    """Gateway calls into a conversation (`x-conversation-id`) are sends: deleting the
    conversation afterwards must not give them back either."""
    gateway = serve(database_url, rate_limit_messages=3, rate_limit_window=60)
    alice = gateway.client()
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]

    def fresh_conversation() -> str:
        with gateway.http() as http:
            return str(
                http.post("/api/conversations", json={"configuration": "small"}).json()["id"]
            )

    for _ in range(3):
        conversation = fresh_conversation()
        alice.chat.completions.create(
            model="small", messages=hello, extra_headers={"x-conversation-id": conversation}
        )
        with gateway.http() as http:
            assert http.delete(f"/api/conversations/{conversation}").status_code == 204
    with pytest.raises(openai.RateLimitError):
        alice.chat.completions.create(
            model="small",
            messages=hello,
            extra_headers={"x-conversation-id": fresh_conversation()},
        )
    with pytest.raises(openai.RateLimitError) as refused:
        alice.chat.completions.create(model="small", messages=hello)
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    with gateway.http() as http:
        conversation = fresh_conversation()
        sent = http.post(f"/api/conversations/{conversation}/messages", json={"content": "hi"})
        assert sent.status_code == 429, "the chat counts the same record"


async def test_the_count_reads_only_the_owners_window(sqlite_url: str) -> None:
    """The rate limit's count walks the owner's rows in the window by index, never the
    table. (The plan is read from SQLite, whose planner needs no statistics to choose.)"""
    url = sqlite_url
    engine = create_engine(url)
    try:
        compiled = RECENT_USES.compile(dialect=engine.dialect)
        values = compiled.construct_params({"owned_by": "user:1", "since": utcnow(), "limit": 30})
        async with engine.connect() as connection:
            plan = await connection.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {compiled}",
                tuple(str(values[name]) for name in compiled.positiontup or ()),
            )
            details = [row[-1] for row in plan]
    finally:
        await engine.dispose()
    assert any("ix_gateway_call_owner_time (owner=? AND called_at>?)" in d for d in details), (
        details
    )


async def test_rows_past_their_window_are_pruned(
    make_client: Callable[..., Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record holds about a window's worth of sends: visitors who never come back
    leave nothing for ever. Imports, counted over a longer window, stay."""
    monkeypatch.setattr(budget, "_PRUNED", {})
    old = utcnow() - timedelta(seconds=200)
    engine = create_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                insert(GatewayCall),
                [
                    {"owner": f"embed:support:{n}", "called_at": old, "kind": kind, "size": 0}
                    for n in range(50)
                    for kind in ("send", "call", "import")
                ],
            )
    finally:
        await engine.dispose()
    client = await make_client(rate_limit_messages=30, rate_limit_window=60)
    conversation = await new_conversation(client)
    url = f"/api/conversations/{conversation['id']}/messages"
    assert (await client.post(url, json={"content": "hi"})).status_code == 201
    assert await rows_of(database_url, "send") == 1
    assert await rows_of(database_url, "call") == 0
    assert await rows_of(database_url, "import") == 50


# ---- imports ------------------------------------------------------------------------------


def an_export(words: int = 20) -> bytes:
    body = {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Imported"},
        "messages": [
            {"seq": 1, "role": "user", "content": "question " * words},
            {"seq": 2, "role": "assistant", "content": "answer " * words},
        ],
    }
    return json.dumps(body).encode()


async def post_import(client: AsyncTestClient, body: bytes) -> Any:
    return await client.post(
        "/api/conversations/import", content=body, headers={"Content-Type": "application/json"}
    )


async def test_imports_are_limited_in_number_and_deleting_them_gives_none_back(
    make_client: Callable[..., Any],
) -> None:
    client = await make_client(import_limit=2, import_window=3600)
    for _ in range(2):
        imported = await post_import(client, an_export())
        assert imported.status_code == 201, imported.text
        assert (
            await client.delete(f"/api/conversations/{imported.json()['id']}")
        ).status_code == 204
    refused = await post_import(client, an_export())
    assert refused.status_code == 429, refused.text
    assert 3500 <= int(refused.headers["retry-after"]) <= 3600
    assert "imported 2 conversations" in refused.json()["detail"]
    assert (await client.get("/api/conversations")).json() == []
    # Bob has a quota of his own.
    tokens = make_client.tokens  # type: ignore[attr-defined]
    client.headers.update(bearer_header(tokens["bob"]))
    assert (await post_import(client, an_export())).status_code == 201


async def test_imports_are_limited_in_size(make_client: Callable[..., Any]) -> None:
    body = an_export()
    client = await make_client(import_limit=0, import_limit_bytes=len(body) * 5 // 2)
    assert (await post_import(client, body)).status_code == 201
    assert (await post_import(client, body)).status_code == 201
    refused = await post_import(client, body)
    assert refused.status_code == 429, "a third would pass the window's bytes"
    assert int(refused.headers["retry-after"]) >= 1
    too_big = await post_import(client, an_export(words=200))
    assert too_big.status_code == 400 and "at most" in too_big.json()["detail"]


async def test_the_sidebars_import_spends_the_same_quota(make_client: Callable[..., Any]) -> None:
    client = await make_client(import_limit=1)
    assert (await post_import(client, an_export())).status_code == 201
    upload = await client.post(
        "/c/import",
        files={"file": ("export.json", an_export(), "application/json")},
        headers={"Accept": "application/json"},
    )
    assert upload.status_code == 429, upload.text
    assert int(upload.headers["retry-after"]) >= 1


# ---- previews -----------------------------------------------------------------------------


async def test_previews_are_throttled_per_user(make_client: Callable[..., Any]) -> None:
    client = await make_client(preview_burst=3, preview_rate=0.01)
    conversation = await new_conversation(client)
    url = f"/api/conversations/{conversation['id']}/preview"
    statuses = [(await client.post(url, json={"content": "typing"})).status_code for _ in range(5)]
    assert statuses == [200] * 3 + [429] * 2
    refused = await client.post(url, json={"content": "typing"})
    assert 1 <= int(refused.headers["retry-after"]) <= 100
    # Another user's meter is not slowed by Alice's.
    tokens = make_client.tokens  # type: ignore[attr-defined]
    client.headers.update(bearer_header(tokens["bob"]))
    theirs = await new_conversation(client)
    preview = await client.post(
        f"/api/conversations/{theirs['id']}/preview", json={"content": "typing"}
    )
    assert preview.status_code == 200


async def test_the_throttle_lets_a_typing_pace_through(make_client: Callable[..., Any]) -> None:
    """The defaults: a preview per pause of typing (htmx asks after 400 ms) is never
    refused."""
    client = await make_client()
    conversation = await new_conversation(client)
    url = f"/api/conversations/{conversation['id']}/preview"
    for _ in range(6):
        assert (await client.post(url, json={"content": "typing"})).status_code == 200
        await asyncio.sleep(0.4)


async def test_the_migration_copies_the_last_hours_sends(tmp_path: Path) -> None:
    """Upgrading does not reset anyone's limit: the sends already stored are counted."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'upgrade.db'}"
    upgrade(url, "0015")
    engine = create_engine(url)
    now = utcnow()
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO conversation (id, owner, configuration, title, created_at, "
                    "updated_at, cut_reset) VALUES ('c', 'x:1', 'small', 't', :now, :now, 0)"
                ),
                {"now": now},
            )
            for seq, role, at in [
                (1, "user", now - timedelta(hours=2)),
                (2, "assistant", now),
                (3, "user", now - timedelta(minutes=1)),
                (4, "assistant", now),
            ]:
                await connection.execute(
                    text(
                        "INSERT INTO message (conversation_id, seq, role, content, status, "
                        "created_at, updated_at, estimated_tokens, pinned) "
                        "VALUES ('c', :seq, :role, 'x', 'complete', :at, :at, 1, 0)"
                    ),
                    {"seq": seq, "role": role, "at": at},
                )
        upgrade(url)
        async with engine.connect() as connection:
            rows = (await connection.execute(text("SELECT owner, kind FROM gateway_call"))).all()
    finally:
        await engine.dispose()
    assert [tuple(row) for row in rows] == [("x:1", "send")]
