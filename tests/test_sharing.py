"""Read-only links (DESIGN 15), on both databases: made, listed and revoked through the
API; the page `/s/{token}` served without sign-in, `noindex`, frozen at the moment of
sharing, showing neither another conversation, nor the owner's name, nor an attached
file unless the owner chose; a revoked, unknown or another owner's link is a 404."""

from __future__ import annotations

from typing import Any

import pytest
from httpx import Response
from litestar.testing import AsyncTestClient

from tests.factories import new_conversation, user_header
from webapp.chat.stored.shares import token_hash

pytestmark = pytest.mark.settings(rate_limit_messages=0)

SECRET_FILE = "the launch code is 0000"


def exported(turns: list[tuple[str, str]], dropped_at: int | None = None) -> dict[str, Any]:
    """A JSON export of `turns`; with `dropped_at`, that user row (by seq) left one turn
    out when it was sent (a cut line on the page)."""
    messages: list[dict[str, Any]] = []
    for question, answer in turns:
        messages.append({"seq": len(messages) + 1, "role": "user", "content": question})
        messages.append({"seq": len(messages) + 1, "role": "assistant", "content": answer})
    if dropped_at is not None:
        messages[dropped_at - 1].update(dropped_turns=1, fit={"left_out": [[1, 2]]})
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Plans <b>bold</b>"},
        "messages": messages,
    }


async def anonymously(client: AsyncTestClient, url: str) -> Response:
    """`url` fetched with no credentials at all (the client's token taken off for it)."""
    token = client.headers.pop("Authorization")
    try:
        return await client.get(url)
    finally:
        client.headers["Authorization"] = token


async def share(client: AsyncTestClient, cid: str, **body: Any) -> dict[str, Any]:
    response = await client.post(f"/api/conversations/{cid}/share", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_link_shows_the_branch_as_shared_without_sign_in(client: AsyncTestClient) -> None:
    turns = [("first question", "first answer"), ("second question", "**second** answer")]
    imported = await client.post("/api/conversations/import", json=exported(turns, dropped_at=3))
    assert imported.status_code == 201, imported.text
    cid = imported.json()["id"]
    other = (await new_conversation(client))["id"]
    sent = await client.post(f"/api/conversations/{other}/messages", json={"content": "elsewhere"})
    assert sent.status_code == 201

    link = await share(client, cid)
    assert set(link) >= {"id", "url"} and link["url"].startswith("/s/")
    assert link["show_owner"] is False and link["with_attachments"] is False

    page = await anonymously(client, link["url"])  # no session, no token
    assert page.status_code == 200, page.text
    assert "noindex" in page.headers["x-robots-tag"]
    assert '<meta name="robots" content="noindex, nofollow">' in page.text
    html = page.text
    for words in ("first question", "first answer", "second question", "<strong>second</strong>"):
        assert words in html
    assert "Plans &lt;b&gt;bold&lt;/b&gt;" in html  # the title escaped
    assert "✂" in html and "1 earlier turn was not sent" in html  # the cut line
    assert "elsewhere" not in html and "alice" not in html
    assert "<form" not in html and "<button" not in html  # no controls

    # Later sends are not shown: the link is the conversation as it was.
    later = await client.post(f"/api/conversations/{cid}/messages", json={"content": "later one"})
    assert later.status_code == 201
    assert "later one" not in (await anonymously(client, link["url"])).text


async def test_owner_name_and_attachments_only_when_chosen(client: AsyncTestClient) -> None:
    cid = (await new_conversation(client))["id"]
    sent = await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": "read this", "attachment": {"name": "notes.txt", "text": SECRET_FILE}},
    )
    assert sent.status_code == 201, sent.text

    plain = (await anonymously(client, (await share(client, cid))["url"])).text
    assert "read this" in plain and "A file was attached; it is not shared." in plain
    # Not even where the answer quotes it (the fake model echoes the message).
    assert SECRET_FILE not in plain and "alice" not in plain

    chosen = await share(client, cid, show_owner=True, with_attachments=True)
    assert chosen["show_owner"] is True and chosen["with_attachments"] is True
    full = (await anonymously(client, chosen["url"])).text
    assert SECRET_FILE in full and "shared by alice" in full


async def test_listed_revoked_and_never_anothers(
    client: AsyncTestClient, database_url: str
) -> None:
    cid = (await new_conversation(client))["id"]
    assert (await client.post(f"/api/conversations/{cid}/share")).status_code == 400  # empty
    await client.post(f"/api/conversations/{cid}/messages", json={"content": "hello there"})
    link = await share(client, cid)
    listed = (await client.get("/api/shares")).json()
    assert [s["id"] for s in listed] == [link["id"]] and "url" not in listed[0]

    bob = await user_header(database_url, "bob")
    assert (await client.get("/api/shares", headers=bob)).json() == []
    assert (await client.delete(f"/api/shares/{link['id']}", headers=bob)).status_code == 404
    theirs = (await client.post("/api/conversations", json={}, headers=bob)).json()["id"]
    assert (await client.post(f"/api/conversations/{theirs}/share")).status_code == 404
    assert (await anonymously(client, link["url"])).status_code == 200  # bob revoked nothing

    assert (await client.delete(f"/api/shares/{link['id']}")).status_code == 204
    assert (await anonymously(client, link["url"])).status_code == 404
    assert (await client.delete(f"/api/shares/{link['id']}")).status_code == 404
    assert (await client.get("/api/shares")).json() == []
    for unknown in ("/s/" + "A" * 43, "/s/short", "/s/" + token_hash("x")):
        assert (await anonymously(client, unknown)).status_code == 404

    again = await share(client, cid)
    assert (await client.delete(f"/api/conversations/{cid}")).status_code == 204
    assert (
        await anonymously(client, again["url"])
    ).status_code == 404  # gone with its conversation


async def test_the_owner_pages_refuse_anothers_conversation_and_link(
    client: AsyncTestClient, database_url: str
) -> None:
    bob = await user_header(database_url, "bob")
    theirs = (await client.post("/api/conversations", json={}, headers=bob)).json()["id"]
    sent = await client.post(
        f"/api/conversations/{theirs}/messages", json={"content": "bob's"}, headers=bob
    )
    assert sent.status_code == 201
    link = (await client.post(f"/api/conversations/{theirs}/share", headers=bob)).json()

    assert (await client.get(f"/c/{theirs}/share")).status_code == 404
    assert (await client.post(f"/c/{theirs}/share", data={})).status_code == 404
    assert (await client.post(f"/shares/{link['id']}/revoke", data={})).status_code == 404
    assert (await anonymously(client, link["url"])).status_code == 200
    assert "bob's" not in (await client.get("/settings/shares")).text
    assert (await client.get("/api/shares", headers=bob)).json()[0]["id"] == link["id"]
