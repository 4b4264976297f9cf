"""Branches in a real Chromium: edit in place, regenerate, alternatives (i/n), fork, copy."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import (
    answered,
    by_id,
    composer_ready,
    create_conversation,
    messages,
    send_by_api,
    stored,
    text_of,
)
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser


def last_request_users(upstream: FakeUpstream) -> list[str]:
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    return [m["content"] for m in chats[-1]["body"]["messages"] if m["role"] == "user"]


def test_edit_in_place_enter_sends_escape_cancels(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    upstream.set_reply("First answer.")
    send_by_api(live_server, conversation_id, "Where is Lyon?")
    send_by_api(live_server, conversation_id, "And Porto?")
    page = open_page(live_server, f"/c/{conversation_id}")
    second = by_id(page, messages(page, "user").last)

    second.locator('[data-action="edit"]').click()
    box = second.locator(".edit-form textarea")
    expect(box).to_be_focused()
    expect(second.locator(".content")).to_be_hidden()
    box.fill("Something else")
    box.press("Escape")
    expect(second.locator(".edit-form")).to_have_count(0)
    expect(second.locator(".content")).to_have_text("And Porto?")
    assert len(stored(live_server, conversation_id)["messages"]) == 4, "nothing was sent"

    upstream.set_reply("Porto is in Portugal.")
    second.locator('[data-action="edit"]').click()
    expect(box).to_have_value("And Porto?")
    box.fill("And Porto, which country?")
    box.press("Enter")
    expect(second).to_have_count(0)  # the branch is shown again, from the edited turn on
    assert text_of(answered(page, 2)) == "Porto is in Portugal."
    expect(messages(page, "user")).to_have_count(2)
    edited = by_id(page, messages(page, "user").last)
    expect(edited.locator(".content")).to_have_text("And Porto, which country?")
    expect(edited.locator(".alternative-position")).to_have_text("2/2")
    assert last_request_users(upstream) == ["Where is Lyon?", "And Porto, which country?"]
    rows = stored(live_server, conversation_id)["messages"]
    assert [r["content"] for r in rows if r["role"] == "user"] == [
        "Where is Lyon?",
        "And Porto, which country?",
    ]
    composer_ready(page)


def test_regenerate_and_navigate_alternatives(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    upstream.set_reply("The first take.")
    send_by_api(live_server, conversation_id, "Tell me about bridges")
    page = open_page(live_server, f"/c/{conversation_id}")
    expect(page.locator(".alternatives")).to_have_count(0)

    upstream.set_reply("The second take.")
    first = by_id(page, messages(page, "assistant").last)
    first.locator('[data-action="regenerate"]').click()
    expect(first).to_have_count(0)
    assert text_of(answered(page, 1)) == "The second take."
    expect(messages(page, "user")).to_have_count(1)
    position = page.locator("#messages .alternative-position")
    expect(position).to_have_text("2/2")
    expect(page.get_by_role("button", name="Next alternative")).to_be_disabled()

    page.get_by_role("button", name="Previous alternative").click()
    expect(position).to_have_text("1/2")
    expect(messages(page, "assistant").last.locator(".content")).to_have_text("The first take.")
    expect(page.get_by_role("button", name="Previous alternative")).to_be_disabled()

    # A send continues the branch shown; the page and the API agree.
    upstream.set_reply("Sure.")
    page.locator("#composer textarea").fill("More, please")
    page.locator("#composer textarea").press("Enter")
    assert text_of(answered(page, 2)) == "Sure."
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    sent = [m["content"] for m in chats[-1]["body"]["messages"]]
    assert "The first take." in sent and "The second take." not in sent
    page.reload()
    expect(position).to_have_text("1/2")
    assert [m["content"] for m in stored(live_server, conversation_id)["messages"]] == [
        "Tell me about bridges",
        "The first take.",
        "More, please",
        "Sure.",
    ]
    page.get_by_role("button", name="Next alternative").click()
    expect(position).to_have_text("2/2")
    expect(messages(page, "assistant")).to_have_count(1)
    expect(messages(page, "assistant").last.locator(".content")).to_have_text("The second take.")


def test_fork_and_copy(live_server: Server, upstream: FakeUpstream, open_page: OpenPage) -> None:
    conversation_id = create_conversation(live_server)
    upstream.set_reply("Rivers run to the sea.")
    send_by_api(live_server, conversation_id, "Where do rivers go?")
    upstream.set_reply("Mostly downhill.")
    send_by_api(live_server, conversation_id, "And how?")
    page = open_page(live_server, f"/c/{conversation_id}")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)

    first_answer = by_id(page, messages(page, "assistant").first)
    first_answer.locator('[data-action="copy"]').click()
    expect(first_answer.locator('[data-action="copy"]')).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "Rivers run to the sea."
    question = by_id(page, messages(page, "user").last)
    question.locator('[data-action="copy"]').click()
    assert page.evaluate("navigator.clipboard.readText()") == "And how?"

    first_answer.locator('[data-action="fork"]').click()
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(conversation_id) + r")[\w-]+$"))
    forked_id = page.url.rsplit("/", 1)[1]
    expect(messages(page, "user")).to_have_count(1)
    expect(messages(page, "user").first.locator(".content")).to_have_text("Where do rivers go?")
    assert text_of(answered(page, 1)) == "Rivers run to the sea."
    expect(page.locator(".conversation-list .current .tag")).to_have_text("fork")
    rows = stored(live_server, forked_id)["messages"]
    assert [r["seq"] for r in rows] == [1, 2]
    assert len(stored(live_server, conversation_id)["messages"]) == 4, "the source is kept"


def test_a_refused_branch_action_says_why_and_keeps_the_page(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "First")
    page = open_page(live_server, f"/c/{conversation_id}")
    upstream.set_reply(" ".join(f"w{i}" for i in range(3000)))  # minutes: it is stopped
    upstream.chunk_delay = 0.05
    try:
        page.locator("#composer textarea").fill("Second, slowly")
        page.locator("#composer textarea").press("Enter")
        expect(messages(page, "assistant")).to_have_count(2)
        expect(messages(page, "assistant").last).to_have_attribute("data-status", "streaming")
        by_id(page, messages(page, "assistant").first).locator('[data-action="regenerate"]').click()
        expect(page.locator("#composer-error")).to_contain_text("still being written")
        expect(messages(page, "assistant")).to_have_count(2)
        first_user = by_id(page, messages(page, "user").first)
        first_user.locator('[data-action="edit"]').click()
        first_user.locator(".edit-form textarea").press("Enter")
        expect(messages(page, "user")).to_have_count(2)
        expect(page.locator("#composer-error")).to_contain_text("still being written")
        page.locator('#composer [data-action="stop"]').click()
        expect(messages(page, "assistant").last).to_have_attribute("data-status", "stopped")
    finally:
        upstream.chunk_delay = 0
    composer_ready(page)


def test_a_regenerated_answer_streams_survives_a_reload_and_stops(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    upstream.set_reply("Short.")
    send_by_api(live_server, conversation_id, "Tell me a long story")
    send_by_api(live_server, conversation_id, "And another")
    page = open_page(live_server, f"/c/{conversation_id}")
    upstream.set_reply(" ".join(f"w{i}" for i in range(3000)))  # minutes: it is stopped
    upstream.chunk_delay = 0.03
    try:
        # Regenerate the first turn: the new branch leaves the second turn behind.
        by_id(page, messages(page, "assistant").first).locator('[data-action="regenerate"]').click()
        expect(messages(page, "assistant")).to_have_count(1)
        answer = messages(page, "assistant").last
        expect(answer).to_have_attribute("data-status", "streaming")
        expect(answer.locator(".content")).to_contain_text("w20")
        page.reload()  # re-attaches to the answer, on its branch
        expect(messages(page, "assistant")).to_have_count(1)
        expect(answer).to_have_attribute("data-status", "streaming")
        expect(answer.locator(".content")).to_contain_text("w60")
        page.locator('#composer [data-action="stop"]').click()
        expect(answer).to_have_attribute("data-status", "stopped")
    finally:
        upstream.chunk_delay = 0
    composer_ready(page)
    rows = stored(live_server, conversation_id)["messages"]
    assert [r["status"] for r in rows] == ["complete", "stopped"]
    assert rows[0]["alternatives"]["count"] == 2 and rows[1]["content"].startswith("w0 w1")
