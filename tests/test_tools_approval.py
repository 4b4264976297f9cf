"""Approval of tool calls through the JSON API, on both databases: a server with
`approval = "always"` (the MCP fixture, a real server on stdio) runs a call only once its
owner allows it (`POST /api/conversations/{id}/tool-calls/{call id}`); a denial, or no
decision in time, goes back to the model as a stub saying the user declined it. Another
user, an unknown call, a call decided twice and a bad body are refused.

The app runs on a real port (`gateway_on`): the send's event stream is read as it comes,
and the decision is posted while the call waits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import bearer_header, make_user, sign_in
from tests.mcp_servers import stdio_fixture_toml
from tests.served import gateway_on
from tests.upstream import FakeUpstream
from webapp.settings import Settings

EXTRA = f"""
{stdio_fixture_toml("guarded", 'tools = ["echo"]', 'approval = "always"', "timeout = 20")}
[[configurations]]
name = "guarded"
model = "large"
tools = ["guarded"]
"""

pytestmark = pytest.mark.settings(extra=EXTRA, tool_approval_seconds=20)

ASK = "Say it back. Use tool please."


@contextmanager
def app_of(settings: Settings) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """alice's and mallory's API clients of the app served on `settings`."""
    with (
        gateway_on(settings, users=("alice", "mallory")) as gateway,
        gateway.http("alice") as alice,
        gateway.http("mallory") as mallory,
    ):
        yield alice, mallory


def new_conversation(api: httpx.Client) -> str:
    made = api.post("/api/conversations", json={"configuration": "guarded"})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) of an SSE response as they arrive."""
    name, data = "message", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            data.append(line.partition(":")[2].strip())
        elif not line and data:
            yield name, json.loads("\n".join(data))
            name, data = "message", []


@contextmanager
def asking(api: httpx.Client, conversation_id: str) -> Iterator[tuple[dict[str, Any], Any]]:
    """A streamed send whose model calls the guarded tool: the waiting call's `approval`
    event, and the rest of the stream's events (to read after deciding)."""
    path = f"/api/conversations/{conversation_id}/messages"
    headers = {"Accept": "text/event-stream"}
    with api.stream("POST", path, json={"content": ASK}, headers=headers) as response:
        assert response.status_code == 201
        stream = events(response)
        for name, data in stream:
            assert name not in ("done", "error"), data
            if name == "approval":
                yield data, stream
                return
        raise AssertionError("the stream ended without asking")


def tool_messages(upstream: FakeUpstream) -> list[dict[str, Any]]:
    """The tool results the model was sent, in its last request."""
    return [m for m in upstream.chats[-1]["messages"] if m["role"] == "tool"]


def decide(conversation_id: str, call_id: str) -> str:
    return f"/api/conversations/{conversation_id}/tool-calls/{call_id}"


