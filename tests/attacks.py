"""Texts made to cost a parser more than their length (issue 43), at the two sizes a text
can have here: what one send may carry (`SEND_LIMIT`, the default `max_message_chars`)
and what one imported message may carry (`IMPORT_LIMIT`). Each regular expression and
parser that reads user or model text on the event loop is tried on them
(tests/test_linear_text.py); the admin review's import (`spans_import`) carries the most
left-out spans an import may hold.

Every input is built from a short unit repeated to the size asked for, so the same attack
is tried at both sizes; a parser that is linear takes ten times as long on the second.
"""

from __future__ import annotations

from typing import Any

from webapp.chat.stored.transfer import MAX_CONTENT, MAX_LEFT_OUT_SPANS, MAX_MESSAGES
from webapp.settings import Settings

SEND_LIMIT = Settings.model_fields["max_message_chars"].default
IMPORT_LIMIT = MAX_CONTENT
SIZES = {"send": SEND_LIMIT, "import": IMPORT_LIMIT}


def repeated(unit: str, size: int, tail: str = "") -> str:
    """`unit` repeated, then `tail`: `size` characters in all."""
    body = size - len(tail)
    return (unit * (body // len(unit) + 1))[:body] + tail


ATTACHMENT_HEADER = "\n\nAttached file `a`:\n\n```\n"
"""A file's header and opening fence, as `attach` writes them: on main, each one made the
search for an attachment read the rest of the message (100,000 characters of them held
the server 14.5 s each time the page showed them)."""


def attachment_attacks(size: int) -> dict[str, str]:
    """Messages of headers: closed by a fence as long as theirs (the first header is the
    attachment), by a longer one (none is), by none; and headers at a line's start
    without the blank line before them."""
    return {
        "headers": repeated(ATTACHMENT_HEADER, size),
        "headers, closed": repeated(ATTACHMENT_HEADER, size, "\n```"),
        "headers, closed longer": repeated(ATTACHMENT_HEADER, size, "\n````"),
        "headers, no blank line": repeated("Attached file `a`:\n\n```\nx", size, "\n```"),
        "names without an end": repeated("\n\nAttached file `" + "a" * 50, size, "\n```"),
        "fences": repeated("\n\nAttached file `a`:\n\n" + "`" * 40, size, "\n```"),
    }


def markdown_attacks(size: int) -> dict[str, str]:
    """What the page's own passes over text and HTML read line by line or block by block:
    blank-line runs (plain paragraphs), fence lines (where a streamed answer's finished
    blocks end), line breaks of every kind (an event's data lines)."""
    return {
        "blank lines of spaces": repeated("\n" + " \t" * 20, size, "x"),
        "backtick lines": repeated("`" * 60 + "x\n", size),
        "fence openers": repeated("```\n\n", size),
        "tilde lines": repeated("~" * 60 + " \t" * 5 + "x\n", size),
        "carriage returns": repeated("\r", size),
        "list items": repeated("\n\n1) x", size),
    }


HTML_TABLE_OPENERS = "<table>"
"""Stored answer HTML is the app's own (balanced), but it is read on the loop each time a
page shows it: a `<table>` with no end must not make each later one read to the end."""


def html_attacks(size: int) -> dict[str, str]:
    return {
        "table openers": repeated(HTML_TABLE_OPENERS, size),
        "code openers": repeated("<pre><code>", size),
        "classed code openers": repeated('<pre><code class="language-', size),
    }


def title_attacks(size: int) -> dict[str, str]:
    """A first message names its conversation; a model's reply names it too."""
    return {
        "spaces": repeated(" ", size, "x"),
        "one word": repeated("a", size),
        "title labels": repeated("title: ", size),
        "blank lines": repeated("\n \n", size, "Title: x"),
    }


def all_attacks(size: int) -> dict[str, str]:
    return {
        **attachment_attacks(size),
        **markdown_attacks(size),
        **title_attacks(size),
    }


def spans_import(
    messages: int = MAX_MESSAGES, spans: int = MAX_LEFT_OUT_SPANS, senders: int = 10
) -> dict[str, Any]:
    """An export of `messages` messages whose last `senders` user turns each left out
    the earliest turns, each as a span of its own (user turns are two seqs apart, so
    none merge): about `spans` left-out spans in all, the most an import may carry
    (issue 43: on main its admin review took 4 s and held `/healthz` for 3 s)."""
    rows: list[dict[str, Any]] = []
    users = list(range(1, messages, 2))
    trimming = users[-senders:]
    each = spans // senders
    for seq in range(1, messages + 1):
        row: dict[str, Any] = {
            "seq": seq,
            "role": "user" if seq % 2 else "assistant",
            "content": f"message {seq}",
            "created_at": "2026-01-01T10:00:00Z",
        }
        if seq in trimming:
            left_out = [[user, user] for user in users[:each] if user < seq]
            row["dropped_turns"] = len(left_out)
            row["fit"] = {"model": "m", "window": 1000, "left_out": left_out}
        rows.append(row)
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Spans", "configuration": "demo"},
        "messages": rows,
    }
