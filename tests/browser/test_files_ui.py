"""Files in the composer and the history, in a real Chromium at desktop and phone sizes
(docs/design.md section 12): several files chosen, dropped and pasted, each uploaded at
once and shown as a chip with its tokens; a chip removed (its upload deleted); a picture
to a model that cannot see refused beside the composer, the draft and the chips kept;
the send carries the files; the history shows the pictures as thumbnails that open the
picture and the other files as links; the paperclip works from the keyboard alone."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image
from playwright.sync_api import FilePayload, Locator, Page, Route, expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import answered, create_conversation, messages, stored
from tests.browser.test_daily_finish import accessible_both_ways, assert_tappable
from tests.factories.files import pdf
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])

NOTES = "Packing list\n- sun hat\n- sandals\n"
REPORT = pdf(["Okapi figures for the trip"])


def png(colour: str, size: tuple[int, int] = (64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


DROP_OR_PASTE = """([kind, bytes, name]) => {
  const data = new DataTransfer();
  data.items.add(new File([new Uint8Array(bytes)], name, {type: "image/png"}));
  const how = {bubbles: true, cancelable: true};
  if (kind === "drop") {
    const area = document.querySelector(".composer-area");
    area.dispatchEvent(new DragEvent("dragover", {...how, dataTransfer: data}));
    area.dispatchEvent(new DragEvent("drop", {...how, dataTransfer: data}));
  } else {
    const box = document.querySelector("#composer textarea");
    box.dispatchEvent(new ClipboardEvent("paste", {...how, clipboardData: data}));
  }
}"""


def chips(page: Page) -> Locator:
    return page.locator("#chips .file-chip:not(.pending)")


@SIZES
def test_files_are_chosen_dropped_pasted_removed_sent_and_shown(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    size = "phone" if viewport[0] < 500 else "desktop"
    upstream.set_reply("A red and a blue square, and your packing list.")
    conversation_id = create_conversation(live_server)  # the default: a model that cannot see
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport, bypass_csp=True)
    page.on("filechooser", lambda _chooser: None)  # intercepted from the start, as below
    box = page.locator("#composer textarea")
    control = page.locator("#attachment")
    expect(control).to_have_accessible_name("Attach files")
    if size == "phone":
        assert_tappable(page.locator("label.attach"))

    # Three files at once from the chooser (text, PDF, picture): a chip each, with its
    # name and its tokens.
    box.fill("What is in these?")
    control.set_input_files(
        files=[
            FilePayload(name="notes.txt", mimeType="text/plain", buffer=NOTES.encode()),
            FilePayload(name="report.pdf", mimeType="application/pdf", buffer=REPORT),
            FilePayload(name="red.png", mimeType="image/png", buffer=png("red")),
        ]
    )
    expect(chips(page)).to_have_count(3)
    for name in ("notes.txt", "report.pdf", "red.png"):
        expect(chips(page).filter(has_text=name)).to_contain_text("tokens")

    # Pictures to a model that cannot see: the 400 names the configuration that can, and
    # the draft and the chips stay for the next try.
    box.press("Enter")
    expect(page.locator("#composer-error")).to_contain_text("seeing")
    expect(box).to_have_value("What is in these?")
    expect(chips(page)).to_have_count(3)
    assert stored(live_server, conversation_id)["messages"] == []

    switched = live_server.api(
        "PATCH", f"/api/conversations/{conversation_id}", json={"configuration": "seeing"}
    )
    assert switched.status_code == 200, switched.text

    # Dropped on the composer, and pasted into the box: two more chips.
    page.evaluate(DROP_OR_PASTE, ["drop", list(png("green")), "green.png"])
    expect(chips(page)).to_have_count(4)
    page.evaluate(DROP_OR_PASTE, ["paste", list(png("blue")), "blue.png"])
    expect(chips(page)).to_have_count(5)

    # A removed chip leaves the message, and its upload is deleted.
    dropped = chips(page).filter(has_text="green.png")
    dropped_id = dropped.get_attribute("data-file-id")
    remove = page.get_by_role("button", name="Remove green.png")
    if size == "phone":
        assert_tappable(remove)
    remove.click()
    expect(chips(page)).to_have_count(4)
    expect(box).to_be_focused()
    expect(page.locator("#meter")).to_have_attribute("data-preview", "true")  # counted at once
    # (the chip goes once the delete is answered)
    gone = live_server.api("GET", f"/api/files/{dropped_id}")
    assert gone.status_code == 404, gone.text

    # A file that is not one the app reads is refused beside the composer; the rest stay.
    control.set_input_files(
        files=[FilePayload(name="logo.svg", mimeType="image/svg+xml", buffer=b"<svg></svg>")]
    )
    expect(page.locator("#composer-error")).to_contain_text("logo.svg")
    expect(chips(page)).to_have_count(4)

    box.press("Enter")
    answered(page, 1)
    expect(chips(page)).to_have_count(0)
    row = stored(live_server, conversation_id)
    sent = row["messages"][0]
    names = [a["name"] for a in sent["attachments"]]
    assert names == ["notes.txt", "report.pdf", "red.png", "blue.png"]
    assert row["title"].startswith("What is in these"), row["title"]

    # The history: pictures as thumbnails that open the picture, the text file once, as a
    # part of the message that opens to its text (not a link beside it as well).
    user = messages(page, "user").first
    thumbs = user.locator(".message-files img")
    expect(thumbs).to_have_count(2)
    expect(thumbs.first).to_have_attribute("alt", "red.png")
    page.wait_for_function(
        "img => img.complete && img.naturalWidth === 64", arg=thumbs.first.element_handle()
    )
    parts = user.locator("details.attachment")
    expect(parts).to_have_count(2)  # the text file and the PDF's text, a part each
    part = parts.filter(has_text="notes.txt")
    expect(user.get_by_role("link", name="Download notes.txt")).to_have_count(0)
    part.locator("summary").click()
    expect(part.get_by_label("Text of notes.txt")).to_contain_text("sun hat")
    expect(parts.filter(has_text="report.pdf")).to_contain_text("Okapi figures")
    expect(user.get_by_role("link", name="Download report.pdf")).to_be_visible()  # the PDF

    # The keyboard alone: Tab from the box to the paperclip, Enter opens the chooser.
    box.focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.action") == "attach"
    with page.expect_file_chooser() as chooser:
        page.locator("label.attach").press("Enter")  # (held there if a late swap moved it)
    chooser.value.set_files(
        files=[FilePayload(name="more.txt", mimeType="text/plain", buffer=b"one more\n")]
    )
    expect(chips(page)).to_have_count(1)

    with page.context.expect_page() as opened:
        user.get_by_role("link", name="Open the picture red.png").click()
    picture = opened.value
    picture.wait_for_load_state()
    assert picture.url.endswith(f"/api/files/{sent['attachments'][2]['id']}")
    assert picture.evaluate("document.images[0].naturalWidth") == 64
    picture.close()
    page.bring_to_front()

    page.screenshot(path=f"/tmp/files-{size}.png")
    accessible_both_ways(page, f"the chat with chips and thumbnails ({size})")


@SIZES
def test_a_chips_count_follows_a_configuration_switch(
    live_server: Server, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    """A chip counts its file for the model that will read it: switch the configuration
    in the header picker and the chip says the new model's count (OpenAI's tiles, then the
    300 tokens `seeing-cheap` counts a picture as), the draft and the chip kept."""
    conversation_id = create_conversation(live_server, "seeing")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    box = page.locator("#composer textarea")
    box.fill("What colour is it?")
    page.locator("#attachment").set_input_files(
        files=[FilePayload(name="red.png", mimeType="image/png", buffer=png("red", (1024, 1024)))]
    )
    chip = chips(page).filter(has_text="red.png")
    expect(chip).to_contain_text("765 tokens")  # 85 + 170 x 4 tiles, OpenAI's rule
    page.locator("#conversation-configuration").select_option("seeing-cheap")
    # The switch reads, plans and counts like a preview: on a loaded machine it may take
    # longer than an expectation's usual 5 s.
    expect(chip).to_contain_text("300 tokens", timeout=15_000)
    expect(chip.locator(".hint")).to_have_attribute("title", "for seeing-cheap")
    expect(chips(page)).to_have_count(1)
    expect(box).to_have_value("What colour is it?")
    expect(page.locator("#meter")).to_have_attribute("data-preview", "true")
    page.locator("#conversation-configuration").select_option("seeing")
    expect(chip).to_contain_text("765 tokens", timeout=15_000)


def test_a_switch_answered_after_a_preview_still_counts_the_chips_again(
    live_server: Server, open_page: OpenPage
) -> None:
    """The switch's answer landing after a preview's (which replaces the meter) still
    counts the chips again: htmx drops an answer whose request's target left the page, so
    the switch's answer may not hang on the meter. Held here on purpose: the switch's
    request waits until a preview, typed after it, has replaced the meter."""
    conversation_id = create_conversation(live_server, "seeing")
    page = open_page(live_server, f"/c/{conversation_id}", bypass_csp=True)  # wait_for_function
    box = page.locator("#composer textarea")
    page.locator("#attachment").set_input_files(
        files=[FilePayload(name="red.png", mimeType="image/png", buffer=png("red", (1024, 1024)))]
    )
    chip = chips(page).filter(has_text="red.png")
    expect(chip).to_contain_text("765 tokens")
    held: list[Route] = []
    page.route(re.compile(r"/configuration$"), lambda route: held.append(route))
    page.locator("#conversation-configuration").select_option("seeing-cheap")
    for _ in range(50):  # the route's handler runs while the page is waited on
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the switch sent no request"
    page.evaluate("window.meterBefore = document.getElementById('meter')")
    box.press_sequentially("What colour?")
    page.wait_for_function("document.getElementById('meter') !== window.meterBefore")
    held[0].continue_()
    expect(chip).to_contain_text("300 tokens")
    expect(chip.locator(".hint")).to_have_attribute("title", "for seeing-cheap")
    expect(box).to_have_value("What colour?")


EMBED_DROP = DROP_OR_PASTE


@SIZES
def test_an_embed_whose_entry_allows_files_takes_them_and_one_that_does_not_has_no_input(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    size = "phone" if viewport[0] < 500 else "desktop"
    upstream.set_reply("A red square.")
    plain = open_page(live_server, "/embed/help", viewport=viewport)
    expect(plain.locator("#composer input[data-files-input]")).to_have_count(0)
    expect(plain.locator("#chips")).to_have_count(0)

    page = open_page(live_server, "/embed/photos", viewport=viewport, bypass_csp=True)
    # File choosers intercepted from the start: on a loaded machine the Enter below could
    # beat the interception Playwright turns on without waiting for it.
    page.on("filechooser", lambda _chooser: None)
    box = page.locator("#composer textarea")
    control = page.locator("#attachment")
    expect(control).to_have_accessible_name("Attach files")
    if size == "phone":
        assert_tappable(page.locator("label.attach"))
    box.fill("What is this?")
    # The keyboard alone: Tab from the box to the paperclip, Enter opens the chooser.
    box.focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.action") == "attach"
    with page.expect_file_chooser() as chooser:
        page.locator("label.attach").press("Enter")
    chooser.value.set_files(
        files=[FilePayload(name="red.png", mimeType="image/png", buffer=png("red"))]
    )
    expect(chips(page)).to_have_count(1)
    expect(chips(page).first).to_contain_text("tokens")  # this embed shows its internals
    page.evaluate(EMBED_DROP, ["drop", list(png("blue")), "blue.png"])
    expect(chips(page)).to_have_count(2)
    page.get_by_role("button", name="Remove blue.png").click()
    expect(chips(page)).to_have_count(1)

    box.press("Enter")
    answered(page, 1)
    expect(chips(page)).to_have_count(0)
    asked = [r for r in upstream.requests if r["path"].endswith("/chat/completions")][-1]
    part = asked["body"]["messages"][-1]["content"][1]
    assert part["image_url"]["url"].startswith("data:image/png;base64,")
    thumb = messages(page, "user").first.locator(".message-files img")
    expect(thumb).to_have_count(1)
    expect(thumb).to_have_attribute("src", re.compile(r"^/embed/photos/files/"))
    page.wait_for_function(
        "img => img.complete && img.naturalWidth === 64", arg=thumb.element_handle()
    )
    page.screenshot(path=f"/tmp/embed-files-{size}.png")
    accessible_both_ways(page, f"the embed with files ({size})")
