"""Daily use, finished (issue 24), in a real Chromium at desktop and phone sizes: a text
file attached from the composer (by its control, reached by keyboard, or dropped) goes
with the message and shows on it, a binary one is refused beside the box with nothing
typed lost; the model's title replaces the first message's cut in the header and the
sidebar without a reload; turns keep distinct numbers after a failed one; axe finds
nothing serious on these pages, light or dark."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import FilePayload, Locator, Page, expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import OpenPage, Server, Servers
from tests.browser.helpers import answered, create_conversation, messages, send_by_api, stored
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
NOTES = "Packing list\n- sun hat\n- the aardvark guide\n" + "".join(
    f"line {n}: bring water\n" for n in range(30)
)


@pytest.fixture(scope="module")
def titled_server(
    catalog_file: Path, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server whose conversations get their titles from the model (off for the other
    browser tests: they count the upstream's requests as sends)."""
    folder = tmp_path_factory.mktemp("titled")
    shutil.copy(sqlite_template, folder / "webapp.db")
    servers = Servers(catalog_file, folder, environment={"WEBAPP_MODEL_TITLES": "true"})
    try:
        yield servers.start(f"sqlite+aiosqlite:///{folder / 'webapp.db'}", name="titled")
    finally:
        servers.close()


def assert_tappable(control: Locator) -> None:
    box = control.bounding_box()
    assert box is not None and box["width"] >= 44 and box["height"] >= 44, box


def accessible_both_ways(page: Page, where: str) -> None:
    """axe in light and in dark."""
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        assert_accessible(page, f"{where} ({scheme})")


@SIZES
def test_a_text_file_goes_with_the_message_and_the_model_names_the_conversation(
    titled_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    artifacts: Path,
    viewport: tuple[int, int],
) -> None:
    live_server = titled_server
    size = "phone" if viewport[0] < 500 else "desktop"
    upstream.set_reply("Packing for the sun")  # the answer, and the title the model writes
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport, bypass_csp=True)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    box = page.locator("#composer textarea")
    control = page.locator("#attachment")
    label = page.locator("label.attach")
    expect(control).to_have_accessible_name("Attach files")
    control.focus()  # the file input takes the keyboard's focus; its label shows it
    expect(control).to_be_focused()
    if size == "phone":
        assert_tappable(label)

    # A file that is not what it says is refused beside the box; what was typed stays.
    box.fill("What should I pack?")
    control.set_input_files(
        files=[FilePayload(name="photo.png", mimeType="image/png", buffer=b"\x89PNG\x00\x00IHDR")]
    )
    expect(page.locator("#composer-error")).to_contain_text("photo.png")
    expect(page.locator("#chips .file-chip")).to_have_count(0)
    expect(box).to_have_value("What should I pack?")
    assert stored(live_server, conversation_id)["messages"] == []

    if size == "desktop":  # dropped on the composer, a file is attached the same way
        page.evaluate(
            """text => {
              const data = new DataTransfer();
              data.items.add(new File([text], "packing.txt", {type: "text/plain"}));
              const area = document.querySelector(".composer-area");
              const how = {dataTransfer: data, bubbles: true, cancelable: true};
              area.dispatchEvent(new DragEvent("dragover", how));
              area.dispatchEvent(new DragEvent("drop", how));
            }""",
            NOTES,
        )
    else:
        control.set_input_files(
            files=[FilePayload(name="packing.txt", mimeType="text/plain", buffer=NOTES.encode())]
        )
    expect(page.locator("#chips .file-chip")).to_contain_text("packing.txt")
    remove = page.get_by_role("button", name="Remove packing.txt")
    if size == "phone":
        assert_tappable(remove)
    expect(page.locator("#meter")).to_have_attribute("data-preview", "true")  # counted at once
    box.fill("")  # the file alone may be sent
    box.press("Enter")
    answer = answered(page, 1)
    expect(page.locator("#chips .file-chip")).to_have_count(0)
    sent = messages(page, "user").first
    part = sent.locator("details.attachment")
    expect(part.locator("summary")).to_contain_text("packing.txt")
    expect(part.locator("summary")).to_contain_text("33 lines")
    part.locator("summary").click()
    expect(part.locator("pre")).to_contain_text("the aardvark guide")
    if size == "phone":
        assert_tappable(part.locator("summary"))
    row = stored(live_server, conversation_id)["messages"][0]
    assert row["content"].startswith("Attached file `packing.txt`:\n\n```\nPacking list")
    sent.get_by_role("button", name="Copy turn 1").click()
    assert page.evaluate("navigator.clipboard.readText()") == row["content"]
    sent.get_by_role("button", name="Edit turn 1").click()  # the message exactly as stored
    expect(sent.locator(".edit-form textarea")).to_have_value(row["content"])
    page.keyboard.press("Escape")
    expect(sent.locator(".edit-form")).to_have_count(0)

    # The model's title, once the first answer is done: header, sidebar and tab, no reload.
    expect(page.locator("#title")).to_have_value("Packing for the sun")
    expect(page.locator(f"#conv-{conversation_id}")).to_contain_text("Packing for the sun")
    expect(page).to_have_title("Packing for the sun · Chat")
    expect(answer).to_contain_text("Packing for the sun")
    page.screenshot(path=str(artifacts / f"chat-attachment-{size}.png"))
    accessible_both_ways(page, f"the chat with an attachment ({size})")

    settings = open_page(live_server, "/settings", viewport=viewport, bypass_csp=True)
    settings.screenshot(path=str(artifacts / f"settings-{size}.png"), full_page=True)
    accessible_both_ways(settings, f"settings ({size})")


@SIZES
def test_turns_after_a_failed_one_keep_numbers_of_their_own(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    upstream.set_reply("Noted.")
    conversation_id = create_conversation(live_server)
    send_by_api(live_server, conversation_id, "first")
    upstream.fail_next(503)
    send_by_api(live_server, conversation_id, "second, whose answer fails")
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport, bypass_csp=True)
    box = page.locator("#composer textarea")
    box.fill("third")
    box.press("Enter")
    answered(page, 3)
    expected_users = ["You, turn 1", "You, turn 2", "You, turn 3"]
    expected_answers = ["Assistant, answer 1", "Assistant, answer 2", "Assistant, answer 3"]
    for _ in range(2):  # as the answer streamed in, then as a page loads it
        users = messages(page, "user")
        answers = messages(page, "assistant")
        assert [users.nth(n).get_attribute("aria-label") for n in range(3)] == expected_users
        assert [answers.nth(n).get_attribute("aria-label") for n in range(3)] == expected_answers
        expect(page.get_by_role("button", name="Pin turn 3", exact=True)).to_have_count(1)
        expect(page.get_by_role("button", name="Retry answer 2", exact=True)).to_have_count(1)
        page.reload()
    accessible_both_ways(page, "a chat with a failed turn")
