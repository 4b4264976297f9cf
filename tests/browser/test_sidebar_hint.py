"""The sidebar's "Configuration for new conversations" says what it changes, seen and
heard: a hint under it (in the drawer on a phone) that the select is described by,
saying it is for new conversations only; changing it leaves this conversation's own
configuration as it was."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import create_conversation, stored

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])


@SIZES
def test_the_sidebar_configuration_says_it_is_for_new_conversations_only(
    live_server: Server, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    conversation_id = create_conversation(live_server, "tiny")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    toggle = page.locator(".drawer-toggle")
    if toggle.is_visible():
        toggle.click()
    chooser = page.get_by_label("Configuration for new conversations")
    expect(chooser).to_have_accessible_description(re.compile("new conversations only"))
    hint = page.locator("#configuration-hint")
    expect(hint).to_be_visible()
    box, under = chooser.bounding_box(), hint.bounding_box()
    assert box is not None and under is not None
    assert under["y"] >= box["y"] + box["height"], (box, under)  # below it, not over it
    sidebar = page.locator("#sidebar").bounding_box()
    assert sidebar is not None and under["x"] + under["width"] <= sidebar["x"] + sidebar["width"]

    before = chooser.input_value()
    with page.expect_response(lambda r: r.url.endswith("/settings/default-configuration")) as sent:
        chooser.select_option("short")
    assert sent.value.ok, sent.value.status
    try:
        assert stored(live_server, conversation_id)["configuration"] == "tiny"
        expect(page.locator("#conversation-configuration")).to_have_value("tiny")
    finally:
        with page.expect_response(lambda r: r.url.endswith("/default-configuration")):
            chooser.select_option(before)


@SIZES
def test_what_the_screenshots_showed_stays_fixed(
    live_server: Server, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    """Seen on screenshots at both sizes: the sidebar's file control was squeezed beside
    its button ("No fi…osen"), the presets' name and numbers were the browser's bare
    fields beside styled ones, the header picker was cut mid-word on a phone."""
    conversation_id = create_conversation(live_server, "tiny")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    toggle = page.locator(".drawer-toggle")
    if toggle.is_visible():
        toggle.click()
    chooser = page.get_by_label("Import a JSON export")
    expect(chooser).to_be_visible()
    importing = page.locator(".import-form").get_by_role("button", name="Import", exact=True)
    file_box, button_box = chooser.bounding_box(), importing.bounding_box()
    assert file_box is not None and button_box is not None
    assert button_box["y"] >= file_box["y"] + file_box["height"]  # on a row of its own
    assert file_box["width"] >= 200, file_box
    picker = page.locator("#conversation-configuration")
    assert picker.evaluate("e => getComputedStyle(e).textOverflow") == "ellipsis"

    page.goto("/settings/presets")
    new = page.get_by_role("region", name="New preset")
    looks = "e => [getComputedStyle(e).paddingLeft, getComputedStyle(e).borderRadius]"
    field = new.get_by_label("Name", exact=True).evaluate(looks)
    assert field == new.get_by_label("Configuration", exact=True).evaluate(looks)
    assert new.get_by_label("Temperature").evaluate(looks) == field
    name_box = new.get_by_label("Name", exact=True).bounding_box()
    assert name_box is not None and name_box["height"] >= 36, name_box
