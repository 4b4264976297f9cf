"""The embed for browsers that keep no cookie in a cross-site frame, and its quotas (SQLite
and PostgreSQL): a visitor id in a header instead of a cookie, limits that fresh ids do
not reset, reads that store nothing."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest
from litestar import Litestar
from sqlalchemy import func, text
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from tests.factories import EMBED, Client, found, htmx_headers
from tests.upstream import FakeUpstream
from webapp.chat.stored.models import Conversation
from webapp.db import Database, create_engine
from webapp.embed.quota import EmbedQuota
from webapp.errors import TooManyRequests
from webapp.timeutil import utcnow

pytestmark = pytest.mark.settings(extra=EMBED, embed_rate_limit_messages=3)

ANSWER = re.compile(r'data-role="assistant" data-message-id="(\d+)"')


async def conversations(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        async with AsyncSession(engine) as session:
            return (await session.exec(select(func.count()).select_from(Conversation))).one()
    finally:
        await engine.dispose()


async def test_the_visitor_cookie_is_partitioned_and_signed(app: Litestar) -> None:
    async with Client(app=app, base_url="https://chat.test") as client:
        page = await client.get("/embed/support")
        cookie = page.headers["set-cookie"]
        for attribute in ("SameSite=None", "Secure", "Partitioned", "HttpOnly"):
            assert attribute in cookie, attribute
        kept = await client.get("/embed/support")
        assert "set-cookie" not in kept.headers, "a valid visitor cookie is kept"
        client.cookies.set("webapp_visitor", "chosen-by-the-client", domain="chat.test")
        forged = await client.get("/embed/support")
        assert "set-cookie" in forged.headers, "a visitor id the server did not sign is replaced"
        assert "chosen-by-the-client" not in forged.headers["set-cookie"]


async def test_the_embed_works_with_no_cookie_at_all(app: Litestar) -> None:
    """Over plain http no Secure cookie comes back, as in a browser that blocks every
    cross-site cookie: the signed visitor id in the page's htmx headers is enough."""
    async with Client(app=app) as client:
        page = await client.get("/embed/support")
        headers = htmx_headers(page.text)
        assert set(headers) == {"x-csrftoken", "x-webapp-visitor"}
        sent = await client.post("/embed/support/send", data={"content": "hi"}, headers=headers)
        assert sent.status_code == 200, sent.text
        answer_id = found(ANSWER, sent.text)
        stream = await client.get(f"/embed/support/answers/{answer_id}/stream", headers=headers)
        assert stream.status_code == 200
        again = await client.post("/embed/support/send", data={"content": "two"}, headers=headers)
        assert again.status_code in (200, 409), "the same visitor, the same conversation"
        stranger = await client.get(f"/embed/support/answers/{answer_id}/stream")
        assert stranger.status_code == 404, "without the id, another visitor"
        forged = {**headers, "x-webapp-visitor": "someone-else.0000"}
        refused = await client.post("/embed/support/send", data={"content": "x"}, headers=forged)
        assert refused.status_code == 403, "an unsigned id is a new visitor, whose CSRF differs"


async def test_reading_the_embed_stores_nothing(app: Litestar, database_url: str) -> None:
    async with Client(app=app) as client:
        for _ in range(30):
            assert (await client.get("/embed/support")).status_code == 200
            older = await client.get("/embed/support/older?before=5")
            assert older.status_code == 404
        assert await conversations(database_url) == 0
        headers = htmx_headers((await client.get("/embed/support")).text)
        sent = await client.post("/embed/support/send", data={"content": "hi"}, headers=headers)
        assert sent.status_code == 200
        assert await conversations(database_url) == 1, "the first send stores the conversation"


async def test_fresh_visitor_ids_do_not_reset_the_quota(app: Litestar, database_url: str) -> None:
    """The per-visitor limit is 3; each send comes from a new visitor, one address."""
    statuses = []
    async with Client(app=app) as client:
        for index in range(6):
            headers = htmx_headers((await client.get("/embed/support")).text)
            sent = await client.post(
                "/embed/support/send", data={"content": f"m{index}"}, headers=headers
            )
            statuses.append(sent.status_code)
        refused = sent
    assert statuses == [200, 200, 200, 429, 429, 429]
    assert 0 < int(refused.headers["retry-after"]) <= 60
    assert "from your address" in refused.text
    assert await conversations(database_url) == 3, "a refused send stores no conversation"


async def embed_send(db: Database, quota: EmbedQuota, embed: str, address: str) -> None:
    """One send through `embed` from `address`, counted as the send's admission counts it."""
    owner = f"embed:{embed}:visitor"
    await db.write(lambda session: quota.take(session.connection(), owner, address, utcnow()))


async def test_an_embed_has_a_ceiling_over_all_addresses(database_url: str) -> None:
    engine = Database(database_url)
    quota = EmbedQuota(per_client=2, per_embed=5, window=timedelta(minutes=1))
    try:
        for address in range(5):
            await embed_send(engine, quota, "support", f"10.0.0.{address}")
        with pytest.raises(TooManyRequests, match="through this chat"):
            await embed_send(engine, quota, "support", "10.0.0.99")
        await embed_send(engine, quota, "other", "10.0.0.99")  # each embed has its own ceiling
        await embed_send(engine, quota, "other", "10.0.0.99")
        with pytest.raises(TooManyRequests, match="from your address"):
            await embed_send(engine, quota, "other", "10.0.0.99")
        # A signed-in user's sends are not the embed's to count.
        await engine.write(
            lambda session: quota.take(session.connection(), "user:1", "10.0.0.99", utcnow())
        )
    finally:
        await engine.dispose()


