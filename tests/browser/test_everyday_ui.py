"""Everyday chat in a real Chromium (issue "Everyday chat"): code and math, the trim
line, search, export and import, each test breaking when its feature does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import (
    answered,
    create_conversation,
    height_of,
    messages,
    send_by_api,
    stored,
    turn_text,
)
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

RICH = r"""Here is the code:

```python
def area(r):
    return 3.14 * r ** 2  # circle
```

The area is $A = \pi r^2$, with a thin space: \(x\,y\). Docs: https://example.com/math
"""


def test_code_is_coloured_and_copies_math_is_mathml_links_open_a_new_tab(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    upstream.set_reply(RICH)
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator("#composer textarea").fill("Show me")
    page.locator("#composer textarea").press("Enter")
    answered(page, 1)

    for _ in range(2):  # as streamed, then as stored
        content = messages(page, "assistant").last.locator(".content")
        expect(content.locator("pre code .k").first).to_have_text("def")
        expect(content.locator("pre code .c1")).to_have_text("# circle")
        expect(content.locator("math")).to_have_count(2)
        expect(content.locator("math mspace")).to_have_count(1)  # `\,` is a space, not ","
        link = content.locator('a[href="https://example.com/math"]')
        expect(link).to_have_attribute("target", "_blank")
        expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
        page.reload()

    content = messages(page, "assistant").last.locator(".content")
    copy = content.locator('[data-action="copy-code"]')
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("def area(r):\n    return 3.14 * r ** 2  # circle")
    # MathML is drawn by the browser itself: the formula has a real size.
    box = content.locator("math").first.bounding_box()
    assert box is not None and box["width"] > 20


def test_one_cut_line_in_plain_words_and_opening_it_keeps_the_view(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, artifacts: Path
) -> None:
    conversation_id = create_conversation(live_server, "narrow")
    for number in range(1, 13):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, f"/c/{conversation_id}")
    users = [r for r in stored(live_server, conversation_id)["messages"] if r["role"] == "user"]
    trimmed = [r for r in users if r["dropped_turns"]]
    assert len(trimmed) >= 3, users
    newest = trimmed[-1]

    # Every trimmed turn keeps its marker (the DOM contract); one line stands out.
    expect(page.locator("#messages [data-dropped-turns]")).to_have_count(len(trimmed))
    line = page.locator("#messages .cut-line")
    expect(line).to_have_count(1)
    words = f"Above this line: {newest['dropped_turns']} earlier turns left out of the newest send"
    expect(line).to_contain_text(words)
    expect(line).to_have_attribute("role", "note")
    # ... right below the last message the newest trimmed send left out.
    boundary = max(last for _, last in newest["fit"]["left_out"])
    above = line.locator("xpath=preceding-sibling::article[1]")
    expect(above).to_have_attribute("data-seq", str(boundary))

    # Opening it highlights the turns in place: the line stays where the reader sees it.
    line.scroll_into_view_if_needed()
    page.wait_for_timeout(200)
    before = line.bounding_box()
    line.get_by_role("button", name="Show which").click()
    highlighted = page.locator("#messages .message.left-out")
    left_out = {s for first, last in newest["fit"]["left_out"] for s in range(first, last + 1)}
    expect(highlighted).to_have_count(len(left_out))
    page.wait_for_timeout(300)
    after = line.bounding_box()
    assert before and after and abs(after["y"] - before["y"]) < 5, (before, after)
    expect(line.get_by_role("button", name="Show which")).to_have_attribute("aria-expanded", "true")
    page.screenshot(path=str(artifacts / "trimmed-cut-line.png"))
    line.get_by_role("button", name="Show which").click()
    expect(highlighted).to_have_count(0)

    # A new trimmed send moves the line to its own boundary: still one line.
    page.locator("#composer textarea").fill(turn_text(13))
    page.locator("#composer textarea").press("Enter")
    answered(page, 13)
    rows = stored(live_server, conversation_id)["messages"]
    latest = [r for r in rows if r["role"] == "user"][-1]
    expect(line).to_have_count(1)
    expect(line).to_contain_text(
        f"Above this line: {latest['dropped_turns']} earlier turns left out of the newest send"
    )
    boundary = max(last for _, last in latest["fit"]["left_out"])
    expect(line.locator("xpath=preceding-sibling::article[1]")).to_have_attribute(
        "data-seq", str(boundary)
    )


def test_search_from_the_sidebar_opens_the_turn_even_beyond_the_first_page(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    upstream.set_reply("Noted.")
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "Remember the aardvark named Quillon")
    for number in range(55):  # more than one page of turns: the hit is not loaded at first
        send_by_api(live_server, conversation_id, f"Filler turn {number}")
    hit_id = stored(live_server, conversation_id)["messages"][0]["id"]
    # The first page does not hold the hit; the hit's link reaches back to it.
    first_page = live_server.api("GET", f"/c/{conversation_id}")
    assert first_page.status_code == 200 and f'id="m{hit_id}"' not in first_page.text
    reaching = live_server.api("GET", f"/c/{conversation_id}", params={"at": hit_id})
    assert f'id="m{hit_id}"' in reaching.text
    page = open_page(live_server, f"/c/{conversation_id}")

    box = page.get_by_role("searchbox", name="Search your conversations")
    box.fill("quill")
    result = page.locator(f'#search-results a[data-message-id="{hit_id}"]')
    expect(result).to_be_visible()
    expect(result.locator("mark")).to_have_text("Quillon")
    result.click()
    found = page.locator(f"#m{hit_id}")
    expect(found).to_have_class(re.compile(r"\bfound\b"))
    expect(found).to_be_in_viewport()

    box = page.get_by_role("searchbox", name="Search your conversations")
    box.fill("nothingmatchesthis")
    expect(page.locator("#search-results")).to_contain_text("No message matches")


def test_export_from_the_header_and_import_from_the_sidebar(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, tmp_path: Path
) -> None:
    upstream.set_reply("Paris, on the **Seine**.")
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "Where is the Louvre?")
    page = open_page(live_server, f"/c/{conversation_id}")

    with page.expect_download() as download:
        page.get_by_role("link", name="Markdown").click()
    markdown = Path(download.value.path()).read_text()
    assert "## You\n\nWhere is the Louvre?" in markdown
    with page.expect_download() as download:
        page.get_by_role("link", name="JSON").click()
    exported = tmp_path / "export.json"
    exported.write_bytes(Path(download.value.path()).read_bytes())

    page.get_by_label("Import a JSON export").set_input_files(exported)
    page.get_by_role("button", name="Import", exact=True).click()
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(conversation_id) + r")[\w-]+$"))
    expect(messages(page, "user").locator(".content")).to_have_text(["Where is the Louvre?"])
    expect(messages(page, "assistant").locator("strong")).to_have_text("Seine")

    # A file that is not an export says so, and nothing is made.
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"hello": "world"}')
    before = len(live_server.api("GET", "/api/conversations").json())
    page.get_by_label("Import a JSON export").set_input_files(wrong)
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.locator("body")).to_contain_text("not a conversation export")
    assert len(live_server.api("GET", "/api/conversations").json()) == before


def test_on_a_phone_the_sidebar_is_a_drawer_and_the_chat_gets_the_screen(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, artifacts: Path
) -> None:
    conversation_id = create_conversation(live_server, "narrow")
    for number in range(1, 7):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, f"/c/{conversation_id}")
    page.set_viewport_size({"width": 390, "height": 844})
    sidebar = page.locator("#sidebar")
    expect(sidebar).not_to_be_visible()
    chat = page.locator("main.chat").bounding_box()
    assert chat and chat["height"] >= 800 and chat["width"] >= 380, chat
    page.screenshot(path=str(artifacts / "phone-chat.png"))

    toggle = page.get_by_role("button", name="Conversations")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(sidebar).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.get_by_role("searchbox", name="Search your conversations")).to_be_focused()
    expect(
        page.get_by_label("Configuration for new conversations")
    ).to_be_visible()  # named, on phones too
    page.wait_for_timeout(300)  # the slide-in
    page.screenshot(path=str(artifacts / "phone-drawer.png"))
    page.keyboard.press("Escape")
    expect(sidebar).not_to_be_visible()
    expect(toggle).to_be_focused()


def test_while_an_answer_streams_the_box_types_escape_stops_and_the_title_follows(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    response = live_server.api("POST", "/api/conversations", json={})
    conversation_id = response.json()["id"]
    page = open_page(live_server, f"/c/{conversation_id}")
    expect(page.locator(".empty-state")).to_be_visible()
    assert page.evaluate("document.querySelector('link[rel=icon]').href").endswith("icon.svg")

    upstream.set_reply(" ".join(f"w{i}" for i in range(200)))
    upstream.chunk_delay = 0.05
    box = page.locator("#composer textarea")
    box.fill("Plan a trip to Lisbon")
    box.press("Enter")
    expect(page.locator(".empty-state")).not_to_be_visible()
    # The first exchange names the conversation everywhere, without a reload.
    expect(page.locator("#title")).to_have_value("Plan a trip to Lisbon")
    expect(page.locator(f"#conv-{conversation_id} .conv-title")).to_have_text(
        "Plan a trip to Lisbon"
    )
    expect(page).to_have_title("Plan a trip to Lisbon · Chat")

    expect(page.locator('[data-action="stop"]')).to_be_visible()
    expect(box).to_be_focused()
    box.type("and then Porto")  # writing the next message while this one streams
    box.press("Enter")  # ... but not sending it yet
    expect(messages(page, "user")).to_have_count(1)
    page.keyboard.press("Escape")
    answer = messages(page, "assistant").last
    expect(answer).to_have_attribute("data-status", "stopped")
    expect(box).to_have_value("and then Porto")
    expect(box).to_be_focused()


def test_long_pastes_fold_and_scroll_to_newest_appears_when_scrolled_up(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    upstream.set_reply("Got it.")
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "\n".join(f"line {i}" for i in range(60)))
    for number in range(6):
        send_by_api(live_server, conversation_id, f"short {number}")
    page = open_page(live_server, f"/c/{conversation_id}")
    long_one = messages(page, "user").first
    more = long_one.get_by_role("button", name="Show more")
    expect(more).to_have_accessible_name("Show more of turn 1")  # never one of many alike
    height = height_of(long_one)
    assert height < 400
    more.click()
    expect(long_one.get_by_role("button", name="Show less of turn 1")).to_have_attribute(
        "aria-expanded", "true"
    )
    assert height_of(long_one) > height + 400
    expect(messages(page, "user").nth(1).get_by_role("button", name="Show more")).to_have_count(0)

    down = page.get_by_role("button", name="Scroll to the newest message")
    page.locator("#messages").evaluate("el => { el.scrollTop = 0; }")
    expect(down).to_be_visible()
    down.click()
    expect(down).to_be_hidden()
    expect(messages(page, "assistant").last).to_be_in_viewport()
