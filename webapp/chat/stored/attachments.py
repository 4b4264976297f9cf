"""Text files attached to a message: the file's text becomes part of the message.

The message's content is what was typed, then the file as a fenced block under its name,
so everything that reads a message reads the file too: the bound, the meter and the
stored counts count it like any text, search finds words in it, the export carries it,
and the model reads it as markdown. The page shows it as a part that opens
(`attachment_html`). Only UTF-8 text is taken (a NUL byte or a byte sequence that is not
UTF-8 is a binary file, refused), within the message's size limit with what was typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from markupsafe import Markup, escape

from webapp.errors import InvalidInput

NAME_MAX = 120
_UNSAFE_IN_NAME = re.compile(r"[\x00-\x1f\x7f`]")
_HEADER = "Attached file `{name}`:"
_BACKTICKS = re.compile(r"`+")
PAPERCLIP = Markup(
    '<svg class="clip" viewBox="0 0 24 24" width="18" height="18" aria-hidden="true" '
    'focusable="false"><path d="M16.5 6.5v10a4.5 4.5 0 0 1-9 0V5a3 3 0 0 1 6 0v10.5a1.5 '
    '1.5 0 0 1-3 0V6.5" fill="none" stroke="currentColor" stroke-width="1.8" '
    'stroke-linecap="round"/></svg>'
)
"""The attachment's icon (also the composer's attach control): drawn, not a font's emoji."""


@dataclass(frozen=True, slots=True)
class Attachment:
    name: str
    text: str

    @property
    def lines(self) -> int:
        return self.text.count("\n") + 1


class NamedText(Protocol):
    """A file as a JSON body gives it: its name and its text."""

    @property
    def name(self) -> str: ...

    @property
    def text(self) -> str: ...


def with_file(typed: str, file: NamedText | None, limit: int) -> str:
    """`typed` with `file` attached (as `attach`), or `typed` alone without one."""
    if file is None:
        return typed
    name = clean_name(file.name)
    return attach(typed, Attachment(name, decode_text(name, file.text.encode())), limit)


def clean_name(name: str) -> str:
    """The file's own name (no folders), without characters that would break its header."""
    base = re.split(r"[\\/]", name)[-1]
    base = " ".join(_UNSAFE_IN_NAME.sub("", base).split())
    return base[:NAME_MAX] or "attachment"


def decode_text(name: str, data: bytes) -> str:
    """A file's bytes as text, or InvalidInput naming the file when it is not text."""
    if b"\x00" in data:
        raise InvalidInput(f"{name} is not a text file (it holds NUL bytes); attach text only")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} is not UTF-8 text; attach a text file") from None
    return text.replace("\r\n", "\n")


def attach(typed: str, attachment: Attachment, limit: int) -> str:
    """The message's content: what was typed, then the file under its name, in a fence
    longer than any run of backticks in it. Over `limit` characters in all, refused with
    the file's size, so the user knows which part to shorten."""
    text = attachment.text.strip("\n")
    if not text.strip():
        raise InvalidInput(f"{attachment.name} is empty")
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    block = f"{_HEADER.format(name=attachment.name)}\n\n{fence}\n{text}\n{fence}"
    content = f"{typed.rstrip()}\n\n{block}" if typed.strip() else block
    if len(content) > limit:
        raise InvalidInput(
            f"{attachment.name} is {len(text):,} characters; a message holds {limit:,} "
            "with what you type: attach a shorter file"
        )
    return content


_FIRST_HEADER = re.compile(r"Attached file `([^`\n]+)`:\n\n(`{3,})\n")
"""A header and its opening fence at the message's start (nothing typed before it)."""


@lru_cache(maxsize=8)
def _header_after_blank_line(fence: int) -> re.Pattern[str]:
    """A header after a blank line, with an opening fence of `fence` backticks. A search
    for it looks for its fixed start, and each try reads to the end of one line at most."""
    return re.compile(rf"\n\nAttached file `([^`\n]+)`:\n\n`{{{fence}}}\n")


