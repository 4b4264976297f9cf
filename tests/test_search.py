"""Search (docs/design.md section 9) through the real app on both databases: the index follows
every write, finds only the caller's own messages, and no typed text can break it."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import bearer_header, make_user, new_conversation
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.settings(max_message_chars=2000)
"""As the JSON API's tests: `client` is alice's, on both databases."""


async def send(client: AsyncTestClient, conversation_id: str, content: str) -> dict[str, Any]:
    response = await client.post(
        f"/api/conversations/{conversation_id}/messages", json={"content": content}
    )
    assert response.status_code == 201, response.text
    return response.json()


async def search(client: AsyncTestClient, query: str) -> list[dict[str, Any]]:
    response = await client.get("/api/search", params={"q": query})
    assert response.status_code == 200, response.text
    return response.json()["results"]


async def test_finds_questions_and_answers_by_word_prefix_with_marked_snippets(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    trips = await new_conversation(client, title="Trips")
    upstream.set_reply("Seven of them.")
    await send(client, trips["id"], "Which bridges cross the Danube in Budapest?")
    upstream.set_reply("The Chain Bridge is the oldest of the Budapest bridges.")
    answer = (await send(client, trips["id"], "And the oldest?"))["assistant"]
    upstream.set_reply("Nine minutes.")
    other = await new_conversation(client, title="Cooking")
    await send(client, other["id"], "How long do I boil an egg?")

    hits = await search(client, "budap")
    assert {hit["conversation_id"] for hit in hits} == {trips["id"]}
    assert answer["id"] in {hit["message_id"] for hit in hits}  # the answer was indexed
    keys = {"conversation_id", "message_id", "title", "snippet", "kind", "archived"}
    assert all(set(hit) == keys for hit in hits)
    assert all(hit["title"] == "Trips" for hit in hits)
    assert all("<mark>Budapest</mark>" in hit["snippet"] for hit in hits), hits

    # Every word must be there.
    both = await search(client, "chain budapest")
    assert [hit["message_id"] for hit in both] == [answer["id"]]
    assert await search(client, "chain egg") == []
    # Case does not matter.
    assert [hit["message_id"] for hit in await search(client, "BOIL")] != []


async def test_only_the_callers_own_conversations(
    client: AsyncTestClient, database_url: str, upstream: FakeUpstream
) -> None:
    mine = await new_conversation(client)
    upstream.set_reply("Oranges.")
    await send(client, mine["id"], "secret marmalade recipe")
    bob = await make_user(database_url, "bob")
    response = await client.get(
        "/api/search", params={"q": "marmalade"}, headers=bearer_header(bob)
    )
    assert response.status_code == 200 and response.json() == {"results": []}
    assert len(await search(client, "marmalade")) == 1


async def test_the_index_follows_deletes_and_renames(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    upstream.set_reply("They are slow.")
    conversation = await new_conversation(client, title="Old name")
    await send(client, conversation["id"], "zeppelin flights over the lake")
    await client.patch(f"/api/conversations/{conversation['id']}", json={"title": "Airships"})
    assert [hit["title"] for hit in await search(client, "zeppelin")] == ["Airships"]
    assert (await client.delete(f"/api/conversations/{conversation['id']}")).status_code == 204
    assert await search(client, "zeppelin") == []


async def test_snippets_are_escaped_text(client: AsyncTestClient, upstream: FakeUpstream) -> None:
    upstream.set_reply("Noted.")
    conversation = await new_conversation(client)
    await send(client, conversation["id"], "<script>alert('walrus')</script> & <b>walrus</b>")
    (hit,) = await search(client, "walrus")
    assert "<script" not in hit["snippet"] and "<b>" not in hit["snippet"]
    assert "&amp;" in hit["snippet"]  # (PostgreSQL's snippet leaves tag-like text out)
    assert "<mark>walrus</mark>" in hit["snippet"]


@pytest.mark.parametrize(
    "params",
    [{}, {"q": ""}, {"q": "   "}, {"q": "?!*\"'()"}, {"q": "x" * 201}],
)
async def test_a_search_with_nothing_to_find_is_a_clear_400(
    client: AsyncTestClient, params: dict[str, str]
) -> None:
    response = await client.get("/api/search", params=params)
    assert response.status_code == 400, response.text
    assert response.json()["detail"]


@pytest.mark.parametrize(
    "query", ['"unbalanced', "NEAR(a b", "a AND OR b", "col:umn", "x*", "-minus", "a & | ! b"]
)
async def test_query_syntax_typed_by_a_person_is_taken_as_words(
    client: AsyncTestClient, query: str
) -> None:
    conversation = await new_conversation(client)
    await send(client, conversation["id"], "unbalanced minus column near and or b x a")
    response = await client.get("/api/search", params={"q": query})
    assert response.status_code == 200, response.text
