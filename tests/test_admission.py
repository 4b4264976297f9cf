"""Every route that reaches a model goes through the one admission (SQLite and PostgreSQL).

The routes are not listed here: the walk takes them from the app's route table and asks
each one, with what a send needs (a message, a model, the ids of the newest user message
and answer, that answer cut at its length limit or failed), as a signed-in user (pages,
API, gateway) or as an embed visitor. Which of them reached the model is what the fake
upstream was asked. Then the user's rate limit and the embed's per-address quota are
spent (their rows stored, as sends store them) and the walk runs again: a route that
reaches the model without admission, old or new, reaches it again and fails the test.

The walk is about the routes, so it runs on SQLite; how the admission counts is tested on
both databases (test_limits.py, test_embed.py, test_gateway.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from litestar import Litestar
from sqlalchemy import text

from tests.factories import EMBED, Client, bearer_header, htmx_headers, make_user
from tests.upstream import FakeUpstream
from webapp.app import create_app
from webapp.db import Database
from webapp.settings import Settings

LIMIT = 100
"""The user's rate limit and the embed's per-visitor and per-address limits: more than
the first walk spends."""
pytestmark = [
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
    pytest.mark.settings(
        extra=EMBED,
        rate_limit_messages=LIMIT,
        embed_rate_limit_messages=LIMIT,
        embed_rate_limit_total=10 * LIMIT,
        import_limit=0,
        preview_rate=0,
    ),
]

MODEL_PATHS = ("/chat/completions", "/completions", "/embeddings")
"""What the fake upstream is asked when a model is called (not counting, not listing)."""
HELD = ("/stream", "/title")
"""GETs that hold the request open while they wait; they read, never send."""
DOCUMENTS = "/schema"
"""The OpenAPI documents: built from the route table, they reach nothing."""
LEFT_ALONE = ("/logout", "/delete", "/password", "/revoke", "/bulk", "/setup")
"""Routes that end the session, delete or change the account: walked by no one (nor
DELETEs). None of them may reach a model; a new one that does is not walked."""
KNOWN_SENDERS = {
    "/c/{conversation_id:str}/send",
    "/c/{conversation_id:str}/continue/{answer_id:int}",
    "/c/{conversation_id:str}/retry/{answer_id:int}",
    "/c/{conversation_id:str}/regenerate/{message_id:int}",
    "/c/{conversation_id:str}/edit/{message_id:int}",
    "/embed/{embed_name:str}/send",
    "/embed/{embed_name:str}/continue/{answer_id:int}",
    "/embed/{embed_name:str}/retry/{answer_id:int}",
    "/embed/{embed_name:str}/regenerate/{message_id:int}",
    "/embed/{embed_name:str}/edit/{message_id:int}",
    "/api/conversations/{conversation_id:str}/messages",
    "/api/conversations/{conversation_id:str}/messages/{message_id:int}/regenerate",
    "/api/conversations/{conversation_id:str}/messages/{message_id:int}/continue",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
}
"""Routes known to reach a model: the walk must find each (it can reach what they need)."""
JSON_BODY = {
    "content": "walk",
    "model": "small",
    "messages": [{"role": "user", "content": "walk"}],
    "prompt": "walk",
    "input": "walk",
}


@dataclass
class Caller:
    client: Client
    conversation_id: str
    headers: dict[str, str]


def model_calls(upstream: FakeUpstream) -> int:
    return sum(1 for r in upstream.requests if r["path"].endswith(MODEL_PATHS))


async def settled(db: Database, conversation_id: str) -> list[Any]:
    """The conversation's rows, newest first, once none of its answers streams."""
    query = text(
        "SELECT id, role, status, finish_reason FROM message"
        " WHERE conversation_id = :c ORDER BY seq DESC"
    )
    for _ in range(500):
        rows = await db.read(lambda s: s.connection().execute(query, {"c": conversation_id}).all())
        if not any(row.status == "streaming" for row in rows):
            return list(rows)
        await asyncio.sleep(0.02)
    raise AssertionError("an answer is still streaming")


async def newest(db: Database, conversation_id: str, status: str) -> tuple[int, int]:
    """The ids of the conversation's newest user message and answer, that answer (once
    written) made `status` and cut at its length limit."""
    rows = await settled(db, conversation_id)
    answer = next(row for row in rows if row.role == "assistant")
    user = next(row.id for row in rows if row.role == "user")
    if (answer.status, answer.finish_reason) != (status, "length"):
        change = text("UPDATE message SET status = :s, finish_reason = 'length' WHERE id = :a")
        await db.write(lambda s: s.connection().execute(change, {"s": status, "a": answer.id}))
    return user, answer.id


