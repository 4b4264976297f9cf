"""No text stalls the server while it is rendered (issue 22): code blocks for Pygments
lexers that backtrack for seconds, and 200 KB of `\\(` (a quadratic math scan), each as an
import, as a model's answer, as a page whose answer has no stored HTML, and as a streamed
update, with a ticker on the app's event loop that must never wait 100 ms. And the parts
that make it so: bad lexers fall back to plain text, a worker that overruns its deadline
is replaced and its text shown plain, and the bracket-math scan is linear."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from markdown_it.rules_inline import StateInline
from sqlmodel import col, update

from tests.dbutil import session_on
from tests.factories import api_client, new_conversation, settings_for
from tests.looplag import LoopLag, watching, watching_app
from tests.page_stream_client import shown_states
from tests.upstream import FakeUpstream
from webapp.chat.stored.models import Message
from webapp.db import Database
from webapp.web import mathml, render_workers
from webapp.web.markdown import plain_html, render_markdown

STALL = 0.1
"""The most CPU time the app's loop thread may spend without letting the ticker run."""

BAD_INPUTS = {
    # A line each lexer colours, then what it backtracks on: on main the blocks took 10 s,
    # 2 s and 6 s to colour (`x`, 1,400 spaces, `x` alone blocked the server 10.4 s when
    # imported and 4.7 s as an answer).
    "systemd": "```systemd\n[Unit]\nDescription=demo\nx" + " " * 1400 + "x\n```\n",
    "lilypond": "```lilypond\n\\relative c' { c4 d e }\n" + "x" * 6000 + "\n```\n",
    "xpp": "```xpp\nstatic void main() { int x = 1; }\n" + "x\n" * 1400 + "```\n",
    # On main: 13 s (every `\(` searched the rest of the text for its `\)`).
    "brackets": "\\(" * 100_000,
}

STREAMED = {**BAD_INPUTS, "brackets": ("\\(" * 50 + "\n") * 2000}
"""What a model sends: the same 200 KB of `\\(` (one paragraph, just as slow to scan on
main) in lines, so the fake upstream streams it in pieces as a model streams tokens. Sent
whole as one 200 KB event, it held the loop for a while in the provider's reading of the
stream (h11 and SSE parsing), which is not rendering."""

ROOMY = """
[[models]]
name = "roomy"
provider = "up"
context_window = 1000000
max_output_tokens = 500000
capabilities = ["chat"]

[[configurations]]
name = "roomy"
model = "roomy"
"""
"""A model that may answer at length (200 KB of `\\(` is over 100,000 tokens)."""


def shows(name: str, html: str) -> bool:
    """Whether the page or fragment shows the bad input's text, rendered or plain."""
    if name == "brackets":  # markdown's escapes show `\(` as `(`; shown plain, it stays
        return "(" * 50 in html or "\\(" * 50 in html
    return f'<code class="language-{name}">' in html or "x" * 1000 in html


# ---- the parts ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["systemd", "lilypond", "xpp"])
def test_a_lexer_that_backtracks_falls_back_to_plain_text(name: str) -> None:
    out = str(render_markdown(BAD_INPUTS[name]))
    assert f'<span class="code-language">{name}</span>' in out
    assert f'<code class="language-{name}">' in out
    code = out.split("<pre", 1)[1]
    assert '<span class="' not in code, "no colour: the block is plain text"
    first_line = BAD_INPUTS[name].split("\n")[1]
    assert first_line.split()[0] in code


def test_a_block_that_overruns_its_time_loses_its_colour_and_nothing_else() -> None:
    """`csharp` is not on the list of slow lexers (C# is common, and colours in time), yet
    enough lines of `x` take it seconds: the time limit, not the list, stops it."""
    slow = "```csharp\n" + "x\n" * 6000 + "```"
    fine = "```csharp\nclass A { int f() { return 1; } }\n```"
    out = str(render_markdown(f"Before **bold**.\n\n{slow}\n\n{fine}\n\nAfter $x^2$."))
    blocks = out.split("<pre")[1:]
    assert len(blocks) == 2
    assert '<span class="' not in blocks[0].split("</pre>")[0], "the slow block is plain"
    assert '<span class="k">class</span>' in blocks[1], "the next block is still coloured"
    assert "<strong>bold</strong>" in out and "<math" in out


