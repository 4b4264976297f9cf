"""What pages following a streamed answer are sent: what changed, made once for all of them.

Sending each page the whole answer, re-rendered, at every update cost bytes and CPU in
the square of the answer's length, and once more per page. Instead each process keeps
one `SharedRendering` per answer that pages follow: its finished top-level blocks
(`webapp.web.blocks`) rendered once, and its open block, re-rendered as it grows. A page
is sent, as a `content` event, only what it lacks: the blocks finished since its last
update, and how much of the open block's HTML it already holds (`k`, in UTF-16 units,
as the page's strings count) with the rest (`o`). The frame for one step is made once
and sent to every page at that step. When the answer ends, what the pages were built
from is compared with the stored rendering; should they differ (a link reference
defined late changes an earlier block), every page is sent the stored one whole (`r`).

A page that connects or reconnects is sent the whole answer so far first (`r`, then
the open block), so it shows neither less nor more than the stored text.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from webapp.chat.models import Message, Status
from webapp.web.blocks import finished_end
from webapp.web.markdown import render_markdown_async

CONTENT_EVENT = "content"


@dataclass(slots=True)
class PageCursor:
    """What one page has been sent of an answer's rendering."""

    version: int = -1
    """The rendering's version it shows; -1: nothing yet."""
    blocks: int = 0
    open_html: str = ""


@dataclass(slots=True)
class SharedRendering:
    """One answer's rendering in this process, shared by every page following it."""

    text_length: int = 0
    finished: list[str] = field(default_factory=list)
    finished_end: int = 0
    open_html: str = ""
    version: int = 0
    replaced_by: str | None = None
    """The stored rendering, when the pages' blocks turned out to differ from it."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _frames: dict[int, bytes] = field(default_factory=dict)
    _shown: dict[object, bytes] = field(default_factory=dict)

    async def advance(self, text: str) -> None:
        """Render `text`, the answer so far, unless a longer text already was: the
        blocks it finished once, its open block again."""
        async with self._lock:
            if len(text) <= self.text_length or self.replaced_by is not None:
                return
            end = finished_end(text, self.finished_end)
            if end > self.finished_end:
                done = await render_markdown_async(text[self.finished_end : end])
                self.finished.append(str(done))
                self.finished_end = end
            rest = text[end:]
            self.open_html = str(await render_markdown_async(rest)) if rest.strip() else ""
            self.text_length = len(text)
            self._changed()

    async def conclude(self, answer: Message) -> None:
        """The answer's final row: make sure the pages end on exactly its stored rendering."""
        await self.advance(answer.content)
        stored = answer.content_html
        if stored is None or answer.status == Status.STREAMING:
            stored = str(await render_markdown_async(answer.content))
        async with self._lock:
            if self.replaced_by is None and "".join(self.finished) + self.open_html != stored:
                self.replaced_by = stored
                self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._frames.clear()

    def update_for(self, cursor: PageCursor, event_id: str) -> bytes | None:
        """The `content` frame that brings a page from `cursor` to now (None: it is up to
        date), made once per step for every page at that step; `cursor` moves on."""
        if cursor.version == self.version:
            return None
        frame = self._frames.get(cursor.version)
        if frame is None:
            frame = event_frame(
                CONTENT_EVENT, json.dumps(self._patch(cursor)), str(self.text_length)
            )
            self._frames[cursor.version] = frame
        cursor.version, cursor.blocks, cursor.open_html = (
            self.version,
            len(self.finished),
            self.open_html,
        )
        return frame

    def _patch(self, cursor: PageCursor) -> dict[str, object]:
        if self.replaced_by is not None:
            return {"r": self.replaced_by, "k": 0, "o": ""}
        if cursor.version < 0:
            return {"r": "".join(self.finished), "k": 0, "o": self.open_html}
        if cursor.blocks == len(self.finished):
            kept = common_prefix(cursor.open_html, self.open_html)
            return {"k": utf16_length(self.open_html[:kept]), "o": self.open_html[kept:]}
        first = self.finished[cursor.blocks]
        kept = common_prefix(cursor.open_html, first)
        done = [first[kept:], *self.finished[cursor.blocks + 1 :]]
        return {"k": utf16_length(first[:kept]), "f": done, "o": self.open_html}

    def shown(self, key: object, make: str) -> bytes:
        """The unnamed (swapped) frame for `key`, framed once for every page."""
        frame = self._shown.get(key)
        if frame is None:
            if len(self._shown) > 8:
                self._shown.clear()
            frame = html_frame(make)
            self._shown[key] = frame
        return frame


class LivePages:
    """The shared renderings of the answers pages follow in this process, by answer id."""

    def __init__(self) -> None:
        self._renderings: dict[int, tuple[SharedRendering, int]] = {}

    @contextmanager
    def sharing(self, answer_id: int) -> Iterator[SharedRendering]:
        rendering, pages = self._renderings.get(answer_id, (None, 0))
        if rendering is None:
            rendering = SharedRendering()
        self._renderings[answer_id] = (rendering, pages + 1)
        try:
            yield rendering
        finally:
            _, pages = self._renderings[answer_id]
            if pages <= 1:
                del self._renderings[answer_id]
            else:
                self._renderings[answer_id] = (rendering, pages - 1)

    def __len__(self) -> int:
        return len(self._renderings)


LIVE_PAGES = LivePages()


def common_prefix(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share (slices compare in C: no loop over
    characters in Python)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def utf16_length(text: str) -> int:
    """`text`'s length as a browser's string counts it."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


_LINES = re.compile(r"\r\n|\r|\n")


def html_frame(html: str) -> bytes:
    """An unnamed SSE message (htmx swaps it into the page), one `data:` line per line."""
    return ("".join(f"data: {line}\n" for line in _LINES.split(html)) + "\n").encode()


def event_frame(name: str, data: str, event_id: str | None = None) -> bytes:
    head = f"event: {name}\n" if event_id is None else f"event: {name}\nid: {event_id}\n"
    return f"{head}data: {data}\n\n".encode()
