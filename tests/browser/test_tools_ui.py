"""Tool calls on the chat page, in a real Chromium at desktop and phone sizes, driven by
clicks: the model (the fake upstream) calls a tool of a real MCP server (the fixture on
stdio, tests/mcp_fixture.py); the call shows as it happens as a part that opens on its
arguments and result, shown as text; a server that asks approval gets Allow and Deny; Stop
while a call waits ends the answer and keeps what was done."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import answered, composer_ready, create_conversation, messages
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser
SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
MARKUP = '<script>alert("tool")</script><a href="javascript:alert(1)">click</a>'
"""What the fixture's `markup` tool answers."""


def ask(page: Page, text: str) -> None:
    page.locator("#composer textarea").fill(text)
    page.locator('#composer [data-action="send"]').click()


@SIZES
def test_a_tool_call_streams_as_a_part_that_opens_on_its_result_as_text(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    viewport: tuple[int, int],
) -> None:
    conversation_id = create_conversation(live_server, "tooled")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport, bypass_csp=True)
    upstream.stall(1.5, count=2)  # each model call: the page sees the call between them
    ask(page, "Show me some markup. Use tool please.")
    streaming = page.locator('#messages [data-role="assistant"][data-status="streaming"]')
    expect(streaming.locator('.tool-call[data-state="ok"]')).to_have_count(1, timeout=15_000)
    answer = answered(page, 1)
    part = answer.locator(".tool-call")
    expect(part).to_have_count(1)
    expect(part.locator("summary")).to_contain_text("markup")
    expect(part).to_have_attribute("data-state", "ok")
    expect(part.locator(".tool-result")).to_be_hidden()  # closed until opened
    part.locator("summary").click()
    result = part.locator(".tool-result")
    expect(result).to_be_visible()
    assert result.inner_text() == MARKUP, "shown as text, not as HTML"
    assert answer.locator(".tool-calls script, .tool-calls a").count() == 0
    expect(part.locator(".tool-arguments")).to_have_text("{}")
    expect(answer.locator(".content")).to_contain_text("I saw 3 messages")
    box = part.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport[0]
    assert_accessible(page, f"a conversation with a tool call ({viewport[0]} wide)")
    events = page.evaluate("window.__sse.map(e => e.event)")
    assert events, "the answer streamed into the page"


@SIZES
def test_allow_runs_the_call_and_deny_tells_the_model(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    viewport: tuple[int, int],
) -> None:
    conversation_id = create_conversation(live_server, "guarded")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport, bypass_csp=True)
    ask(page, "Say it back. Use tool please.")
    prompt = page.locator(".tool-approval")
    expect(prompt).to_be_visible(timeout=20_000)
    expect(prompt).to_contain_text("echo")
    expect(page.locator("#announcer")).to_contain_text("The model wants to run echo")
    assert_accessible(page, f"a call waiting for approval ({viewport[0]} wide)")
    allow = prompt.get_by_role("button", name="Allow echo")
    expect(allow).to_be_in_viewport()
    allow.click()
    part = page.locator('#messages [data-role="assistant"] .tool-call')
    expect(part.locator("summary")).to_be_focused()  # not lost with the prompt that went
    answered(page, 1)
    expect(page.locator(".tool-approval")).to_have_count(0)
    expect(part).to_have_attribute("data-state", "ok")
    part.locator("summary").click()
    expect(part.locator(".tool-result")).to_have_text("echo")
    composer_ready(page)

    ask(page, "Again please. Use tool please.")
    prompt = page.locator(".tool-approval")
    expect(prompt).to_be_visible(timeout=20_000)
    prompt.get_by_role("button", name="Deny echo").click()
    denied = answered(page, 2)
    expect(denied.locator(".tool-call")).to_have_attribute("data-state", "denied")
    expect(denied.locator(".tool-state")).to_have_text("Not allowed")
    told = [m for m in upstream.chats[-1]["messages"] if m["role"] == "tool"]
    assert "declined" in told[-1]["content"], "the model was told the user declined"


@SIZES
def test_stop_while_a_call_waits_ends_the_loop_and_keeps_the_call(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    viewport: tuple[int, int],
) -> None:
    conversation_id = create_conversation(live_server, "guarded")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    ask(page, "Say it back. Use tool please.")
    expect(page.locator(".tool-approval")).to_be_visible(timeout=20_000)
    asked = len(upstream.chats)
    page.locator('[data-action="stop"]').click()
    answer = answered(page, 1, "stopped")
    expect(answer.locator(".status")).to_have_text("Stopped")
    expect(page.locator(".tool-approval")).to_have_count(0)
    expect(answer.locator(".tool-call")).to_have_count(1)  # the call made so far stays
    expect(answer.locator(".tool-call summary")).to_contain_text("echo")
    composer_ready(page)
    later = len(upstream.chats)
    assert later == asked, "the loop ended: the model was not asked again"
    assert messages(page, "assistant").count() == 1