def test_a_render_that_overruns_its_deadline_is_shown_plain_and_the_next_one_renders() -> None:
    # linkify reads thousands of URLs in a row in quadratic time: 80 KB take 27 s.
    urls = "http://a." * 9000
    assert render_workers.render(urls, seconds=0.2) is None, "the worker was stopped"
    assert str(plain_html(urls)).startswith("<p>http://a.http://a.")
    again = render_workers.render("```python\nx = 1\n```")
    assert again is not None and '<span class="n">x</span>' in again, "a new worker serves"


def test_plain_html_is_escaped_paragraphs() -> None:
    out = str(plain_html("a <b>\nc\n\n \n<script>x</script>"))
    assert out == "<p>a &lt;b&gt;<br>\nc</p><p>&lt;script&gt;x&lt;/script&gt;</p>"


def test_a_text_that_cannot_be_rendered_is_shown_plain_not_a_failure() -> None:
    """nh3 refuses a lone surrogate (JSON can carry one), here and in a worker alike."""
    assert str(render_markdown("a \ud800 <b>")) == "<p>a \ud800 &lt;b&gt;</p>"
    long = "a \ud800 <b>\n\n" + "word " * 200
    assert str(render_markdown(long)).startswith("<p>a \ud800 &lt;b&gt;</p><p>word word")


def test_the_bracket_math_scan_reads_each_source_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear, counted rather than timed: the closers' positions are listed in one pass
    over each inline source, however many openers it holds."""
    scanned: list[int] = []
    listed = mathml._positions

    def counting(src: str, needle: str) -> list[int]:
        scanned.append(len(src))
        return listed(src, needle)

    monkeypatch.setattr(mathml, "_positions", counting)
    for text in ("\\(" * 25_000, "\\(" * 100_000, "\\[a\\] \\(" * 20_000 + "b\\)"):
        scanned.clear()
        render_markdown(text)
        assert len(scanned) <= 2, "one pass per closer"
        assert sum(scanned) <= 2 * len(text) + 10


def test_the_bracket_math_scan_finds_what_find_finds() -> None:
    """The same closer as `str.find` from every position, so the output is unchanged."""
    chooser = random.Random(22)
    env: dict[str, Any] = {}
    for _ in range(300):
        src = "".join(chooser.choice(["\\", "(", ")", "[", "]", "x", " "]) for _ in range(40))
        state = StateInline(src, None, env, [])  # type: ignore[arg-type]
        for closer in ("\\)", "\\]"):
            for start in range(len(src) + 2):
                assert mathml._next_closer(state, closer, start) == src.find(closer, start)


def test_math_still_renders_as_before() -> None:
    out = str(render_markdown(r"Take \(a+b\), then \[\sqrt{y}\], not \( alone."))
    assert out.count("<math") == 2
    assert "\\( alone" in out or "( alone" in out


async def test_the_monitor_sees_a_stall() -> None:
    async with watching() as lag:
        busy_until = time.thread_time() + 0.15
        while time.thread_time() < busy_until:  # what a blocking render does to the loop
            pass
        await asyncio.sleep(0.02)
    assert lag.worst >= 0.15 and lag.busiest >= 0.15


async def test_the_monitor_tells_a_wait_for_a_core_from_a_stall() -> None:
    """A thread that is not running (here: sleeping, as when the machine is busy) makes a
    gap in wall time, not in the loop thread's CPU time."""
    async with watching() as lag:
        time.sleep(0.15)
        await asyncio.sleep(0.02)
    assert lag.worst >= 0.15 and lag.busiest < 0.05


# ---- through the app, with a ticker on its loop --------------------------------------------


@pytest.fixture
async def client(
    sqlite_url: str, tmp_path: Path, upstream: FakeUpstream
) -> AsyncIterator[AsyncTestClient]:
    upstream.set_models({**upstream.models, "roomy": 1_000_000})
    settings = settings_for(sqlite_url, tmp_path, upstream, ROOMY)
    async with api_client(settings) as test_client:
        # A first render starts the render workers, a first answer loads the tokenizers
        # (the fake upstream's too, in a thread of this process), a first page compiles
        # its templates: the tests watch what the texts cost, not those.
        render_markdown("```python\nwarm = 1\n```")
        conversation = await new_conversation(test_client, configuration="roomy")
        warm = await test_client.post(
            f"/api/conversations/{conversation['id']}/messages", json={"content": "Hello"}
        )
        assert warm.status_code == 201, warm.text
        assert (await test_client.get(f"/c/{conversation['id']}")).status_code == 200
        yield test_client