async def test_regenerating_and_editing_count_as_sends(app: Litestar) -> None:
    """Each asks the model again, so the embed's quota counts them (limit 3 here)."""
    user = re.compile(r'data-role="user" data-message-id="(\d+)"')
    async with Client(app=app) as client:
        headers = htmx_headers((await client.get("/embed/support")).text)
        sent = await client.post("/embed/support/send", data={"content": "hi"}, headers=headers)
        assert sent.status_code == 200, sent.text
        user_id = found(user, sent.text)
        assert f'id="m{user_id}"' in (await client.get("/embed/support", headers=headers)).text
        for _ in range(200):  # until the answer is written
            page = await client.get("/embed/support", headers=headers)
            if 'data-status="streaming"' not in page.text:
                break
            await asyncio.sleep(0.05)
        again = await client.post(f"/embed/support/regenerate/{user_id}", headers=headers)
        assert again.status_code in (200, 201), again.text
        for _ in range(200):
            page = await client.get("/embed/support", headers=headers)
            if 'data-status="streaming"' not in page.text:
                break
            await asyncio.sleep(0.05)
        edited = await client.post(
            f"/embed/support/edit/{user_id}", data={"content": "hello"}, headers=headers
        )
        assert edited.status_code in (200, 201), edited.text
        refused = await client.post(f"/embed/support/regenerate/{user_id}", headers=headers)
        assert refused.status_code == 429, refused.text
        fork = await client.post(f"/embed/support/fork/{user_id}", headers=headers)
        assert fork.status_code in (400, 404)


async def cut_at_its_length_limit(database_url: str, html: str) -> int:
    """The answer a turn's HTML shows, once written, marked as cut at its length limit
    (as a reply past max_tokens is): the answer Continue goes on from."""
    answer_id = int(found(ANSWER, html))
    db = Database(database_url)
    query = text("SELECT status FROM message WHERE id = :a")
    change = text("UPDATE message SET finish_reason = 'length' WHERE id = :a")
    try:
        for _ in range(200):
            status = await db.read(lambda s: s.connection().execute(query, {"a": answer_id}).one())
            if status[0] != "streaming":
                break
            await asyncio.sleep(0.05)
        await db.write(lambda s: s.connection().execute(change, {"a": answer_id}))
    finally:
        await db.dispose()
    return answer_id


async def test_continue_counts_against_the_addresss_quota(
    app: Litestar, database_url: str, upstream: FakeUpstream
) -> None:
    """The attack: Continue through an embed skipped the per-address quota (3 here), so one
    address went on past it with a visitor whose own count was under the limit."""
    async with Client(app=app) as client:
        page = await client.get("/embed/support")
        mine = htmx_headers(page.text)
        sent = await client.post("/embed/support/send", data={"content": "hi"}, headers=mine)
        assert sent.status_code == 200, sent.text
        other = htmx_headers((await client.get("/embed/support")).text)
        assert other != mine, "another visitor from the same address"
        second = await client.post("/embed/support/send", data={"content": "hi"}, headers=other)
        assert second.status_code == 200, second.text
        answer_id = await cut_at_its_length_limit(database_url, sent.text)
        went_on = await client.post(f"/embed/support/continue/{answer_id}", headers=mine)
        assert went_on.status_code == 200, went_on.text  # the address's third send
        answer_id = await cut_at_its_length_limit(database_url, went_on.text)
        asked = len(upstream.requests)
        refused = await client.post(f"/embed/support/continue/{answer_id}", headers=mine)
        assert refused.status_code == 429, refused.text
        assert "from your address" in refused.text
        assert len(upstream.requests) == asked, "the model is not asked"


OPEN_EMBED = """
[[embeds]]
name = "open"
configuration = "small"
allowed_origins = ["https://shop.example.com"]
show_internals = true
"""


def visible_text(html: str) -> str:
    """What a visitor reads: the page without its tags, attributes and scripts' data."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.settings(extra=EMBED + OPEN_EMBED)  # and no rate limit of the module's
async def test_visitors_see_no_internals_unless_the_embed_shows_them(
    app: Litestar, upstream: FakeUpstream
) -> None:
    """Token counts, the model's and the configuration's names are the site's business:
    an embed shows them only with `show_internals = true`."""
    upstream.set_reply("Glad to help.")
    shown = {}
    async with Client(app=app) as client:
        for name in ("support", "open"):
            headers = htmx_headers((await client.get(f"/embed/{name}")).text)
            sent = await client.post(f"/embed/{name}/send", data={"content": "hi"}, headers=headers)
            assert sent.status_code == 200, sent.text
            answer_id = found(ANSWER, sent.text)
            stream = await client.get(f"/embed/{name}/answers/{answer_id}/stream", headers=headers)
            page = await client.get(f"/embed/{name}", headers=headers)
            shown[name] = (visible_text(page.text), page.text, stream.text)
    closed, closed_html, closed_stream = shown["support"]
    assert "Everything was sent" in closed
    for internal in ("small", "tokens"):
        assert internal not in closed, internal
        assert internal not in visible_text(closed_stream), internal
    assert 'class="badge"' not in closed_html and 'class="model"' not in closed_html
    assert 'placeholder="Your message' in closed_html
    opened, opened_html, _ = shown["open"]
    assert "Everything was sent to small" in opened and "tokens for the prompt" in opened
    assert 'class="badge"' in opened_html
