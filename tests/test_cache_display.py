"""The engine's prompt cache as the chat page shows it, rendered on the server: each answer's
note of the prompt tokens its cache served (from the stored rows), the note on a send that
moved the cut, and the meter's count of the turns left before older turns are left out."""

from __future__ import annotations

import html as markup
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlmodel import col, update

from tests.dbutil import session_on
from tests.factories import api_client, meter, new_conversation, settings_for
from tests.upstream import FakeUpstream
from webapp.chat.stored.models import Message, Role, Status
from webapp.chat.web.views import Meter, message_views
from webapp.db import Database
from webapp.web.templates import render_fragment

CACHE_NOTE = re.compile(r'<p class="cache-note">(.*?)</p>', re.S)
AHEAD = re.compile(r'<span class="meter-ahead"([^>]*)>(.*?)</span>', re.S)


# ---- the meter's words, rendered alone ------------------------------------------------------


def ahead_of(html: str) -> tuple[str, str]:
    """The meter's count of turns left: its attributes and its text."""
    (found,) = AHEAD.findall(html)
    return found[0], found[1].strip()


@pytest.mark.parametrize(
    ("turns_left", "preview", "dropped", "words"),
    [
        (None, False, 0, ""),
        (None, True, 0, ""),
        (0, False, 0, "the next send will leave older turns out"),
        (0, True, 0, "the send after this one will leave older turns out"),
        (1, False, 0, "about 1 more turn before older turns are left out"),
        (1, True, 0, "then about 1 more turn before older turns are left out"),
        (6, False, 0, "about 6 more turns before older turns are left out"),
        (6, True, 0, "then about 6 more turns before older turns are left out"),
        (1234, False, 0, "about 1,234 more turns before older turns are left out"),
        # A send that leaves turns out already: the next cut leaves out more.
        (0, True, 3, "the send after this one will leave more turns out"),
        (4, True, 3, "then about 4 more turns before more turns are left out"),
    ],
)
def test_the_meter_counts_the_turns_left(
    turns_left: int | None, preview: bool, dropped: int, words: str
) -> None:
    shown = meter(turns_left=turns_left, preview=preview, dropped_turns=dropped)
    assert (shown.ahead_words or "") == words
    html = render_fragment("chat/_meter.html", meter=shown, base="/c/x")
    attributes, text = ahead_of(html)
    assert text == words
    if turns_left is None:
        # The line is there, empty: the meter does not grow when a count appears.
        assert attributes == ""
    else:
        assert f'data-turns-left="{turns_left}"' in attributes
        assert f'title="{words}"' in attributes


def test_a_meter_before_anything_was_sent_keeps_the_line_too() -> None:
    html = render_fragment("chat/_meter.html", meter=None, base="/c/x")
    assert "Nothing sent yet" in html
    assert ahead_of(html) == ("", "")


def test_a_stored_sends_meter_says_nothing_it_cannot_know() -> None:
    row = Message(
        conversation_id="x",
        seq=1,
        role=Role.USER,
        content="hi",
        dropped_turns=0,
        fit_model="small",
        fit_window=1024,
        fit_budget=900,
        fit_estimated_tokens=40,
    )
    assert Meter.of_row(row).turns_left is None
    assert Meter.of_row(row, preview=True, turns_left=5).ahead_words == (
        "then about 5 more turns before older turns are left out"
    )


# ---- the note, on a rendered turn ------------------------------------------------------------


def turn(
    cached: int | None,
    prompt: int | None = 1415,
    *,
    moved: bool = False,
    trim_to: float = 0.75,
    status: Status = Status.COMPLETE,
    evaluated: int | None = None,
    written: int | None = None,
) -> str:
    user = Message(
        id=1,
        conversation_id="x",
        seq=1,
        role=Role.USER,
        content="hello",
        dropped_turns=2 if moved else 0,
        fit_model="small",
        fit_window=1024,
        fit_budget=900,
        fit_estimated_tokens=700,
        fit_reserve=100,
        fit_left_out=[[3, 6]] if moved else [],
        fit_trim_to=trim_to,
        fit_cut_moved=moved,
    )
    answer = Message(
        id=2,
        conversation_id="x",
        seq=2,
        role=Role.ASSISTANT,
        content="an answer",
        status=status,
        model="small",
        prompt_tokens=prompt,
        completion_tokens=9,
        cached_tokens=cached,
        evaluated_tokens=evaluated,
        cache_write_tokens=written,
    )
    views = message_views([user, answer])
    return "".join(
        render_fragment("chat/_message.html", message=view, base="/c/x") for view in views
    )


