"""axe-core at its stricter level on every page issue 42 touched: not even a moderate
finding (besides no serious or critical one), light and dark, at desktop and phone sizes:
the chat (with an answer, a cut line, tags and a preset picked), a read-only share page,
the presets page, the organise pages, settings, the embed, sign-in and the admin's
review of a trimmed conversation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import create_conversation, send_by_api, turn_text
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

STRICT = ("moderate", "serious", "critical")
SCHEMES = pytest.mark.parametrize("scheme", ["light", "dark"])


def assert_no_moderate(page: Page, where: str) -> None:
    """No moderate, serious or critical finding at desktop width, then at phone width."""
    for width, height, size in ((1280, 800, "desktop"), (390, 844, "phone")):
        page.set_viewport_size({"width": width, "height": height})
        strict_here(page, f"{where} ({size})")
    page.set_viewport_size({"width": 1280, "height": 800})


def strict_here(page: Page, where: str) -> None:
    """No moderate, serious or critical finding on what `page` shows at its present size."""
    found = violations(page, STRICT)
    assert not found, f"axe on {where}: " + "\n".join(
        f"{v['impact']} {v['id']} ({v['help']}): {v['nodes']}" for v in found
    )


@pytest.fixture(scope="module")
def setting(live_server: Server, upstream_server: FakeUpstream) -> Iterator[dict[str, str]]:
    """A trimmed conversation, tagged, pinned, with a preset picked and a share link; made
    once for the module, its preset and link removed afterwards."""
    upstream_server.reset()
    cid = create_conversation(live_server, "narrow")
    upstream_server.set_reply(
        "Here is `code` and a list:\n\n- one\n- two\n\n" + "More words to fill the window. " * 8
    )
    for number in range(1, 9):
        send_by_api(live_server, cid, turn_text(number))
    upstream_server.reset()
    made = live_server.api(
        "POST",
        "/api/presets",
        json={"name": "Strict axe", "configuration": "narrow", "system_prompt": "Be brief."},
    )
    assert made.status_code == 201, made.text
    preset = made.json()["id"]
    changed = live_server.api(
        "PATCH",
        f"/api/conversations/{cid}",
        json={"title": "Strict axe", "pinned": True, "tags": ["<b>axe</b>"], "preset": preset},
    )
    assert changed.status_code == 200, changed.text
    shared = live_server.api("POST", f"/api/conversations/{cid}/share", json={})
    assert shared.status_code == 201, shared.text
    try:
        yield {"id": cid, "share": shared.json()["url"]}
    finally:
        live_server.api("DELETE", f"/api/shares/{shared.json()['id']}")
        live_server.api("DELETE", f"/api/presets/{preset}")


@SCHEMES
def test_the_signed_in_pages(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    setting: dict[str, str],
    scheme: str,
) -> None:
    cid = setting["id"]
    page = open_page(live_server, f"/c/{cid}", color_scheme=scheme, bypass_csp=True)
    expect(page.locator("#cut-line")).to_be_visible()
    assert_no_moderate(page, f"/c/{{id}} ({scheme})")
    page.locator("#cut-line").get_by_role("button", name="Show which").click()
    expect(page.locator(".message.left-out").first).to_be_visible()
    assert_no_moderate(page, f"/c/{{id}} ({scheme}, left-out turns shown)")
    page.set_viewport_size({"width": 390, "height": 844})
    page.get_by_role("button", name="More: export, delete").click()
    expect(page.locator("#header-menu")).to_be_visible()
    strict_here(page, f"/c/{{id}} ({scheme}, phone, header menu open)")
    page.keyboard.press("Escape")
    page.get_by_role("button", name="Conversations").click()
    strict_here(page, f"/c/{{id}} ({scheme}, phone, drawer open)")
    page.set_viewport_size({"width": 1280, "height": 800})
    empty = create_conversation(live_server)  # the picker and the box as a newcomer sees them
    page.goto(f"/c/{empty}")
    expect(page.locator(".empty-state")).to_be_visible()
    assert_no_moderate(page, f"/c/{{id}} ({scheme}, empty)")
    cut_off = create_conversation(live_server, "short")  # an answer cut at its length limit
    upstream.set_reply("word " * 60)
    send_by_api(live_server, cut_off, "Tell me a lot")
    page.goto(f"/c/{cut_off}")
    expect(page.get_by_role("button", name="Continue")).to_be_visible()
    assert_no_moderate(page, f"/c/{{id}} ({scheme}, Continue offered)")
    for path in (
        f"/c/{cid}/organise",
        f"/c/{cid}/share",
        "/organise",
        "/organise?archived=archived",
        "/settings",
        "/settings/presets",
        "/admin/trimmed",
        f"/admin/c/{cid}",
        "/admin/users",
    ):
        page.goto(path)
        assert_no_moderate(page, f"{path} ({scheme})")
    # The states a form can be left in: a bulk delete waiting for its confirmation, a
    # preset refused (its error tied to the field).
    page.goto("/organise")
    page.get_by_label("Strict axe").check()
    page.get_by_role("button", name="Delete selected").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delete 1 conversation")
    assert_no_moderate(page, f"/organise/bulk, confirming ({scheme})")
    page.goto("/settings/presets")
    new = page.get_by_role("region", name="New preset")
    new.get_by_label("Name", exact=True).fill("Strict axe")  # taken: refused
    new.get_by_label("Configuration", exact=True).select_option("small")
    new.get_by_role("button", name="Create preset").click()
    expect(page.get_by_role("alert")).to_be_visible()
    assert_no_moderate(page, f"/settings/presets, refused ({scheme})")


@SCHEMES
def test_the_pages_without_sign_in(
    live_server: Server,
    browser: Browser,
    setting: dict[str, str],
    scheme: Literal["light", "dark"],
) -> None:
    context = browser.new_context(base_url=live_server.url, color_scheme=scheme, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(setting["share"])
        expect(page.locator(".shared-messages")).to_be_visible()
        assert_no_moderate(page, f"/s/{{token}} ({scheme})")
        page.goto("/embed/help")
        expect(page.locator("form#composer")).to_be_visible()
        assert_no_moderate(page, f"/embed/help ({scheme})")
        page.goto("/login")
        assert_no_moderate(page, f"/login ({scheme})")
        page.fill('input[name="username"]', "nobody")
        page.fill('input[name="password"]', "wrong")
        page.click("button[type=submit]")
        expect(page.locator(".inline-error")).to_be_visible()
        assert_no_moderate(page, f"/login ({scheme}, refused)")
    finally:
        context.close()
