"""The chat UI in a real Chromium (issue "Chat UI"): each test breaks when its feature does.

The app runs in uvicorn subprocesses (see conftest.py) against the fake OpenAI-compatible
upstream, whose replies, pace and faults each test scripts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Dialog, Locator, Page, expect

from tests.browser.conftest import OpenPage, Server, Servers
from tests.browser.helpers import (
    answered,
    by_id,
    composer_ready,
    create_conversation,
    messages,
    send_by_api,
    stored,
    text_of,
    turn_text,
)
from tests.page_stream_client import ANSWER
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser


def words(count: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


# ---- the page --------------------------------------------------------------------------------


def wait_for_words(page: Page, count: int) -> None:
    """Until the newest answer shows at least `count` words."""
    page.wait_for_function(
        """count => {
            const all = document.querySelectorAll('#messages [data-role="assistant"]');
            const last = all[all.length - 1];
            if (!last) return false;
            return last.querySelector('.content').textContent.trim().split(/\\s+/)
                .filter(Boolean).length >= count;
        }""",
        arg=count,
    )


def scroll_settled(page: Page) -> None:
    """Until the messages stop scrolling (a click meanwhile may land on whatever passes under
    the pointer)."""
    page.evaluate(
        """() => new Promise((done) => {
            const box = document.getElementById("messages");
            let last = box.scrollTop, still = 0;
            const tick = () => {
                if (box.scrollTop === last) still += 1; else { still = 0; last = box.scrollTop; }
                if (still > 10) done(); else requestAnimationFrame(tick);
            };
            requestAnimationFrame(tick);
        })"""
    )


def swaps(page: Page) -> list[dict[str, Any]]:
    """The newest answer after each update (a swap, or a `content` event), in order."""
    return [s for s in page.evaluate("window.__sse") if s["event"] in (None, "content")]


def assert_streamed_whole(shown: list[str], reply: str) -> None:
    """Every state shown was a prefix of the reply (nothing duplicated or garbled), it only
    grew (nothing lost), and it ended complete."""
    assert shown, "no SSE swap arrived"
    for text in shown:
        assert reply.startswith(text), f"shown text is not a prefix of the reply: {text!r}"
    lengths = [len(text) for text in shown]
    assert lengths == sorted(lengths), f"the answer shrank while streaming: {lengths}"
    assert shown[-1] == reply


# ---- sending and streaming -------------------------------------------------------------------


def test_enter_sends_and_the_answer_streams_in_several_swaps(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    reply = words(80)  # some 300 characters: an update every 96 (SNAPSHOT_CHARS) at most
    upstream.set_reply(reply)
    upstream.chunk_delay = 0.025  # 80 chunks: about two seconds
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    expect(page.locator("#meter")).to_contain_text("Nothing sent yet")
    # A stream cut by a restart reconnects within seconds (hx-sse's own ceiling is a minute).
    assert page.evaluate("htmx.config.sse.reconnectMaxDelay") == 5000

    sends: list[str] = []
    streams: list[str] = []
    page.on("request", lambda r: sends.append(r.url) if r.url.endswith("/send") else None)
    page.on("request", lambda r: streams.append(r.url) if r.url.endswith("/stream") else None)
    box = page.locator("#composer textarea")
    box.click()
    box.press_sequentially("first line")
    box.press("Shift+Enter")
    box.press_sequentially("second line")
    assert box.input_value() == "first line\nsecond line"
    page.wait_for_timeout(200)
    assert sends == [] and messages(page, "user").count() == 0, "Shift+Enter sent the message"

    box.press("Enter")
    answer = answered(page, 1)
    assert text_of(answer) == reply
    assert text_of(messages(page, "user").last) == "first line\nsecond line"

    shown = [s["text"] for s in swaps(page) if s["id"] == answer.get_attribute("data-message-id")]
    partial = {text for text in shown if text and text != reply}
    assert len(partial) >= 2, f"the answer did not arrive in several swaps: {shown}"
    assert_streamed_whole(shown, reply)

    expect(box).to_have_value("")
    composer_ready(page)
    # One stream per answer: a finished answer is not asked for again (hx-sse reconnects
    # after 0.5 s ± 30 % when the stream ends without its `done`).
    page.wait_for_timeout(1000)
    assert len(streams) == 1, f"the answer was streamed {len(streams)} times: {streams}"
    rows = stored(live_server, conversation_id)["messages"]
    assert [(r["role"], r["status"]) for r in rows] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert rows[0]["content"] == "first line\nsecond line"
    assert rows[1]["content"] == reply
    # The context meter now shows this send's fit.
    meter = page.locator("#meter meter")
    fit = rows[0]["fit"]
    expect(meter).to_have_attribute(
        "value", str(round(100 * fit["estimated_tokens"] / fit["budget"]))
    )
    expect(page.locator("#meter")).to_contain_text("Last send")
    expect(page.locator("#meter")).to_contain_text("Everything was sent to small")


# ---- trimming --------------------------------------------------------------------------------


def sent_turns(request: dict[str, Any]) -> list[int]:
    """Which turns (by number) a chat request to the upstream carried."""
    found = []
    for message in request["body"]["messages"]:
        match = re.match(r"Turn (\d+)\.", str(message.get("content") or ""))
        if message["role"] == "user" and match:
            found.append(int(match.group(1)))
    return found


def trim_label(dropped: int, model: str) -> str:
    were = "turn was" if dropped == 1 else "turns were"
    return f"{dropped} earlier {were} not sent to {model}"


def test_trim_markers_name_what_was_left_out(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    artifacts: Path,
) -> None:
    conversation_id = create_conversation(live_server, "tiny")
    for number in range(1, 7):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, f"/c/{conversation_id}")

    upstream.chunk_delay = 0.01
    box = page.locator("#composer textarea")
    box.fill(turn_text(7))
    box.press("Enter")
    answered(page, 7)

    rows = stored(live_server, conversation_id)["messages"]
    users = [r for r in rows if r["role"] == "user"]
    assert len(users) == 7
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 7, [sent_turns(c) for c in chats]
    for number, (row, request) in enumerate(zip(users, chats, strict=True), start=1):
        carried = sent_turns(request)
        assert carried[-1] == number
        assert row["dropped_turns"] == number - len(carried), (number, carried)
    newest = users[-1]
    dropped = newest["dropped_turns"]
    assert dropped >= 2, f"the 600-token window should have trimmed turn 7: {users}"
    assert users[0]["dropped_turns"] == 0 and users[1]["dropped_turns"] == 0

    # Every user turn on the page carries exactly its stored count; whole ones show nothing.
    shown = messages(page, "user")
    expect(shown).to_have_count(7)
    for index, row in enumerate(users):
        article = shown.nth(index)
        marker = article.locator(".trim-marker")
        if row["dropped_turns"]:
            expect(article).to_have_attribute("data-dropped-turns", str(row["dropped_turns"]))
            expect(marker.locator("summary")).to_contain_text(
                trim_label(row["dropped_turns"], row["fit"]["model"])
            )
        else:
            assert article.get_attribute("data-dropped-turns") is None
            expect(marker).to_have_count(0)
    # The newest marker arrived over SSE and names the model that served.
    newest_article = shown.last
    expect(newest_article.locator(".trim-marker summary")).to_have_text(
        re.compile(re.escape(trim_label(dropped, "tiny")))
    )

    # Opening it highlights exactly the turns the upstream did not receive.
    left_out = sorted(set(range(1, 7)) - set(sent_turns(chats[-1])))
    assert len(left_out) == dropped
    expected_seqs = {str(s) for n in left_out for s in (2 * n - 1, 2 * n)}
    newest_article.locator(".trim-marker summary").click()
    highlighted = page.locator("#messages .message.left-out")
    expect(highlighted).to_have_count(len(expected_seqs))
    assert {highlighted.nth(i).get_attribute("data-seq") for i in range(len(expected_seqs))} == (
        expected_seqs
    )
    assert all(
        text_of(page.locator(f'#messages [data-role="user"][data-seq="{2 * n - 1}"]')).startswith(
            f"Turn {n}."
        )
        for n in left_out
    )
    # The meter shows the newest send's fit, calmly: "Over" is for text being typed only.
    expect(page.locator("#meter meter")).to_have_attribute("value", "100")
    expect(page.locator("#meter")).not_to_contain_text("Over")
    expect(page.locator("#meter")).to_contain_text(trim_label(dropped, "tiny"))

    # Closing it clears the highlight.
    summary = newest_article.locator(".trim-marker summary")
    scroll_settled(page)
    summary.click()
    expect(highlighted).to_have_count(0)

    # Open again, in a window tall enough to show the highlighted turns and the marker together.
    page.set_viewport_size({"width": 1280, "height": 2000})
    scroll_settled(page)
    summary.click()
    expect(highlighted).to_have_count(len(expected_seqs))
    scroll_settled(page)
    page.screenshot(path=str(artifacts / "trimmed-marker-open.png"))


def test_pins_and_the_meter_that_warns_before_sending(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage, artifacts: Path
) -> None:
    conversation_id = create_conversation(live_server, "tiny")
    for number in range(1, 7):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, f"/c/{conversation_id}")

    # Pin turn 2 from its own control; the page and the record both say so.
    second = messages(page, "user").nth(1)
    second.locator('[data-action="pin"]').click()
    second = page.locator(f"#m{second.get_attribute('data-message-id')}")
    expect(second.locator('[data-action="unpin"]')).to_have_attribute("aria-pressed", "true")
    expect(second).to_contain_text("Pinned")
    assert [m["pinned"] for m in stored(live_server, conversation_id)["messages"]][2] is True

    # Typing (no Enter) previews the next send in the meter, before anything is sent.
    chats_before = len([r for r in upstream.requests if r["path"] == "/v1/chat/completions"])
    box = page.locator("#composer textarea")
    box.fill(turn_text(7))
    meter = page.locator("#meter")
    expect(meter).to_have_attribute("data-preview", "true")
    expect(meter).to_contain_text("Next send")
    expect(meter).to_contain_text("will not be sent to tiny")
    preview_dropped = int(meter.get_attribute("data-dropped-turns-next") or 0)
    assert preview_dropped > 0
    chats_now = len([r for r in upstream.requests if r["path"] == "/v1/chat/completions"])
    assert chats_now == chats_before, "a preview sends nothing"
    # A remedy: a configuration with a larger window.
    expect(meter.locator('[data-action="switch-configuration"]').first).to_be_visible()
    page.screenshot(path=str(artifacts / "meter-preview.png"))

    # The send does what the preview said, and the pinned turn went with it.
    box.press("Enter")
    answered(page, 7)
    rows = stored(live_server, conversation_id)["messages"]
    newest = [r for r in rows if r["role"] == "user"][-1]
    assert newest["dropped_turns"] == preview_dropped
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    assert 2 in sent_turns(chats[-1]) and 3 not in sent_turns(chats[-1])

    # One click on the remedy switches the conversation; the next send fits whole.
    box.fill(turn_text(8))
    expect(meter).to_contain_text("will not be sent")
    # The page stays (htmx swaps the meter): the switch is stored once its POST answers.
    with page.expect_response(lambda r: r.url.endswith("/configuration")) as switched:
        meter.locator('[data-action="switch-configuration"]').first.click()
    assert switched.value.ok
    configuration = stored(live_server, conversation_id)["configuration"]
    assert configuration != "tiny"
    box = page.locator("#composer textarea")
    box.fill(turn_text(8))
    expect(page.locator("#meter")).to_contain_text("Everything will be sent")
    box.press("Enter")
    answered(page, 8)
    newest = [r for r in stored(live_server, conversation_id)["messages"] if r["role"] == "user"][
        -1
    ]
    assert newest["dropped_turns"] == 0 and newest["fit"]["model"] != "tiny"


# ---- stop, reload, restart ------------------------------------------------------------------


def test_stop_keeps_the_partial_answer(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    reply = words(80)
    upstream.set_reply(reply)
    upstream.chunk_delay = 0.1
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    page.locator("#composer textarea").fill("Tell me a long story")
    page.locator("#composer textarea").press("Enter")

    stop = page.locator('[data-action="stop"]')
    expect(stop).to_be_visible()
    expect(page.locator("#composer textarea")).to_be_enabled()  # write the next one meanwhile
    expect(page.locator('#composer [data-action="send"]')).to_be_disabled()
    wait_for_words(page, 4)
    stop.click()

    answer = by_id(page, messages(page, "assistant").last)
    expect(answer).to_have_attribute("data-status", "stopped")
    expect(answer.locator(".status")).to_have_text("Stopped")
    partial = text_of(answer)
    assert partial and reply.startswith(partial) and len(partial) < len(reply) / 2
    composer_ready(page)
    row = stored(live_server, conversation_id)["messages"][-1]
    assert row["status"] == "stopped"
    assert row["content"].strip() == partial

    # The composer works again.
    upstream.set_reply("Fine.")
    upstream.chunk_delay = 0
    page.locator("#composer textarea").fill("Shorter, please")
    page.locator("#composer textarea").press("Enter")
    assert text_of(answered(page, 2)) == "Fine."
    assert text_of(answer) == partial


def reload_mid_answer(second: Page, reply: str) -> None:
    """`second` loaded the conversation while its answer was being written: it must pick the
    answer up where it was, and end with exactly the whole reply."""
    initial = second.evaluate("window.__initial")
    assert initial is not None and initial["status"] == "streaming", initial
    assert reply.startswith(initial["text"])
    answer = messages(second, "assistant").last
    expect(answer).to_have_attribute("data-status", "complete", timeout=15_000)
    shown = [s["text"] for s in swaps(second)]
    seen = second.evaluate("window.__sse")
    assert any(len(text) < len(reply) for text in shown), f"the page saw no progress: {seen}"
    assert_streamed_whole([initial["text"], *shown], reply)
    assert text_of(answer) == reply


def test_reload_mid_answer_reattaches(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    reply = words(80)
    upstream.set_reply(reply)
    upstream.chunk_delay = 0.05  # about four seconds once the stall ends
    upstream.stall(60, before_first_chunk=False)  # held after its first word: mid-answer
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    page.locator("#composer textarea").fill("Count for me")
    page.locator("#composer textarea").press("Enter")
    wait_for_words(page, 1)

    page.reload()
    upstream.end_stalls()
    reload_mid_answer(page, reply)
    rows = stored(live_server, conversation_id)["messages"]
    assert rows[-1]["content"] == reply and rows[-1]["status"] == "complete"
    composer_ready(page)


@pytest.mark.postgres
def test_reload_on_another_server_reattaches(
    servers: Servers, postgres_database: str, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    """Two workers, one PostgreSQL database: the answer is written by A, watched from B."""
    a, b = servers.start_several(postgres_database, ["worker-a", "worker-b"])
    reply = words(80)
    upstream.set_reply(reply)
    upstream.chunk_delay = 0.05
    upstream.stall(60, before_first_chunk=False)  # held after its first word: mid-answer
    conversation_id = create_conversation(a)
    page_a = open_page(a, f"/c/{conversation_id}")
    page_a.locator("#composer textarea").fill("Count for me")
    page_a.locator("#composer textarea").press("Enter")
    wait_for_words(page_a, 1)

    page_b = open_page(b, f"/c/{conversation_id}")
    upstream.end_stalls()
    reload_mid_answer(page_b, reply)
    expect(messages(page_a, "assistant").last).to_have_attribute("data-status", "complete")
    assert text_of(messages(page_a, "assistant").last) == reply
    assert stored(b, conversation_id)["messages"][-1]["content"] == reply
    composer_ready(page_b)


def test_killed_server_leaves_the_answer_interrupted_with_retry(
    servers: Servers, sqlite_url: str, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    server = servers.start(sqlite_url, name="doomed", stale_stream_after=1.5)
    upstream.set_reply(words(200))
    upstream.chunk_delay = 0.05
    conversation_id = create_conversation(server)
    page = open_page(server, f"/c/{conversation_id}")
    # hx-sse's reconnect backs off 0.5 s, 1 s, 2 s, 4 s...; cap it so the test need not wait.
    page.evaluate("htmx.config.sse = {reconnectDelay: 250, reconnectMaxDelay: 1000}")
    page.locator("#composer textarea").fill("A long one, please")
    page.locator("#composer textarea").press("Enter")
    wait_for_words(page, 15)

    servers.restart(server, kill=True)
    # The page's SSE connection reconnects to the restarted server by itself.
    answer = by_id(page, messages(page, "assistant").last)
    expect(answer).to_have_attribute("data-status", "interrupted", timeout=20_000)
    expect(answer.locator(".status")).to_have_text("Interrupted")
    expect(answer.locator(".error-text")).to_contain_text("server stopped")
    row = stored(server, conversation_id)["messages"][-1]
    assert row["status"] == "interrupted"
    assert row["content"], "the text written before the kill was lost"
    composer_ready(page)

    upstream.set_reply("Here it is again.")
    upstream.chunk_delay = 0
    answer.locator("button.retry").click()
    expect(answer).to_have_count(0)
    # Retry regenerates the turn in place: no duplicate turn, no stale Retry.
    assert text_of(answered(page, 1)) == "Here it is again."
    expect(messages(page, "user")).to_have_count(1)
    assert text_of(messages(page, "user").last) == "A long one, please"
    expect(page.locator("button.retry")).to_have_count(0)
    rows = stored(server, conversation_id)["messages"]
    assert [r["status"] for r in rows] == ["complete", "complete"]
    assert rows[0]["alternatives"]["count"] == 2, "the interrupted turn stays on record"


# ---- faults and bad input --------------------------------------------------------------------


def test_provider_error_shows_on_the_turn_with_retry(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    upstream.fail_next(503)
    page.locator("#composer textarea").fill("Are you there?")
    page.locator("#composer textarea").press("Enter")

    answer = by_id(page, messages(page, "assistant").last)
    expect(answer).to_have_attribute("data-status", "failed")
    expect(answer.locator(".status")).to_have_text("Failed")
    # The model by its name and what happened; never the provider's address.
    expect(answer.locator(".error-text")).to_contain_text("small is unavailable (HTTP 503)")
    expect(answer.locator(".error-text")).not_to_contain_text("://")
    composer_ready(page)
    rows = stored(live_server, conversation_id)["messages"]
    assert rows[0]["content"] == "Are you there?" and rows[0]["fit"] is not None
    assert rows[1]["status"] == "failed" and "small is unavailable" in rows[1]["error"]

    upstream.set_reply("Yes, back now.")
    answer.locator("button.retry").click()
    expect(answer).to_have_count(0)
    # Retry regenerates the turn in place: no duplicate turn, no stale Retry.
    assert text_of(answered(page, 1)) == "Yes, back now."
    expect(messages(page, "user")).to_have_count(1)
    expect(page.locator("button.retry")).to_have_count(0)
    expect(page.locator('#messages [data-role="user"] .alternative-position')).to_have_text("2/2")
    # The failed turn stays on record, one alternative back.
    page.get_by_role("button", name="Previous alternative").click()
    expect(messages(page, "assistant").last).to_have_attribute("data-status", "failed")


def test_empty_message_is_refused_inline_and_nothing_stored(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    box = page.locator("#composer textarea")

    box.fill("")
    box.press("Enter")  # nothing to send: nothing happens
    box.fill("   \n  ")
    page.locator('#composer [data-action="send"]').click()
    error = page.locator("#composer-error")
    expect(error).to_contain_text("the message is empty")
    expect(page.locator("#messages article")).to_have_count(0)
    assert stored(live_server, conversation_id)["messages"] == []
    assert not [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]

    # The next good send clears the error.
    box.fill("Now with words")
    box.press("Enter")
    answered(page, 1)
    expect(error).to_be_empty()


MALICIOUS = """Here is some output.

