"""Summaries through the JSON API on both databases (DESIGN 14): the branch's versions in
`GET /api/conversations/{id}`, the owner's edit of the newest, `summarize` per
conversation, clear 4xx on bad input, and a JSON export and import that carry them."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.catalogs import SUMMED_TOML
from tests.factories import api_client, new_conversation
from tests.upstream import FakeUpstream
from webapp.settings import Settings

pytestmark = pytest.mark.settings(extra=SUMMED_TOML, max_message_chars=5000, rate_limit_messages=0)


async def summarized(client: AsyncTestClient) -> dict[str, Any]:
    conversation = await new_conversation(client, configuration="summed")
    base = f"/api/conversations/{conversation['id']}"
    for number in range(24):
        sent = await client.post(
            f"{base}/messages", json={"content": f"message {number}: " + "lorem ipsum " * 80}
        )
        assert sent.status_code == 201, sent.text
    shown = await client.get(base)
    assert shown.status_code == 200
    return shown.json()


async def test_summaries_are_shown_edited_and_switched_off(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    data = await summarized(client)
    base = f"/api/conversations/{data['id']}"
    summaries = data["summaries"]
    assert len(summaries) >= 2 and data["summarize"] is None
    assert set(summaries[0]) == {
        *("id", "version", "covers", "content", "model", "tokens", "created_at", "edited"),
        "fallback",
    }
    assert summaries[0]["fallback"] is False, "the replay fits: served from the cache"
    assert [s["version"] for s in summaries] == list(range(1, len(summaries) + 1))
    assert summaries[0]["covers"][0] == 3 and summaries[-1]["edited"] is False
    carried = [m["fit"]["summary"] for m in data["messages"] if m["role"] == "user"]
    assert summaries[-1]["version"] in carried

    newest, older = summaries[-1]["id"], summaries[0]["id"]
    edited = await client.patch(f"{base}/summaries/{newest}", json={"content": "Edited."})
    assert edited.status_code == 200 and edited.json()["edited"] is True
    assert (await client.get(base)).json()["summaries"][-1]["content"] == "Edited."
    for path, body, status in (
        (f"{base}/summaries/{older}", {"content": "x"}, 400),
        (f"{base}/summaries/{newest}", {"content": "  "}, 400),
        (f"{base}/summaries/{newest}", {"content": 5}, 400),
        (f"{base}/summaries/{newest}", {}, 400),
        (f"{base}/summaries/{newest}", {"content": "x" * 6000}, 400),
        (f"{base}/summaries/999999", {"content": "x"}, 404),
        (f"{base}/summaries/{2**70}", {"content": "x"}, 404),
        (f"{base}/summaries/0", {"content": "x"}, 404),
        ("/api/conversations/nope/summaries/1", {"content": "x"}, 404),
        (base, {"summarize": "yes"}, 400),
    ):
        response = await client.patch(path, json=body)
        assert response.status_code == status, (path, body, response.text)
    sent = await client.post(f"{base}/messages", json={"content": "after the edit"})
    assert sent.status_code == 201
    request = upstream.requests[-1]["body"]["messages"]
    assert request[3]["content"].endswith("\n\nEdited.")

    off = await client.patch(base, json={"summarize": False})
    assert off.status_code == 200
    assert (await client.get(base)).json()["summarize"] is False
    sent = await client.post(f"{base}/messages", json={"content": "no summary now"})
    assert sent.json()["user"]["fit"]["summary"] is None


async def test_an_export_its_import_and_the_admin_review_carry_the_summaries(
    client: AsyncTestClient, settings: Settings
) -> None:
    data = await summarized(client)
    exported = await client.get(f"/api/conversations/{data['id']}/export")
    document = json.loads(exported.content)
    assert [s["content"] for s in document["summaries"]] == [
        s["content"] for s in data["summaries"]
    ]
    imported = await client.post("/api/conversations/import", content=exported.content)
    assert imported.status_code == 201, imported.text
    again = (await client.get(f"/api/conversations/{imported.json()['id']}")).json()
    keys = ("version", "covers", "content", "model", "tokens", "edited", "fallback")
    assert [{k: s[k] for k in keys} for s in again["summaries"]] == [
        {k: s[k] for k in keys} for s in data["summaries"]
    ]
    # A summary written by the uncached fallback stays marked as such, and the review says it.
    marked = {**document, "summaries": [{**document["summaries"][0], "fallback": True}]}
    imported = await client.post("/api/conversations/import", content=json.dumps(marked))
    assert imported.status_code == 201, imported.text
    again = (await client.get(f"/api/conversations/{imported.json()['id']}")).json()
    assert [s["fallback"] for s in again["summaries"]] == [True]
    async with api_client(settings, "root", admin=True) as admin:
        review = await admin.get(f"/admin/c/{data['id']}")
        marked_review = await admin.get(f"/admin/c/{imported.json()['id']}")
    assert review.status_code == 200
    assert "Summaries of what the cut left out" in review.text
    assert html.escape(data["summaries"][-1]["content"], quote=False) in review.text
    assert "(uncached)" not in review.text
    assert marked_review.status_code == 200 and "(uncached)" in marked_review.text
    for bad in ("no", [{"version": 1}], [{"version": 1, "covers": [3, 9999], "content": "x"}]):
        broken = {**document, "summaries": bad}
        refused = await client.post("/api/conversations/import", content=json.dumps(broken))
        assert refused.status_code == 400, refused.text


async def test_the_page_opens_the_summary_from_the_cut_line_and_edits_it(
    client: AsyncTestClient,
) -> None:
    """The page as alice's token reads it (pages take the API's bearer token too)."""
    data = await summarized(client)
    browser = client
    base = f"/c/{data['id']}"
    page = await browser.get(base)
    assert page.status_code == 200
    newest, older = data["summaries"][-1], data["summaries"][0]
    carried = [m for m in data["messages"] if m["role"] == "user"][-1]["fit"]["summary"]
    assert f'data-summary="{carried}"' in page.text
    assert "The model sees a summary instead of the" in page.text
    assert 'id="summary-dialog"' in page.text
    assert html.escape(newest["content"], quote=False) in page.text
    assert "cannot reuse the model's cached copy" in page.text

    saved = await browser.post(
        f"{base}/summary/{newest['id']}",
        data={"content": "Edited on the page"},
        follow_redirects=False,
    )
    assert saved.status_code == 303
    shown = (await client.get(f"/api/conversations/{data['id']}")).json()
    assert shown["summaries"][-1]["content"] == "Edited on the page"
    for path, form in (
        (f"{base}/summary/{older['id']}", {"content": "x"}),
        (f"{base}/summary/{newest['id']}", {"content": " "}),
        (f"{base}/summaries", {"summarize": "maybe"}),
    ):
        refused = await browser.post(path, data={**form})
        assert refused.status_code == 400, (path, refused.text)

    off = await browser.post(f"{base}/summaries", data={"summarize": "off"}, follow_redirects=False)
    assert off.status_code == 303
    assert (await client.get(f"/api/conversations/{data['id']}")).json()["summarize"] is False
    assert "Turn summaries on for this conversation" in (await browser.get(base)).text
