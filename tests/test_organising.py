"""Organising conversations through the JSON API (DESIGN 15), on both databases: pin,
archive, tags, the filtered list, bulk actions (all or nothing), search narrowed by tag
and saying each hit's kind; bad input a clear 4xx that changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import new_conversation, user_header

pytestmark = pytest.mark.settings(rate_limit_messages=0)


async def patch(client: AsyncTestClient, cid: str, **body: Any) -> dict[str, Any]:
    response = await client.patch(f"/api/conversations/{cid}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def listed(client: AsyncTestClient, query: str = "") -> list[str]:
    response = await client.get(f"/api/conversations{query}")
    assert response.status_code == 200, response.text
    return [c["id"] for c in response.json()]


async def test_pin_archive_and_tag(client: AsyncTestClient) -> None:
    first, second, third = [(await new_conversation(client))["id"] for _ in range(3)]
    assert await listed(client) == [third, second, first]  # newest first

    pinned = await patch(client, first, pinned=True, tags=["Work", " trips  abroad", "work"])
    assert pinned["pinned"] is True and pinned["archived"] is False
    assert pinned["tags"] == ["trips abroad", "work"]  # cleaned, once each
    assert pinned["kind"] == "original"
    assert await listed(client) == [first, third, second]  # pinned on top

    await patch(client, second, archived=True, tags=["work"])
    assert await listed(client) == [first, third]
    assert await listed(client, "?archived=true") == [second]
    assert await listed(client, "?archived=all") == [first, third, second]
    assert await listed(client, "?tag=WORK") == [first]
    assert await listed(client, "?tag=work&archived=all") == [first, second]
    assert await listed(client, "?archived=&tag=") == [first, third]  # empty: the defaults

    read = (await client.get(f"/api/conversations/{first}")).json()
    assert read["pinned"] is True and read["tags"] == ["trips abroad", "work"]
    one = [c for c in (await client.get("/api/conversations")).json() if c["id"] == first]
    assert one[0]["tags"] == ["trips abroad", "work"]

    unpinned = await patch(client, first, pinned=False, tags=["work"])  # one tag removed
    assert unpinned["pinned"] is False and unpinned["tags"] == ["work"]
    assert await listed(client, "?tag=trips abroad") == []
    assert (await patch(client, second, archived=False))["archived"] is False
    assert await listed(client) == [third, second, first]  # organising is not a use


async def test_bad_tags_are_refused_and_change_nothing(client: AsyncTestClient) -> None:
    cid = (await new_conversation(client))["id"]
    await patch(client, cid, tags=["keep"])
    for body, words in [
        ({"tags": ["x" * 33]}, "at most 32 characters"),
        ({"tags": [f"t{n}" for n in range(11)]}, "at most 10 tags"),
        ({"tags": ["   "]}, "empty"),
        ({"tags": ["a\x00b"]}, "NUL"),
        ({"tags": ["ok"], "title": ""}, "title is empty"),
        ({"pinned": True, "configuration": "nope"}, "unknown configuration"),
        ({}, "nothing to change"),
    ]:
        response = await client.patch(f"/api/conversations/{cid}", json=body)
        assert response.status_code == 400, (body, response.text)
        assert words in response.json()["detail"], response.text
    response = await client.patch(f"/api/conversations/{cid}", json={"tags": "not a list"})
    assert response.status_code == 400
    after = (await client.get(f"/api/conversations/{cid}")).json()
    assert after["tags"] == ["keep"] and after["pinned"] is False
    assert (await client.get("/api/conversations?tag=" + "x" * 40)).status_code == 400
    assert (await client.get("/api/conversations?archived=maybe")).status_code == 400


async def test_markup_in_a_tag_is_kept_as_text(client: AsyncTestClient) -> None:
    cid = (await new_conversation(client))["id"]
    tagged = await patch(client, cid, tags=["<b>x</b>"])
    assert tagged["tags"] == ["<b>x</b>"]
    assert await listed(client, "?tag=%3Cb%3Ex%3C/b%3E") == [cid]


async def test_bulk_is_all_or_nothing(client: AsyncTestClient, database_url: str) -> None:
    mine = [(await new_conversation(client))["id"] for _ in range(3)]
    bob = await user_header(database_url, "bob")
    response = await client.post("/api/conversations", json={}, headers=bob)
    theirs = response.json()["id"]

    for ids in ([mine[0], theirs], [mine[0], "no-such-id"]):
        for action in ("archive", "delete"):
            refused = await client.post(
                "/api/conversations/bulk", json={"ids": ids, "action": action}
            )
            assert refused.status_code == 404, refused.text
    assert set(await listed(client)) == set(mine)  # nothing archived, nothing deleted
    assert (await client.get(f"/api/conversations/{theirs}", headers=bob)).status_code == 200

    for body in (
        {"ids": [], "action": "archive"},
        {"ids": mine, "action": "explode"},
        {"ids": ["x"] * 501 + [str(n) for n in range(501)], "action": "archive"},
        {"action": "archive"},
    ):
        assert (await client.post("/api/conversations/bulk", json=body)).status_code == 400

    done = await client.post("/api/conversations/bulk", json={"ids": mine[:2], "action": "archive"})
    assert done.status_code == 200 and done.json() == {"action": "archive", "count": 2}
    assert await listed(client) == [mine[2]]
    assert set(await listed(client, "?archived=true")) == set(mine[:2])
    back = await client.post(
        "/api/conversations/bulk", json={"ids": [mine[0]], "action": "unarchive"}
    )
    assert back.status_code == 200
    assert set(await listed(client)) == {mine[0], mine[2]}
    gone = await client.post("/api/conversations/bulk", json={"ids": mine, "action": "delete"})
    assert gone.status_code == 200 and gone.json()["count"] == 3
    assert await listed(client, "?archived=all") == []
    assert (await client.get(f"/api/conversations/{mine[0]}")).status_code == 404


async def test_another_users_conversation_is_not_found(
    client: AsyncTestClient, database_url: str
) -> None:
    bob = await user_header(database_url, "bob")
    theirs = (await client.post("/api/conversations", json={}, headers=bob)).json()["id"]
    response = await client.patch(f"/api/conversations/{theirs}", json={"pinned": True})
    assert response.status_code == 404
    kept = (await client.get(f"/api/conversations/{theirs}", headers=bob)).json()
    assert kept["pinned"] is False


async def test_search_narrowed_by_tag_says_kind_and_archived(client: AsyncTestClient) -> None:
    cid = (await new_conversation(client))["id"]
    sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "zebra one"})
    assert sent.status_code == 201, sent.text
    user_id = sent.json()["user"]["id"]
    fork = await client.post(f"/api/conversations/{cid}/fork", json={"message_id": user_id})
    assert fork.status_code == 201 and fork.json()["kind"] == "fork"
    fork_id = fork.json()["id"]
    await patch(client, cid, tags=["animals"], archived=True)

    hits = (await client.get("/api/search?q=zebra")).json()["results"]
    kinds = {(hit["conversation_id"], hit["kind"], hit["archived"]) for hit in hits}
    assert kinds == {(cid, "original", True), (fork_id, "fork", False)}
    narrowed = (await client.get("/api/search?q=zebra&tag=Animals")).json()["results"]
    assert {hit["conversation_id"] for hit in narrowed} == {cid}
    assert (await client.get("/api/search?q=zebra&tag=none")).json()["results"] == []
    assert len((await client.get("/api/search?q=zebra&tag=")).json()["results"]) == len(hits)
    assert (await client.get("/api/search?q=zebra&tag=" + "y" * 40)).status_code == 400


async def test_the_pages_refuse_what_is_not_yours_and_change_nothing(
    client: AsyncTestClient, database_url: str
) -> None:
    """The forms of /organise and /c/{id}/organise (a token reaches the pages too)."""
    mine = (await new_conversation(client))["id"]
    bob = await user_header(database_url, "bob")
    theirs = (await client.post("/api/conversations", json={}, headers=bob)).json()["id"]

    bulk = {"ids": [mine, theirs], "action": "archive"}
    assert (await client.post("/organise/bulk", data=bulk)).status_code == 404
    confirm = {"ids": [mine, theirs], "action": "delete"}
    assert (await client.post("/organise/bulk", data=confirm)).status_code == 404
    assert (await client.get(f"/c/{theirs}/organise")).status_code == 404
    for change in ({"change": "pin"}, {"change": "add_tag", "tag": "mine now"}):
        assert (await client.post(f"/c/{theirs}/organise", data=change)).status_code == 404
    too_long = {"change": "add_tag", "tag": "x" * 33}
    assert (await client.post(f"/c/{mine}/organise", data=too_long)).status_code == 400
    assert (await client.post(f"/c/{mine}/organise", data={"change": "x"})).status_code == 400

    assert set(await listed(client)) == {mine}
    kept = (await client.get(f"/api/conversations/{theirs}", headers=bob)).json()
    assert kept["pinned"] is False and kept["tags"] == [] and kept["archived"] is False
    assert (await client.get(f"/api/conversations/{mine}")).json()["tags"] == []

    # The confirmation names what would go; nothing goes until it is confirmed.
    asked = await client.post("/organise/bulk", data={"ids": [mine], "action": "delete"})
    assert asked.status_code == 200 and "Delete for good" in asked.text
    assert await listed(client) == [mine]
    done = await client.post(
        "/organise/bulk",
        data={"ids": [mine], "action": "delete", "confirmed": "yes"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and await listed(client) == []
