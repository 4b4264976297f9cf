"""Keyboard and screen reader use, phones and tables, in a real Chromium at desktop and
phone sizes: the focus kept across swaps, messages and their controls named, code blocks
and search results reached by keyboard, thumb-sized controls, nothing cut off, no word
broken in a table, and an embed that takes no focus from its host page."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import HostPage, OpenPage, Server, Servers
from tests.browser.helpers import answered, create_conversation, send_by_api
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
PHONE = (390, 844)
THUMB = 44
REPLY = (
    "Sizes:\n\n| size | tokens |\n|---|---|\n| medium | 16,384 |\n\n```python\nwindow = "
    + " + ".join(["16384"] * 40)
    + "\n```"
)


@pytest.fixture(scope="module")
def branched(live_server: Server, upstream_server: FakeUpstream) -> str:
    """Two turns with a table and a long line of code, the second with an alternative."""
    upstream_server.reset()
    upstream_server.set_reply(REPLY)
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "Which window sizes are there?")
    second = send_by_api(live_server, conversation_id, "And the largest one?")
    edited = live_server.api(
        "POST",
        f"/api/conversations/{conversation_id}/messages",
        json={"content": "And the smallest one?", "edit_of": second["user"]["id"]},
    )
    assert edited.status_code == 201, edited.text
    upstream_server.reset()
    return conversation_id


def button(page: Page, name: str) -> Locator:
    return page.get_by_role("button", name=name, exact=True)


def lines_of(page: Page, text: str) -> int:
    """On how many lines the first element of #messages whose whole text is `text` shows."""
    return int(
        page.evaluate(
            """text => {
                const cell = [...document.querySelectorAll('#messages td, #messages th')]
                    .find((el) => el.textContent.trim() === text);
                const range = document.createRange();
                range.selectNodeContents(cell);
                return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
            }""",
            text,
        )
    )


def open_drawer_on_phone(page: Page) -> None:
    toggle = page.locator(".drawer-toggle")
    if toggle.is_visible():
        toggle.click()


@SIZES
def test_keyboard_keeps_the_focus_and_every_control_has_its_own_name(
    live_server: Server, open_page: OpenPage, branched: str, viewport: tuple[int, int]
) -> None:
    page = open_page(live_server, f"/c/{branched}", viewport=viewport)
    # Messages are named for a screen reader, and so is each control, uniquely.
    expect(page.get_by_role("article", name="You, turn 1", exact=True)).to_have_count(1)
    expect(page.get_by_role("article", name="Assistant, answer 2", exact=True)).to_have_count(1)
    names = page.evaluate(
        """() => [...document.querySelectorAll('#messages button')]
            .filter((b) => !b.hidden && b.offsetParent !== null)
            .map((b) => b.getAttribute('aria-label') || b.textContent.trim())"""
    )
    assert len(names) == len(set(names)), sorted(names)
    for name in ("Pin turn 1", "Copy answer 1", "Fork at answer 2", "Copy code of answer 2"):
        assert name in names, names

    # The page's first stop in the tab order is the skip link, past the sidebar to the box.
    first_stop = page.evaluate(
        """() => [...document.querySelectorAll('a[href], button, input, select, textarea')]
            .find((el) => el.tabIndex >= 0).className"""
    )
    assert first_stop == "skip-link"
    skip = page.locator(".skip-link")
    skip.focus()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("#composer textarea")).to_be_focused()

    # A message's tools are one Tab stop (a toolbar); the arrow keys walk them, and Tab
    # comes back to the one used last.
    tools = page.get_by_role("toolbar", name="Actions on answer 2")
    tabbable = "t => [...t.querySelectorAll('button')].filter((b) => b.tabIndex >= 0).length"
    assert tools.evaluate(tabbable) == 1
    stops = page.evaluate(
        """() => [...document.querySelectorAll('#messages button, #messages a[href]')]
            .filter((el) => el.tabIndex >= 0 && !el.disabled && el.offsetParent !== null)
            .length"""
    )
    assert stops <= 12, f"{stops} tab stops in two exchanges and an alternative"
    tools.get_by_role("button").first.focus()
    page.keyboard.press("ArrowRight")
    expect(tools.get_by_role("button").nth(1)).to_be_focused()
    page.keyboard.press("End")
    expect(tools.get_by_role("button").last).to_be_focused()
    page.keyboard.press("Home")
    page.keyboard.press("ArrowLeft")
    expect(tools.get_by_role("button").last).to_be_focused()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    expect(tools.get_by_role("button").last).to_be_focused()
    assert tools.evaluate(tabbable) == 1

    # Pin and Unpin: the focus stays on the control that took the place of the one pressed.
    button(page, "Pin turn 1").focus()
    page.keyboard.press("Enter")
    expect(button(page, "Unpin turn 1")).to_be_focused()
    page.keyboard.press("Enter")
    expect(button(page, "Pin turn 1")).to_be_focused()

    # The branch arrows: the same arrow of the alternative shown, else the other one.
    position = page.locator("#messages .alternative-position")
    expect(position).to_have_text("2/2")
    button(page, "Previous alternative of turn 2").focus()
    page.keyboard.press("Enter")
    expect(position).to_have_text("1/2")
    expect(button(page, "Next alternative of turn 2")).to_be_focused()
    page.keyboard.press("Enter")
    expect(position).to_have_text("2/2")
    expect(button(page, "Previous alternative of turn 2")).to_be_focused()

    # A code block too wide for the bubble scrolls, and a keyboard can focus and scroll it.
    code = page.locator("#messages .code-block pre").last
    expect(code).to_have_attribute("aria-label", "python code")
    assert code.evaluate("el => el.scrollWidth > el.clientWidth")
    code.focus()
    expect(code).to_be_focused()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("el => el.scrollLeft > 0", arg=code.element_handle())
    # A table keeps its words and numbers whole.
    assert lines_of(page, "medium") == 1
    assert lines_of(page, "16,384") == 1

    # Search: the count is said in a live region; the arrow keys walk the results.
    open_drawer_on_phone(page)
    box = page.locator("#search-q")
    box.focus()
    box.fill("window sizes")
    hits = page.locator("#search-results a")
    expect(hits.first).to_be_visible()
    count = hits.count()
    expect(page.locator("#search-count[role=status]")).to_have_text(
        f"{count} matching message{'s' if count != 1 else ''}"
    )
    box.press("ArrowDown")
    expect(hits.first).to_be_focused()
    if count > 1:
        page.keyboard.press("ArrowDown")
        expect(hits.nth(1)).to_be_focused()
        page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    expect(box).to_be_focused()
    box.fill("nothing matches this zqxj")
    expect(page.locator("#search-count")).to_have_text("No message matches")


