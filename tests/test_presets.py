"""Presets (DESIGN 15), on both databases: a user's own system prompt, temperature and
answer length over a configuration; made, edited and deleted through the API, one default
per user, another user's a 404, bad input a 400 with nothing stored; a conversation on a
preset sends its system prompt (after the configuration's, before the user's custom
instructions), its temperature and its answer room to the upstream."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy import update
from sqlmodel import col

from tests.factories import make_user, new_conversation, sign_in, user_header
from tests.upstream import FakeUpstream
from webapp.accounts.models import User
from webapp.chat.stored.presets import Preset
from webapp.db import Database
from webapp.llm.providers.anthropic import AnthropicProvider
from webapp.llm.providers.base import ChatCall
from webapp.llm.providers.gemini import to_gemini_request

pytestmark = pytest.mark.settings(rate_limit_messages=0)

TERSE = {"name": "Terse", "configuration": "small", "system_prompt": "Answer in one line."}


async def instructions_of(username: str, instructions: str, database_url: str) -> None:
    """Set a user's custom instructions (the API's tokens have no settings scope)."""
    db = Database(database_url)
    try:
        await db.write(
            lambda session: session.connection().execute(
                update(User)
                .where(col(User.username) == username)
                .values(custom_instructions=instructions)
            )
        )
    finally:
        await db.dispose()


async def made(client: AsyncTestClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/api/presets", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def test_presets_are_made_edited_and_deleted_by_their_owner_alone(
    client: AsyncTestClient, database_url: str
) -> None:
    terse = await made(client, **TERSE, temperature=0.2, max_tokens=50)
    assert terse == {
        "id": terse["id"],
        "name": "Terse",
        "configuration": "small",
        "system_prompt": "Answer in one line.",
        "temperature": 0.2,
        "max_tokens": 50,
        "is_default": False,
    }
    loose = await made(client, name="Loose", configuration="large", is_default=True)
    assert loose["system_prompt"] == "" and loose["temperature"] is None

    # One default per user: making another the default takes it from the first.
    edited = await client.patch(f"/api/presets/{terse['id']}", json={"is_default": True})
    assert edited.status_code == 200, edited.text
    assert edited.json()["is_default"] is True and edited.json()["max_tokens"] == 50
    listed = (await client.get("/api/presets")).json()
    assert [(p["name"], p["is_default"]) for p in listed] == [("Loose", False), ("Terse", True)]

    # bob sees none of alice's, and cannot read, change or delete them: 404.
    bob_headers = await user_header(database_url, "bob")
    assert (await client.get("/api/presets", headers=bob_headers)).json() == []
    for call in (
        client.patch(f"/api/presets/{terse['id']}", json={"name": "Mine"}, headers=bob_headers),
        client.delete(f"/api/presets/{terse['id']}", headers=bob_headers),
    ):
        assert (await call).status_code == 404
    theirs = await new_conversation(client, configuration="small")
    # ...nor put one on his own conversation.
    own = await client.post("/api/conversations", json={}, headers=bob_headers)
    used = await client.patch(
        f"/api/conversations/{own.json()['id']}",
        json={"preset": terse["id"]},
        headers=bob_headers,
    )
    assert used.status_code == 404, used.text
    assert theirs["preset"] is None

    assert (await client.delete(f"/api/presets/{loose['id']}")).status_code == 204
    assert [p["name"] for p in (await client.get("/api/presets")).json()] == ["Terse"]
    assert (await client.delete(f"/api/presets/{loose['id']}")).status_code == 404


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"name": "X", "configuration": "nope"}, "unknown configuration 'nope'"),
        ({"name": "X", "temperature": 2.5}, "temperature is from 0 to 2"),
        ({"name": "X", "temperature": "hot"}, "temperature is a number"),
        ({"name": "X", "configuration": "small", "max_tokens": 101}, "can answer (100 tokens)"),
        ({"name": "X", "max_tokens": 0}, "max_tokens is at least 1"),
        ({"name": "T" * 61}, "at most 60 characters"),
        ({"name": "   "}, "a preset needs a name"),
        ({"name": "Terse"}, "already have a preset named 'Terse'"),
        ({"name": "X", "colour": "red"}, "unknown field 'colour'"),
        ({"name": "X", "is_default": "yes"}, "is_default is true or false"),
        (
            {"name": "X", "configuration": "small", "system_prompt": "word " * 790},
            "leave no room for a message in configuration 'small'",
        ),
    ],
)
async def test_bad_presets_are_refused_and_nothing_is_stored(
    client: AsyncTestClient, body: dict[str, Any], says: str
) -> None:
    terse = await made(client, **TERSE)
    refused = await client.post("/api/presets", json=body)
    assert refused.status_code == 400, refused.text
    assert says in refused.text
    edit = await client.patch(f"/api/presets/{terse['id']}", json=body)
    assert edit.status_code == 400 or body["name"] == "Terse"
    assert (await client.get("/api/presets")).json() == [terse]


async def test_a_conversation_on_a_preset_sends_its_prompt_temperature_and_room(
    client: AsyncTestClient, upstream: FakeUpstream, database_url: str
) -> None:
    await instructions_of("alice", "Call me Al.", database_url)
    terse = await made(client, **TERSE, temperature=0.3, max_tokens=40)
    cid = (await new_conversation(client, configuration="large"))["id"]
    switched = await client.patch(f"/api/conversations/{cid}", json={"preset": terse["id"]})
    assert switched.status_code == 200, switched.text
    assert switched.json()["preset"] == terse["id"]
    assert switched.json()["configuration"] == "small"  # the preset's own

    upstream.forget_requests()
    sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "Hi"})
    assert sent.status_code == 201, sent.text
    body = upstream.requests[-1]["body"]
    assert body["temperature"] == 0.3 and body["max_tokens"] == 40
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a test model.\n\nAnswer in one line.")
    assert system["content"].endswith("Answer in one line.\n\nCall me Al.")
    fit = sent.json()["user"]["fit"]
    assert fit["instructions_tokens"] > 0  # the preset's prompt counts in the head

    # Back to the configuration alone: no preset prompt, the provider's temperature.
    cleared = await client.patch(f"/api/conversations/{cid}", json={"preset": None})
    assert cleared.status_code == 200 and cleared.json()["preset"] is None
    await client.post(f"/api/conversations/{cid}/messages", json={"content": "Again"})
    body = upstream.requests[-1]["body"]
    assert "temperature" not in body and "Answer in one line." not in str(body["messages"])

    # Picking a configuration leaves the preset.
    await client.patch(f"/api/conversations/{cid}", json={"preset": terse["id"]})
    moved = await client.patch(f"/api/conversations/{cid}", json={"configuration": "large"})
    assert moved.json()["preset"] is None and moved.json()["configuration"] == "large"

    # A deleted preset leaves its conversations on their configuration.
    await client.patch(f"/api/conversations/{cid}", json={"preset": terse["id"]})
    assert (await client.delete(f"/api/presets/{terse['id']}")).status_code == 204
    assert (await client.get(f"/api/conversations/{cid}")).json()["preset"] is None


async def test_a_new_conversation_starts_on_the_default_preset(client: AsyncTestClient) -> None:
    terse = await made(client, **TERSE, is_default=True)
    fresh = await client.post("/api/conversations", json={})
    assert fresh.json()["preset"] == terse["id"] and fresh.json()["configuration"] == "small"
    chosen = await new_conversation(client, configuration="large")
    assert chosen["preset"] is None and chosen["configuration"] == "large"
    both = await client.patch(
        f"/api/conversations/{chosen['id']}", json={"preset": terse["id"], "configuration": "large"}
    )
    assert both.status_code == 400 and "a preset has its own" in both.text


async def test_the_gateway_takes_a_preset_by_name_as_its_model(
    client: AsyncTestClient, upstream: FakeUpstream, database_url: str
) -> None:
    await made(client, **TERSE, temperature=0.5, max_tokens=30)
    call = {"model": "preset:Terse", "messages": [{"role": "user", "content": "hello"}]}
    upstream.forget_requests()
    answered = await client.post("/v1/chat/completions", json=call)
    assert answered.status_code == 200, answered.text
    body = upstream.requests[-1]["body"]
    assert body["model"] == "small" and body["temperature"] == 0.5 and body["max_tokens"] == 30
    assert body["messages"][0] == {"role": "system", "content": "Answer in one line."}

    # Unknown, and another user's, are OpenAI's 404 like an unknown model.
    for who in ({}, await user_header(database_url, "bob")):
        missing = await client.post(
            "/v1/chat/completions", json={**call, "model": "preset:Nope"}, headers=who
        )
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    bobs = await client.post(
        "/v1/chat/completions", json=call, headers=await user_header(database_url, "carol")
    )
    assert bobs.status_code == 404, bobs.text


async def test_the_gateways_models_list_the_callers_presets_alone(
    client: AsyncTestClient, database_url: str
) -> None:
    await made(client, **TERSE, max_tokens=30)
    await made(client, name="Roomy", configuration="small")
    bob = await user_header(database_url, "bob")
    bobs = await client.post(
        "/api/presets", json={"name": "Bobs own", "configuration": "small"}, headers=bob
    )
    assert bobs.status_code == 201, bobs.text

    listed = await client.get("/v1/models")
    assert listed.status_code == 200, listed.text
    ids = [entry["id"] for entry in listed.json()["data"]]
    assert "small" in ids and "preset:Terse" in ids and "preset:Roomy" in ids
    assert "preset:Bobs own" not in ids
    by_id = {entry["id"]: entry for entry in listed.json()["data"]}
    terse = by_id["preset:Terse"]["webapp"]
    assert terse["kind"] == "preset" and terse["configuration"] == "small"
    assert terse["max_tokens"] == 30 and terse["model"] == by_id["small"]["webapp"]["model"]
    assert by_id["preset:Roomy"]["webapp"]["max_tokens"] == by_id["small"]["webapp"]["max_tokens"]

    one = await client.get("/v1/models/preset:Terse")
    assert one.status_code == 200 and one.json() == by_id["preset:Terse"]
    # Another user's preset is unknown to the caller, listed or asked for by name.
    for path, who in (("/v1/models/preset:Bobs own", {}), ("/v1/models/preset:Terse", bob)):
        missing = await client.get(path, headers=who)
        assert missing.status_code == 404, missing.text
        assert missing.json()["error"]["code"] == "model_not_found"
    theirs = await client.get("/v1/models", headers=bob)
    assert [e["id"] for e in theirs.json()["data"] if e["id"].startswith("preset:")] == [
        "preset:Bobs own"
    ]

    # A preset whose configuration left the catalog cannot be called: not offered either.
    db = Database(database_url)
    try:
        await db.write(
            lambda session: session.connection().execute(
                update(Preset).where(col(Preset.name) == "Roomy").values(configuration="gone")
            )
        )
    finally:
        await db.dispose()
    ids = [entry["id"] for entry in (await client.get("/v1/models")).json()["data"]]
    assert "preset:Roomy" not in ids and "preset:Terse" in ids
    assert (await client.get("/v1/models/preset:Roomy")).status_code == 404


async def test_export_and_import_carry_the_presets_name(
    client: AsyncTestClient, database_url: str
) -> None:
    terse = await made(client, **TERSE)
    cid = (await new_conversation(client, configuration="large"))["id"]
    await client.patch(f"/api/conversations/{cid}", json={"preset": terse["id"]})
    sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "Hi"})
    assert sent.status_code == 201, sent.text
    exported = (await client.get(f"/api/conversations/{cid}/export?format=json")).json()
    assert exported["conversation"]["preset"] == "Terse"

    back = await client.post("/api/conversations/import", json=exported)
    assert back.status_code == 201, back.text
    assert back.json()["preset"] == terse["id"] and back.json()["configuration"] == "small"
    # bob has no preset of that name: the import goes through without it.
    bobs = await client.post(
        "/api/conversations/import", json=exported, headers=await user_header(database_url, "bob")
    )
    assert bobs.status_code == 201, bobs.text
    assert bobs.json()["preset"] is None and bobs.json()["configuration"] == "small"


async def test_the_preview_follows_a_preset_switch_at_once(client: AsyncTestClient) -> None:
    """The preset's system prompt is in the head of the next send's fit, and its answer
    room in the reserve, as soon as the conversation is switched, before any send."""
    wordy = await made(
        client,
        name="Wordy",
        configuration="large",
        system_prompt="Be thorough. " * 200,
        max_tokens=300,
    )
    cid = (await new_conversation(client, configuration="large"))["id"]

    async def preview() -> dict[str, Any]:
        found = await client.post(f"/api/conversations/{cid}/preview", json={"content": "Hi"})
        assert found.status_code == 200, found.text
        return found.json()["fit"]

    before = await preview()
    await client.patch(f"/api/conversations/{cid}", json={"preset": wordy["id"]})
    after = await preview()
    assert after["estimated_tokens"] > before["estimated_tokens"] + 300
    assert after["reserve"] == 300 != before["reserve"]


async def test_a_fork_keeps_the_preset(client: AsyncTestClient) -> None:
    terse = await made(client, **TERSE)
    cid = (await new_conversation(client, configuration="small"))["id"]
    await client.patch(f"/api/conversations/{cid}", json={"preset": terse["id"]})
    sent = await client.post(f"/api/conversations/{cid}/messages", json={"content": "Hi"})
    forked = await client.post(
        f"/api/conversations/{cid}/fork", json={"message_id": sent.json()["user"]["id"]}
    )
    assert forked.status_code == 201, forked.text
    assert forked.json()["preset"] == terse["id"]


async def test_the_presets_page_refuses_a_bad_form_with_the_reason_and_the_text(
    browser: AsyncTestClient, database_url: str
) -> None:
    await make_user(database_url, "dora")
    csrf = await sign_in(browser, "dora")
    form = {"name": "Hot", "configuration": "small", "temperature": "9", "_csrf_token": csrf}
    refused = await browser.post("/settings/presets", data=form)
    assert refused.status_code == 400
    assert "temperature is from 0 to 2" in refused.text and 'value="Hot"' in refused.text
    assert "No presets yet." in refused.text  # nothing stored

    made_it = await browser.post("/settings/presets", data={**form, "temperature": "1"})
    assert made_it.status_code == 303
    page = await browser.get("/settings/presets")
    assert "Preset" in page.text and '<h2 id="preset-' in page.text


def test_the_vendors_bodies_carry_the_temperature() -> None:
    """Anthropic takes 0 to 1 (a preset's 1.5 goes as 1); Gemini, in generationConfig."""
    hello: list[Any] = [{"role": "user", "content": "hi"}]
    anthropic = AnthropicProvider._body("claude", hello, ChatCall(temperature=1.5))
    assert anthropic["temperature"] == 1.0
    assert "temperature" not in AnthropicProvider._body("claude", hello, ChatCall())
    gemini = to_gemini_request(hello, max_tokens=None, tools=None, temperature=0.4)
    assert gemini["generationConfig"] == {"temperature": 0.4}
    assert "generationConfig" not in to_gemini_request(hello, max_tokens=None, tools=None)
