"""The header's configuration picker, the calm context display and the sidebar's everyday
behaviour, in a real Chromium at desktop and phone sizes."""

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
    send_by_api,
    stored,
    turn_text,
)
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])


def largest_configuration(server: Server) -> str:
    listed = server.api("GET", "/api/configurations").json()
    entries = listed if isinstance(listed, list) else listed["configurations"]
    return max(entries, key=lambda entry: entry["window"] or 0)["name"]


def send_until_trimmed(server: Server, conversation_id: str, *, most: int = 12) -> int:
    """Sends turns until the newest send left some out, and says how many were sent: where
    the cut falls depends on what the shared server has learned from earlier tests."""
    for number in range(1, most + 1):
        send_by_api(server, conversation_id, turn_text(number))
        users = [r for r in stored(server, conversation_id)["messages"] if r["role"] == "user"]
        if number > 1 and users[-1]["dropped_turns"]:
            return number
    raise AssertionError(f"{most} turns never outgrew the window")


@SIZES
def test_the_header_picker_switches_and_keeps_the_draft(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    conversation_id = create_conversation(live_server, "tiny")
    sent = send_until_trimmed(live_server, conversation_id)
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    expect(page.locator("#cut-line")).to_have_count(1)
    expect(page.locator("#meter")).not_to_contain_text("Over")
    # The sidebar's select is for new conversations, and says so.
    expect(page.locator('label[for="configuration"]')).to_have_text(
        "Configuration for new conversations"
    )
    expect(page.locator("#configuration")).not_to_have_value("tiny")  # the default, not this one's
    expect(page.locator("#conversation-configuration")).to_have_value("tiny")

    box = page.locator("#composer textarea")
    box.fill("my draft, not sent yet")
    large = largest_configuration(live_server)
    picker = page.locator("#conversation-configuration")
    expect(picker).to_be_visible()
    picker.select_option(large)
    expect(page.locator("#meter")).to_have_attribute("data-preview", "true")
    expect(page.locator("#meter")).to_contain_text("Everything will be sent")
    expect(page.locator("#cut-line")).to_have_count(0)  # the larger model takes it all
    expect(box).to_have_value("my draft, not sent yet")
    assert stored(live_server, conversation_id)["configuration"] == large

    box.press("Enter")
    answered(page, sent + 1)
    newest = [r for r in stored(live_server, conversation_id)["messages"] if r["role"] == "user"][
        -1
    ]
    assert newest["dropped_turns"] == 0, newest["fit"]
    expect(page.locator("#cut-line")).to_have_count(0)
    expect(page.locator("#meter")).to_contain_text("Everything was sent")


@SIZES
def test_the_header_picker_switches_with_an_empty_box_and_keeps_it(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    """A person who picks another configuration before typing anything: the switch is sent
    (the empty, required message box must not block it), kept across a reload, and the
    next answer comes from the new configuration's model."""
    conversation_id = create_conversation(live_server, "tiny")
    send_by_api(live_server, conversation_id, turn_text(1))
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    box = page.locator("#composer textarea")
    expect(box).to_have_value("")
    listed = live_server.api("GET", "/api/configurations").json()
    entries = listed if isinstance(listed, list) else listed["configurations"]
    chosen = next(e for e in entries if e["name"] == largest_configuration(live_server))
    assert chosen["serving_model"] != "tiny"
    picker = page.locator("#conversation-configuration")
    with page.expect_response(lambda r: r.url.endswith("/configuration")) as switched:
        picker.select_option(chosen["name"])
    assert switched.value.ok, switched.value.status
    assert stored(live_server, conversation_id)["configuration"] == chosen["name"]

    page.reload()
    expect(picker).to_have_value(chosen["name"])
    box.fill("And now?")
    box.press("Enter")
    answered(page, 2)
    newest = stored(live_server, conversation_id)["messages"][-1]
    assert newest["role"] == "assistant" and newest["model"] == chosen["serving_model"], newest

    # The sidebar's choice for new conversations is kept as Settings keeps it: the next
    # page, and the settings page, show it.
    if viewport[0] < 600:
        page.locator('[data-action="toggle-sidebar"]').click()
    try:
        with page.expect_response(lambda r: r.url.endswith("/default-configuration")) as kept:
            page.locator("#configuration").select_option("narrow")
        assert kept.value.ok, kept.value.status
        page.goto("/settings")
        expect(page.locator("#default-configuration")).to_have_value("narrow")
        page.goto(f"/c/{conversation_id}")
        expect(page.locator("#configuration")).to_have_value("narrow")
    finally:  # the shared server's user starts new conversations on the site's default again
        reset = live_server.api("POST", "/settings/default-configuration", data={})
        assert reset.status_code == 204, reset.text


@SIZES
def test_the_meter_keeps_its_height_and_notes_are_calm(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    conversation_id = create_conversation(live_server, "narrow")
    for number in range(1, 10):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    meter = page.locator("#meter")
    before = height_of(meter)
    box = page.locator("#composer textarea")
    box.fill(turn_text(10) * 4)
    expect(meter).to_have_attribute("data-preview", "true")
    typing = height_of(meter)
    box.fill("")
    box.dispatch_event("input")
    expect(meter).to_have_attribute("data-preview", "false")
    assert before == typing == height_of(meter), (before, typing)
    expect(meter).not_to_contain_text("Over · Over")

    # One note shows, on the newest trimmed turn; the others on demand.
    trimmed = page.locator("#messages [data-dropped-turns]")
    count = trimmed.count()
    assert count >= 2
    expect(page.locator("#messages .trim-marker:visible")).to_have_count(1)
    line = page.locator("#cut-line")
    expect(line.locator(".cut-words")).to_have_text(re.compile(r"^The model no longer sees the"))
    # On one line, whatever the width (the buttons may go below it on a phone).
    words_box = line.locator(".cut-words").bounding_box()
    assert words_box is not None and words_box["height"] < 30, words_box
    newest = trimmed.last.get_attribute("data-turn-name")
    assert newest and newest.startswith("turn ")
    # The line's buttons say which turn they speak of: no two controls share a name.
    expect(line.get_by_role("button", name="Show which")).to_have_accessible_name(
        f"Show which turns {newest} was sent without"
    )
    notes = line.get_by_role("button", name="All notes")
    expect(notes).to_have_accessible_name(
        f"All notes of the {count} trimmed turns, not only {newest}'s"
    )
    notes.click()
    expect(page.locator("#messages .trim-marker:visible")).to_have_count(count)
    expect(line.get_by_role("button", name="Fewer notes")).to_have_accessible_name(
        f"Fewer notes: only {newest}'s, not all {count} trimmed turns"
    )


@SIZES
def test_sidebar_new_rename_export_and_fork_marks(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    page = open_page(live_server, "/", viewport=viewport)
    if viewport[0] < 600:
        page.locator('[data-action="toggle-sidebar"]').click()
    page.locator(".new-conversation button[type=submit]").click()
    page.wait_for_url(re.compile(r"/c/[\w-]+$"))
    first = page.url
    if viewport[0] < 600:
        page.locator('[data-action="toggle-sidebar"]').click()
    page.locator(".new-conversation button[type=submit]").click()
    page.wait_for_load_state()
    assert page.url == first, "an empty conversation is reused"
    conversation_id = first.rsplit("/", 1)[1]

    expect(page.locator("#export-links")).to_be_hidden()
    expect(page.locator("#title-hint")).not_to_be_in_viewport()
    box = page.locator("#composer textarea")
    box.fill("How were the suspension bridges of the nineteenth century built, and by whom")
    box.press("Enter")
    answered(page, 1)
    title = stored(live_server, conversation_id)["title"]
    assert title.endswith("…") and not title[:-1].endswith(" ")
    assert "How were the suspension bridges of the nineteenth century built".startswith(title[:-1])
    if viewport[0] >= 600:
        expect(page.locator("#export-links")).to_be_visible()
    expect(page.locator("#export-links a")).to_have_count(2)

    title_box = page.locator("#title")
    title_box.fill("Bridges")
    title_box.press("Enter")
    expect(page.locator("#title-hint")).to_have_text("Renamed.")
    expect(page.locator(f"#conv-{conversation_id} .conv-title")).to_have_text("Bridges")

    answer_id = stored(live_server, conversation_id)["messages"][1]["id"]
    response = live_server.api(
        "POST", f"/api/conversations/{conversation_id}/fork", json={"message_id": answer_id}
    )
    fork_id = response.json()["id"]
    page.goto(f"/c/{fork_id}")
    tag = page.locator(f"#conv-{fork_id} .tag")
    expect(tag).to_have_text("fork")
    if viewport[0] < 600:
        page.locator('[data-action="toggle-sidebar"]').click()
    expect(tag).to_be_visible()
    assert (tag.bounding_box() or {"width": 0})["width"] > 10


@SIZES
def test_a_refused_import_says_why_beside_the_form(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    viewport: tuple[int, int],
    tmp_path: Path,
) -> None:
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}", viewport=viewport)
    if viewport[0] < 600:
        page.locator('[data-action="toggle-sidebar"]').click()
    bad = tmp_path / "not-an-export.json"
    bad.write_text('{"format": "something else"}')
    page.locator("#import-file").set_input_files(str(bad))
    page.locator(".import-form button[type=submit]").click()
    expect(page.locator("#import-error")).not_to_be_empty()
    expect(page.locator("#import-error")).to_be_visible()
    assert page.url.endswith(f"/c/{conversation_id}"), "the page stays"
    assert page.locator("#import-file").evaluate("el => el.files.length") == 1, "the file stays"


@SIZES
def test_a_refused_admin_form_keeps_what_was_typed(
    live_server: Server, open_page: OpenPage, viewport: tuple[int, int]
) -> None:
    page = open_page(live_server, "/admin/users", viewport=viewport)
    name = f"twice-{viewport[0]}"
    for _ in range(2):
        page.get_by_label("Username").fill(name)
        page.locator('form[action="/admin/users"] input[name="password"]').fill(
            "correct horse battery staple"
        )
        page.locator('form[action="/admin/users"] button[type=submit]').click()
        page.wait_for_load_state()
    expect(page.locator("#form-error")).to_be_visible()
    expect(page.get_by_role("heading", name="Users")).to_be_visible()
    expect(page.get_by_label("Username")).to_have_value(name)
    expect(page.locator('form[action="/admin/users"] input[name="password"]')).to_have_value("")