def test_more_conversations_keeps_the_focus_in_the_list(
    servers: Servers, sqlite_template: Path, tmp_path: Path, open_page: OpenPage
) -> None:
    """On a server of its own: 201 conversations would give every later test's sidebar a
    "More conversations" of its own."""
    database = tmp_path / "many.db"
    shutil.copy(sqlite_template, database)
    server = servers.start(f"sqlite+aiosqlite:///{database}", name="many-conversations")
    for _ in range(201):
        create_conversation(server)
    page = open_page(server, f"/c/{create_conversation(server)}")
    links = page.locator("#sidebar nav a")
    before = links.count()
    more = page.locator(".more-conversations")
    more.focus()
    page.keyboard.press("Enter")
    expect(links).not_to_have_count(before)
    expect(links.nth(before)).to_be_focused()


def test_a_phone_has_thumb_sized_controls_and_nothing_cut_off(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, branched: str
) -> None:
    page = open_page(live_server, f"/c/{branched}", viewport=PHONE)
    for name in (
        "Pin turn 1",
        "Edit turn 1",
        "Copy turn 1",
        "Fork at turn 1",
        "Copy answer 1",
        "Fork at answer 1",
        "Previous alternative of turn 2",
        "Next alternative of turn 2",
    ):
        control = button(page, name)
        control.scroll_into_view_if_needed()
        box = control.bounding_box()
        assert box is not None, name
        assert box["width"] >= THUMB and box["height"] >= THUMB, (name, box)
    # One header row: the drawer's button, the title (ellipsised, not cut mid-glyph), the
    # configuration and a menu holding Export and Delete; nothing leaves the screen.
    row = [
        page.locator(selector)
        for selector in (".drawer-toggle", "#title", "#conversation-configuration")
    ] + [page.get_by_role("button", name="More: export, delete")]
    middles = []
    for part in row:
        expect(part).to_be_in_viewport(ratio=1)
        box = part.bounding_box()
        assert box is not None
        middles.append(box["y"] + box["height"] / 2)
    assert max(middles) - min(middles) < 8, middles
    header = page.locator(".chat-header").bounding_box()
    assert header is not None and header["height"] < 64, header
    assert page.locator("#title").evaluate("e => getComputedStyle(e).textOverflow") == "ellipsis"
    menu = page.get_by_role("button", name="More: export, delete")
    for hidden in ("#export-links", ".delete-conversation"):
        expect(page.locator(hidden)).to_be_hidden()
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    for shown in ("#export-links", ".delete-conversation"):
        expect(page.locator(shown)).to_be_in_viewport(ratio=1)
    page.keyboard.press("Escape")
    expect(page.locator(".delete-conversation")).to_be_hidden()
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE[0]

    # The composer takes the width, with a short placeholder (no keys on a touch keyboard);
    # the meter is one line.
    area = page.locator("#composer textarea")
    assert area.bounding_box()["width"] >= PHONE[0] - 40  # type: ignore[index]
    placeholder = area.get_attribute("placeholder") or ""
    assert placeholder and "Enter" not in placeholder, placeholder
    meter_box = page.locator("#meter").bounding_box()
    assert meter_box is not None and meter_box["height"] <= 26, meter_box

    # While an answer streams, Stop takes Send's place and the box keeps its width.
    width = area.bounding_box()["width"]  # type: ignore[index]
    upstream.set_reply(" ".join(f"word{n}" for n in range(80)))
    upstream.chunk_delay = 0.1
    area.fill("Tell me more")
    area.press("Enter")
    stop = page.locator('#composer [data-action="stop"]')
    expect(stop).to_be_visible()
    expect(page.locator('#composer [data-action="send"]')).to_be_hidden()
    assert area.bounding_box()["width"] == pytest.approx(width, abs=1)  # type: ignore[index]
    stop_box = stop.bounding_box()
    assert stop_box is not None and stop_box["height"] >= THUMB
    stop.click()
    answered(page, 3, status="stopped")
    expect(page.locator('#composer [data-action="send"]')).to_be_visible()

    # Settings and the admin pages: tables scroll in their own box, their last column
    # (the actions) is reached, and the page itself never scrolls sideways.
    for path, last in (
        ("/settings", "table.data th:last-child"),
        ("/admin/users", 'table.users tbody tr:first-child button[value="reset"]'),
        ("/admin/trimmed", "table.admin-table th:last-child"),
        (f"/admin/c/{branched}", "main"),
    ):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE[0], path
        target = page.locator(last).first
        target.scroll_into_view_if_needed()
        expect(target).to_be_in_viewport()
        box = target.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + min(box["width"], 40) <= PHONE[0]


