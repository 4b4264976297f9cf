"""Organising and sharing in a real Chromium, driven by clicks at desktop and phone sizes:
pin, tag (markup shown as text) and filter the sidebar by the tag, share a read-only link
and revoke it, select several conversations to archive, unarchive and delete; axe on
every page touched, light and dark."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.axe import assert_accessible, violations
from tests.browser.conftest import OpenPage, Server
from tests.browser.helpers import create_conversation, send_by_api

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])


def named(server: Server, title: str, tags: list[str] | None = None) -> str:
    """A conversation with one exchange, titled (and tagged) by the API."""
    cid = create_conversation(server)
    send_by_api(server, cid, f"Notes for {title}")
    body: dict[str, object] = {"title": title}
    if tags:
        body["tags"] = tags
    response = server.api("PATCH", f"/api/conversations/{cid}", json=body)
    assert response.status_code == 200, response.text
    return cid


def chatgpt_conversation(title: str) -> dict[str, object]:
    """One conversation as ChatGPT's `conversations.json` holds it: a question, an answer."""

    def node(key: str, parent: str | None, role: str, text: str) -> dict[str, object]:
        message = {"author": {"role": role}, "content": {"content_type": "text", "parts": [text]}}
        children = {"q": ["a"], "a": []}[key]
        return {"id": key, "parent": parent, "children": children, "message": message}

    mapping = {"q": node("q", None, "user", "Hello there"), "a": node("a", "q", "assistant", "Hi!")}
    return {"title": title, "mapping": mapping, "current_node": "a"}


def open_drawer_on_phone(page: Page) -> None:
    toggle = page.locator(".drawer-toggle")
    if toggle.is_visible():
        toggle.click()


