"""Export and import (docs/design.md section 9) through the real app on both databases: a round
trip keeps every message and fit fact, the Markdown says what was left out, and a bad
file is a clear 400 that stores nothing."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlmodel import Session

from tests.factories import new_conversation, user_header
from tests.looplag import watching_app
from tests.upstream import FakeUpstream
from webapp.chat.stored.models import Conversation
from webapp.chat.stored.transfer import (
    EXPORT_BATCH_BYTES,
    EXPORT_BATCH_ROWS,
    MAX_MESSAGES,
    batch_ends,
    markdown_plan,
)
from webapp.db import Database

pytestmark = pytest.mark.settings(max_message_chars=2000)
"""As the JSON API's tests: `client` is alice's, on both databases."""

STALL = 0.1
"""The most CPU time the app's loop thread may spend without letting a ticker run."""


async def trimmed_conversation(client: AsyncTestClient, upstream: FakeUpstream) -> str:
    """Eight long turns on the small model (so later sends are trimmed), a pin, and one
    failed answer."""
    conversation = await new_conversation(client, title="Rivers & bridges")
    base = f"/api/conversations/{conversation['id']}"
    for number in range(1, 9):
        if number == 5:
            upstream.fail_next(400)
        sent = await client.post(f"{base}/messages", json={"content": f"turn {number} " * 60})
        assert sent.status_code == 201, sent.text
        if number == 2:
            pinned = await client.post(f"{base}/messages/{sent.json()['user']['id']}/pin")
            assert pinned.status_code == 200
    return conversation["id"]


async def export(client: AsyncTestClient, conversation_id: str, kind: str = "json") -> Any:
    response = await client.get(
        f"/api/conversations/{conversation_id}/export", params={"format": kind}
    )
    assert response.status_code == 200, response.text
    return response


def without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "id"} for m in messages]


