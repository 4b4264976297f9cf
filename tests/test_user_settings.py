"""Per-user settings and feedback on answers, on both databases: the default configuration
starts new conversations, the theme is drawn on every page, custom instructions go with
the system prompt and are counted in the head; a refused settings form keeps what was
typed; thumbs up and down are stored, taken back, never another user's, and filter the
admin review (page and JSON API)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.factories import EMBED, bearer_header, htmx_headers, make_account
from tests.upstream import FakeUpstream
from webapp.accounts.models import ADMIN, DEFAULT_SCOPES, SETTINGS
from webapp.accounts.preferences import MAX_INSTRUCTIONS

pytestmark = pytest.mark.settings(extra=EMBED)

HTMX = {"hx-request": "true"}


@dataclass
class Clients:
    app: AsyncTestClient
    alice: dict[str, str]
    bob: dict[str, str]
    root: dict[str, str]


@pytest.fixture
async def clients(app: Litestar, database_url: str) -> AsyncIterator[Clients]:
    """Tokens that may change their user's settings (a chat token may not:
    test_token_scopes.py)."""
    headers = {}
    for name, admin in (("alice", False), ("bob", False), ("root", True)):
        scopes = (*DEFAULT_SCOPES, SETTINGS, *([ADMIN] if admin else []))
        _, token = await make_account(database_url, name, admin=admin, scopes=scopes)
        headers[name] = bearer_header(token)
    async with AsyncTestClient(app=app) as client:
        yield Clients(client, headers["alice"], headers["bob"], headers["root"])


async def save(clients: Clients, **form: str) -> Any:
    return await clients.app.post(
        "/settings/preferences", data=form, headers=clients.alice, follow_redirects=False
    )


async def sent_messages(upstream: FakeUpstream) -> list[dict[str, Any]]:
    chats = [r for r in upstream.requests if r["path"].endswith("/chat/completions")]
    messages: list[dict[str, Any]] = chats[-1]["body"]["messages"]
    return messages


async def test_settings_start_conversations_theme_pages_and_go_with_each_send(
    clients: Clients, upstream: FakeUpstream
) -> None:
    saved = await save(
        clients,
        default_configuration="medium",
        theme="dark",
        custom_instructions="Answer in French.\r\n",
    )
    assert saved.status_code == 303 and saved.headers["location"] == "/settings?done=preferences"
    page = await clients.app.get("/settings?done=preferences", headers=clients.alice)
    assert '<html lang="en" data-theme="dark">' in page.text and "Settings saved." in page.text
    assert '<meta name="color-scheme" content="dark">' in page.text
    assert ">Answer in French.</textarea>" in page.text
    assert '<option value="medium" selected>' in page.text.replace("\n", "")
    other = await clients.app.get("/settings", headers=clients.bob)
    assert 'data-theme="system"' in other.text, "settings are each user's own"

    made = await clients.app.post("/api/conversations", json={}, headers=clients.alice)
    assert made.json()["configuration"] == "medium"
    theirs = await clients.app.post("/api/conversations", json={}, headers=clients.bob)
    assert theirs.json()["configuration"] != "medium"
    fresh = await clients.app.post("/c/new", data={"x": ""}, headers={**clients.alice, **HTMX})
    opened = await clients.app.get(fresh.headers["hx-redirect"], headers=clients.alice)
    assert 'id="conversation-configuration"' in opened.text
    assert 'data-theme="dark"' in opened.text

    # Instructions follow the configuration's own system prompt, and the head counts them.
    small = await clients.app.post(
        "/api/conversations", json={"configuration": "small"}, headers=clients.alice
    )
    url = f"/api/conversations/{small.json()['id']}/messages"
    sent = await clients.app.post(url, json={"content": "hello"}, headers=clients.alice)
    assert sent.status_code == 201, sent.text
    system = (await sent_messages(upstream))[0]
    assert system == {"role": "system", "content": "You are a test model.\n\nAnswer in French."}
    fit = sent.json()["user"]["fit"]
    assert fit["instructions_tokens"] > 0

    plain = await clients.app.post(
        "/api/conversations", json={"configuration": "small"}, headers=clients.bob
    )
    bob_url = f"/api/conversations/{plain.json()['id']}/messages"
    bobs = await clients.app.post(bob_url, json={"content": "hello"}, headers=clients.bob)
    assert (await sent_messages(upstream))[0]["content"] == "You are a test model."
    assert bobs.json()["user"]["fit"]["instructions_tokens"] is None
    assert fit["estimated_tokens"] > bobs.json()["user"]["fit"]["estimated_tokens"]


async def test_instructions_go_wherever_the_configurations_system_prompt_goes(
    clients: Clients, upstream: FakeUpstream
) -> None:
    """A gateway call into a conversation is a send of its owner: the instructions go, and
    are counted in the head. A call without one sends the caller's own transcript, which
    never carries the configuration's system prompt either; an embed's visitors are not
    the site's admin, so the admin's instructions never reach them."""
    mine = "Answer in French."
    for who in (clients.alice, clients.root):
        done = await clients.app.post(
            "/settings/preferences", data={"custom_instructions": mine}, headers=who
        )
        assert done.status_code in (200, 303), done.text
    made = await clients.app.post(
        "/api/conversations", json={"configuration": "small"}, headers=clients.alice
    )
    call = {"model": "small", "messages": [{"role": "user", "content": "hello"}]}
    into = await clients.app.post(
        "/v1/chat/completions",
        json=call,
        headers={**clients.alice, "x-conversation-id": made.json()["id"]},
    )
    assert into.status_code == 200, into.text
    system = (await sent_messages(upstream))[0]
    assert system == {"role": "system", "content": f"You are a test model.\n\n{mine}"}
    stored = await clients.app.get(f"/api/conversations/{made.json()['id']}", headers=clients.alice)
    assert stored.json()["messages"][0]["fit"]["instructions_tokens"] > 0

    alone = await clients.app.post("/v1/chat/completions", json=call, headers=clients.alice)
    assert alone.status_code == 200, alone.text
    assert await sent_messages(upstream) == call["messages"]

    page = await clients.app.get("/embed/support")
    visitor = htmx_headers(page.text)
    sent = await clients.app.post("/embed/support/send", data={"content": "hi"}, headers=visitor)
    assert sent.status_code == 200, sent.text
    for _ in range(200):  # until the answer's request is made
        chats = [r for r in upstream.requests if r["path"].endswith("/chat/completions")]
        if len(chats) == 3:
            break
        await asyncio.sleep(0.02)
    system = (await sent_messages(upstream))[0]
    assert system == {"role": "system", "content": "You are a test model."}


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"theme": "neon"}, "the theme is one of system, light, dark"),
        ({"default_configuration": "nope"}, "unknown configuration"),
        ({"custom_instructions": "x" * (MAX_INSTRUCTIONS + 1)}, "at most 4,000 characters"),
        ({"custom_instructions": "nul \x00 here"}, "NUL character"),
    ],
)
async def test_a_refused_settings_form_keeps_what_was_typed(
    clients: Clients, form: dict[str, str], reason: str
) -> None:
    typed = {"theme": "light", "custom_instructions": "Be brief, please.", **form}
    refused = await save(clients, **typed)
    assert refused.status_code == 400, refused.text
    assert 'role="alert"' in refused.text and reason in refused.text
    assert "<h1>Settings</h1>" in refused.text
    if "\x00" not in typed["custom_instructions"] and len(typed["custom_instructions"]) < 100:
        assert f">{typed['custom_instructions']}</textarea>" in refused.text
    page = await clients.app.get("/settings", headers=clients.alice)
    assert 'data-theme="system"' in page.text, "nothing of a refused form is stored"


async def test_thumbs_are_stored_toggled_and_filter_the_review(clients: Clients) -> None:
    app, alice = clients.app, clients.alice
    made = await app.post("/api/conversations", json={"configuration": "medium"}, headers=alice)
    conversation_id = made.json()["id"]
    base = f"/api/conversations/{conversation_id}"
    sent = (await app.post(f"{base}/messages", json={"content": "hi"}, headers=alice)).json()
    answer, question = sent["assistant"]["id"], sent["user"]["id"]
    assert sent["assistant"]["feedback"] is None

    rated = await app.put(
        f"{base}/messages/{answer}/feedback", json={"feedback": "down"}, headers=alice
    )
    assert rated.status_code == 200 and rated.json()["feedback"] == "down"
    messages = (await app.get(base, headers=alice)).json()["messages"]
    assert [m["feedback"] for m in messages] == [None, "down"]

    # The page's thumbs: the other thumb replaces, the same thumb again takes it back.
    page_url = f"/c/{conversation_id}/feedback/{answer}"
    up = await app.post(page_url, data={"value": "up"}, headers={**alice, **HTMX})
    assert (
        up.status_code == 200 and 'data-action="feedback-up" aria-label="Good answer 1"' in up.text
    )
    assert up.text.count('aria-pressed="true"') == 1
    off = await app.post(page_url, data={"value": "up"}, headers={**alice, **HTMX})
    assert 'aria-pressed="true"' not in off.text
    assert (await app.get(base, headers=alice)).json()["messages"][1]["feedback"] is None

    bad = await app.put(
        f"{base}/messages/{answer}/feedback", json={"feedback": "meh"}, headers=alice
    )
    assert bad.status_code == 400
    on_question = await app.put(
        f"{base}/messages/{question}/feedback", json={"feedback": "up"}, headers=alice
    )
    assert on_question.status_code == 400 and "answer" in on_question.text
    foreign = await app.put(
        f"{base}/messages/{answer}/feedback", json={"feedback": "up"}, headers=clients.bob
    )
    assert foreign.status_code == 404
    bad_form = await app.post(page_url, data={"value": "sideways"}, headers={**alice, **HTMX})
    assert bad_form.status_code == 400

    await app.put(f"{base}/messages/{answer}/feedback", json={"feedback": "down"}, headers=alice)
    root = clients.root
    listed = (await app.get("/api/admin/trimmed?feedback=down", headers=root)).json()
    rows = listed["rows"]
    assert [r["conversation_id"] for r in rows] == [conversation_id]
    assert rows[0]["trimmed_turns"] == 0, "rated, though never trimmed"
    assert not (await app.get("/api/admin/trimmed?feedback=up", headers=root)).json()["rows"]
    assert not (await app.get("/api/admin/trimmed", headers=root)).json()["rows"]
    refused = await app.get("/api/admin/trimmed?feedback=sideways", headers=root)
    assert refused.status_code == 400 and "feedback must be up or down" in refused.text
    html = await app.get("/admin/trimmed?feedback=down", headers=root)
    assert conversation_id in html.text and '<option value="down" selected>' in html.text
    review = await app.get(f"/admin/c/{conversation_id}", headers=root)
    assert 'data-feedback="down"' in review.text


async def test_instructions_that_leave_no_room_are_refused_and_named(
    clients: Clients, upstream: FakeUpstream
) -> None:
    """The attack: instructions larger than a model's window were saved, and every send
    then failed with nothing naming them. They are refused when saved (naming the smallest
    window they fit), and a send into a configuration they crowd out is a 400 naming them,
    before anything is stored or asked of the model."""
    instructions = "Please answer in great detail. " * 125  # about 1,100 tokens
    refused = await save(clients, default_configuration="small", custom_instructions=instructions)
    assert refused.status_code == 400, refused.text
    assert "your custom instructions (about" in refused.text
    assert "configuration &#39;small&#39; (model small, a window of 1,024 tokens" in refused.text
    assert "the smallest window they fit (3,072 tokens)" in refused.text
    saved = await save(clients, default_configuration="medium", custom_instructions=instructions)
    assert saved.status_code == 303, saved.text

    made = await clients.app.post(
        "/api/conversations", json={"configuration": "small"}, headers=clients.alice
    )
    base = f"/api/conversations/{made.json()['id']}"
    asked = len(upstream.requests)
    sent = await clients.app.post(f"{base}/messages", json={"content": "hi"}, headers=clients.alice)
    assert sent.status_code == 400, sent.text
    assert "your custom instructions" in sent.json()["detail"]
    assert "configuration 'small'" in sent.json()["detail"]
    assert len(upstream.requests) == asked, "the model is not asked"
    stored = await clients.app.get(base, headers=clients.alice)
    assert stored.json()["messages"] == [], "nothing is stored"
    switched = await clients.app.patch(
        base, json={"configuration": "medium"}, headers=clients.alice
    )
    assert switched.status_code == 200, switched.text
    answered = await clients.app.post(
        f"{base}/messages", json={"content": "hi"}, headers=clients.alice
    )
    assert answered.status_code == 201, answered.text
