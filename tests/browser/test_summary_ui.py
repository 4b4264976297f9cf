"""The summary of what the cut left out, in a real Chromium at a desktop's and a phone's
size: the cut line says the model sees a summary instead of the turns above it and opens
it; the owner edits it and turns summaries off, by clicking and typing."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import OpenPage, Servers
from tests.browser.helpers import api
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

VIEWPORTS = {"desktop": (1280, 800), "phone": (390, 844)}
SENTENCE = "The ferry leaves the harbour at seven and reaches the island by nine. "


@pytest.mark.parametrize("viewport", list(VIEWPORTS), ids=list(VIEWPORTS))
def test_the_cut_line_opens_the_summary_which_the_owner_edits_and_turns_off(
    servers: Servers,
    sqlite_url: str,
    upstream: FakeUpstream,
    open_page: OpenPage,
    artifacts: Path,
    viewport: str,
) -> None:
    server = servers.start(sqlite_url, name=f"summary-{viewport}")
    conversation = api(server, "POST", "/api/conversations", json={"configuration": "medium"})
    path = f"/api/conversations/{conversation['id']}"
    api(server, "PATCH", path, json={"summarize": True})
    for number in range(40):
        sent = api(
            server, "POST", f"{path}/messages", json={"content": f"Turn {number}. " + SENTENCE * 20}
        )
        if sent["user"]["fit"]["summary"] is not None and number > 20:
            break
    shown = api(server, "GET", path)
    newest = shown["summaries"][-1]

    page = open_page(
        server, f"/c/{conversation['id']}", viewport=VIEWPORTS[viewport], bypass_csp=True
    )
    line = page.locator("#cut-line")
    expect(line).to_contain_text("The model sees a summary instead of the")
    read = line.get_by_role("button", name="Read the summary")
    expect(read).to_be_visible()
    read.click()
    dialog = page.get_by_role("dialog", name="What the model sees instead of the earlier turns")
    expect(dialog).to_be_visible()
    box = dialog.get_by_label("Summary")
    expect(box).to_have_value(newest["content"])
    page.screenshot(path=str(artifacts / f"summary-dialog-{viewport}.png"))
    assert_accessible(page, f"the summary dialog ({viewport})")
    box.fill("The ferry times: leaves at seven (turn 1), arrives at nine (turn 1).")
    dialog.get_by_role("button", name="Save the summary").click()
    expect(page.locator("#cut-line")).to_contain_text("summary instead")
    edited = api(server, "GET", path)["summaries"][-1]
    assert edited["edited"] and edited["content"].startswith("The ferry times")

    page.locator("#cut-line").get_by_role("button", name="Read the summary").click()
    page.get_by_role("button", name="Turn summaries off for this conversation").click()
    expect(page.locator("#messages")).to_be_visible()
    page.wait_for_load_state()
    assert api(server, "GET", path)["summarize"] is False