<script>alert('script')</script>

<img src=x onerror="alert('img')">

<div hx-get="/pwned" hx-trigger="load">htmx bait</div>

[click me](javascript:alert('link'))

```python
print("hello")
```

- first item
- second item

See [the docs](https://example.com/docs) for more.
"""


def test_malicious_answer_is_inert_and_markdown_renders(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    upstream.set_reply(MALICIOUS)
    upstream.chunk_delay = 0.005
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    dialogs: list[str] = []

    def refuse(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    page.locator("#composer textarea").fill("Show me something")
    page.locator("#composer textarea").press("Enter")
    answer = answered(page, 1)

    def check(answer: Locator) -> None:
        content = answer.locator(".content")
        for selector in ("script", "img", "[onerror]", "[hx-get]", "[hx-trigger]",
                         'a[href^="javascript"]', "iframe", "style"):  # fmt: skip
            expect(content.locator(selector)).to_have_count(0)
        expect(content.locator("pre code")).to_contain_text('print("hello")')
        expect(content.locator("ul li")).to_have_count(2)
        expect(content.locator('a[href="https://example.com/docs"]')).to_have_text("the docs")
        expect(content).to_contain_text("htmx bait")  # shown as text, not obeyed

    check(answer)
    page.reload()  # the stored answer renders the same way
    check(messages(page, "assistant").last)
    page.wait_for_timeout(300)
    assert dialogs == []
    assert not [url for url in requested if "pwned" in url]


def test_a_streamed_answer_ends_exactly_as_its_stored_rendering(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    """Streamed by what changed (finished blocks once, the open block as it grows), the page
    ends with the same DOM as a reload of the stored answer: code, lists, tables, math."""
    upstream.set_reply(ANSWER)
    upstream.chunk_delay = 0.01
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    page.locator("#composer textarea").fill("Show me everything")
    page.locator("#composer textarea").press("Enter")
    answer = answered(page, 1)
    updates = [s for s in page.evaluate("window.__sse") if s["event"] == "content"]
    assert len(updates) >= 3, "the answer did not arrive in several updates"
    streamed = answer.locator(".content").inner_html()
    page.reload()
    stored_html = messages(page, "assistant").last.locator(".content").inner_html()
    assert streamed == stored_html
    assert "<table>" in streamed and "<math" in streamed and "code-block" in streamed


# ---- long conversations ----------------------------------------------------------------------


def test_older_messages_load_on_scroll(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    upstream.set_reply("ok")
    for number in range(1, 56):
        send_by_api(live_server, conversation_id, f"message {number}")
    page = open_page(live_server, f"/c/{conversation_id}")

    users = messages(page, "user")
    expect(users).to_have_count(50)
    assert text_of(users.first) == "message 6"
    assert text_of(users.last) == "message 55"
    older = page.locator("#messages .older")
    expect(older).to_have_count(1)

    page.locator("#messages").evaluate("box => { box.scrollTop = 0; }")
    expect(users).to_have_count(55)
    expect(older).to_have_count(0)
    assert [text_of(users.nth(i)) for i in range(55)] == [f"message {n}" for n in range(1, 56)]
    seqs = page.locator("#messages [data-seq]").evaluate_all(
        "els => els.map(el => Number(el.dataset.seq))"
    )
    assert seqs == list(range(1, 111)), "older messages are out of order or duplicated"


# ---- conversations ---------------------------------------------------------------------------


def test_new_conversation_rename_and_delete(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    first = create_conversation(live_server)
    send_by_api(live_server, first, "not empty: New conversation stores a new one")
    page = open_page(live_server, f"/c/{first}")

    # The sidebar's choice is kept for the user's next conversations (as Settings keeps
    # it): the shared server's user goes back to the site's default right away.
    with page.expect_response(lambda r: r.url.endswith("/default-configuration")):
        page.locator("#configuration").select_option("tiny")
    reset = live_server.api("POST", "/settings/default-configuration", data={})
    assert reset.status_code == 204, reset.text
    page.locator(".new-conversation button[type=submit]").click()
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(first) + r")[\w-]+$"))
    created = page.url.rsplit("/", 1)[1]
    assert stored(live_server, created)["configuration"] == "tiny"
    expect(page.locator("#conversation-configuration")).to_have_value("tiny")

    title = page.locator("#title")
    title.fill("Rivers and bridges")
    title.press("Enter")
    expect(page.locator("#title-hint")).to_have_text("Renamed.")
    assert stored(live_server, created)["title"] == "Rivers and bridges"
    renamed_row = page.locator(".conversation-list .current a[aria-current=page]")
    expect(renamed_row).to_have_text("Rivers and bridges")
    # No reload: Delete names the title as renamed, not the one the page was drawn with.

    prompts: list[str] = []

    def accept(dialog: Any) -> None:
        prompts.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.locator(".header-actions .delete-conversation").click()
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(created) + r")[\w-]+$"))
    assert prompts and "Rivers and bridges" in prompts[0]
    assert live_server.api("GET", f"/api/conversations/{created}").status_code == 404
    expect(page.locator(".conversation-list")).not_to_contain_text("Rivers and bridges")


def test_delete_needs_confirmation(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    page.on("dialog", lambda dialog: dialog.dismiss())
    page.locator(".header-actions .delete-conversation").click()
    page.wait_for_timeout(300)
    assert page.url.endswith(f"/c/{conversation_id}")
    assert live_server.api("GET", f"/api/conversations/{conversation_id}").status_code == 200


# ---- accessibility ---------------------------------------------------------------------------


FOCUSED = "(el => el.id || el.dataset.action || el.className || el.tagName)(document.activeElement)"


SPOKEN = """
window.__spoken = [];
const region = document.getElementById("announcer");
new MutationObserver(() => {
  if (region.textContent) window.__spoken.push(region.textContent);
}).observe(region, {subtree: true, childList: true, characterData: true});
"""
"""Everything the page's polite region is given to say, in order."""


def test_a_screen_reader_hears_an_answer_once_and_the_meter_when_it_crosses(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server, "narrow")
    for number in (1, 2, 3):
        send_by_api(live_server, conversation_id, turn_text(number))
    page = open_page(live_server, f"/c/{conversation_id}")
    page.evaluate(SPOKEN)
    # Neither the list (streamed text) nor the meter (a refresh per keystroke) is live.
    for live in ("#messages", "#meter"):
        element = page.locator(live)
        assert element.get_attribute("aria-live") in (None, "off"), live
        assert element.get_attribute("role") not in ("log", "status", "alert"), live
    expect(page.locator("#announcer")).to_have_attribute("aria-live", "polite")

    box = page.locator("#composer textarea")
    meter = page.locator("#meter")
    box.fill(turn_text(4) * 5)  # the next send would leave turns out
    expect(meter).to_have_attribute("data-cut-words", re.compile(r"will no longer see"))
    box.fill(turn_text(4) * 6)  # still leaving turns out: nothing new to say
    box.dispatch_event("input")
    page.wait_for_function("document.getElementById('meter').dataset.preview === 'true'")
    expect(meter).to_have_attribute("data-cut-words", re.compile(r"will no longer see"))
    box.fill("short again")  # back to sending everything
    expect(meter).to_have_attribute("data-cut-words", "")
    spoken = page.evaluate("window.__spoken")
    assert len(spoken) == 2, spoken
    assert spoken[0].startswith("The model will no longer see"), spoken
    assert "Everything" in spoken[1], spoken

    page.evaluate("window.__spoken = []")
    upstream.set_reply(" ".join(f"piece{i}" for i in range(40)))
    upstream.chunk_delay = 0.02
    try:
        box.press("Enter")
        answer = answered(page, 4)
    finally:
        upstream.chunk_delay = 0
    spoken = page.evaluate("window.__spoken")
    said = [s for s in spoken if "piece" in s]
    assert len(said) == 1 and "piece39" in said[0], spoken  # once, whole, at the end
    assert said[0].startswith(answer.get_attribute("aria-label") or "?"), said


def test_keyboard_only_reaches_the_composer_and_sends(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    # Playwright turns on the interception of file choosers without waiting for it: on a
    # loaded machine the Enter below could beat it, so it is on from the start.
    page.on("filechooser", lambda _chooser: None)
    expect(page.locator("#composer textarea")).to_be_focused()  # type at once

    # From the top of the page: the skip link comes first and jumps to the message box.
    skip = page.locator(".skip-link")
    skip.focus()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("#composer textarea")).to_be_focused()

    # Tabbing through everything also gets there, and only through visible controls.
    skip.focus()
    visited = []
    for _ in range(80):
        page.keyboard.press("Tab")
        visited.append(page.evaluate(FOCUSED))
        assert page.evaluate("document.activeElement.checkVisibility()"), visited
        if visited[-1] == "content":
            break
    assert visited[-1] == "content", f"Tab never reached the message box: {visited}"
    page.keyboard.type("Typed with the keyboard only")
    # The box's first Tab lands on the paperclip people see, not on the 1 px file input,
    # and Enter there opens the file chooser.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.action") == "attach"
    focused = page.locator(":focus").bounding_box()
    assert focused is not None and focused["width"] >= 24 and focused["height"] >= 24, focused
    with page.expect_file_chooser() as chooser:
        page.locator(":focus").press("Enter")  # (held there if a late swap moved it)
    assert chooser.value.element.get_attribute("id") == "attachment"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.action") == "send"
    page.keyboard.press("Enter")
    answered(page, 1)
    assert text_of(messages(page, "user").last) == "Typed with the keyboard only"
    # The focus stayed in the box while the answer streamed.
    expect(page.locator("#composer textarea")).to_be_focused()
    page.keyboard.type("And a second one")
    page.keyboard.press("Enter")
    answered(page, 2)
    assert text_of(messages(page, "user").last) == "And a second one"
    expect(page.locator("#composer textarea")).to_be_focused()

    # Shortcuts: Ctrl+Shift+; copies the newest answer whole, Ctrl+Shift+O starts anew.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    newest = stored(live_server, conversation_id)["messages"][-1]
    page.keyboard.press("Control+Shift+Semicolon")
    expect(page.locator("#announcer")).to_have_text("Copied answer 2.")
    assert page.evaluate("navigator.clipboard.readText()") == newest["content"]
    page.keyboard.press("Control+Shift+KeyO")
    page.wait_for_url(re.compile(r"/c/(?!" + re.escape(conversation_id) + r")[\w-]+$"))
    expect(page.locator("#composer textarea")).to_be_focused()


# ---- screenshots -----------------------------------------------------------------------------


SHOWCASE = """Bridges come in a few families:

1. **Beam** bridges, the simplest;
2. **Arch** bridges, which push outwards;
3. **Suspension** bridges, which hang from cables.

```python
def span(length_m: float) -> str:
    return "suspension" if length_m > 1000 else "arch"
```

More at [Wikipedia](https://en.wikipedia.org/wiki/Bridge)."""


@pytest.mark.parametrize(
    ("scheme", "width"),
    [("light", 1280), ("dark", 1280), ("light", 390)],
    ids=["light", "dark", "phone"],
)
def test_screenshot_main_page(
    live_server: Server,
    upstream: FakeUpstream,
    open_page: OpenPage,
    artifacts: Path,
    scheme: str,
    width: int,
) -> None:
    conversation_id = create_conversation(live_server)
    upstream.set_reply(SHOWCASE)
    send_by_api(live_server, conversation_id, "What kinds of bridges are there?")
    live_server.api(
        "PATCH", f"/api/conversations/{conversation_id}", json={"title": "Kinds of bridges"}
    )
    page = open_page(live_server, f"/c/{conversation_id}", color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 800 if width > 500 else 844})
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    dark = scheme == "dark"
    # The stylesheet follows the colour scheme: a dark background in dark mode only.
    channels = [int(c) for c in re.findall(r"\d+", background)[:3]]
    assert (sum(channels) < 200) == dark, background
    expect(page.locator(".content pre code")).to_be_visible()
    # Nothing sticks out sideways: the page never scrolls horizontally.
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than the window"
    sidebar = page.locator(".sidebar").bounding_box()
    for control in (".new-conversation select", ".new-conversation button"):
        box = page.locator(control).bounding_box()
        assert sidebar and box and box["x"] + box["width"] <= sidebar["x"] + sidebar["width"], (
            f"{control} sticks out of the sidebar"
        )
    name = "phone" if width < 500 else scheme
    page.screenshot(path=str(artifacts / f"main-{name}.png"))
