"""Nothing on the event loop grows faster than its input (issue 43): every regular
expression and parser that reads user or model text where a request waits for it, tried
on the texts of tests/attacks.py at the send limit and at the import limit.

On main a user message of repeated "Attached file" headers (100,000 characters, within
the send limit) held the server 14.5 s each time its page was shown, and 6.3 s in the
admin review; a model answer of the same text did the same (the page split every
message, answers too, to fold the long ones). The search for an attachment looked for
its closing fence from each header, to the end of the message.

Each parser is held to `STALL` of CPU time on the texts of both sizes (a linear one takes
a few milliseconds on the first, ten times as long on the second); the pages that show
the texts are held to it through the app, on both databases, with a ticker on the app's
loop: a request that waits behind the page (`/healthz`, another user's send) waits as
long as the ticker does."""

from __future__ import annotations

import random
import re
import time
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.attacks import (
    IMPORT_LIMIT,
    SEND_LIMIT,
    SIZES,
    all_attacks,
    attachment_attacks,
    html_attacks,
)
from tests.factories import api_client, new_conversation, settings_for
from tests.looplag import LoopLag, watching, watching_app
from tests.upstream import FakeUpstream
from webapp.chat.naming import clean_model_title
from webapp.chat.stored.attachments import (
    Attachment,
    attachment_html,
    clean_name,
    split_attachment,
)
from webapp.chat.stored.models import Message
from webapp.chat.stored.search import snippet_html
from webapp.chat.stored.titles import title_from
from webapp.chat.web.api import download_name
from webapp.chat.web.views import MessageView
from webapp.web.blocks import finished_end_async
from webapp.web.events import frame
from webapp.web.markdown import name_code_copies, plain_html, scrollable_parts_focusable

STALL = 0.1
"""The most CPU time one parse of one text may take, and the app's loop may spend without
letting the ticker run."""


def folded(role: str) -> Callable[[str], object]:
    def collapsible(text: str) -> bool:
        return MessageView(Message(conversation_id="c", seq=1, role=role, content=text)).collapsible

    return collapsible


PARSERS: dict[str, Callable[[str], object]] = {
    "split_attachment": split_attachment,
    "attachment_html": attachment_html,
    "a user message folded": folded("user"),
    "an answer folded": folded("assistant"),
    "plain_html": plain_html,
    "frame": frame,
    "scrollable_parts_focusable": scrollable_parts_focusable,
    "name_code_copies": lambda text: name_code_copies(text, "answer 1"),
    "title_from": title_from,
    "clean_model_title": clean_model_title,
    "download_name": download_name,
    "snippet_html": snippet_html,
    "clean_name": clean_name,
}
"""What reads user or model text on the loop: the page's message views, the plain
rendering and the stream's framing, the stored HTML's passes, titles, file names, search
snippets. (Markdown itself renders in a worker, under a deadline: tests/test_render_stalls.)"""


@cache
def attacks_of(size: int) -> dict[str, str]:
    """Every attack at `size` characters, built once per run."""
    return {**all_attacks(size), **html_attacks(size)}


ATTACKS = attacks_of(SEND_LIMIT)


def cpu_seconds(parse: Callable[[str], object], text: str) -> float:
    """The least CPU of up to three parses: one that is over the stall is tried again, as
    another process on a shared core slows even CPU time (caches, clock); a parse that
    grows faster than its input is over every time."""
    spent = []
    for _ in range(3):
        started = time.thread_time()
        parse(text)
        spent.append(time.thread_time() - started)
        if spent[-1] < STALL:
            break
    return min(spent)


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("parser", list(PARSERS))
def test_each_parser_is_linear_on_each_attack(parser: str, attack: str) -> None:
    """At the send limit, then at the import limit (skipped when the first is over: a
    quadratic parse of a megabyte takes minutes)."""
    parse = PARSERS[parser]
    for size_name, size in SIZES.items():
        spent = cpu_seconds(parse, attacks_of(size)[attack])
        assert spent < STALL, f"{parser} took {spent:.2f} s on {attack!r} at the {size_name} limit"


# ---- the attachment, exactly as before ----------------------------------------------------

MAINS_BLOCK = re.compile(r"(?:\A|\n\n)Attached file `([^`\n]+)`:\n\n(`{3,})\n(.*)\n\2\Z", re.DOTALL)
"""The expression main searched with (quadratic): the reference for what is found."""


def mains_split(content: str) -> tuple[str, Attachment | None, str, str]:
    found = MAINS_BLOCK.search(content)
    if found is None:
        return content, None, "", ""
    name, fence, text = found.groups()
    start = found.start()
    return content[:start], Attachment(name, text), content[start : found.start(3)], f"\n{fence}"


PIECES = ["\n", "\n\n", "`", "```", "````", "Attached file `", "a", "`:\n\n", "x y", "\n```"]
PIECES += ["Attached file `a`:\n\n```\n", "\n\nAttached file `b c`:\n\n````\n", "\n````"]