def split_attachment(content: str) -> tuple[str, Attachment | None, str, str]:
    """(what was typed, the attachment, the text between them, the closing fence): the
    pieces `attach` joined, so the page can show them apart and still give back the
    message exactly ("", None, "", "" parts when there is no attachment).

    The closing fence is the message's last line, so it is read off the end first; the
    attachment is then the first header whose opening fence is as long and ends before
    that line. Linear in the message, however many headers it holds (a regular
    expression that looked for the closing fence from each header read the rest of the
    message once per header: 100,000 characters of headers took seconds)."""
    fence = len(content) - len(content.rstrip("`"))
    newline = len(content) - fence - 1  # where the closing fence's line starts
    if fence < 3 or newline < 0 or content[newline] != "\n":
        return content, None, "", ""
    found = _FIRST_HEADER.match(content, 0, newline)
    if found is None or len(found[2]) != fence:
        found = _header_after_blank_line(fence).search(content, 0, newline)
        if found is None:
            return content, None, "", ""
    start = found.start()
    return (
        content[:start],
        Attachment(found[1], content[found.end() : newline]),
        content[start : found.end()],
        content[newline:],
    )


PARTS_SHOWN = 64
"""The most attached files the page folds into parts; past them the rest reads as typed
(a message holds ten files at most; a typed text made of fake headers costs no more)."""
_NAME_START = "Attached file `"


def _last_part(content: str) -> tuple[str, Attachment, str, str] | None:
    """The message's last attached file: (everything before it, the file, its header and
    opening fence, its closing fence), or None when the message does not end with one.

    A file's fence is longer than any run of backticks in its text, so the last opening
    fence as long as the closing one is the file's own header, whatever the text holds."""
    fence = len(content) - len(content.rstrip("`"))
    newline = len(content) - fence - 1
    if fence < 3 or newline < 0 or content[newline] != "\n":
        return None
    opening = "`:\n\n" + "`" * fence + "\n"
    at = content.rfind(opening, 0, newline)
    if at < 0:
        return None
    named = content.rfind(_NAME_START, 0, at)
    name = content[named + len(_NAME_START) : at] if named >= 0 else ""
    if not name or "`" in name or "\n" in name:
        return None
    if named == 0:
        start = 0
    elif content[named - 2 : named] == "\n\n":
        start = named - 2
    else:
        return None
    body = at + len(opening)
    return (
        content[:start],
        Attachment(name, content[body:newline]),
        content[start:body],
        content[newline:],
    )


def split_attachments(content: str) -> tuple[str, list[tuple[Attachment, str, str]]]:
    """What was typed, and every file attached after it, in order, each with its header
    and closing fence (so the page can give the message back exactly)."""
    parts: list[tuple[Attachment, str, str]] = []
    rest = content
    while len(parts) < PARTS_SHOWN and (found := _last_part(rest)) is not None:
        rest, attachment, between, closing = found
        parts.insert(0, (attachment, between, closing))
    return rest, parts


def attachment_html(content: str) -> Markup | None:
    """A user message with attached files, as the page shows it: the typed text, then
    each file in a part that opens to its text. The fences and headers are in hidden
    spans, and the labels (`data-display-only`) are left out when the page copies or
    edits the message, so the element's text is the message exactly."""
    typed, parts = split_attachments(content)
    if not parts:
        return None
    shown = [escape(typed)]
    for attachment, between, closing in parts:
        name = escape(attachment.name)
        lines = f"{attachment.lines:,} line{'s' if attachment.lines != 1 else ''}"
        shown.append(
            Markup(
                f"<span hidden>{escape(between)}</span>"
                f'<details class="attachment"><summary><span data-display-only>'
                f"{PAPERCLIP}{name}</span>"
                f'<span class="hint" data-display-only> · {lines}</span></summary>'
                f'<pre tabindex="0" aria-label="Text of {name}">{escape(attachment.text)}</pre>'
                f"</details><span hidden>{escape(closing)}</span>"
            )
        )
    return Markup("").join(shown)
