"""The admin review reads only what a page shows (issue 43): a page of turns, and of each
trimmed send on it a page of its left-out spans, on SQLite and PostgreSQL.

On main the review of an import carrying the most left-out spans an import may hold
(~100,000) read the whole history and drew every span: 4 s, `/healthz` held 3 s. Here
it is watched with a ticker on the app's loop (a request behind it waits as long), and
each page of a smaller conversation is held against the whole review."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.attacks import spans_import
from tests.factories import api_client, settings_on
from tests.looplag import watching_app
from webapp.admin import queries
from webapp.admin.listing import REVIEW_PER_PAGE, SPANS_PER_PAGE, ReviewPaging
from webapp.db import Database
from webapp.errors import NotFound
from webapp.settings import Settings

STALL = 0.1


@pytest.fixture
async def admin(database_url: str) -> AsyncIterator[tuple[AsyncTestClient, Settings]]:
    settings = settings_on(database_url, None)
    async with api_client(settings, "root", admin=True) as client:
        yield client, settings


async def imported(client: AsyncTestClient, export: dict[str, Any]) -> str:
    response = await client.post("/api/conversations/import", json=export)
    assert response.status_code == 201, response.text[:300]
    conversation_id: str = response.json()["id"]
    return conversation_id


async def test_the_review_of_the_most_spans_an_import_holds_does_not_stall(
    admin: tuple[AsyncTestClient, Settings],
) -> None:
    client, _ = admin
    conversation_id = await imported(client, spans_import(messages=4000, senders=50))
    path = f"/admin/c/{conversation_id}"
    assert (await client.get(path)).status_code == 200  # templates compiled, caches warm
    pages = [path, f"{path}?spans=2", f"{path}?page=40", f"{path}?page=40&spans=50"]
    for url in pages:
        with watching_app(client) as lag:
            shown = await client.get(url)
            health = await client.get("/healthz")
        assert shown.status_code == 200 and health.status_code == 200, url
        assert lag.ticks > 0
        assert lag.busiest < STALL, (
            f"{url} held the app's loop for {lag.busiest:.2f} s of CPU"
            f" ({lag.worst:.2f} s of wall time)"
        )
    last = (await client.get(f"{path}?page=40")).text
    assert last.count('class="message user"') == REVIEW_PER_PAGE
    assert "Later spans" in last and f"of {SPANS_PER_PAGE * 10:,}" not in last
    assert f"stored spans 1–{SPANS_PER_PAGE:,} of 1,950" in last
    second = (await client.get(f"{path}?page=40&spans=2")).text
    assert f"stored spans {SPANS_PER_PAGE + 1:,}–{2 * SPANS_PER_PAGE:,} of 1,950" in second
    assert "Earlier spans" in second
    assert (await client.get(f"{path}?page=41")).status_code == 404
    for bad in ("page=0", "per_page=201", "spans=x"):
        response = await client.get(f"{path}?{bad}")
        assert response.status_code == 400, bad


def random_export(chooser: random.Random, turns: int) -> dict[str, Any]:
    """A conversation whose sends left out overlapping, random spans (some answers failed,
    so some turns inside spans were never sendable)."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        seq = 2 * turn + 1
        user: dict[str, Any] = {"seq": seq, "role": "user", "content": f"question {turn}"}
        if turn > 2 and chooser.random() < 0.6:
            spans: list[list[int]] = []
            at = 1
            while at < seq - 1 and len(spans) < seq // 2 - 1:
                first = chooser.randint(at, seq - 1)
                last = chooser.randint(first, min(seq - 1, first + 6))
                spans.append([first, last])
                at = last + 2
            user["dropped_turns"] = len(spans)
            user["fit"] = {"model": "m", "left_out": spans}
        failed = chooser.random() < 0.1
        answer = {
            "seq": seq + 1,
            "role": "assistant",
            "content": "" if failed else f"answer {turn}",
            "status": "failed" if failed else "complete",
        }
        messages += [user, answer]
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Random spans", "configuration": "demo"},
        "messages": messages,
    }


async def test_each_page_is_the_whole_review_in_part(
    admin: tuple[AsyncTestClient, Settings],
) -> None:
    """Every page of turns, with every page of spans, says what the whole review says of
    the turns it shows: the messages, the sends, their spans, who left each turn out."""
    client, settings = admin
    conversation_id = await imported(client, random_export(random.Random(43), 60))
    db = Database(settings.database_url)
    try:
        whole = await db.read(queries.review, conversation_id)
        assert whole.trimmed and whole.covering
        by_whole = whole.left_out_by()
        full_spans = {turn.seq: turn.spans for turn in whole.trimmed}
        per_page, spans_per_page = 7, 3
        pages = -(-whole.turns // per_page)
        seen: list[int] = []
        for page in range(1, pages + 1):
            for spans in (1, 2, 5):
                paging = ReviewPaging(page, per_page, spans, spans_per_page)
                part = await db.read(queries.review, conversation_id, paging)
                assert part.pages == pages and part.stored_messages == len(whole.messages)
                assert part.turn_numbers == whole.turn_numbers
                shown = [row.seq for row in part.messages]
                if spans == 1:
                    seen += shown
                for turn in part.trimmed:
                    start = (spans - 1) * spans_per_page
                    assert turn.spans == full_spans[turn.seq][start : start + spans_per_page]
                    assert turn.spans_total == len(full_spans[turn.seq])
                by_part = part.left_out_by()
                for seq in shown:
                    assert by_part.get(seq) == by_whole.get(seq), (page, seq)
        assert seen == [row.seq for row in whole.messages], "the pages hold every row once"
        with pytest.raises(NotFound):
            await db.read(queries.review, conversation_id, ReviewPaging(pages + 1, per_page))
    finally:
        await db.dispose()
