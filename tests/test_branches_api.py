"""The branch routes of the JSON API (docs/design.md section 8) over HTTP, on both databases:
every route, and every bad input answered with a clear 4xx, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import new_conversation, parse_sse, user_header

pytestmark = pytest.mark.settings(rate_limit_messages=0)


async def send(client: AsyncTestClient, cid: str, content: str, **extra: Any) -> dict[str, Any]:
    response = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": content, **extra}
    )
    assert response.status_code == 201, response.text
    return response.json()


async def shown(client: AsyncTestClient, cid: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/conversations/{cid}")
    assert response.status_code == 200, response.text
    return response.json()["messages"]


async def test_edit_regenerate_branch_and_fork(client: AsyncTestClient) -> None:
    cid = (await new_conversation(client))["id"]
    one = await send(client, cid, "first question")
    two = await send(client, cid, "second question")
    edited = await send(client, cid, "second, put better", edit_of=two["user"]["id"])
    assert edited["user"]["content"] == "second, put better"
    assert edited["user"]["seq"] == 5 and edited["user"]["dropped_turns"] == 0
    messages = await shown(client, cid)
    assert [m["id"] for m in messages] == [
        one["user"]["id"],
        one["assistant"]["id"],
        edited["user"]["id"],
        edited["assistant"]["id"],
    ]
    assert messages[0]["alternatives"] is None and messages[1]["alternatives"] is None
    assert messages[2]["alternatives"] == {
        "index": 1,
        "count": 2,
        "ids": [two["user"]["id"], edited["user"]["id"]],
    }

    url = f"/api/conversations/{cid}/messages/{edited['user']['id']}/regenerate"
    again = await client.post(url)
    assert again.status_code == 201, again.text
    regenerated = again.json()
    assert regenerated["user"]["content"] == "second, put better"
    assert regenerated["assistant"]["status"] == "complete"
    messages = await shown(client, cid)
    assert messages[2]["alternatives"]["count"] == 3 and messages[2]["alternatives"]["index"] == 2

    streamed = await client.post(url, headers={"Accept": "text/event-stream"})
    assert streamed.status_code == 201
    events = parse_sse(streamed.text)
    assert events[0][0] == "fit" and events[-1][0] == "done"

    switched = await client.post(
        f"/api/conversations/{cid}/branch", json={"message_id": two["assistant"]["id"]}
    )
    assert switched.status_code == 200, switched.text
    assert [m["id"] for m in switched.json()["messages"]][2:] == [
        two["user"]["id"],
        two["assistant"]["id"],
    ]
    assert switched.json()["messages"][2]["alternatives"]["index"] == 0
    # The next send continues the branch shown.
    three = await send(client, cid, "third")
    assert [m["id"] for m in await shown(client, cid)][2:] == [
        two["user"]["id"],
        two["assistant"]["id"],
        three["user"]["id"],
        three["assistant"]["id"],
    ]
    assert three["user"]["dropped_turns"] == 0

    forked = await client.post(
        f"/api/conversations/{cid}/fork", json={"message_id": two["user"]["id"]}
    )
    assert forked.status_code == 201, forked.text
    fork = forked.json()
    assert fork["id"] != cid and fork["configuration"] == "small"
    assert [m["seq"] for m in fork["messages"]] == [1, 2, 3, 4]
    assert [m["content"] for m in fork["messages"]] == [
        "first question",
        one["assistant"]["content"],
        "second question",
        two["assistant"]["content"],
    ]
    assert fork["messages"][2]["fit"] == two["user"]["fit"]
    assert any(c["id"] == fork["id"] for c in (await client.get("/api/conversations")).json())


async def test_bad_input_is_a_clear_4xx(client: AsyncTestClient, database_url: str) -> None:
    cid = (await new_conversation(client))["id"]
    turn = await send(client, cid, "hello")
    other = (await new_conversation(client))["id"]
    elsewhere = await send(client, other, "elsewhere")
    user_id, answer_id = turn["user"]["id"], turn["assistant"]["id"]
    base = f"/api/conversations/{cid}"

    for bad in (0, -5, 10**9, 2**63, 2**64 + 1, elsewhere["user"]["id"]):
        response = await client.post(f"{base}/messages", json={"content": "x", "edit_of": bad})
        assert response.status_code in (400, 404), (bad, response.text)
        for route in ("branch", "fork"):
            response = await client.post(f"{base}/{route}", json={"message_id": bad})
            assert response.status_code in (400, 404), (route, bad, response.text)
        response = await client.post(f"{base}/messages/{bad}/regenerate")
        assert response.status_code in (400, 404), (bad, response.text)
    bodies: tuple[object, ...] = (
        {},
        {"message_id": "one"},
        {"message_id": None},
        {"message_id": 1.5},
        [],
    )
    for body in bodies:
        for route in ("branch", "fork"):
            response = await client.post(f"{base}/{route}", json=body)
            assert response.status_code == 400, (route, body, response.text)
    for edit_of in ("one", 1.5, [1]):
        response = await client.post(f"{base}/messages", json={"content": "x", "edit_of": edit_of})
        assert response.status_code == 400, (edit_of, response.text)
    response = await client.post(
        f"{base}/branch", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400

    response = await client.post(f"{base}/messages", json={"content": "x", "edit_of": answer_id})
    assert response.status_code == 400 and "user's message" in response.text
    response = await client.post(f"{base}/messages/{answer_id}/regenerate")
    assert response.status_code == 400 and "user's message" in response.text
    response = await client.post(f"{base}/messages", json={"content": "  ", "edit_of": user_id})
    assert response.status_code == 400

    # Another user's conversation and messages are not found, never shown.
    mallory = await user_header(database_url, "mallory")
    attempts: tuple[tuple[str, str, dict[str, object] | None], ...] = (
        ("post", f"{base}/messages", {"content": "x", "edit_of": user_id}),
        ("post", f"{base}/messages/{user_id}/regenerate", None),
        ("post", f"{base}/branch", {"message_id": user_id}),
        ("post", f"{base}/fork", {"message_id": user_id}),
    )
    for method, url, body in attempts:
        response = await getattr(client, method)(url, json=body, headers=mallory)
        assert response.status_code == 404, (url, response.text)
    mine = (await new_conversation(client))["id"]
    for route in ("branch", "fork"):
        response = await client.post(
            f"/api/conversations/{mine}/{route}", json={"message_id": user_id}
        )
        assert response.status_code == 404, "a message of another conversation"
    response = await client.post("/api/conversations/nope/fork", json={"message_id": user_id})
    assert response.status_code == 404
    # Nothing changed on the way.
    assert [m["id"] for m in await shown(client, cid)] == [user_id, answer_id]


async def test_page_routes_refuse_bad_ids(client: AsyncTestClient) -> None:
    cid = (await new_conversation(client))["id"]
    turn = await send(client, cid, "hello")
    user_id, answer_id = turn["user"]["id"], turn["assistant"]["id"]
    headers = {"hx-request": "true"}
    for bad in (0, 10**9, 2**63, 2**80):
        for route in ("regenerate", "retry", "branch", "fork"):
            response = await client.post(f"/c/{cid}/{route}/{bad}", headers=headers)
            assert response.status_code in (400, 404), (route, bad, response.status_code)
        response = await client.post(f"/c/{cid}/edit/{bad}", data={"content": "x"}, headers=headers)
        assert response.status_code in (400, 404), (bad, response.status_code)
    response = await client.post(f"/c/{cid}/edit/{answer_id}", data={"content": "x"})
    assert response.status_code == 400
    response = await client.get(f"/c/{cid}/older", params={"before": 2**70})
    assert response.status_code in (200, 400)
    # The page routes answer the branch as the messages pane shows it.
    response = await client.post(f"/c/{cid}/regenerate/{answer_id}", headers=headers)
    assert response.status_code == 201 or response.status_code == 200, response.text
    assert 'data-alternative-count="2"' in response.text
    assert response.text.count('data-role="user"') == 1
    response = await client.post(f"/c/{cid}/branch/{user_id}", headers=headers)
    assert response.status_code in (200, 201) and f'id="m{user_id}"' in response.text
    response = await client.post(f"/c/{cid}/fork/{user_id}", headers=headers)
    assert response.status_code == 204 and response.headers["HX-Redirect"].startswith("/c/")


async def test_an_export_carries_every_branch_and_imports_back_whole(
    client: AsyncTestClient,
) -> None:
    cid = (await new_conversation(client))["id"]
    await send(client, cid, "first question")
    two = await send(client, cid, "second question")
    await send(client, cid, "third question")
    edited = await send(client, cid, "second, put better", edit_of=two["user"]["id"])
    await send(client, cid, "fourth, on the new branch")
    # Back to the first branch: the shown branch is not the newest row.
    switched = await client.post(
        f"/api/conversations/{cid}/branch", json={"message_id": two["assistant"]["id"]}
    )
    assert switched.status_code == 200
    before = await shown(client, cid)

    exported = (await client.get(f"/api/conversations/{cid}/export?format=json")).json()
    assert len(exported["messages"]) == 10, "every branch, not only the one shown"
    assert exported["conversation"]["active_seq"] == before[-1]["seq"]
    assert exported["messages"][edited["user"]["seq"] - 1]["parent_seq"] == two["user"]["seq"] - 1
    imported = await client.post("/api/conversations/import", json=exported)
    assert imported.status_code == 201, imported.text
    copy = imported.json()["id"]
    after = await shown(client, copy)
    keys = ("seq", "role", "content", "dropped_turns", "fit", "pinned")
    assert [{k: m[k] for k in keys} for m in after] == [{k: m[k] for k in keys} for m in before]
    assert [m["alternatives"]["count"] if m["alternatives"] else 0 for m in after] == [
        m["alternatives"]["count"] if m["alternatives"] else 0 for m in before
    ]
    # The other branch came along too, and continues where it did.
    back = await client.post(
        f"/api/conversations/{copy}/branch",
        json={"message_id": after[2]["alternatives"]["ids"][1]},
    )
    assert [m["content"] for m in back.json()["messages"]][2::2] == [
        "second, put better",
        "fourth, on the new branch",
    ]
    # A parent that is not an earlier answer, or an active_seq that is not a leaf: 400.
    bad_parent = {**exported, "messages": [dict(m) for m in exported["messages"]]}
    bad_parent["messages"][4]["parent_seq"] = 3
    assert (await client.post("/api/conversations/import", json=bad_parent)).status_code == 400
    bad_leaf = {**exported, "conversation": {**exported["conversation"], "active_seq": 2}}
    assert (await client.post("/api/conversations/import", json=bad_leaf)).status_code == 400
