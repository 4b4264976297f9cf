"""Each conversation on its cache, through the app (SQLite and PostgreSQL, the fake
llama.cpp over HTTP): every send of a conversation names the slot its key maps to over the
slots the server lists and asks for the prefill's progress; another conversation carries
its own key; the title call carries no slot, no key and no progress, so it never takes a
conversation's place on purpose."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import user_header
from tests.upstream import FakeUpstream
from webapp.chat.naming import ASK
from webapp.llm.affinity import CacheKeys, slot_for
from webapp.settings import Settings

SLOTS = 7


def chat_calls(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.requests if r["path"].endswith("/chat/completions")]


def is_title(body: dict[str, Any]) -> bool:
    return body["messages"][0] == {"role": "system", "content": ASK}


@pytest.mark.settings(model_titles=True)
async def test_sends_name_their_conversations_slot_and_titles_none(
    app: Litestar, settings: Settings, database_url: str, upstream: FakeUpstream
) -> None:
    upstream.set_engine("llamacpp")
    upstream.slot_count = SLOTS
    auth = await user_header(database_url, "alice")
    keys = CacheKeys(settings.secret_key)
    sent: dict[str, int] = {}
    async with AsyncTestClient(app=app) as client:
        for n in range(4):
            made = await client.post(
                "/api/conversations", json={"configuration": "small"}, headers=auth
            )
            conversation_id: str = made.json()["id"]
            for text in ("Where is the old bridge?", "And who built it?"):
                answer = await client.post(
                    f"/api/conversations/{conversation_id}/messages",
                    json={"content": f"{text} ({n})"},
                    headers={**auth, **({"Accept": "text/event-stream"} if n % 2 else {})},
                )
                assert answer.status_code == 201, answer.text
            title = await client.get(
                f"/c/{conversation_id}/title", params={"was": "x"}, headers=auth
            )
            assert title.status_code == 200
            sent[conversation_id] = n
    calls = chat_calls(upstream)
    titles = [body for body in calls if is_title(body)]
    sends = [body for body in calls if not is_title(body)]
    assert len(titles) == 4 and len(sends) == 8
    for body in titles:
        assert not {"id_slot", "prompt_cache_key", "return_progress"} & body.keys(), body
    for conversation_id, n in sent.items():
        mine = [body for body in sends if f"({n})" in body["messages"][-1]["content"]]
        assert len(mine) == 2
        slot = slot_for(keys.key(conversation_id), SLOTS)
        assert [body["id_slot"] for body in mine] == [slot, slot]
        assert not any("prompt_cache_key" in body for body in mine), "llama.cpp takes the slot"
        # The app streams every answer from the engine, whether its caller streams or not.
        assert all(body.get("return_progress") is True for body in mine)
    assert len({body["id_slot"] for body in sends}) > 1, "conversations spread over slots"
    assert len([r for r in upstream.requests if r["path"] == "/slots"]) == 1
