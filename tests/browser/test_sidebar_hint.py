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
