"""Continue on an answer cut off by its length limit, on both databases: the model is
asked to go on, bounded like any send, and what it writes is appended to the same answer
(one row, its parts' usage added; nothing of the asking stored); refused for an answer
that ended, for a question, for an answer that is no longer the newest, and for another
user."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import make_user, new_conversation
from tests.upstream import FakeUpstream
from webapp.chat.sending.turn import CONTINUE_PROMPT

SHORT = '\n[[configurations]]\nname = "short"\nmodel = "small"\nmax_tokens = 20\n'

pytestmark = pytest.mark.settings(extra=SHORT)

HTMX = {"hx-request": "true"}


async def test_continue_appends_to_the_same_answer(
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
    first_usage = answer["usage"]
    assert first_usage is not None
    page = await client.get(f"/c/{conversation['id']}")
    assert f'hx-post="/c/{conversation["id"]}/continue/{answer["id"]}"' in page.text
    assert "Cut off at its length limit" in page.text

    upstream.set_reply("and the rest.")
    went_on = await client.post(f"{base}/messages/{answer['id']}/continue")
    assert went_on.status_code == 201, went_on.text
    turn = went_on.json()
    assert turn["user"]["id"] == cut["user"]["id"], "the turn it answers, not a new one"
    joined = turn["assistant"]
    assert joined["id"] == answer["id"]
    assert joined["content"] == answer["content"] + "and the rest."
    assert joined["finish_reason"] == "stop" and joined["status"] == "complete"
    usage = joined["usage"]
    assert usage["completion_tokens"] > first_usage["completion_tokens"]
    assert usage["prompt_tokens"] > first_usage["prompt_tokens"], "both requests' prompts"
    sent = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    roles = [m["role"] for m in sent["body"]["messages"]]
    assert roles[-3:] == ["user", "assistant", "user"], "the cut answer goes with it"
    assert sent["body"]["messages"][-1]["content"] == CONTINUE_PROMPT
    rows = (await client.get(base)).json()["messages"]
    assert [(r["id"], r["role"]) for r in rows] == [
        (cut["user"]["id"], "user"),
        (answer["id"], "assistant"),
    ], "nothing of the asking is stored"
    assert CONTINUE_PROMPT not in (await client.get(f"/c/{conversation['id']}")).text
    page = await client.get(f"/c/{conversation['id']}")
    assert f"/continue/{answer['id']}" not in page.text, "that one ended"

    ended = await client.post(f"{base}/messages/{answer['id']}/continue")
    assert ended.status_code == 400 and "length limit" in ended.text
    question = await client.post(f"{base}/messages/{turn['user']['id']}/continue")
    assert question.status_code == 400

    # A cut answer no longer the newest: refused (409), for the page as well.
    upstream.set_reply("word " * 400)
    newer = (await client.post(f"{base}/messages", json={"content": "More"})).json()["assistant"]
    assert newer["finish_reason"] == "length"
    upstream.set_reply("fine.")
    await client.post(f"{base}/messages", json={"content": "Something else"})
    stale = await client.post(f"{base}/messages/{newer['id']}/continue")
    assert stale.status_code == 409 and "newest answer" in stale.text
    on_page = await client.post(f"/c/{conversation['id']}/continue/{newer['id']}", headers=HTMX)
    assert on_page.status_code == 409
    other = await make_user(database_url, "mallory")
    foreign = await client.post(
        f"{base}/messages/{answer['id']}/continue", headers={"Authorization": f"Bearer {other}"}
    )
    assert foreign.status_code == 404


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
