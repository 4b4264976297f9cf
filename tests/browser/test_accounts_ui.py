"""Accounts, admin review and the embed, in Chromium against the served app."""

from __future__ import annotations

import asyncio

import httpx
from playwright.sync_api import Browser, Route, expect

from tests.browser.conftest import (
    PASSWORD,
    USERNAME,
    HostPage,
    OpenPage,
    Server,
    Servers,
    outside_playwright,
)
from tests.browser.helpers import create_conversation, send_by_api, turn_text
from tests.factories import accounts_call
from tests.upstream import FakeUpstream


def add_user(database_url: str, name: str) -> None:
    """An account of the browser tests' password (no token), made outside Playwright."""
    outside_playwright(asyncio.run, accounts_call(database_url, "create_user", name, PASSWORD))


def test_first_run_setup_then_sign_in(browser: Browser, servers: Servers, sqlite_url: str) -> None:
    database = sqlite_url  # migrated, and no account yet
    servers.tokens[database] = ""  # no account: the first visitor creates the admin
    server = servers._launch(database, "fresh", None)
    server.wait_until_ready()
    page = browser.new_context(base_url=server.url).new_page()
    page.goto("/")
    expect(page).to_have_url(f"{server.url}/setup")
    page.fill('input[name="username"]', "owner")
    page.fill('input[name="password"]', PASSWORD)
    page.fill('input[name="password2"]', PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("form#composer")).to_be_visible()
    expect(page.get_by_text("Trimmed conversations")).to_be_visible()
    # Setting up signed the admin in: that is a sign-in, not "never".
    page.goto("/admin/users")
    owner = page.locator("tr", has=page.get_by_role("rowheader", name="owner (you)"))
    expect(owner).not_to_contain_text("never")
    page.goto("/")
    page.click("text=Sign out")
    expect(page).to_have_url(f"{server.url}/login")
    page.goto("/setup")
    expect(page).to_have_url(f"{server.url}/login")  # setup is offered only once
    page.fill('input[name="username"]', "owner")
    page.fill('input[name="password"]', "wrong password")
    page.click("button[type=submit]")
    expect(page.locator(".inline-error")).to_contain_text("Wrong username or password")
    # The username stays; only the password is typed again, where the focus already is.
    expect(page.locator('input[name="username"]')).to_have_value("owner")
    expect(page.locator('input[name="password"]')).to_be_focused()
    page.keyboard.type(PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("form#composer")).to_be_visible()


def test_a_second_user_gets_404_for_the_first_users_conversation(
    browser: Browser, live_server: Server
) -> None:
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "my private plans")
    add_user(live_server.database_url, "second")
    page = browser.new_context(base_url=live_server.url).new_page()
    page.goto("/login")
    page.fill('input[name="username"]', "second")
    page.fill('input[name="password"]', PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("form#composer")).to_be_visible()
    response = page.goto(f"/c/{conversation_id}")
    assert response is not None and response.status == 404
    expect(page.locator("body")).not_to_contain_text("my private plans")
    admin_page = page.goto("/admin/trimmed")
    assert admin_page is not None and admin_page.status == 403


def test_admin_sees_the_trimmed_conversation_and_its_review(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server, "tiny")
    for number in range(1, 8):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, "/admin/trimmed")  # the test user is the admin
    row = page.locator(f'[data-conversation-id="{conversation_id}"]')
    expect(row).to_be_visible()
    expect(page.locator("svg").first).to_be_visible()
    page.goto(f"/admin/c/{conversation_id}")
    trimmed = page.locator('[data-role="user"][data-dropped-turns]')
    assert trimmed.count() >= 1
    expect(page.locator("body")).to_contain_text("left out by")
    assert USERNAME in page.locator("body").inner_text()


def test_the_embed_chats_inside_an_allowed_host_and_is_refused_elsewhere(
    browser: Browser,
    live_server: Server,
    upstream: FakeUpstream,
    host_page: HostPage,
    embed_host_port: int,
) -> None:
    from tests.live_server import free_port

    embed_url = f"{live_server.url}/embed/help"
    page = browser.new_context().new_page()
    page.goto(host_page(embed_host_port, embed_url))
    frame = page.frame_locator("#chat")
    expect(frame.get_by_text("Hello from the help desk.")).to_be_visible()
    frame.locator("#composer textarea").fill("Where is my parcel?")
    frame.locator("#composer textarea").press("Enter")
    answer = frame.locator('[data-role="assistant"][data-status="complete"]')
    expect(answer).to_contain_text("Echo from small")
    page.reload()
    reloaded = page.frame_locator("#chat")
    # Chromium keeps only a Partitioned (CHIPS) cookie in a cross-site frame.
    expect(reloaded.get_by_text("Where is my parcel?", exact=True)).to_be_visible()

    refused = browser.new_context().new_page()
    # Chromium says why it blocked the frame; until then it might yet have loaded it.
    with refused.expect_console_message(lambda message: "frame-ancestors" in message.text):
        refused.goto(host_page(free_port(), embed_url))
    assert refused.frame_locator("#chat").locator("#composer").count() == 0


def test_the_embed_chats_in_a_browser_that_keeps_no_cookie_at_all(
    browser: Browser,
    live_server: Server,
    upstream: FakeUpstream,
    host_page: HostPage,
    embed_host_port: int,
) -> None:
    """As in a browser that blocks every cookie in a cross-site frame: each response from
    the app reaches the page without its Set-Cookie. The page's signed visitor id, sent by
    htmx as a header, carries the whole conversation (send, stream, stop)."""
    context = browser.new_context()
    page = context.new_page()
    seen: list[str] = []

    def without_cookies(route: Route) -> None:
        # Fetched outside the browser (Playwright's own fetch would store the cookies).
        request = route.request
        seen.append(request.headers.get("cookie", ""))
        response = httpx.request(
            request.method,
            request.url,
            headers={k: v for k, v in request.headers.items() if k.lower() != "cookie"},
            content=request.post_data_buffer,
            timeout=30,
        )
        headers = {
            k: v
            for k, v in response.headers.items()
            if k.lower() not in ("set-cookie", "content-length", "content-encoding")
        }
        route.fulfill(status=response.status_code, headers=headers, body=response.content)

    context.route(f"{live_server.url}/**", without_cookies)
    page.goto(host_page(embed_host_port, f"{live_server.url}/embed/help"))
    frame = page.frame_locator("#chat")
    frame.locator("#composer textarea").fill("No cookies here")
    frame.locator("#composer textarea").press("Enter")
    answer = frame.locator('[data-role="assistant"][data-status="complete"]')
    expect(answer).to_contain_text("Echo from small")
    assert context.cookies(live_server.url) == [], "the browser kept no cookie"
    assert not any(seen), "no request carried a cookie"
