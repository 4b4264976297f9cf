"""The engine's prompt cache on the page, in a real Chromium: each answer's quiet note of how
much of its prompt the engine served from its cache, the note on the send that moved the
cut, and the meter's count of the turns left before older turns are left out.

The fake upstream behaves like OpenAI: it keeps a prefix cache and reports
`usage.prompt_tokens_details.cached_tokens` (from 1,024 tokens on, in steps of 128). Each
test runs its own server on a fresh database, so that its long sends do not move the
estimate's calibration that the package's other tests count on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import OpenPage, Server, Servers
from tests.browser.helpers import api
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

VIEWPORTS = {"desktop": (1280, 800), "phone": (390, 844)}

SENTENCE = (
    "The river runs past the old mill, under the stone bridge and along the rail line to "
    "the harbour, where the ferries wait for the morning trains from the hills. "
)


def turn_text(number: int) -> str:
    """About 330 tokens: a dozen turns fill the `medium` model's 4,096-token window."""
    return f"Turn {number}. " + SENTENCE * 9


def rows(server: Server, conversation_id: str) -> list[dict[str, Any]]:
    return api(server, "GET", f"/api/conversations/{conversation_id}")["messages"]


def cache_words(answer: dict[str, Any]) -> str:
    usage = answer["usage"]
    cached, prompt = usage["cached_tokens"], usage["prompt_tokens"]
    if cached == 0:
        return f"None of the {prompt:,} prompt tokens came from the engine's cache."
    return f"{cached:,} of {prompt:,} prompt tokens came from the engine's cache."


def ahead_words(preview: dict[str, Any]) -> str:
    """What the meter says of the turns left after the send a preview describes."""
    left = preview["turns_left"]
    which = "more" if preview["dropped_turns"] else "older"
    if left == 0:
        return f"the send after this one will leave {which} turns out"
    turns = "turn" if left == 1 else "turns"
    return f"then about {left} more {turns} before {which} turns are left out"


def newest_answer(page: Page, count: int) -> Locator:
    answers = page.locator('#messages [data-role="assistant"]')
    expect(answers).to_have_count(count)
    answer = page.locator(f"#m{answers.last.get_attribute('data-message-id')}")
    expect(answer).to_have_attribute("data-status", "complete", timeout=15_000)
    return answer


def height(element: Locator) -> float:
    box = element.bounding_box()
    assert box is not None
    return box["height"]


@pytest.mark.parametrize("viewport", list(VIEWPORTS), ids=list(VIEWPORTS))
def test_answers_say_what_came_from_the_cache_and_the_meter_counts_turns_left(
    servers: Servers,
    sqlite_url: str,
    upstream: FakeUpstream,
    open_page: OpenPage,
    artifacts: Path,
    viewport: str,
) -> None:
    server = servers.start(sqlite_url, name=f"cache-{viewport}")
    conversation_id = api(server, "POST", "/api/conversations", json={"configuration": "medium"})[
        "id"
    ]
    # Sent by the API until the preview of the next turn says it is the last that fits.
    number = 1
    while True:
        preview = api(
            server,
            "POST",
            f"/api/conversations/{conversation_id}/preview",
            json={"content": turn_text(number)},
        )
        assert preview["dropped_turns"] == 0, "the seeding went past the cut"
        if preview["turns_left"] is not None and preview["turns_left"] <= 1:
            break
        api(
            server,
            "POST",
            f"/api/conversations/{conversation_id}/messages",
            json={"content": turn_text(number)},
        )
        number += 1
        assert number < 30, "the window never filled"
    seeded = number - 1

    page = open_page(server, f"/c/{conversation_id}", viewport=VIEWPORTS[viewport])
    meter = page.locator("#meter")
    expect(meter).to_contain_text("Last send")
    # Every answer already on the page carries its note, in the stored numbers.
    answers = [r for r in rows(server, conversation_id) if r["role"] == "assistant"]
    assert len(answers) == seeded
    for answer in answers:
        assert answer["usage"]["cached_tokens"] is not None, "the upstream reports cached tokens"
        expect(page.locator(f"#m{answer['id']} .cache-note")).to_have_text(cache_words(answer))
    assert answers[-1]["usage"]["cached_tokens"] > 0, "pure appends reuse the cache"
    resting = height(meter)
    resting_ahead = height(meter.locator(".meter-ahead"))
    assert resting_ahead > 0, "the count's line is kept while it is empty"

    # Typing previews the next send: the meter counts the turns left, on the same height.
    box = page.locator("#composer textarea")
    sends: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for attempt in range(4):
        box.fill(turn_text(number))
        expect(meter).to_have_attribute("data-preview", "true")
        ahead = meter.locator(".meter-ahead")
        expect(ahead).to_have_attribute("data-turns-left", str(preview["turns_left"]))
        expect(ahead).to_have_text(ahead_words(preview))
        if attempt == 0:
            page.screenshot(path=str(artifacts / f"cache-meter-preview-{viewport}.png"))
        # The count has a line of its own, kept while empty: typing does not make the meter
        # taller (a preview that leaves turns out adds its remedies, as it always has).
        assert height(ahead) == resting_ahead, "the count stays on one line"
        if not preview["dropped_turns"]:
            assert height(meter) == resting, "the meter keeps its height while typing"
        box.press("Enter")
        answer_on_page = newest_answer(page, seeded + attempt + 1)
        stored = rows(server, conversation_id)
        user, answer = stored[-2], stored[-1]
        assert user["role"] == "user" and answer["role"] == "assistant"
        note = answer_on_page.locator(".cache-note")
        # The note arrives with the stream's last update, without a reload.
        expect(note).to_contain_text(cache_words(answer))
        sends.append((user, answer))
        number += 1
        if user["fit"]["cut_moved"]:
            expect(note).to_contain_text("This send moved the cut: older turns were left out")
            page.screenshot(path=str(artifacts / f"cache-note-cut-moved-{viewport}.png"))
            break
        expect(note).not_to_contain_text("moved the cut")
        preview = api(
            server,
            "POST",
            f"/api/conversations/{conversation_id}/preview",
            json={"content": turn_text(number)},
        )
    else:
        pytest.fail(f"four sends past the last that fit never moved the cut: {sends}")
    moved_user, moved_answer = sends[-1]
    assert moved_user["dropped_turns"] > 0

    # The send after the move is a pure append again: most of its prompt came from the cache.
    box.fill(turn_text(number))
    expect(meter).to_have_attribute("data-preview", "true")
    box.press("Enter")
    answer_on_page = newest_answer(page, seeded + len(sends) + 1)
    after = rows(server, conversation_id)[-1]
    expect(answer_on_page.locator(".cache-note")).to_have_text(cache_words(after))
    assert after["usage"]["cached_tokens"] > moved_answer["usage"]["cached_tokens"]
    assert after["usage"]["cached_tokens"] > after["usage"]["prompt_tokens"] // 2
    # The note is small print: smaller than the answer it sits under.
    style = answer_on_page.locator(".cache-note").evaluate(
        "el => [getComputedStyle(el).fontSize, getComputedStyle(el.closest('.bubble')).fontSize]"
    )
    assert float(style[0].removesuffix("px")) < float(style[1].removesuffix("px"))
    page.screenshot(path=str(artifacts / f"cache-note-{viewport}.png"))
