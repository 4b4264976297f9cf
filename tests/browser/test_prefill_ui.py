"""Prefill you can see, in a real Chromium at desktop and phone sizes: while llama.cpp
reads a long prompt (the fake upstream reports its `prompt_progress` as llama.cpp does,
then holds the stream), the answer says how far it has read and how much its cache
served; the line goes when the text comes; axe finds nothing serious meanwhile. Where
the engine says nothing of it, the answer counts the time waited.

A server of this module's own: the app asks an engine for its `/slots` once per provider,
and the package's shared server has met the fake as OpenAI."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.axe import assert_accessible
from tests.browser.conftest import OpenPage, Server, Servers
from tests.browser.helpers import answered, composer_ready, create_conversation
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

SIZES = pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
READING = re.compile(r"^Reading the conversation: [\d,]+ of ([\d,]+) tokens, ([\d,]+) from cache$")


@pytest.fixture(scope="module")
def engine_server(
    catalog_file: Path, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("prefill")
    shutil.copy(sqlite_template, folder / "webapp.db")
    servers = Servers(catalog_file, folder)
    try:
        yield servers.start(f"sqlite+aiosqlite:///{folder / 'webapp.db'}", name="prefill")
    finally:
        servers.close()


@SIZES
def test_the_answer_says_how_far_the_engine_has_read(
    engine_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    artifacts: Path,
    viewport: tuple[int, int],
) -> None:
    upstream.set_engine("llamacpp")
    upstream.progress_batch = 8
    upstream.hold_after_progress = True
    upstream.set_reply("The bridge was built in 1820.")
    conversation_id = create_conversation(engine_server)
    page = open_page(engine_server, f"/c/{conversation_id}", viewport=viewport, bypass_csp=True)
    composer_ready(page)
    box = page.locator("#composer textarea")
    box.fill("When was the stone bridge over the river built, and by whom? " * 3)
    box.press("Enter")

    reading = page.locator('#messages [data-role="assistant"] .prefill')
    expect(reading).to_have_text(READING, timeout=15_000)
    expect(reading).to_have_attribute("role", "status")
    record = upstream.cache_log[-1]
    expect(reading).to_have_text(
        f"Reading the conversation: {record.prompt_tokens:,} of {record.prompt_tokens:,} "
        f"tokens, {record.cached_tokens:,} from cache"
    )
    size = "phone" if viewport[0] < 500 else "desktop"
    page.screenshot(path=str(artifacts / f"prefill-{size}.png"))
    assert_accessible(page, f"the prefill line ({size})")

    upstream.end_stalls()
    answer = answered(page, 1)
    expect(answer.locator(".content")).to_have_text("The bridge was built in 1820.")
    expect(answer.locator(".prefill")).to_have_count(0)

    # An engine that says nothing of its reading: the time waited, counted on the page.
    upstream.set_engine("openai")
    upstream.hold_after_progress = False
    upstream.stall(60)
    composer_ready(page)
    box.fill("And the mill?")
    box.press("Enter")
    waited = page.locator('#messages [data-role="assistant"] .waited')
    expect(waited).to_have_text(re.compile(r"^Waiting for the model: \d+ s$"), timeout=15_000)
    assert_accessible(page, f"the time waited ({size})")
    upstream.end_stalls()
    answered(page, 2)
    expect(waited).to_have_count(0)
