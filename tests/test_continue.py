"""Continue on an answer cut off by its length limit, on both databases: a new turn that
asks the model to go on, bounded like any send; refused for an answer that ended, for a
question, for an answer that is no longer the newest, and for another user."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import make_user, new_conversation
from tests.upstream import FakeUpstream
from webapp.chat.send import CONTINUE_PROMPT

SHORT = '\n[[configurations]]\nname = "short"\nmodel = "small"\nmax_tokens = 20\n'

pytestmark = pytest.mark.settings(extra=SHORT)

HTMX = {"hx-request": "true"}


async def test_continue_goes_on_in_a_new_bounded_turn(
    client: AsyncTestClient,
    upstream: FakeUpstream,
    database_url: str,
) -> None:
    conversation = await new_conversation(client, configuration="short")
    base = f"/api/conversations/{conversation['id']}"
    upstream.set_reply("word " * 400)  # past the configuration's 20-token limit
    cut = (await client.post(f"{base}/messages", json={"content": "Tell me a lot"})).json()
    answer = cut["assistant"]
    assert answer["finish_reason"] == "length"
    page = await client.get(f"/c/{conversation['id']}")
    assert f'hx-post="/c/{conversation["id"]}/continue/{answer["id"]}"' in page.text
    assert "Cut off at its length limit" in page.text

    upstream.set_reply("and the rest.")
    went_on = await client.post(f"{base}/messages/{answer['id']}/continue")
    assert went_on.status_code == 201, went_on.text
    turn = went_on.json()
    assert turn["user"]["content"] == CONTINUE_PROMPT
    assert turn["user"]["fit"] is not None and turn["user"]["dropped_turns"] == 0
    assert turn["assistant"]["content"] == "and the rest."
    sent = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    roles = [m["role"] for m in sent["body"]["messages"]]
    assert roles[-3:] == ["user", "assistant", "user"], "the cut answer goes with it"
    page = await client.get(f"/c/{conversation['id']}")
    assert f"/continue/{turn['assistant']['id']}" not in page.text, "that one ended"

    stale = await client.post(f"{base}/messages/{answer['id']}/continue")
    assert stale.status_code == 409 and "newest answer" in stale.text
    ended = await client.post(f"{base}/messages/{turn['assistant']['id']}/continue")
    assert ended.status_code == 400 and "length limit" in ended.text
    question = await client.post(f"{base}/messages/{turn['user']['id']}/continue")
    assert question.status_code == 400
    other = await make_user(database_url, "mallory")
    foreign = await client.post(
        f"{base}/messages/{answer['id']}/continue", headers={"Authorization": f"Bearer {other}"}
    )
    assert foreign.status_code == 404
    on_page = await client.post(f"/c/{conversation['id']}/continue/{answer['id']}", headers=HTMX)
    assert on_page.status_code == 409


@pytest.mark.parametrize("status", ["failed", "stopped", "interrupted"])
async def test_an_answer_that_did_not_complete_cannot_be_continued(
    client: AsyncTestClient, upstream: FakeUpstream, status: str
) -> None:
    """An import may carry a length cut on an answer that failed (or was stopped): there is
    no whole answer to go on from, so Continue is a clear 409, the model is not asked."""
    export = {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "cut", "configuration": "short"},
        "messages": [
            {"seq": 1, "role": "user", "content": "Tell me a lot"},
            {
                "seq": 2,
                "role": "assistant",
                "content": "word word",
                "status": status,
                "finish_reason": "length",
                "error": "the provider failed" if status == "failed" else None,
            },
        ],
    }
    imported = await client.post("/api/conversations/import", json=export)
    assert imported.status_code == 201, imported.text
    conversation = imported.json()
    answer = conversation["messages"][-1]
    assert (answer["status"], answer["finish_reason"]) == (status, "length")
    asked = len(upstream.requests)
    base = f"/api/conversations/{conversation['id']}"
    refused = await client.post(f"{base}/messages/{answer['id']}/continue")
    assert refused.status_code == 409, refused.text
    assert f"this answer is {status}" in refused.json()["detail"]
    on_page = await client.post(f"/c/{conversation['id']}/continue/{answer['id']}", headers=HTMX)
    assert on_page.status_code == 409
    assert len(upstream.requests) == asked, "the model is not asked"
