"""Presets from the browser, as a person makes and uses one (DESIGN 15): from Settings to
the presets page, a new preset typed in and made the default, then picked in a
conversation's header without typing a message first; the answer's request carries the
preset's system prompt and temperature. At desktop and phone sizes, axe-clean light and
dark."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import answered, create_conversation, stored
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
PROMPT = "Talk like a ship's cook."


def preset_named(server: Server, name: str) -> dict[str, object]:
    listed = server.api("GET", "/api/presets").json()
    return next(p for p in listed if p["name"] == name)


def delete_presets(server: Server) -> None:
    """The package's server is shared: no preset (nor a default one) outlives the test."""
    for preset in server.api("GET", "/api/presets").json():
        server.api("DELETE", f"/api/presets/{preset['id']}")


@SIZES
def test_a_preset_is_made_made_default_and_picked_in_the_header(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    name = f"Galley {viewport[0]}"
    conversation_id = create_conversation(live_server, "tiny")
    try:
        page = open_page(live_server, "/settings", viewport=viewport, bypass_csp=True)
        page.get_by_role("link", name="manage your presets").click()
        expect(page).to_have_url(re.compile(r"/settings/presets$"))
        expect(page.get_by_text("No presets yet.")).to_be_visible()
        page.get_by_label("Name", exact=True).click()
        page.keyboard.type(name)
        page.get_by_label("Configuration", exact=True).select_option("small")
        page.get_by_label("System prompt").click()
        page.keyboard.type(PROMPT)
        page.get_by_label("Temperature").click()
        page.keyboard.type("0.7")
        page.get_by_role("button", name="Create preset").click()
        expect(page.get_by_role("status")).to_have_text("Preset created.")
        preset = preset_named(live_server, name)
        assert preset["temperature"] == 0.7 and preset["is_default"] is False

        # Made the default from its own form.
        section = page.get_by_role("region", name=name)
        section.get_by_label("Use for new conversations").check()
        section.get_by_role("button", name=f"Save {name}").click()
        expect(page.get_by_role("status")).to_have_text("Preset saved.")
        expect(page.get_by_role("heading", name=f"{name} default")).to_be_visible()
        assert preset_named(live_server, name)["is_default"] is True
        assert_accessible(page, f"/settings/presets (light, {viewport})")

        # Picked in the header with the message box still empty.
        page.goto(f"/c/{conversation_id}")
        box = page.locator("#composer textarea")
        expect(box).to_have_value("")
        picker = page.locator("#conversation-configuration")
        with page.expect_response(lambda r: r.url.endswith("/configuration")) as switched:
            picker.select_option(label=f"{name} · small")
        assert switched.value.ok, switched.value.status
        assert stored(live_server, conversation_id)["preset"] == preset["id"]
        expect(page.locator("#meter")).to_have_attribute("data-preview", "true")
        page.reload()
        expect(picker).to_have_value(f"preset:{preset['id']}")

        upstream.forget_requests()
        box.click()
        page.keyboard.type("What is for dinner?")
        box.press("Enter")
        answered(page, 1)
        chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
        assert chats, "the answer was asked of the upstream"
        body = chats[-1]["body"]
        assert body["temperature"] == 0.7
        assert body["messages"][0]["role"] == "system"
        assert PROMPT in body["messages"][0]["content"]

        dark = open_page(
            live_server,
            "/settings/presets",
            viewport=viewport,
            color_scheme="dark",
            bypass_csp=True,
        )
        assert_accessible(dark, f"/settings/presets (dark, {viewport})")
    finally:
        delete_presets(live_server)
