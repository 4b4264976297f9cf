"""axe-core on every page: no serious or critical finding, in light and dark, at desktop
and phone width (chat, trimmed chat, settings, the admin pages, sign-in, the embed)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import PASSWORD, OpenPage, Server, Servers
from tests.browser.helpers import create_conversation, send_by_api, turn_text
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def trimmed(live_server: Server, upstream_server: FakeUpstream) -> str:
    """A conversation with code (one line too long for the bubble), a table, math and
    trimmed turns, made once for the module."""
    upstream_server.reset()
    conversation_id = create_conversation(live_server, "narrow")
    upstream_server.set_reply(
        "Try `x`:\n\n```python\nprint(" + "1 + " * 40 + "1)\n```\n\n"
        "| size | tokens |\n|---|---|\n| medium | 16,384 |\n\nand $x^2$. https://example.com"
    )
    for number in range(1, 8):
        send_by_api(live_server, conversation_id, turn_text(number))
    upstream_server.reset()
    return conversation_id


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_chat_with_an_opened_marker_at_desktop_and_phone_width(
    live_server: Server, open_page: OpenPage, trimmed: str, scheme: str
) -> None:
    page = open_page(live_server, f"/c/{trimmed}", color_scheme=scheme, bypass_csp=True)
    page.locator("#cut-line").get_by_role("button", name="Show which").click()
    expect(page.locator(".message.left-out").first).to_be_visible()
    page.locator(".trim-marker").last.evaluate("el => { el.open = true; }")
    assert_accessible(page, f"/c/{{id}} ({scheme}, marker open)")
    page.set_viewport_size({"width": 390, "height": 844})
    assert_accessible(page, f"/c/{{id}} ({scheme}, phone)")
    page.get_by_role("button", name="Conversations").click()
    assert_accessible(page, f"/c/{{id}} ({scheme}, phone, drawer open)")


def accessible_at_both_sizes(page: Page, where: str) -> None:
    """axe on what `page` shows at desktop width, then at phone width (and back)."""
    page.set_viewport_size({"width": 1280, "height": 800})
    assert_accessible(page, where)
    page.set_viewport_size({"width": 390, "height": 844})
    assert_accessible(page, f"{where}, phone")
    page.set_viewport_size({"width": 1280, "height": 800})


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_settings_and_admin_pages(
    live_server: Server, open_page: OpenPage, trimmed: str, scheme: str
) -> None:
    page = open_page(live_server, "/settings", color_scheme=scheme, bypass_csp=True)
    accessible_at_both_sizes(page, f"/settings ({scheme})")
    page.goto("/admin/trimmed")
    expect(page.locator(f'[data-conversation-id="{trimmed}"]')).to_be_visible()
    accessible_at_both_sizes(page, f"/admin/trimmed ({scheme})")
    page.goto(f"/admin/c/{trimmed}")
    expect(page.locator(".code-block pre").first).to_have_attribute("tabindex", "0")
    accessible_at_both_sizes(page, f"/admin/c/{{id}} ({scheme})")
    page.goto("/admin/users")
    accessible_at_both_sizes(page, f"/admin/users ({scheme})")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_an_empty_chat_and_the_embed(live_server: Server, open_page: OpenPage, scheme: str) -> None:
    conversation_id = live_server.api("POST", "/api/conversations", json={}).json()["id"]
    page = open_page(live_server, f"/c/{conversation_id}", color_scheme=scheme, bypass_csp=True)
    expect(page.locator(".empty-state")).to_be_visible()
    accessible_at_both_sizes(page, f"/c/{{id}} (empty, {scheme})")
    page.goto("/embed/help")
    expect(page.locator("form#composer")).to_be_visible()
    accessible_at_both_sizes(page, f"/embed/help ({scheme})")


def test_setup_and_sign_in(browser: Browser, servers: Servers, sqlite_url: str) -> None:
    database = sqlite_url  # migrated, and no account yet
    servers.tokens[database] = ""  # no account: the first visitor creates the admin
    server = servers._launch(database, "fresh", None)
    server.wait_until_ready()
    context = browser.new_context(base_url=server.url, bypass_csp=True)
    page = context.new_page()
    page.goto("/")
    expect(page).to_have_url(f"{server.url}/setup")
    assert_accessible(page, "/setup")
    page.fill('input[name="username"]', "owner")
    page.fill('input[name="password"]', PASSWORD)
    page.fill('input[name="password2"]', PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("form#composer")).to_be_visible()
    page.click("text=Sign out")
    expect(page).to_have_url(f"{server.url}/login")
    assert_accessible(page, "/login")
    page.fill('input[name="password"]', "wrong")
    page.fill('input[name="username"]', "owner")
    page.click("button[type=submit]")
    expect(page.locator(".inline-error")).to_be_visible()
    accessible_at_both_sizes(page, "/login (an error shown)")
    page.emulate_media(color_scheme="dark")
    accessible_at_both_sizes(page, "/login (an error shown, dark)")
    context.close()


def test_keyboard_only_search_opens_a_hit_and_the_cut_line_opens(
    live_server: Server, open_page: OpenPage, trimmed: str
) -> None:
    page = open_page(live_server, f"/c/{trimmed}")
    expect(page.locator("#composer textarea")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    # Backwards through the page to the sidebar's search box: past every message's own
    # controls (copy, edit, regenerate, fork, pin), so allow for many stops.
    for _ in range(600):
        if page.evaluate("document.activeElement.id") == "search-q":
            break
        page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.id") == "search-q"
    page.keyboard.type("turn 2")
    expect(page.locator("#search-results a").first).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#search-results') !== null")
    page.keyboard.press("Enter")
    expect(page.locator(".message.found")).to_be_in_viewport()

    show = page.locator('#cut-line [data-action="show-left-out"]')
    expect(show).to_have_accessible_name(re.compile("^Show which"))
    show.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".message.left-out").first).to_be_visible()
    expect(show).to_have_attribute("aria-expanded", "true")
    expect(show).to_have_accessible_name(re.compile("^Hide which"))