async def test_a_json_round_trip_keeps_every_message_and_fit_fact(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    original_id = await trimmed_conversation(client, upstream)
    response = await export(client, original_id)
    assert 'filename="Rivers-bridges.json"' in response.headers["content-disposition"]
    exported = response.json()
    assert exported["format"] == "webapp.conversation" and exported["version"] == 1
    messages = exported["messages"]
    assert len(messages) == 16
    assert [m["parent_seq"] for m in messages] == [None, *range(1, 16)]
    assert any(m["dropped_turns"] for m in messages), "the fixture should have trimmed"
    assert any(m["status"] == "failed" for m in messages)
    assert any(m["pinned"] for m in messages)

    imported = await client.post("/api/conversations/import", json=exported)
    assert imported.status_code == 201, imported.text
    copy_id = imported.json()["id"]
    assert copy_id != original_id
    again = (await export(client, copy_id)).json()
    assert again["conversation"]["title"] == "Rivers & bridges (imported)"
    assert again["conversation"]["configuration"] == exported["conversation"]["configuration"]
    assert again["conversation"]["created_at"] == exported["conversation"]["created_at"]
    assert without_ids(again["messages"]) == without_ids(messages)

    # The copy is a live conversation: the next send is bounded the same way as the
    # original's would be (the turn counts the bound relies on were rebuilt).
    previews = [
        (
            await client.post(f"/api/conversations/{cid}/preview", json={"content": "turn 9 " * 60})
        ).json()
        for cid in (original_id, copy_id)
    ]
    assert previews[0]["dropped_turns"] == previews[1]["dropped_turns"] > 0
    assert previews[0]["left_out"] == previews[1]["left_out"]
    sent = await client.post(f"/api/conversations/{copy_id}/messages", json={"content": "hi"})
    assert sent.status_code == 201 and sent.json()["user"]["seq"] == 17


async def test_markdown_is_for_reading_with_trim_markers_in_words(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    conversation_id = await trimmed_conversation(client, upstream)
    response = await export(client, conversation_id, "markdown")
    assert response.headers["content-type"].startswith("text/markdown")
    text = response.text
    assert text.startswith("# Rivers & bridges\n")
    assert text.count("## You") == 8 and text.count("## Assistant") == 8
    assert "## Assistant (small)" in text
    rows = (await client.get(f"/api/conversations/{conversation_id}")).json()["messages"]
    trimmed = [r for r in rows if r["dropped_turns"]]
    for row in trimmed:
        were = "turn was" if row["dropped_turns"] == 1 else "turns were"
        assert f"{row['dropped_turns']} earlier {were} not sent to small" in text
    assert text.count("✂ Sent without older history") == len(trimmed)
    assert "*Failed" in text
    assert "turn 8 turn 8" in text


async def test_export_is_the_owners_only_and_names_a_known_format(
    client: AsyncTestClient, database_url: str, upstream: FakeUpstream
) -> None:
    conversation = await new_conversation(client)
    bob = await user_header(database_url, "bob")
    url = f"/api/conversations/{conversation['id']}/export"
    assert (await client.get(url, headers=bob)).status_code == 404
    bad = await client.get(url, params={"format": "pdf"})
    assert bad.status_code == 400 and bad.json()["detail"]


def valid_export() -> dict[str, Any]:
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Hi", "configuration": "small"},
        "messages": [
            {"seq": 1, "role": "user", "content": "Hello", "created_at": "2026-01-01T10:00:00Z"},
            {"seq": 2, "role": "assistant", "content": "Hi **there**", "status": "complete"},
        ],
    }


def broken(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    data = copy.deepcopy(valid_export())
    change(data)
    return data


BAD_IMPORTS = {
    "not an export": {"hello": "world"},
    "a list": [1, 2, 3],
    "wrong version": broken(lambda d: d.update(version=7)),
    "messages not a list": broken(lambda d: d.update(messages="no")),
    "roles out of order": broken(lambda d: d["messages"].reverse()),
    "a seq gap": broken(lambda d: d["messages"][1].update(seq=5)),
    "no answer": broken(lambda d: d["messages"].pop()),
    "content not text": broken(lambda d: d["messages"][0].update(content=5)),
    "a NUL": broken(lambda d: d["messages"][0].update(content="a\x00b")),
    "a huge number": broken(lambda d: d["messages"][0].update(estimated_tokens=2**40)),
    "a negative number": broken(lambda d: d["messages"][0].update(estimated_tokens=-1)),
    "a time without zone": broken(
        lambda d: d["messages"][0].update(created_at="2026-01-01T10:00:00")
    ),
    "not a time": broken(lambda d: d["messages"][0].update(created_at="yesterday")),
    "an unknown status": broken(lambda d: d["messages"][1].update(status="great")),
    "bad spans": broken(
        lambda d: d["messages"][0].update(dropped_turns=1, fit={"left_out": [[3]]})
    ),
    "a long model name": broken(lambda d: d["messages"][1].update(model="m" * 500)),
    "a title too long": broken(lambda d: d["conversation"].update(title="t" * 500)),
    "a branch": broken(lambda d: d["messages"][1].update(parent_seq=None)),
}


@pytest.mark.parametrize("name", list(BAD_IMPORTS))
async def test_a_bad_import_is_a_clear_400_and_stores_nothing(
    client: AsyncTestClient, name: str
) -> None:
    response = await client.post("/api/conversations/import", json=BAD_IMPORTS[name])
    assert response.status_code == 400, (name, response.text)
    assert response.json()["detail"]
    assert (await client.get("/api/conversations")).json() == []


async def test_an_imported_trim_without_its_fit_facts_shows_on_the_page(
    client: AsyncTestClient,
) -> None:
    """Every fit fact of an export is optional: the page shows the trim and what is known."""
    data = valid_export()
    data["messages"] = [
        {"role": role, "content": f"{role} {n}"} for n in range(3) for role in ("user", "assistant")
    ]
    data["messages"][4] |= {"dropped_turns": 1, "fit": {"budget": 900}}
    imported = await client.post("/api/conversations/import", json=data)
    assert imported.status_code == 201, imported.text
    page = await client.get(f"/c/{imported.json()['id']}")
    assert page.status_code == 200, page.text
    assert 'data-dropped-turns="1"' in page.text
    assert "<dt>Budget for the prompt</dt><dd>900 tokens</dd>" in page.text
    assert "<dt>Window</dt>" not in page.text


async def test_import_of_a_minimal_export_fills_in_the_rest(client: AsyncTestClient) -> None:
    data = broken(lambda d: d["conversation"].update(configuration="no-longer-there"))
    response = await client.post("/api/conversations/import", json=data)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["configuration"] == "small"  # unknown here: the default configuration
    user, answer = body["messages"]
    assert user["created_at"] == "2026-01-01T10:00:00Z"
    assert user["estimated_tokens"] > 0 and user["dropped_turns"] is None
    assert answer["status"] == "complete"
    not_json = await client.post(
        "/api/conversations/import",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert not_json.status_code == 400


def test_export_batches_are_bounded_in_rows_and_in_bytes() -> None:
    """20,000 short messages were read (and held, per client) in one batch (issue 43)."""
    short = batch_ends([(seq, 300) for seq in range(1, 20_001)])
    assert len(short) == 20_000 // EXPORT_BATCH_ROWS
    assert all(b - a == EXPORT_BATCH_ROWS for a, b in zip([0, *short], short, strict=False))
    long = batch_ends([(seq, EXPORT_BATCH_BYTES // 3) for seq in range(1, 13)])
    assert long == [2, 4, 6, 8, 10, 12]
    assert batch_ends([(1, 10 * EXPORT_BATCH_BYTES), (2, 5)]) == [1, 2]  # one row at least


def turns_export(title: str, messages: int, content: str) -> dict[str, Any]:
    """An export of `messages` short messages, each `content` with its seq in it."""
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": title},
        "messages": [
            {"seq": seq, "role": "user" if seq % 2 else "assistant", "content": content.format(seq)}
            for seq in range(1, messages + 1)
        ],
    }


async def test_an_import_of_twenty_thousand_messages_never_holds_the_loop(
    client: AsyncTestClient,
) -> None:
    """A 20,000-message import (the most one may hold) held the loop up to 1 s (issue 43):
    the JSON decoded, checked and laid out on the loop, and the answer's JSON too. Now each
    of those runs on a thread, and the rows are written a chunk at a time."""
    body = json.dumps(turns_export("Quick exchanges", MAX_MESSAGES, "line {}")).encode()
    with watching_app(client) as lag:
        imported = await client.post(
            "/api/conversations/import", content=body, headers={"Content-Type": "application/json"}
        )
    assert imported.status_code == 201, imported.text
    assert len(imported.json()["messages"]) == MAX_MESSAGES
    assert lag.ticks > 0
    assert lag.busiest < STALL, f"the import held the loop for {lag.busiest:.2f} s of CPU"


async def test_a_long_markdown_export_is_whole_across_its_batches(client: AsyncTestClient) -> None:
    """The Markdown export is read and sent a batch of the branch at a time (issue 43)."""
    messages = 2 * EXPORT_BATCH_ROWS + 6
    data = turns_export("Many turns", messages, "text {}  ")
    imported = await client.post("/api/conversations/import", json=data)
    assert imported.status_code == 201, imported.text
    text = (await export(client, imported.json()["id"], "markdown")).text
    assert text.startswith("# Many turns (imported)\n\nConfiguration: ")
    assert text.count("## You\n\ntext ") == text.count("## Assistant\n\ntext ") == messages // 2
    assert [int(n) for n in re.findall(r"text (\d+)", text)] == list(range(1, messages + 1))
    assert text.endswith(f"text {messages}\n")


async def test_a_markdown_export_of_long_messages_is_read_by_bytes_too(
    client: AsyncTestClient, database_url: str
) -> None:
    """A few rows of long text make several batches, each about `EXPORT_BATCH_BYTES`."""
    long = "x" * (EXPORT_BATCH_BYTES // 2)
    data = turns_export("Long turns", 8, long + " {}")
    conversation_id = (await client.post("/api/conversations/import", json=data)).json()["id"]

    def planned(session: Session) -> list[tuple[int, int]]:
        owner = session.get(Conversation, conversation_id)
        assert owner is not None
        return markdown_plan(session, owner.owner, conversation_id)[2]

    db = Database(database_url)
    try:
        batches = await db.read(planned)
    finally:
        await db.dispose()
    assert [rows for _, rows in batches] == [1] * 8  # by bytes, not by the row cap
    text = (await export(client, conversation_id, "markdown")).text
    assert [int(n) for n in re.findall(r"x (\d+)", text)] == list(range(1, 9))
