"""Per-user settings and thumbs on answers in a real Chromium, at desktop and phone sizes:
the theme drawn by the server on every page (no flash), a refused settings form that keeps
what was typed, the default configuration for new conversations, and thumbs that toggle,
keep focus and are big enough to tap."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import answered, create_conversation, send_by_api, stored
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
DEFAULTS = {"default_configuration": "", "theme": "system", "custom_instructions": ""}


@pytest.fixture
def settings_restored(live_server: Server) -> Iterator[None]:
    """The shared server's test user gets its default settings back, whatever happens."""
    yield
    response = live_server.api("POST", "/settings/preferences", data=DEFAULTS)
    assert response.status_code in (200, 303), response.text


def is_dark(page: Page) -> bool:
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    return sum(int(c) for c in re.findall(r"\d+", background)[:3]) < 200


@SIZES
def test_settings_theme_every_page_and_a_refused_form_keeps_the_text(
    live_server: Server, open_page: OpenPage, viewport: tuple[int, int], settings_restored: None
) -> None:
    page = open_page(live_server, "/settings", viewport=viewport)
    assert not is_dark(page)
    form = page.locator("form.preferences")
    form.get_by_label("Configuration for new conversations").select_option("medium")
    form.get_by_label("Dark").check()
    instructions = form.get_by_label("Custom instructions")
    counter = page.locator("#instructions-count")
    expect(instructions).to_have_accessible_description(re.compile(r"0 of 4,000 characters$"))
    instructions.fill("x" * 4001)
    expect(counter).to_have_text("4,001 of 4,000 characters")
    expect(counter).to_have_class(re.compile(r"\bover\b"))
    form.get_by_role("button", name="Save settings").click()
    # Refused: the reason beside the form, and what was typed still there.
    expect(page.locator("#settings-error")).to_contain_text("at most 4,000 characters")
    expect(instructions).to_have_value("x" * 4001)
    expect(form.get_by_label("Dark")).to_be_checked()
    assert not is_dark(page), "nothing of a refused form is applied"

    instructions.fill("Answer briefly.")
    expect(counter).to_have_text("15 of 4,000 characters")
    expect(counter).not_to_have_class(re.compile(r"\bover\b"))
    form.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_have_text("Settings saved.")
    assert is_dark(page)
    expect(instructions).to_have_value("Answer briefly.")

    # Every page is drawn dark by the server itself: dark before any script ran.
    for path in ("/", "/admin/trimmed"):
        response = page.goto(path, wait_until="commit")
        assert response is not None and 'data-theme="dark"' in response.text()
        page.wait_for_load_state("domcontentloaded")
        assert is_dark(page), path
    page.goto("/")
    expect(page.locator("#configuration")).to_have_value("medium")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0


def pair_of(answer: Locator) -> list[Any]:
    """The thumbs' elements and attributes, but which is pressed (and htmx's own marks)."""
    return answer.locator(".feedback").evaluate(
        """(group) => [group, ...group.querySelectorAll("*")].map((el) => [el.tagName,
            [...el.attributes]
              .filter((a) => a.name !== "aria-pressed" && !a.name.startsWith("data-htmx"))
              .map((a) => [a.name, a.value.replace(/ ?htmx-(added|settling|swapping)/g, "")])
              .sort()])"""
    )


@SIZES
def test_thumbs_toggle_keep_focus_and_are_stored(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    viewport: tuple[int, int],
    artifacts: Path,
) -> None:
    conversation_id = create_conversation(live_server, "small")
    send_by_api(live_server, conversation_id, "Rate me")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    answer = answered(page, 1)
    up = answer.get_by_role("button", name="Good answer")
    down = answer.get_by_role("button", name="Bad answer")
    expect(up).to_have_attribute("aria-pressed", "false")
    if viewport[0] < 500:
        for thumb in (up, down):
            box = thumb.bounding_box()
            assert box is not None and box["width"] >= 44 and box["height"] >= 44, box
    for thumb in (up, down):  # drawn, so no emoji font is needed to see them
        icon = thumb.locator("svg").bounding_box()
        assert icon is not None and icon["width"] >= 16 and icon["height"] >= 16, icon
    drawn = pair_of(answer)  # drawn by chat.js; a thumb gets the server's pair back
    up.click()
    expect(up).to_have_attribute("aria-pressed", "true")
    expect(up).to_be_focused()
    assert pair_of(answer) == drawn, "the server draws the thumbs as chat.js did"
    answer.screenshot(path=str(artifacts / f"thumbs-{viewport[0]}.png"))
    assert stored(live_server, conversation_id)["messages"][1]["feedback"] == "up"
    down.click()
    expect(down).to_have_attribute("aria-pressed", "true")
    expect(up).to_have_attribute("aria-pressed", "false")
    down.click()
    expect(down).to_have_attribute("aria-pressed", "false")
    assert stored(live_server, conversation_id)["messages"][1]["feedback"] is None
    page.reload()
    expect(answered(page, 1).get_by_role("button", name="Bad answer")).to_have_attribute(
        "aria-pressed", "false"
    )
