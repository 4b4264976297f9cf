"""What the browser tests share: set-up and checks through the JSON API, and finding the
conversation's messages on the page."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import Server

FILLER = (
    "Please keep this in mind while we talk about rivers, bridges, trains and the long history "
    "of the places they connect, because I will come back to every one of these details later "
    "on in our conversation and I would like you to remember them all."
)


def turn_text(number: int) -> str:
    return f"Turn {number}. {FILLER}"


# ---- the JSON API, for set-up and for checking what was stored ------------------------------


def api(server: Server, method: str, path: str, **kwargs: Any) -> Any:
    """The JSON of an API call that must succeed (200 or 201)."""
    response = server.api(method, path, **kwargs)
    assert response.status_code in (200, 201), response.text
    return response.json()


def create_conversation(server: Server, configuration: str | None = None) -> str:
    body = {"configuration": configuration} if configuration else {}
    response = server.api("POST", "/api/conversations", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def stored(server: Server, conversation_id: str) -> dict[str, Any]:
    response = server.api("GET", f"/api/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    return response.json()


def send_by_api(server: Server, conversation_id: str, content: str) -> dict[str, Any]:
    response = server.api(
        "POST", f"/api/conversations/{conversation_id}/messages", json={"content": content}
    )
    assert response.status_code == 201, response.text
    return response.json()


# ---- the page --------------------------------------------------------------------------------


def messages(page: Page, role: str) -> Locator:
    return page.locator(f'#messages [data-role="{role}"]')


def by_id(page: Page, message: Locator) -> Locator:
    """That very message, however many come after it."""
    return page.locator(f"#m{message.get_attribute('data-message-id')}")


def answered(page: Page, count: int, status: str = "complete") -> Locator:
    """The `count`-th answer, once it is on the page and has reached `status`."""
    expect(messages(page, "assistant")).to_have_count(count)
    answer = by_id(page, messages(page, "assistant").last)
    expect(answer).to_have_attribute("data-status", status, timeout=15_000)
    return answer


def text_of(message: Locator) -> str:
    return (message.locator(".content").text_content() or "").strip()


def composer_ready(page: Page) -> None:
    expect(page.locator("#composer textarea")).to_be_enabled()
    expect(page.locator('#composer [data-action="send"]')).to_be_enabled()
    expect(page.locator('#composer [data-action="stop"]')).to_be_hidden()


def height_of(element: Locator) -> float:
    """The element's height on screen, in CSS pixels (it must be shown)."""
    box = element.bounding_box()
    assert box is not None, "the element is not shown"
    return box["height"]