def export_with(answer: str) -> dict[str, Any]:
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Bad input", "configuration": "roomy"},
        "messages": [
            {"seq": 1, "role": "user", "content": "Show me", "created_at": "2026-01-01T10:00:00Z"},
            {"seq": 2, "role": "assistant", "content": answer, "status": "complete"},
        ],
    }


async def imported(client: AsyncTestClient, answer: str) -> dict[str, Any]:
    response = await client.post("/api/conversations/import", json=export_with(answer))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def no_stall(lag: LoopLag, what: str) -> None:
    """The loop's thread never computed for `STALL` without letting the ticker run (its
    CPU time, so a machine busy with other work does not count as a stall)."""
    assert lag.ticks > 0
    assert lag.busiest < STALL, (
        f"{what} held the app's loop for {lag.busiest:.2f} s of CPU"
        f" ({lag.worst:.2f} s of wall time)"
    )


@pytest.mark.parametrize("name", list(BAD_INPUTS))
async def test_an_import_does_not_stall_the_server(client: AsyncTestClient, name: str) -> None:
    with watching_app(client) as lag:
        body = await imported(client, BAD_INPUTS[name])
    no_stall(lag, "an import")
    page = await client.get(f"/c/{body['id']}")
    assert page.status_code == 200 and shows(name, page.text)


@pytest.mark.parametrize("name", list(BAD_INPUTS))
async def test_a_model_answer_does_not_stall_the_server(
    client: AsyncTestClient, upstream: FakeUpstream, name: str
) -> None:
    conversation = await new_conversation(client, configuration="roomy")
    upstream.set_reply(STREAMED[name])
    with watching_app(client) as lag:
        sent = await client.post(
            f"/api/conversations/{conversation['id']}/messages", json={"content": "Show me"}
        )
    assert sent.status_code == 201, sent.text
    assert sent.json()["assistant"]["content"] == STREAMED[name]
    no_stall(lag, "an answer")


async def without_stored_html(database_url: str, message_id: int) -> None:
    """As an answer stopped by another worker, or stored before answers kept their HTML."""
    async with session_on(Database(database_url), begin=True) as session:
        statement = update(Message).where(col(Message.id) == message_id)
        await session.exec(statement.values(content_html=None))


@pytest.mark.parametrize("name", list(BAD_INPUTS))
async def test_a_page_rendering_an_answer_does_not_stall_the_server(
    client: AsyncTestClient, sqlite_url: str, name: str
) -> None:
    body = await imported(client, BAD_INPUTS[name])
    await without_stored_html(sqlite_url, body["messages"][1]["id"])
    with watching_app(client) as lag:
        page = await client.get(f"/c/{body['id']}")
    assert page.status_code == 200
    no_stall(lag, "a page")
    assert shows(name, page.text)


@pytest.mark.parametrize("name", ["systemd", "brackets"])
async def test_a_streamed_update_does_not_stall_the_server(
    client: AsyncTestClient, upstream: FakeUpstream, name: str
) -> None:
    """The page's stream renders the answer so far at each update."""
    conversation = await new_conversation(client, configuration="roomy")
    upstream.set_reply("Here:\n\n" + STREAMED[name] + "\n\nDone.")
    upstream.stall(1.0, before_first_chunk=False)  # still streaming when the page follows
    sent = await client.post(f"/c/{conversation['id']}/send", data={"content": "Show me"})
    assert sent.status_code == 200, sent.text
    answer = (await client.get(f"/api/conversations/{conversation['id']}")).json()["messages"][-1]
    assert answer["role"] == "assistant" and answer["status"] == "streaming"
    answer_id = answer["id"]
    with watching_app(client) as lag:
        stream = await client.get(f"/c/{conversation['id']}/answers/{answer_id}/stream")
    assert stream.status_code == 200
    no_stall(lag, "a stream")
    assert any(shows(name, shown) for shown in shown_states(stream.text)), "the text was shown"