def routes(app: Litestar) -> list[tuple[str, str]]:
    return sorted(
        (route.path, method)
        for route in app.routes
        for method in getattr(route, "methods", ())
        if method not in ("OPTIONS", "HEAD", "DELETE")
        and not route.path.endswith(LEFT_ALONE)
        and not (method == "GET" and route.path.endswith(HELD))
        and not route.path.startswith(DOCUMENTS)
    )


async def walk(
    app: Litestar, db: Database, upstream: FakeUpstream, user: Caller, visitor: Caller
) -> tuple[set[str], dict[str, set[int]]]:
    """Every route asked once per kind of newest answer and id: the routes that reached the
    model, and the statuses each route answered."""
    reached: set[str] = set()
    answered: dict[str, set[int]] = {}
    variants = [("complete", "user"), ("complete", "answer"), ("failed", "answer")]
    for index, (status, which) in enumerate(variants):
        for template, method in routes(app):
            if index > 0 and ":int}" not in template:
                continue  # no id in its path: asked once
            caller = visitor if template.startswith("/embed/") else user
            path = template
            if ":int}" in template:
                user_id, answer_id = await newest(db, caller.conversation_id, status)
                number = str(user_id if which == "user" else answer_id)
                path = re.sub(r"\{\w+:int\}", number, template)
            path = path.replace("{conversation_id:str}", user.conversation_id)
            path = path.replace("{embed_name:str}", "support").replace("{name:str}", "small")
            before = model_calls(upstream)
            kwargs: dict[str, Any] = {"headers": caller.headers}
            if method != "GET":
                api = template.startswith(("/api/", "/v1/"))
                kwargs |= {"json": JSON_BODY} if api else {"data": {"content": "walk"}}
            response = await caller.client.request(method, path, **kwargs)
            answered.setdefault(template, set()).add(response.status_code)
            if response.status_code < 300 and method != "GET":
                await settled(db, caller.conversation_id)  # an answer it started is written
            if model_calls(upstream) > before:
                reached.add(template)
    return reached, answered


@pytest.fixture
async def callers(
    app: Litestar, settings: Settings, database_url: str
) -> AsyncIterator[tuple[Caller, Caller]]:
    """alice (by token: pages, API and gateway) and an embed visitor (on an app of its own,
    as on another worker), each with one turn."""
    token = await make_user(database_url, "alice")
    async with Client(app=app) as by_token, Client(app=create_app(settings)) as browser:
        by_token.headers.update(bearer_header(token))
        created = await by_token.post("/api/conversations", json={})
        conversation_id = created.json()["id"]
        sent = await by_token.post(
            f"/api/conversations/{conversation_id}/messages", json={"content": "hi"}
        )
        assert sent.status_code == 201, sent.text
        headers = htmx_headers((await browser.get("/embed/support")).text)
        sent = await browser.post("/embed/support/send", data={"content": "hi"}, headers=headers)
        assert sent.status_code == 200, sent.text
        yield (
            Caller(by_token, conversation_id, {}),
            Caller(browser, await visitor_conversation(database_url), headers),
        )


async def visitor_conversation(database_url: str) -> str:
    db = Database(database_url)
    try:
        query = text("SELECT id FROM conversation WHERE embed_name = 'support'")
        return str(await db.read(lambda s: s.connection().execute(query).scalar_one()))
    finally:
        await db.dispose()


async def spend(db: Database, owner: str) -> None:
    """The user's rate limit and the embed's per-address quota, spent as sends spend them."""
    now = datetime.now(UTC)
    calls = text(
        "INSERT INTO gateway_call (owner, called_at, kind, size) VALUES (:o, :t, 'call', 0)"
    )
    sends = text(
        "INSERT INTO embed_send (embed_name, client, sent_at) VALUES ('support', 'testclient', :t)"
    )

    def store(session: Any) -> None:
        connection = session.connection()
        connection.execute(calls, [{"o": owner, "t": now}] * LIMIT)
        connection.execute(sends, [{"t": now}] * LIMIT)

    await db.write(store)


async def test_every_route_that_reaches_a_model_is_admitted(
    app: Litestar,
    database_url: str,
    upstream: FakeUpstream,
    callers: tuple[Caller, Caller],
) -> None:
    user, visitor = callers
    db = Database(database_url)
    try:
        reached, _ = await walk(app, db, upstream, user, visitor)
        missed = KNOWN_SENDERS - reached
        assert not missed, f"the walk did not reach the model through {missed}"
        owner = text("SELECT owner FROM conversation WHERE id = :c")
        alice = await db.read(
            lambda s: s.connection().execute(owner, {"c": user.conversation_id}).scalar_one()
        )
        await spend(db, alice)
        before = model_calls(upstream)
        spent, answered = await walk(app, db, upstream, user, visitor)
        assert not spent, f"reached the model past the spent quotas: {spent}"
        assert model_calls(upstream) == before
        for template in reached:
            assert 429 in answered[template], (template, answered[template])
    finally:
        await db.dispose()
