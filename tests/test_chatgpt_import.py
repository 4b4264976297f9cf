"""Importing ChatGPT's `conversations.json` (DESIGN 15) through the JSON API, on both
databases: every conversation with a turn in it, its branches kept as alternatives, the
branch last shown active; the empty ones reported as skipped; malformed or oversized input
a 4xx with nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import EMBED
from webapp.chat.stored import chatgpt

pytestmark = pytest.mark.settings(rate_limit_messages=0)

IMPORT = "/api/conversations/import"


def node(
    key: str, parent: str | None, children: list[str], role: str | None, *parts: Any, **extra: Any
) -> tuple[str, dict[str, Any]]:
    message = None
    if role is not None:
        content = {"content_type": extra.pop("content_type", "text"), "parts": list(parts)}
        message = {"id": key, "author": {"role": role}, "content": content, "create_time": 1.7e9}
        message.update(extra)
    return key, {"id": key, "message": message, "parent": parent, "children": children}


def trip() -> dict[str, Any]:
    """A question answered twice (a regeneration), the second answer followed up, then
    the follow-up edited; the edit's path is the one last shown."""
    mapping = dict(
        [
            node("root", None, ["sys"], None),
            node("sys", "root", ["u1"], "system", "You are helpful."),
            node("u1", "sys", ["a1", "a1b"], "user", "Plan a trip to Rome"),
            node("a1", "u1", [], "assistant", "Go in spring."),
            node("a1b", "u1", ["tool", "u2", "u2b"], "assistant", "Go in autumn."),
            node("tool", "a1b", ["call"], "tool", "search results", content_type="code"),
            node("call", "tool", [], "assistant", "search(rome)", recipient="browser"),
            node("u2", "a1b", ["a2"], "user", "What to eat?"),
            node("a2", "u2", [], "assistant", "Carbonara."),
            node("u2b", "a1b", ["a2b"], "user", "Where to stay?", {"asset": "image"}),
            node("a2b", "u2b", ["a2c"], "assistant", "Trastevere."),
            node("a2c", "a2b", [], "assistant", "Or Monti."),
        ]
    )
    return {"title": "Rome <trip>", "create_time": 1.7e9, "mapping": mapping, "current_node": "a2c"}


def empty() -> dict[str, Any]:
    mapping = dict([node("root", None, ["s"], None), node("s", "root", [], "system", "hi")])
    return {"title": "Nothing here", "mapping": mapping, "current_node": "s"}


async def conversations(client: AsyncTestClient) -> list[dict[str, Any]]:
    response = await client.get("/api/conversations?archived=all")
    assert response.status_code == 200
    return response.json()


async def test_every_branch_kept_the_last_shown_active(client: AsyncTestClient) -> None:
    response = await client.post(IMPORT, json=[trip(), empty()])
    assert response.status_code == 201, response.text
    report = response.json()
    assert len(report["imported"]) == 1
    assert report["skipped"] == [
        {"title": "Nothing here", "reason": "nothing a person wrote or was answered"}
    ]
    cid = report["imported"][0]
    read = (await client.get(f"/api/conversations/{cid}")).json()
    assert read["kind"] == "import" and read["title"] == "Rome <trip> (imported)"
    shown = [(m["role"], m["content"]) for m in read["messages"]]
    assert shown == [
        ("user", "Plan a trip to Rome"),
        ("assistant", "Go in autumn."),
        ("user", "Where to stay?"),  # the image part left out
        ("assistant", "Trastevere.\n\nOr Monti."),  # one answer in two messages, joined
    ]
    first, second = read["messages"][0], read["messages"][2]
    assert first["alternatives"]["count"] == 2 and first["alternatives"]["index"] == 1
    assert second["alternatives"]["count"] == 2 and second["alternatives"]["index"] == 1

    # The other branches are there to switch to.
    other = first["alternatives"]["ids"][0]
    switched = await client.post(f"/api/conversations/{cid}/branch", json={"message_id": other})
    assert [m["content"] for m in switched.json()["messages"]] == [
        "Plan a trip to Rome",
        "Go in spring.",
    ]
    back = await client.post(
        f"/api/conversations/{cid}/branch", json={"message_id": second["alternatives"]["ids"][0]}
    )
    assert [m["content"] for m in back.json()["messages"]][2:] == ["What to eat?", "Carbonara."]