def notes(html: str) -> list[str]:
    return [" ".join(markup.unescape(found).split()) for found in CACHE_NOTE.findall(html)]


LEDGER = re.compile(r'<details class="cache-ledger"><summary>Prompt cache</summary>(.*?)</details>')


def test_the_turns_details_keep_the_cache_ledger() -> None:
    """Served, evaluated, written: each as the engine said it, in a closed details."""
    (ledger,) = LEDGER.findall(turn(1380, evaluated=35, written=1200))
    assert ledger == (
        "<dl><dt>Served from the engine&#39;s cache</dt><dd>1,380 tokens</dd>"
        "<dt>Evaluated by the engine</dt><dd>35 tokens</dd>"
        "<dt>Written to the engine&#39;s cache</dt><dd>1,200 tokens</dd></dl>"
    )
    (partial,) = LEDGER.findall(turn(None, evaluated=1415))
    assert "Evaluated by the engine" in partial and "Served" not in partial
    assert LEDGER.findall(turn(None)) == [], "the engine said nothing"
    assert LEDGER.findall(turn(5, evaluated=9, status=Status.STREAMING)) == []


def test_the_note_says_what_came_from_the_cache() -> None:
    assert notes(turn(1380)) == ["1,380 of 1,415 prompt tokens came from the engine's cache."]
    assert notes(turn(0)) == ["None of the 1,415 prompt tokens came from the engine's cache."]


@pytest.mark.parametrize(
    ("cached", "prompt", "status"),
    [
        (None, 1415, Status.COMPLETE),  # the engine did not say
        (0, 0, Status.COMPLETE),
        (0, None, Status.FAILED),
        (500, 1415, Status.STREAMING),  # not until the answer is done
    ],
)
def test_no_note_without_the_numbers(
    cached: int | None, prompt: int | None, status: Status
) -> None:
    html = turn(cached, prompt, status=status, moved=True)
    assert "cache-note" not in html


def test_the_note_on_a_send_that_moved_the_cut() -> None:
    (note,) = notes(turn(0, moved=True))
    assert note == (
        "None of the 1,415 prompt tokens came from the engine's cache. This send moved the "
        "cut: older turns were left out at once, so the next several sends can reuse the "
        "engine's cache."
    )
    # With the plain rule (trim to the whole budget) the cut moves again on the next send.
    (plain,) = notes(turn(12, moved=True, trim_to=1.0))
    assert plain.endswith(
        "This send moved the cut, so the engine could reuse little of its cached prompt."
    )
    # The user's fit facts say it too, whether or not the engine reported its cache.
    html = turn(None, moved=True)
    assert "<dt>Cut</dt><dd>Moved on this send: older turns were left out at once" in html
    assert "<dt>Cut</dt>" not in turn(None)


# ---- the page, from stored rows --------------------------------------------------------------


@pytest.fixture
async def client(
    sqlite_url: str, tmp_path: Path, upstream: FakeUpstream
) -> AsyncIterator[AsyncTestClient]:
    async with api_client(settings_for(sqlite_url, tmp_path, upstream)) as test_client:
        yield test_client


async def store(database_url: str, message_id: int, **values: Any) -> None:
    """Set a stored row's columns, as the engine's answer would have left them."""
    async with session_on(Database(database_url), begin=True) as session:
        await session.exec(update(Message).where(col(Message.id) == message_id).values(**values))