def no_sideways_scroll(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0


@SIZES
def test_pin_tag_filter_and_share_by_clicks(
    live_server: Server,
    open_page: OpenPage,
    browser: Browser,
    artifacts: Path,
    viewport: tuple[int, int],
) -> None:
    size = "phone" if viewport[0] < 500 else "desktop"
    tag = f"<i>trip-{size}</i>"
    first = named(live_server, f"Rome {size}")
    other = named(live_server, f"Oslo {size}")

    page = open_page(live_server, f"/c/{first}", viewport=viewport)
    open_drawer_on_phone(page)
    page.get_by_role("link", name="Organise or share this conversation").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Organise “Rome {size}”")
    page.get_by_role("button", name="Pin to the top").click()
    expect(page.get_by_role("button", name="Unpin from the top")).to_be_visible()
    page.get_by_label("New tag").fill(tag)
    page.get_by_role("button", name="Add the tag").click()
    expect(page.locator(".tag-list .tag")).to_have_text(tag.lower())  # as text, not markup
    expect(page.locator(".tag-list i")).to_have_count(0)
    no_sideways_scroll(page)

    # The sidebar: pinned on top, the tag on the row, filtered by it.
    page.get_by_role("link", name="← Back to the conversation").click()
    open_drawer_on_phone(page)
    pinned = page.locator("#conversation-list .list-group").first
    expect(pinned).to_have_text("Pinned")
    row = page.locator(f"#conv-{first}")
    expect(row.locator(".tag-user")).to_have_text(tag.lower())
    expect(page.locator(f"#conv-{other}")).to_have_count(1)
    page.get_by_label("Tag", exact=True).select_option(tag.lower())
    expect(page.locator(f"#conv-{other}")).to_have_count(0)
    expect(page.locator(f"#conv-{first}")).to_have_count(1)
    # Search within the tag: the other conversation's words are not found there.
    page.get_by_label("Search your conversations").fill(f"Notes {size}")
    hits = page.locator("#search-results .hit-title")
    expect(hits.first).to_have_text(f"Rome {size}")
    expect(page.locator("#search-results")).not_to_contain_text(f"Oslo {size}")
    page.get_by_label("Search your conversations").fill("")
    page.screenshot(path=str(artifacts / f"organise-sidebar-{size}.png"))

    # Share, open the link signed out, revoke it from the owner's page.
    page.get_by_role("link", name="Organise or share this conversation").click()
    page.get_by_role("link", name="Share a read-only link").click()
    page.get_by_role("button", name="Create a link").click()
    link = page.locator("[data-share-url]").get_attribute("href")
    assert link is not None and link.startswith("/s/")
    anonymous = browser.new_context(
        base_url=live_server.url, viewport={"width": viewport[0], "height": viewport[1]}
    )
    try:
        reader = anonymous.new_page()
        response = reader.goto(link)
        assert response is not None and response.status == 200
        assert "noindex" in response.headers["x-robots-tag"]
        expect(reader.get_by_role("heading", level=1)).to_have_text(f"Rome {size}")
        expect(reader.locator(".shared-messages")).to_contain_text(f"Notes for Rome {size}")
        expect(reader.locator("button, form, textarea")).to_have_count(0)
        no_sideways_scroll(reader)
        reader.screenshot(path=str(artifacts / f"shared-page-{size}.png"), full_page=True)
        page.get_by_role("button", name=re.compile(f"Revoke the link to Rome {size}")).click()
        expect(page.locator(".share-list")).to_have_count(0)
        gone = reader.goto(link)
        assert gone is not None and gone.status == 404

        # A second link, listed in the settings and revoked there.
        page.get_by_role("button", name="Create a link").click()
        second = page.locator("[data-share-url]").get_attribute("href")
        assert second is not None and second != link
        page.goto("/settings")
        revoke = page.get_by_role("button", name=re.compile(f"Revoke the link to Rome {size}"))
        expect(revoke).to_have_count(1)
        revoke.click()
        expect(page).to_have_url(re.compile("/settings$"))
        expect(page.locator("#shared-links")).to_contain_text("No shared links.")
        gone = reader.goto(second)
        assert gone is not None and gone.status == 404
    finally:
        anonymous.close()


@SIZES
def test_select_several_to_archive_unarchive_and_delete(
    live_server: Server, open_page: OpenPage, tmp_path: Path, viewport: tuple[int, int]
) -> None:
    size = "phone" if viewport[0] < 500 else "desktop"
    tag = f"bulk-{size}"
    ids = [named(live_server, f"{name} {size}", [tag]) for name in ("Alpha", "Beta", "Gamma")]

    page = open_page(live_server, f"/c/{ids[0]}", viewport=viewport)
    open_drawer_on_phone(page)
    page.get_by_role("link", name="Organise conversations").click()
    page.get_by_label("Tag").select_option(tag)
    page.get_by_role("button", name="Show", exact=True).click()
    boxes = page.locator(".organise-list input[type=checkbox]")
    expect(boxes).to_have_count(3)
    page.get_by_label(f"Alpha {size}").check()
    page.get_by_label(f"Beta {size}").check()
    page.get_by_role("button", name="Archive selected").click()
    expect(boxes).to_have_count(1)
    expect(page.locator(".organise-list")).to_contain_text(f"Gamma {size}")
    no_sideways_scroll(page)

    page.get_by_label("Show").select_option("archived")
    page.get_by_role("button", name="Show", exact=True).click()
    expect(boxes).to_have_count(2)
    page.get_by_label(f"Alpha {size}").check()
    page.get_by_role("button", name="Unarchive selected").click()
    expect(boxes).to_have_count(1)
    page.get_by_label(f"Beta {size}").check()
    page.get_by_role("button", name="Delete selected").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Delete 1 conversation for good?")
    page.get_by_role("button", name="Delete for good").click()
    expect(page.get_by_text("No archived conversations")).to_be_visible()

    listed = live_server.api("GET", f"/api/conversations?archived=all&tag={tag}").json()
    assert sorted(c["title"] for c in listed) == [f"Alpha {size}", f"Gamma {size}"]
    assert all(not c["archived"] for c in listed)

    # ChatGPT's export through the sidebar's import: opened, its row says it was imported.
    chatgpt = tmp_path / "conversations.json"
    chatgpt.write_text(json.dumps([chatgpt_conversation(f"From ChatGPT {size}")]))
    page.goto(f"/c/{ids[0]}")
    open_drawer_on_phone(page)
    page.get_by_label("Import a JSON export").set_input_files(chatgpt)
    page.get_by_role("button", name="Import", exact=True).click()
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(ids[0]) + r")[\w-]+$"))
    expect(page.locator(".message.user .content")).to_have_text(["Hello there"])
    open_drawer_on_phone(page)
    expect(page.locator(".conversation-list .current .tag-imported")).to_have_text("imported")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_organise_and_share_pages_pass_axe(
    live_server: Server, open_page: OpenPage, scheme: str
) -> None:
    cid = named(live_server, f"Axe {scheme}", ["<b>checked</b>"])
    pinned = live_server.api("PATCH", f"/api/conversations/{cid}", json={"pinned": True})
    assert pinned.status_code == 200
    shared = live_server.api("POST", f"/api/conversations/{cid}/share", json={})
    assert shared.status_code == 201
    paths = [
        f"/c/{cid}",
        f"/c/{cid}/organise",
        f"/c/{cid}/share",
        "/organise",
        shared.json()["url"],
    ]
    page = open_page(live_server, paths[0], color_scheme=scheme, bypass_csp=True)
    for path in paths:
        page.goto(path)
        assert_accessible(page, f"{path} ({scheme})")
        if path != paths[0]:  # the pages this change adds: not even a moderate finding
            moderate = violations(page, ("moderate",))
            assert not moderate, f"axe on {path} ({scheme}): {moderate}"
    page.set_viewport_size({"width": 390, "height": 844})  # the public page on a phone
    assert_accessible(page, f"{paths[-1]} ({scheme}, phone)")
    revoked = live_server.api("DELETE", f"/api/shares/{shared.json()['id']}")
    assert revoked.status_code == 204