@pytest.mark.parametrize("viewport", [(1280, 800), PHONE], ids=["desktop", "phone"])
def test_the_embed_greets_without_a_band_and_shows_visitors_no_meter(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    page = open_page(live_server, "/embed/help", viewport=viewport)
    greeting = page.locator(".greeting")
    expect(greeting).to_have_text("Hello from the help desk.")
    expect(page.locator("#meter")).to_be_hidden()  # the catalog's embed shows no internals
    box = page.locator("#composer textarea")
    if viewport == PHONE:
        assert "Enter" not in (box.get_attribute("placeholder") or "")
    for number in (1, 2, 3, 4):
        box.fill(f"Question {number}: " + "tell me about the shop's opening hours " * 4)
        box.press("Enter")
        answered(page, number)
    # The greeting opens the conversation and scrolls with it: nothing sits over a message.
    messages_box = page.locator("#messages")
    messages_box.evaluate("e => { e.scrollTop = e.scrollHeight / 3; }")
    expect(messages_box.locator(".greeting")).to_have_count(1)
    seen = greeting.bounding_box()
    for message in page.locator("#messages .message").all():
        other = message.bounding_box()
        assert seen is not None and other is not None
        overlap = min(seen["y"] + seen["height"], other["y"] + other["height"]) - max(
            seen["y"], other["y"]
        )
        assert overlap <= 0, (seen, other)
    expect(page.locator("#meter")).to_be_hidden()


def test_the_embed_takes_no_focus_from_its_host_page(
    live_server: Server, open_page: OpenPage, host_page: HostPage, embed_host_port: int
) -> None:
    page = open_page(live_server, "/login")
    page.goto(host_page(embed_host_port, f"{live_server.url}/embed/help"))
    frame = page.frame_locator("#chat")
    expect(frame.locator("form#composer")).to_be_visible()
    page.wait_for_timeout(300)  # past the frame's load handlers
    assert page.evaluate("document.activeElement.tagName") == "BODY"
    assert frame.locator("body").evaluate("() => document.activeElement.tagName") == "BODY"
    # What visitors see of internals is the embed's setting, off here.
    expect(frame.locator(".chat-header .badge")).to_have_count(0)