def test_the_attachment_is_found_where_main_found_it() -> None:
    chooser = random.Random(43)
    found = 0
    for _ in range(50_000):
        content = "".join(chooser.choice(PIECES) for _ in range(chooser.randint(0, 12)))
        assert split_attachment(content) == mains_split(content), repr(content)
        found += split_attachment(content)[1] is not None
    assert found > 500, "the draw holds attachments, not only texts without one"


def test_a_typed_message_with_headers_keeps_its_attachment() -> None:
    """Headers typed before the file (or inside it) do not hide the file: the first header
    whose fence closes the message is the attachment, as on main."""
    typed = "Attached file `x`:\n\n```\nnot a file\n\nAttached file `y`:\n\n````\n"
    content = f"{typed}\n\nAttached file `z.txt`:\n\n```\nline\n```"
    before, attachment, between, closing = split_attachment(content)
    assert attachment is not None and attachment.name == "x" and before == ""
    assert attachment.text.endswith("Attached file `z.txt`:\n\n```\nline")
    assert before + between + attachment.text + closing == content
    assert split_attachment(content) == mains_split(content)


async def test_a_long_stretch_of_an_answer_is_read_off_the_loop() -> None:
    """Where a streamed answer's finished blocks end is read a line at a time: a megabyte
    of short lines is read in a thread."""
    slowest = ("fence openers", "list items", "blank lines", "headers")
    for text in (attacks_of(IMPORT_LIMIT)[name] for name in slowest):
        async with watching() as lag:
            await finished_end_async(text)
        assert lag.busiest < STALL


# ---- through the app: the pages that show the texts ---------------------------------------

ROOMY = """
[[models]]
name = "roomy"
provider = "up"
context_window = 4000000
max_output_tokens = 2000000
capabilities = ["chat"]

[[configurations]]
name = "roomy"
model = "roomy"
"""

SHOWN = ["headers", "headers, closed", "headers, closed longer"]


@pytest.fixture
async def client(
    database_url: str, tmp_path: Path, upstream: FakeUpstream
) -> AsyncIterator[AsyncTestClient]:
    upstream.set_models({**upstream.models, "roomy": 4_000_000})
    settings = settings_for(database_url, tmp_path, upstream, ROOMY)
    async with api_client(settings, admin=True) as test_client:
        conversation = await new_conversation(test_client, configuration="roomy")
        warm = await test_client.post(
            f"/api/conversations/{conversation['id']}/messages", json={"content": "Hello"}
        )
        assert warm.status_code == 201, warm.text
        for page in (f"/c/{conversation['id']}", f"/admin/c/{conversation['id']}", "/healthz"):
            assert (await test_client.get(page)).status_code == 200, page
        yield test_client


def no_stall(lag: LoopLag, what: str) -> None:
    assert lag.ticks > 0
    assert lag.busiest < STALL, (
        f"{what} held the app's loop for {lag.busiest:.2f} s of CPU"
        f" ({lag.worst:.2f} s of wall time)"
    )


async def shown_without_stall(client: AsyncTestClient, conversation_id: str, what: str) -> None:
    """The chat page, the admin review and the JSON of the conversation, each watched, with
    `/healthz` asked between them."""
    for url in (
        f"/c/{conversation_id}",
        f"/admin/c/{conversation_id}",
        f"/api/conversations/{conversation_id}",
    ):
        with watching_app(client) as lag:
            shown = await client.get(url)
            health = await client.get("/healthz")
        assert shown.status_code == 200, (url, shown.text[:300])
        assert health.status_code == 200
        no_stall(lag, f"{url} of {what}")


@pytest.mark.parametrize("attack", SHOWN)
async def test_a_sent_message_and_its_answer_of_headers_are_shown_without_a_stall(
    client: AsyncTestClient, upstream: FakeUpstream, attack: str
) -> None:
    text = attachment_attacks(SEND_LIMIT)[attack]
    conversation = await new_conversation(client, configuration="roomy")
    upstream.set_reply(text)
    sent = await client.post(
        f"/api/conversations/{conversation['id']}/messages", json={"content": text}
    )
    assert sent.status_code == 201, sent.text[:300]
    assert sent.json()["assistant"]["content"] == text
    await shown_without_stall(client, conversation["id"], f"a sent {attack!r}")


def export_of(question: str, answer: str) -> dict[str, Any]:
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Headers", "configuration": "roomy"},
        "messages": [
            {"seq": 1, "role": "user", "content": question},
            {"seq": 2, "role": "assistant", "content": answer, "status": "complete"},
        ],
    }


@pytest.mark.parametrize("attack", SHOWN[-1:])
async def test_an_imported_message_and_answer_of_headers_are_shown_without_a_stall(
    client: AsyncTestClient, attack: str
) -> None:
    """At the import limit: a megabyte of headers, as the question and as the answer. (The
    import itself is watched elsewhere: tests of imports.) One shape of the three, the
    one whose closing fence is searched for longest: the sent messages cover the others,
    and each megabyte costs the suite seconds."""
    text = attachment_attacks(IMPORT_LIMIT)[attack]
    response = await client.post("/api/conversations/import", json=export_of(text, text))
    assert response.status_code == 201, response.text[:300]
    await shown_without_stall(client, response.json()["id"], f"an imported {attack!r}")
