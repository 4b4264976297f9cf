"""Titles the conversation's model writes after the first answer (SQLite and PostgreSQL,
the fake upstream over HTTP): one short call, off the send path, cleaned up; a rename
made before it lands is kept; a failed call keeps the clean cut of the first message."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import user_header
from tests.upstream import FakeUpstream
from webapp.chat.naming import ASK, TITLE_TOKENS, clean_model_title
from webapp.chat.stored.titles import title_from

FIRST = "I would like to spend a week somewhere warm in April, what would you suggest for me"


def chat_calls(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.requests if r["path"].endswith("/chat/completions")]


def test_a_reply_is_cleaned_to_a_title() -> None:
    assert clean_model_title('Title: "Porto in spring."\nBecause...') == "Porto in spring"
    assert clean_model_title("**A week in the sun**") == "A week in the sun"
    assert clean_model_title("  \n\n") == ""
    assert len(clean_model_title("word " * 40)) <= 60


@pytest.mark.settings(model_titles=True)
async def test_the_model_names_the_conversation_after_its_first_answer(
    app: Litestar, database_url: str, upstream: FakeUpstream
) -> None:
    auth = await user_header(database_url, "alice")
    cut = title_from(FIRST)
    async with AsyncTestClient(app=app) as client:

        async def first_turn(configuration: str) -> str:
            made = await client.post(
                "/api/conversations", json={"configuration": configuration}, headers=auth
            )
            conversation_id: str = made.json()["id"]
            sent = await client.post(
                f"/api/conversations/{conversation_id}/messages",
                json={"content": FIRST},
                headers=auth,
            )
            assert sent.status_code == 201, sent.text
            return conversation_id

        async def title_once_done(conversation_id: str, was: str) -> str:
            page = await client.get(
                f"/c/{conversation_id}/title", params={"was": was}, headers=auth
            )
            assert page.status_code == 200, page.text
            assert f'id="conv-{conversation_id}"' in page.text  # the sidebar's link too
            stored = await client.get(f"/api/conversations/{conversation_id}", headers=auth)
            title: str = stored.json()["title"]
            assert f'value="{title}"' in page.text
            return title

        upstream.set_reply('Title: "Porto in spring."')
        named = await first_turn("small")
        assert await title_once_done(named, cut) == "Porto in spring"
        calls = chat_calls(upstream)
        assert len(calls) == 2, "one call for the answer, one for the title"
        assert calls[1]["max_tokens"] == TITLE_TOKENS and not calls[1].get("stream")
        assert calls[1]["messages"][0] == {"role": "system", "content": ASK}
        assert FIRST in calls[1]["messages"][1]["content"]
        # Later turns never ask again.
        more = await client.post(
            f"/api/conversations/{named}/messages", json={"content": "and May?"}, headers=auth
        )
        assert more.status_code == 201 and len(chat_calls(upstream)) == 3
        # The conversation's sends carry its key (derived, not its id); the title none.
        key = calls[0]["prompt_cache_key"]
        assert key and named not in key and chat_calls(upstream)[2]["prompt_cache_key"] == key
        assert "prompt_cache_key" not in calls[1]

        # A rename made while the title call is on its way is kept.
        upstream.stall(0.5, count=2)
        renamed = await first_turn("small")
        done = await client.patch(
            f"/api/conversations/{renamed}", json={"title": "My own name"}, headers=auth
        )
        assert done.status_code == 200, done.text
        assert await title_once_done(renamed, "My own name") == "My own name"
        assert len(chat_calls(upstream)) == 5, "the title call was made, and lost to the rename"

        # The conversation's model cannot be reached (the answer came from its fallback):
        # the clean cut of the first message stays.
        upstream.set_reply("Sunny places")
        unnamed = await first_turn("unreachable-then-medium")
        assert await title_once_done(unnamed, cut) == cut
