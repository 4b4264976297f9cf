"""The JSON API (docs/design.md section 5) through Litestar's test client, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import bearer_header, make_user, new_conversation, parse_sse
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.settings(max_message_chars=2000)

MESSAGE_FIELDS = {
    "id",
    "attachments",
    "alternatives",
    "seq",
    "role",
    "content",
    "status",
    "created_at",
    "estimated_tokens",
    "token_counts",
    "pinned",
    "dropped_turns",
    "fit",
    "model",
    "usage",
    "finish_reason",
    "error",
    "feedback",
    "tool_calls",
    "tool_call_id",
    "name",
}


async def test_health_schema_and_configurations(client: AsyncTestClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    schema = (await client.get("/schema/openapi.json")).json()
    assert "/api/conversations/{conversation_id}/messages" in schema["paths"]
    configurations = {c["name"]: c for c in (await client.get("/api/configurations")).json()}
    assert configurations["small"]["window"] == 1024
    assert configurations["cheapest-4k"]["kind"] == "criteria"
    assert configurations["cheapest-4k"]["serving_model"] == "medium"


async def test_conversation_lifecycle(client: AsyncTestClient) -> None:
    created = await new_conversation(client, configuration="small", title="Plans")
    assert created["messages"] == [] and created["title"] == "Plans"
    assert len(created["id"]) >= 20
    listed = (await client.get("/api/conversations")).json()
    assert [c["id"] for c in listed] == [created["id"]]
    renamed = await client.patch(f"/api/conversations/{created['id']}", json={"title": "Trips"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Trips"
    assert (await client.delete(f"/api/conversations/{created['id']}")).status_code == 204
    assert (await client.get(f"/api/conversations/{created['id']}")).status_code == 404
    default = await client.post("/api/conversations")
    assert default.status_code == 201 and default.json()["configuration"] == "small"


async def test_send_returns_both_rows_with_every_field(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client)
    url = f"/api/conversations/{conversation['id']}/messages"
    response = await client.post(url, json={"content": "Hello API"})
    assert response.status_code == 201, response.text
    user, assistant = response.json()["user"], response.json()["assistant"]
    assert set(user) == MESSAGE_FIELDS and set(assistant) == MESSAGE_FIELDS
    assert user["dropped_turns"] == 0 and user["fit"]["model"] == "small"
    assert set(user["fit"]) == {
        "model",
        "window",
        "reserve",
        "budget",
        "estimated_tokens",
        "overflow_at_floor",
        "counted_by",
        "left_out",
        "pins_left_out",
        "trim_to",
        "cut_moved",
        "instructions_tokens",
        "summary",
        "attachments_sent",
        "attachments_left_out",
        "cleared",
    }
    assert user["fit"]["counted_by"] == "estimate" and user["fit"]["left_out"] == []
    assert user["fit"]["trim_to"] == 0.75 and user["fit"]["cut_moved"] is False
    assert user["fit"]["summary"] is None
    assert set(assistant["usage"]) == {
        *("prompt_tokens", "completion_tokens", "cached_tokens"),
        *("evaluated_tokens", "cache_write_tokens"),
    }
    assert user["token_counts"] == {"estimate": user["estimated_tokens"]}
    assert assistant["status"] == "complete" and assistant["model"] == "small"
    assert assistant["usage"]["prompt_tokens"] > 0 and assistant["fit"] is None
    full = (await client.get(f"/api/conversations/{conversation['id']}")).json()
    assert [m["role"] for m in full["messages"]] == ["user", "assistant"]
    assert full["messages"][0] == user


async def test_streamed_send_emits_fit_deltas_and_done(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    conversation = await new_conversation(client)
    response = await client.post(
        f"/api/conversations/{conversation['id']}/messages",
        json={"content": "Stream please"},
        headers={"Accept": "text/event-stream"},
    )
    assert response.status_code == 201
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    names = [name for name, _, _ in events]
    assert names[0] == "fit" and names[-1] == "done"
    assert names.count("delta") >= 3
    fit = events[0][1]
    assert fit["role"] == "user" and fit["dropped_turns"] == 0
    text = "".join(data["text"] for name, data, _ in events if name == "delta")
    done = events[-1][1]
    assert done["content"] == text and done["status"] == "complete"
    offsets = []
    for name, _, event_id in events:
        if name == "delta":
            assert event_id is not None, "every delta says where it ends"
            offsets.append(int(event_id))
    assert offsets == sorted(offsets) and offsets[-1] == len(text)


async def test_streamed_send_reports_the_engines_reading_of_the_prompt(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    """llama.cpp reports its prefill: `progress` events {processed, total, cached} come
    before the first piece of text."""
    upstream.set_engine("llamacpp")
    upstream.progress_batch = 8
    conversation = await new_conversation(client)
    response = await client.post(
        f"/api/conversations/{conversation['id']}/messages",
        json={"content": "Stream please, " * 10},
        headers={"Accept": "text/event-stream"},
    )
    assert response.status_code == 201
    events = parse_sse(response.text)
    names = [name for name, _, _ in events]
    read = [data for name, data, _ in events if name == "progress"]
    assert len(read) > 1 and names.index("delta") > max(
        i for i, name in enumerate(names) if name == "progress"
    )
    record = upstream.cache_log[-1]
    total = record.prompt_tokens
    assert read[-1] == {"processed": total, "total": total, "cached": record.cached_tokens}
    assert all(set(data) == {"processed", "total", "cached"} for data in read)


async def test_streamed_failure_ends_with_an_error_event(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    conversation = await new_conversation(client)
    upstream.fail_next(503, count=3)
    response = await client.post(
        f"/api/conversations/{conversation['id']}/messages",
        json={"content": "Anyone?"},
        headers={"Accept": "text/event-stream"},
    )
    events = parse_sse(response.text)
    assert [name for name, _, _ in events] == ["fit", "error"]
    assert events[-1][1]["message"]
    stored = (await client.get(f"/api/conversations/{conversation['id']}")).json()["messages"]
    assert stored[0]["content"] == "Anyone?" and stored[1]["status"] == "failed"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"content": ""}, "empty"),
        ({"content": "   "}, "empty"),
        ({"content": "x" * 2001}, "limit"),
        ({"content": 5}, ""),
        ({}, ""),
        ([], ""),
    ],
)
async def test_bad_messages_get_a_clear_400(
    client: AsyncTestClient, body: Any, fragment: str
) -> None:
    conversation = await new_conversation(client)
    response = await client.post(f"/api/conversations/{conversation['id']}/messages", json=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["detail"]
    stored = (await client.get(f"/api/conversations/{conversation['id']}")).json()
    assert stored["messages"] == []


async def test_invalid_json_and_unknown_things(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client)
    raw = await client.post(
        f"/api/conversations/{conversation['id']}/messages",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert raw.status_code == 400
    for method, url, body in [
        ("GET", "/api/conversations/nope", None),
        ("PATCH", "/api/conversations/nope", {"title": "x"}),
        ("DELETE", "/api/conversations/nope", None),
        ("POST", "/api/conversations/nope/messages", {"content": "hi"}),
        ("POST", "/api/conversations/nope/stop", None),
    ]:
        response = await client.request(method, url, json=body)
        assert response.status_code == 404, (method, url, response.text)
        assert response.json()["detail"] == "no such conversation"
    unknown = await client.post("/api/conversations", json={"configuration": "gpt-17"})
    assert unknown.status_code == 400 and "unknown configuration" in unknown.json()["detail"]
    empty_title = await client.patch(
        f"/api/conversations/{conversation['id']}", json={"title": "  "}
    )
    assert empty_title.status_code == 400


async def test_stop_with_nothing_running(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client)
    response = await client.post(f"/api/conversations/{conversation['id']}/stop")
    assert response.status_code == 200 and response.json() == {"stopped": False, "assistant": None}


async def test_pin_preview_and_switch_configuration_over_the_api(
    client: AsyncTestClient, database_url: str
) -> None:
    conversation = await new_conversation(client)
    base = f"/api/conversations/{conversation['id']}"
    rows = []
    for number in range(1, 9):
        sent = await client.post(f"{base}/messages", json={"content": f"turn {number} " * 60})
        assert sent.status_code == 201, sent.text
        rows.append(sent.json())
    second = rows[1]["user"]
    pinned = await client.post(f"{base}/messages/{second['id']}/pin")
    assert pinned.status_code == 200 and pinned.json()["pinned"] is True
    listed = (await client.get(base)).json()["messages"]
    assert [m["pinned"] for m in listed if m["id"] == second["id"]] == [True]

    preview = await client.post(f"{base}/preview", json={"content": "turn 9 " * 60})
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert set(body) == {"dropped_turns", "left_out", "fit", "turns_left"}
    assert body["dropped_turns"] > 0 and body["left_out"] == body["fit"]["left_out"]
    assert body["fit"]["model"] == "small" and body["fit"]["counted_by"] == "estimate"
    assert all(not (a <= second["seq"] <= b) for a, b in body["left_out"]), "the pin is kept"
    assert len((await client.get(base)).json()["messages"]) == 16, "preview stored nothing"
    sent = (await client.post(f"{base}/messages", json={"content": "turn 9 " * 60})).json()
    assert sent["user"]["fit"]["left_out"] == body["left_out"]
    assert sent["user"]["dropped_turns"] == body["dropped_turns"]

    unpinned = await client.delete(f"{base}/messages/{second['id']}/pin")
    assert unpinned.status_code == 200 and unpinned.json()["pinned"] is False

    half = await client.patch(base, json={"configuration": "large", "title": "   "})
    assert half.status_code == 400
    assert (await client.get(base)).json()["configuration"] == "small", "nothing applied"
    switched = await client.patch(base, json={"configuration": "large"})
    assert switched.status_code == 200 and switched.json()["configuration"] == "large"
    after = (await client.post(f"{base}/preview", json={"content": "and now?"})).json()
    assert after["fit"]["model"] == "large" and after["dropped_turns"] == 0

    # Bad input is a clear 4xx, and nobody else's data is reachable.
    answer_id = rows[0]["assistant"]["id"]
    assert (await client.post(f"{base}/messages/{answer_id}/pin")).status_code == 400
    assert (await client.post(f"{base}/messages/999999/pin")).status_code == 404
    assert (await client.post(f"{base}/messages/{2**63}/pin")).status_code in (400, 404)
    assert (await client.patch(base, json={"configuration": "nope"})).status_code == 400
    assert (await client.post(f"{base}/preview", json={"content": " "})).status_code == 400
    assert (await client.post(f"{base}/preview", json={})).status_code == 400
    other = await make_user(database_url, "bob")
    theirs = bearer_header(other)
    assert (
        await client.post(f"{base}/preview", json={"content": "x"}, headers=theirs)
    ).status_code == 404
    foreign_pin = await client.post(f"{base}/messages/{second['id']}/pin", headers=theirs)
    assert foreign_pin.status_code == 404
    foreign_patch = await client.patch(base, json={"configuration": "large"}, headers=theirs)
    assert foreign_patch.status_code == 404
