"""Issue 42's items that other browser tests check at one size, here at desktop and phone
sizes alike, by clicks and keys as a person would:
- 5, words and speech: the cut line in plain words on one line, Show/Hide a toggle; a
  screen reader's region says a streamed answer once, when it completes;
- 7, the small ones: setup signs the admin in (the users page does not say "never"), the
  only admin is offered neither Remove admin nor Deactivate, a refused sign-in keeps the
  username and focuses the password; Delete names the title as renamed; the composer's
  first Tab reaches the paperclip; Ctrl+Shift+; copies the newest answer and Ctrl+Shift+O
  starts a new conversation."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PASSWORD, OpenPage, Server, Servers
from tests.browser.helpers import (
    answered,
    create_conversation,
    messages,
    send_by_api,
    stored,
    turn_text,
)
from tests.browser.test_chat_ui import SPOKEN
from tests.browser.test_no_moderate import strict_here
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])


def on_phone(viewport: tuple[int, int]) -> bool:
    return viewport[0] < 500


def one_line(page: Page, selector: str) -> None:
    """The element's text takes one line: no taller than its line height (and a little)."""
    height, line = page.locator(selector).evaluate(
        "e => [e.getBoundingClientRect().height, parseFloat(getComputedStyle(e).lineHeight)"
        " || parseFloat(getComputedStyle(e).fontSize) * 1.5]"
    )
    assert height <= line * 1.6 + 12, (selector, height, line)  # one line, its padding


@SIZES
def test_words_and_speech(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    conversation_id = create_conversation(live_server, "narrow")
    for number in range(1, 9):
        send_by_api(live_server, conversation_id, turn_text(number))
    newest = [m for m in stored(live_server, conversation_id)["messages"] if m["dropped_turns"]]
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    line = page.locator("#messages .cut-line")
    expect(line).to_have_count(1)
    words = f"The model no longer sees the {newest[-1]['dropped_turns']} turns above"
    expect(line.locator(".cut-words")).to_have_text(words)
    line.scroll_into_view_if_needed()
    one_line(page, "#messages .cut-line .cut-words")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    toggle = line.locator('[data-action="show-left-out"]')
    toggle.click()
    expect(toggle).to_have_text("Hide which")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#messages .message.left-out").first).to_be_visible()
    toggle.click()
    expect(toggle).to_have_text("Show which")
    expect(page.locator("#messages .message.left-out")).to_have_count(0)

    page.evaluate(SPOKEN)
    upstream.set_reply(" ".join(f"piece{i}" for i in range(30)))
    upstream.chunk_delay = 0.02
    try:
        box = page.locator("#composer textarea")
        box.click()
        page.keyboard.type("One more, please")
        box.press("Enter")
        answer = answered(page, 9)
    finally:
        upstream.chunk_delay = 0
    said = [s for s in page.evaluate("window.__spoken") if "piece" in s]
    assert len(said) == 1 and "piece29" in said[0], said  # once, whole, at the end
    assert said[0].startswith(answer.get_attribute("aria-label") or "?"), said


@SIZES
def test_setup_users_and_a_refused_sign_in(
    browser: Browser, servers: Servers, sqlite_url: str, viewport: tuple[int, int]
) -> None:
    servers.tokens[sqlite_url] = ""  # no account: the first visitor creates the admin
    server = servers._launch(sqlite_url, f"fresh-{viewport[0]}", None)
    server.wait_until_ready()
    context = browser.new_context(
        base_url=server.url,
        viewport={"width": viewport[0], "height": viewport[1]},
        bypass_csp=True,  # for axe
    )
    try:
        page = context.new_page()
        page.goto("/")
        strict_here(page, f"/setup ({viewport[0]})")
        page.get_by_label("Username").fill("owner")
        page.get_by_label("Password (8 characters or more)").fill(PASSWORD)
        page.get_by_label("Password again").fill(PASSWORD)
        page.get_by_role("button", name="Create the admin account").click()
        expect(page.locator("form#composer")).to_be_visible()
        page.goto("/admin/users")
        me = page.locator("tr", has=page.get_by_role("rowheader", name="owner (you)"))
        expect(me).not_to_contain_text("never")
        expect(me).to_contain_text("The only admin")
        for action in ("Remove admin", "Deactivate"):
            expect(me.get_by_role("button", name=action)).to_have_count(0)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        strict_here(page, f"/admin/users, the only admin ({viewport[0]})")

        page.goto("/settings")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile("/login$"))
        page.get_by_label("Username").fill("owner")
        page.get_by_label("Password").fill("wrong password")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator(".inline-error")).to_contain_text("Wrong username or password")
        expect(page.get_by_label("Username")).to_have_value("owner")
        expect(page.get_by_label("Password")).to_be_focused()
        page.keyboard.type(PASSWORD)
        page.keyboard.press("Enter")
        expect(page.locator("form#composer")).to_be_visible()
    finally:
        context.close()


@SIZES
def test_rename_then_delete_first_tab_and_shortcuts(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    box = page.locator("#composer textarea")
    expect(box).to_be_focused()
    page.keyboard.type("Hello from the keyboard")
    page.keyboard.press("Tab")  # the paperclip people see, not the hidden file input
    assert page.evaluate("document.activeElement.dataset.action") == "attach"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.action") == "send"
    page.keyboard.press("Enter")
    answered(page, 1)
    expect(box).to_be_focused()

    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    newest = stored(live_server, conversation_id)["messages"][-1]
    page.keyboard.press("Control+Shift+Semicolon")
    expect(page.locator("#announcer")).to_have_text("Copied answer 1.")
    assert page.evaluate("navigator.clipboard.readText()") == newest["content"]

    title = page.locator("#title")
    title.click()
    title.fill(f"Renamed at {viewport[0]}")
    title.press("Enter")
    expect(page.locator("#title-hint")).to_have_text("Renamed.")
    prompts: list[str] = []

    def dismiss(dialog: Any) -> None:
        prompts.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    if on_phone(viewport):
        page.get_by_role("button", name="More: export, delete").click()
    page.locator(".header-actions .delete-conversation").click()
    page.wait_for_timeout(300)
    assert prompts and f"Renamed at {viewport[0]}" in prompts[0], prompts
    assert stored(live_server, conversation_id)["title"] == f"Renamed at {viewport[0]}"

    page.keyboard.press("Escape")
    box.focus()
    page.keyboard.press("Control+Shift+KeyO")
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(conversation_id) + r")[\w-]+$"))
    expect(page.locator("#composer textarea")).to_be_focused()
    expect(messages(page, "user")).to_have_count(0)
