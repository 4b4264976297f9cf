"""Users in the UI (issue "Everyday chat", item 6) in a real Chromium, on a server of
their own: an admin creates, promotes, deactivates and resets; a user changes their own
password; axe checks both pages."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import PASSWORD, USERNAME, OpenPage, Servers

pytestmark = pytest.mark.browser

NEW_PASSWORD = "another correct horse"


def sign_in_as(browser: Browser, url: str, username: str, password: str) -> Page:
    page = browser.new_context(base_url=url, bypass_csp=True).new_page()
    page.goto("/login")
    page.fill('input[name="username"]', username)
    page.fill('input[name="password"]', password)
    page.click("button[type=submit]")
    return page


def test_an_admin_manages_users_and_a_user_changes_their_password(
    browser: Browser, servers: Servers, open_page: OpenPage, sqlite_url: str
) -> None:
    server = servers.start(sqlite_url, name="users")
    page = open_page(server, "/admin/users", bypass_csp=True)
    expect(page.get_by_role("heading", name="Users")).to_be_visible()
    assert_accessible(page, "/admin/users")

    page.get_by_label("Username").fill("nina")
    page.locator('form[action="/admin/users"] input[name="password"]').fill(PASSWORD)
    page.get_by_role("button", name="Create").click()
    expect(page.locator(".notice")).to_have_text("Account created.")
    nina = page.locator("tr", has=page.get_by_role("rowheader", name="nina"))
    expect(nina).to_contain_text("User")

    # The only admin is not offered what the server would refuse (demotion, deactivation);
    # with a second admin, both are.
    me = page.locator("tr", has=page.get_by_role("rowheader", name=f"{USERNAME} (you)"))
    for action in ("Remove admin", "Deactivate"):
        expect(me.get_by_role("button", name=action)).to_have_count(0)
    expect(me).to_contain_text("The only admin")
    nina.get_by_role("button", name="Make admin").click()
    expect(nina).to_contain_text("Admin")
    expect(me.get_by_role("button", name="Remove admin")).to_have_count(1)
    nina.get_by_role("button", name="Remove admin").click()
    expect(nina).not_to_contain_text("Admin")
    expect(me.get_by_role("button", name="Remove admin")).to_have_count(0)

    # nina signs in elsewhere; deactivating her ends that session at once.
    hers = sign_in_as(browser, server.url, "nina", PASSWORD)
    expect(hers.locator("form#composer")).to_be_visible()
    nina.get_by_role("button", name="Deactivate").click()
    expect(page.locator(".notice")).to_contain_text("sessions and tokens no longer work")
    expect(nina).to_contain_text("Deactivated")
    hers.reload()
    expect(hers).to_have_url(re.compile(r"/login\b"))
    refused = sign_in_as(browser, server.url, "nina", PASSWORD)
    expect(refused.locator(".inline-error")).to_be_visible()

    nina.get_by_role("button", name="Activate").click()
    nina.get_by_label("New password for nina").fill(NEW_PASSWORD)
    nina.get_by_role("button", name="Reset password").click()
    expect(page.locator(".notice")).to_contain_text("Password reset")
    again = sign_in_as(browser, server.url, "nina", NEW_PASSWORD)
    expect(again.locator("form#composer")).to_be_visible()

    # nina changes her own password on /settings.
    again.goto("/settings")
    assert_accessible(again, "/settings")
    again.get_by_label("Current password").fill("not it at all")
    again.get_by_label("New password", exact=True).fill(PASSWORD)
    again.get_by_label("New password again").fill(PASSWORD)
    again.get_by_role("button", name="Change password").click()
    expect(again.locator("body")).to_contain_text("the current password is wrong")
    again.goto("/settings")
    again.get_by_label("Current password").fill(NEW_PASSWORD)
    again.get_by_label("New password", exact=True).fill(PASSWORD)
    again.get_by_label("New password again").fill(PASSWORD)
    again.get_by_role("button", name="Change password").click()
    expect(again.locator(".notice")).to_contain_text("Password changed")
    again.goto("/")
    expect(again.locator("form#composer")).to_be_visible()  # this session stays
    expect(
        sign_in_as(browser, server.url, "nina", PASSWORD).locator("form#composer")
    ).to_be_visible()