def rest(stream: Iterator[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return list(stream)


def test_an_allowed_call_runs_and_a_second_decision_conflicts(
    settings: Settings, upstream: FakeUpstream
) -> None:
    with app_of(settings) as (alice, _):
        conversation_id = new_conversation(alice)
        with asking(alice, conversation_id) as (call, stream):
            assert call["state"] == "waiting" and call["name"] == "echo"
            assert call["server"] == "guarded"
            assert json.loads(call["arguments"]) == {"text": "echo"}
            upstream.stall(1.5)  # the model's next call: the answer still runs meanwhile
            path = decide(conversation_id, call["id"])
            allowed = alice.post(path, json={"approve": True})
            assert allowed.status_code == 200, allowed.text
            assert allowed.json() == {"id": call["id"], "approve": True, "decided": True}
            again = alice.post(path, json={"approve": False})
            assert again.status_code == 409, again.text
            after = rest(stream)
        names = [name for name, _ in after]
        assert names[0] == "approval" and after[0][1]["state"] == "allowed"
        result = next(data for name, data in after if name == "tool_result")
        assert result["status"] == "ok" and result["content"] == "echo"
        assert after[-1][0] == "done" and after[-1][1]["status"] == "complete"
        (sent,) = tool_messages(upstream)
        assert sent["tool_call_id"] == call["id"] and sent["content"] == "echo"
        gone = alice.post(path, json={"approve": True})
        assert gone.status_code == 404, "the answer is over: nothing waits"


def test_a_denied_call_is_not_run_and_the_model_is_told(
    settings: Settings, upstream: FakeUpstream
) -> None:
    with app_of(settings) as (alice, _):
        conversation_id = new_conversation(alice)
        with asking(alice, conversation_id) as (call, stream):
            denied = alice.post(decide(conversation_id, call["id"]), json={"approve": False})
            assert denied.status_code == 200, denied.text
            after = rest(stream)
        assert [d["state"] for n, d in after if n == "approval"] == ["denied"]
        result = next(data for name, data in after if name == "tool_result")
        assert result["status"] == "denied"
        assert after[-1][0] == "done" and after[-1][1]["status"] == "complete"
        (sent,) = tool_messages(upstream)
        assert sent["tool_call_id"] == call["id"]
        assert "declined" in sent["content"] and sent["content"] != "echo"


@pytest.mark.settings(extra=EXTRA, tool_approval_seconds=0.5)
def test_no_decision_in_time_counts_as_a_denial(settings: Settings, upstream: FakeUpstream) -> None:
    with app_of(settings) as (alice, _):
        conversation_id = new_conversation(alice)
        with asking(alice, conversation_id) as (call, stream):
            after = rest(stream)
        assert [d["state"] for n, d in after if n == "approval"] == ["expired"]
        assert after[-1][0] == "done" and after[-1][1]["status"] == "complete"
        (sent,) = tool_messages(upstream)
        assert "did not allow it in time" in sent["content"]
        late = alice.post(decide(conversation_id, call["id"]), json={"approve": True})
        assert late.status_code == 404


def test_only_the_owner_decides_and_bad_requests_are_refused(
    settings: Settings, upstream: FakeUpstream
) -> None:
    with app_of(settings) as (alice, mallory):
        conversation_id = new_conversation(alice)
        with asking(alice, conversation_id) as (call, stream):
            path = decide(conversation_id, call["id"])
            foreign = mallory.post(path, json={"approve": True})
            assert foreign.status_code == 404, foreign.text
            for body in ({}, {"approve": "yes"}, {"approve": None}, [True], "true", 1):
                refused = alice.post(path, json=body)
                assert refused.status_code == 400, (body, refused.text)
            raw = alice.post(
                path, content=b"{not json", headers={"content-type": "application/json"}
            )
            assert raw.status_code == 400
            unknown = alice.post(decide(conversation_id, "call_nope"), json={"approve": True})
            assert unknown.status_code == 404
            long = alice.post(decide(conversation_id, "c" * 500), json={"approve": True})
            assert long.status_code == 404
            nowhere = alice.post(decide("no-such-conversation", call["id"]), json={"approve": 1})
            assert nowhere.status_code in (400, 404)
            # Nothing refused touched the call: it still waits, and the owner's decision counts.
            allowed = alice.post(path, json={"approve": True})
            assert allowed.status_code == 200, allowed.text
            after = rest(stream)
        assert after[-1][0] == "done" and after[-1][1]["status"] == "complete"
        assert tool_messages(upstream)[0]["content"] == "echo"


async def test_the_pages_allow_and_deny_refuse_bad_input_and_other_users(
    app: Litestar, browser: AsyncTestClient, database_url: str
) -> None:
    alice = await make_user(database_url, "alice")
    await make_user(database_url, "mallory")
    made = await browser.post(
        "/api/conversations", json={"configuration": "guarded"}, headers=bearer_header(alice)
    )
    conversation_id = made.json()["id"]
    path = f"/c/{conversation_id}/tool-calls/call_1"
    csrf = await sign_in(browser, "alice")
    headers = {"x-csrftoken": csrf, "hx-request": "true"}
    for form in ({}, {"approve": "maybe"}, {"approve": ""}):
        refused = await browser.post(path, data=form, headers=headers)
        assert refused.status_code == 400, (form, refused.text)
    idle = await browser.post(path, data={"approve": "true"}, headers=headers)
    assert idle.status_code == 404, "no answer is being written: no call waits"
    csrf = await sign_in(browser, "mallory")
    foreign = await browser.post(
        path, data={"approve": "true"}, headers={"x-csrftoken": csrf, "hx-request": "true"}
    )
    assert foreign.status_code == 404
