"""The composer and Continue in a real Chromium, at desktop and phone sizes: the box grows
with what is typed (up to a limit), Enter while an answer streams says why nothing was
sent and keeps the text, and Continue on an answer cut off by its length limit goes on in
the same answer: one message, one Copy that copies all of it, one rating."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import answered, create_conversation, height_of, messages, stored
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])


@SIZES
def test_the_composer_grows_says_why_enter_waits_and_continue_goes_on(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    conversation_id = create_conversation(live_server, "short")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    box = page.locator("#composer textarea")
    empty = height_of(box)
    box.fill("one line\n" * 5)
    taller = height_of(box)
    assert taller > empty + 30, (empty, taller)
    box.fill("one line\n" * 80)
    assert height_of(box) <= viewport[1] * 0.4 + 1, "it stops growing and scrolls"
    box.fill("")
    assert height_of(box) == pytest.approx(empty, abs=1)

    # An answer long enough to be cut at 20 tokens, streamed slowly enough to press Enter.
    upstream.set_reply("word " * 60)
    upstream.chunk_delay = 0.15
    box.fill("Tell me a lot")
    box.press("Enter")
    expect(messages(page, "assistant").last).to_have_attribute("data-status", "streaming")
    box.fill("my next question")
    box.press("Enter")
    note = page.locator("#composer-error [data-busy-note]")
    expect(note).to_contain_text("an answer is still being written")
    expect(box).to_have_value("my next question")
    answer = answered(page, 1)
    expect(note).to_have_count(0)
    upstream.chunk_delay = 0

    expect(answer).to_contain_text("Cut off at its length limit")
    upstream.set_reply("and that is all.")
    first_part = stored(live_server, conversation_id)["messages"][1]["content"]
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    go_on = answer.get_by_role("button", name="Continue")
    if viewport[0] < 500:
        box_of = go_on.bounding_box()
        assert box_of is not None and box_of["height"] >= 44, box_of
    go_on.click()
    joined = answered(page, 1)  # the same answer, streamed again in its place
    expect(joined).to_contain_text("and that is all.")
    expect(box).to_have_value("my next question")  # Continue leaves the draft alone
    rows = stored(live_server, conversation_id)["messages"]
    assert [r["role"] for r in rows] == ["user", "assistant"], "no turn of its own"
    assert rows[1]["content"] == first_part + "and that is all."
    assert rows[1]["finish_reason"] == "stop"
    expect(messages(page, "user")).to_have_count(1)
    expect(page.locator("#messages")).not_to_contain_text("Continue exactly")
    expect(joined).not_to_contain_text("Cut off at its length limit")
    expect(joined.get_by_role("button", name="Continue")).to_have_count(0)
    expect(joined.get_by_role("button", name="Copy answer 1")).to_have_count(1)
    expect(joined.get_by_role("button", name="Good answer")).to_have_count(1)
    joined.get_by_role("button", name="Copy answer 1").click()
    assert page.evaluate("navigator.clipboard.readText()") == rows[1]["content"]
    page.reload()
    expect(messages(page, "assistant")).to_have_count(1)
    expect(page.get_by_role("button", name="Continue")).to_have_count(0)