BAD_FILES: list[tuple[list[Any], str]] = [
    ([trip(), "not a conversation"], "conversations[1] must be an object"),
    ([trip(), {"title": "x", "mapping": []}], "conversations[1].mapping"),
    (
        [{"mapping": dict([node("a", "b", ["b"], None), node("b", "a", ["a"], None)])}],
        "",  # a loop with no root reaches nothing: reported as skipped
    ),
    (
        [{"mapping": dict([node("r", None, ["a", "a"], None), node("a", "r", [], None)])}],
        "reached twice",
    ),
    (
        [
            {
                "title": "big",
                "mapping": dict(
                    [
                        node("r", None, ["a"], "user", "x" * 1_000_001),
                        node("a", "r", [], "assistant", "ok"),
                    ]
                ),
            }
        ],
        "longer than",
    ),
    ([{}] * (chatgpt.MAX_CONVERSATIONS + 1), "at most 1,000 conversations"),
]
"""Files and what the answer says (empty: a cycle with no root reaches nothing, so the
conversation is reported skipped, not refused)."""


async def test_bad_files_store_nothing(client: AsyncTestClient) -> None:
    for body, words in BAD_FILES:
        response = await client.post(IMPORT, json=body)
        if not words:  # reported, not refused
            assert response.status_code == 201, response.text
            assert response.json()["imported"] == [] and len(response.json()["skipped"]) == 1
        else:
            assert response.status_code == 400, response.text
            assert words in response.json()["detail"]
        assert await conversations(client) == []


async def test_too_many_messages_in_all_is_refused(
    client: AsyncTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chatgpt, "MAX_NODES", 15)
    response = await client.post(IMPORT, json=[trip(), trip()])  # 12 nodes each
    assert response.status_code == 400 and "at most 15 messages" in response.json()["detail"]
    assert await conversations(client) == []
    assert (await client.post(IMPORT, json=[trip()])).status_code == 201


@pytest.mark.settings(extra=EMBED, rate_limit_messages=0, import_limit_bytes=20_000)
async def test_malformed_or_oversized_files_by_the_api_and_the_sidebar_store_nothing(
    callers: dict[str, AsyncTestClient],
) -> None:
    """The same refusals through the JSON API and the sidebar's file import: a file that
    is not JSON, a good conversation followed by a broken one (nothing of the good one
    kept), a file over the per-import bytes (the quota's, read before parsing)."""
    api, browser = callers["token"], callers["session"]
    before = await conversations(api)  # signing in opened an empty one
    padded = trip()
    padded["title"] = "x" * 30_000
    for what, raw, status, words in [
        ("not JSON", b'[{"title": "Rome", "mapping": {', 400, "not JSON"),
        ("half good", json.dumps([trip(), {"mapping": []}]).encode(), 400, "mapping"),
        ("too big", json.dumps([padded]).encode(), 400, "at most"),
    ]:
        by_api = await api.post(IMPORT, content=raw, headers={"Content-Type": "application/json"})
        assert by_api.status_code == status, (what, by_api.text)
        assert words in by_api.json()["detail"], (what, by_api.text)
        page = await browser.post(
            "/c/import", files={"file": ("conversations.json", raw, "application/json")}
        )
        assert page.status_code == status, (what, page.status_code, page.text[:200])
        assert words in page.text, (what, page.text[:300])
        assert await conversations(api) == before, what
    assert (await api.post(IMPORT, json=[trip()])).status_code == 201  # the quota still allows