async def test_the_page_shows_each_answers_note_from_the_stored_rows(
    client: AsyncTestClient, sqlite_url: str
) -> None:
    conversation = await new_conversation(client)
    base = f"/api/conversations/{conversation['id']}"
    sent = []
    for text in ("first question", "second question", "third question"):
        response = await client.post(f"{base}/messages", json={"content": text})
        assert response.status_code == 201, response.text
        sent.append(response.json())
    await store(sqlite_url, sent[0]["assistant"]["id"], cached_tokens=None, prompt_tokens=120)
    await store(sqlite_url, sent[1]["assistant"]["id"], cached_tokens=1380, prompt_tokens=1415)
    await store(sqlite_url, sent[2]["assistant"]["id"], cached_tokens=64, prompt_tokens=2950)
    await store(sqlite_url, sent[2]["user"]["id"], fit_cut_moved=True, fit_trim_to=0.75)

    page = await client.get(f"/c/{conversation['id']}")
    assert page.status_code == 200, page.text
    html = page.text

    def note_of(message_id: int) -> list[str]:
        article = html.split(f'id="m{message_id}"', 1)[1].split("</article>", 1)[0]
        return notes(article)

    assert note_of(sent[0]["assistant"]["id"]) == [], "the engine did not say: no note"
    assert note_of(sent[1]["assistant"]["id"]) == [
        "1,380 of 1,415 prompt tokens came from the engine's cache."
    ]
    (moved,) = note_of(sent[2]["assistant"]["id"])
    assert moved.startswith("64 of 2,950 prompt tokens came from the engine's cache. ")
    assert "This send moved the cut: older turns were left out at once" in moved
    assert all(note_of(s["user"]["id"]) == [] for s in sent), "notes are on the answers"

    # A streamed answer's last update (what the page morphs in when it is done) carries it.
    stream = await client.get(
        f"/c/{conversation['id']}/answers/{sent[1]['assistant']['id']}/stream"
    )
    assert stream.status_code == 200
    blocks = stream.text.replace("\r\n", "\n").split("\n\n")
    updates = [
        "\n".join(
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        )
        for block in blocks
        if block.strip() and "event:" not in block
    ]
    last = updates[-1]
    assert notes(last.split("<hx-partial", 1)[0]) == [
        "1,380 of 1,415 prompt tokens came from the engine's cache."
    ]
    assert "event: done" in stream.text


async def test_the_preview_meter_counts_the_turns_left_as_the_fit_does(
    client: AsyncTestClient,
) -> None:
    conversation = await new_conversation(client)
    api = f"/api/conversations/{conversation['id']}"
    text = "tell me about rivers " * 8
    counts = []
    for _ in range(3):
        preview = (await client.post(f"{api}/preview", json={"content": text})).json()
        page = await client.post(f"/c/{conversation['id']}/preview", data={"content": text})
        assert page.status_code == 200, page.text
        attributes, words = ahead_of(page.text)
        left = preview["turns_left"]
        counts.append(left)
        if left is None:
            assert (attributes, words) == ("", "")
        else:
            assert f'data-turns-left="{left}"' in attributes
            assert words.startswith(("then about ", "the send after this one"))
            if left > 0:
                assert f"about {left:,} more turn" in words
        assert (await client.post(f"{api}/messages", json={"content": text})).status_code == 201
    assert counts[0] is None, "nothing answered yet to size a turn by"
    assert all(isinstance(count, int) for count in counts[1:]), counts
    # The meter of the last send (the empty box's) keeps the line, without a count.
    empty = await client.post(f"/c/{conversation['id']}/preview", data={"content": " "})
    assert "Last send" in empty.text and ahead_of(empty.text) == ("", "")


async def test_each_answer_keeps_the_engines_ledger(
    client: AsyncTestClient, upstream: FakeUpstream
) -> None:
    """llama.cpp's timings on the answer (prompt_n evaluated, cache_n served) are stored
    on the row, shown by the API and carried by the export; an engine that says nothing
    of its cache leaves them null."""
    upstream.set_engine("llamacpp")
    conversation = await new_conversation(client)
    base = f"/api/conversations/{conversation['id']}"
    for text in ("first question " * 20, "second question"):
        response = await client.post(f"{base}/messages", json={"content": text})
        assert response.status_code == 201, response.text
    answer = (await client.get(base)).json()["messages"][-1]
    record = upstream.cache_log[-1]
    assert answer["usage"]["cached_tokens"] == record.cached_tokens > 0
    assert answer["usage"]["evaluated_tokens"] == record.prompt_tokens - record.cached_tokens
    assert answer["usage"]["cache_write_tokens"] is None, "llama.cpp does not say"
    exported = (await client.get(f"{base}/export")).json()
    assert exported["messages"][-1]["usage"] == answer["usage"]
    imported = await client.post("/api/conversations/import", json=exported)
    assert imported.status_code == 201, imported.text
    copy = (await client.get(f"/api/conversations/{imported.json()['id']}")).json()
    assert copy["messages"][-1]["usage"] == answer["usage"], "an import keeps the ledger"

    upstream.set_engine("llama-cpp-python")  # no usage on streams: nothing said
    response = await client.post(f"{base}/messages", json={"content": "third question"})
    assert response.status_code == 201, response.text
    silent = (await client.get(base)).json()["messages"][-1]
    assert silent["usage"] is None or silent["usage"]["evaluated_tokens"] is None
