"""What pages following a streamed answer are sent: what changed, made once for all of them.

Sending each page the whole answer, re-rendered, at every update cost bytes and CPU in
the square of the answer's length, and once more per page. Instead each process follows
an answer that pages watch once (`LiveAnswer`, one task for all its pages), spaces its
snapshots, and keeps one rendering of it (`SharedRendering`): the finished top-level
blocks (`webapp.web.blocks`) rendered once, and the open block, re-rendered as it grows
with its code plain (coloured, a block may tokenize differently as it grows, and would be
sent again whole each time). A page is sent, as a `content` event, only what it lacks:
the blocks finished since its last update, and how much of the open block's HTML it
already holds (`k`, in UTF-16 units, as the page's strings count) with the rest (`o`).
The frame for one step is made once and written to every page at that step; a slow page
skips ahead. When the answer ends, its open block is rendered in colour and what the
pages were built from is compared with the stored rendering; should they differ (a link
reference defined late changes an earlier block), every page is sent the stored one
whole (`r`). A page that connects or reconnects is sent the whole answer so far (`r`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from webapp.chat.stored.models import Message, Status
from webapp.chat.stored.serialize import message_dict
from webapp.chat.web.live import Snapshot
from webapp.chat.web.views import answer_view
from webapp.web.blocks import finished_end_async
from webapp.web.events import frame as sse_frame
from webapp.web.markdown import code_blocks_in, name_code_copies, render_markdown_async

log = logging.getLogger(__name__)

CONTENT_EVENT = "content"

SNAPSHOT_CHARS = 96
SNAPSHOT_WAIT = 0.5
"""Pages are sent new text once this many characters have come, or this many seconds
have passed, since the last update: each update costs some 60 bytes of framing, so this
keeps what a page receives within about twice the answer's rendering
(bench/page_watchers.py), and text that stops short still shows within half a second."""
SNAPSHOT_GAP = 0.05
"""Updates are at least this far apart, however fast the text comes."""
RENDER_SHARE = 0.25
"""After a render, the next waits at least this render's time over this share: a long
open block (one long paragraph) then costs at most this share of a render worker."""


@dataclass(slots=True)
class PageCursor:
    """What one page has been sent of an answer."""

    version: int = -1
    """The rendering's version it shows; -1: nothing yet."""
    blocks: int = 0
    open_html: str = ""
    turn: int = -1
    """The turn frame (status, the user row) it shows."""
    floor: int = 0
    """The length of text it showed before it connected (a page loaded mid-answer shows
    the text stored so far): it is sent text once the rendering has at least as much, so
    the text never shrinks, then regrows."""


@dataclass(slots=True)
class SharedRendering:
    """One answer's rendering in this process, shared by every page following it; its
    code copy controls named after `whose` (the answer, "answer 3")."""

    whose: str
    text_length: int = -1
    finished: list[str] = field(default_factory=list)
    finished_end: int = 0
    finished_blocks: int = 0
    """Code blocks in `finished`: the open block's are numbered after them."""
    open_html: str = ""
    version: int = 0
    replaced_by: str | None = None
    """The stored rendering, when the pages' blocks turned out to differ from it."""
    _frames: dict[int, bytes] = field(default_factory=dict)

    async def advance(self, text: str, *, final: bool = False) -> None:
        """Render `text`, the answer so far, if it grew: the blocks it finished once, its
        open block again (in colour when `final`: nothing more will be appended)."""
        if self.replaced_by is not None or (len(text) <= self.text_length and not final):
            return
        # Rendered first, then changed at once: a page that connects meanwhile reads a
        # whole version, never half of the next.
        end = len(text) if final else await finished_end_async(text, self.finished_end)
        done = ""
        if end > self.finished_end:
            done = self._named(str(await render_markdown_async(text[self.finished_end : end])))
        rest = text[end:]
        if rest.strip():
            raw = str(await render_markdown_async(rest, colour=False))
            open_html = name_code_copies(
                raw, self.whose, self.finished_blocks + code_blocks_in(done)
            )
        else:
            open_html = ""
        if done:
            self.finished.append(done)
            self.finished_blocks += code_blocks_in(done)
            self.finished_end = end
        self.open_html = open_html
        self.text_length = len(text)
        self._changed()

    async def conclude(self, answer: Message) -> None:
        """The answer's final row: make sure the pages end on exactly its stored rendering."""
        await self.advance(answer.content, final=True)
        stored = answer.content_html
        if stored is None or answer.status == Status.STREAMING:
            stored = str(await render_markdown_async(answer.content))
        stored = name_code_copies(stored, self.whose)
        if self.replaced_by is None and "".join(self.finished) + self.open_html != stored:
            self.replaced_by = stored
            self._changed()

    def _named(self, html: str) -> str:
        return name_code_copies(html, self.whose, before=self.finished_blocks)

    def _changed(self) -> None:
        self.version += 1
        self._frames.clear()

    def update_for(self, cursor: PageCursor) -> bytes | None:
        """The `content` frame that brings a page from `cursor` to now (None: it is up to
        date), made once per step for every page at that step; `cursor` moves on. Its id
        is the length of the text it shows."""
        if cursor.version == self.version:
            return None
        frame = self._frames.get(cursor.version)
        if frame is None:
            patch = json.dumps(self._patch(cursor), separators=(",", ":"))
            frame = sse_frame(patch, CONTENT_EVENT, str(self.text_length))
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


_STOPPING: set[asyncio.Task[None]] = set()

TurnFrame = Callable[[Snapshot], str]
"""Renders the turn around an answer (its status and footer, the user row) for a page."""


class LiveAnswer:
    """An answer pages in this process follow: one follower of its snapshots, spacing them
    and rendering each once for all the pages, which it wakes when something changed."""

    def __init__(self, snapshots: AsyncIterator[Snapshot]) -> None:
        self.rendering: SharedRendering | None = None
        self.snapshot: Snapshot | None = None
        """The latest snapshot rendered."""
        self.turn = 0
        """Counts changes of the turn around the answer (its status, its user row)."""
        self.failed = False
        self._turn_state: object = None
        self._turn_frames: dict[object, bytes] = {}
        self._woken = asyncio.Event()
        self._latest: Snapshot | None = None
        self._arrived = asyncio.Event()
        self._ended = False
        self._feeder = asyncio.create_task(self._feed(snapshots))
        self._task = asyncio.create_task(self._run())

    @property
    def final(self) -> bool:
        return self.snapshot is not None and self.snapshot.final

    @property
    def done(self) -> bool:
        return self.final or self.failed

    async def frames_for(
        self, cursor: PageCursor, kind: object, make: TurnFrame
    ) -> AsyncIterator[bytes]:
        """What one page is sent, from `cursor` to the end: its text as `content` events,
        the turn (rendered by `make`, once for every page of its `kind`) when it changed,
        and `done` with the answer's status. A follower that failed ends it without."""
        while True:
            await self._changed_since(cursor)
            rendering = self.rendering
            if rendering is None:  # the follower failed before its first snapshot
                return
            # The text first: the final turn frame ends the page's stream.
            if self._text_for(cursor):
                update = rendering.update_for(cursor)
                if update is not None:
                    yield update
            if cursor.turn != self.turn:
                yield self.turn_frame(kind, make)
                cursor.turn = self.turn
            if self.done:
                if self.snapshot is not None and self.final:
                    yield sse_frame(self.snapshot.answer.status, "done")
                return

    async def _changed_since(self, cursor: PageCursor) -> None:
        """Until there is something `cursor`'s page has not been sent, or the end."""
        while not self.done and not self._news_for(cursor):
            await self._woken.wait()

    def _news_for(self, cursor: PageCursor) -> bool:
        rendering = self.rendering
        if rendering is None:
            return False
        text = self._text_for(cursor) and cursor.version != rendering.version
        return text or cursor.turn != self.turn

    def _text_for(self, cursor: PageCursor) -> bool:
        rendering = self.rendering
        return rendering is not None and (rendering.text_length >= cursor.floor or self.final)

    def turn_frame(self, key: object, make: TurnFrame) -> bytes:
        """The turn as pages of one kind (`key`: full page or embed) show it now, rendered
        once for all of them."""
        frame = self._turn_frames.get(key)
        if frame is None:
            assert self.snapshot is not None, "a turn frame is asked for once there is one"
            frame = self._turn_frames[key] = sse_frame(make(self.snapshot))
        return frame

    def stop(self) -> None:
        """No page follows it any more: stop following (the tasks are kept until they
        have ended, as the loop itself keeps only weak references to tasks)."""
        for task in (self._task, self._feeder):
            if not task.done():
                task.cancel()
                _STOPPING.add(task)
                task.add_done_callback(_STOPPING.discard)

    async def _feed(self, snapshots: AsyncIterator[Snapshot]) -> None:
        try:
            async for snapshot in snapshots:
                self._latest = snapshot
                self._arrived.set()
        finally:
            self._ended = True
            self._arrived.set()

    async def _run(self) -> None:
        try:
            await self._render_as_it_comes()
        except Exception:  # a read that failed (the conversation deleted, the database)
            log.exception("following an answer for its pages failed")
        finally:
            if not self.final:
                self.failed = True
            self._wake()

    async def _render_as_it_comes(self) -> None:
        shown_at = -math.inf
        cost = 0.0
        while True:
            await self._arrived.wait()
            await self._wait_for_enough(shown_at, cost)
            self._arrived.clear()
            snapshot = self._latest
            if snapshot is None:
                if self._ended:  # nothing was ever heard: the reason is in the feeder
                    await self._feeder
                    return
                continue
            started = time.monotonic()
            await self._show(snapshot)
            shown_at = time.monotonic()
            cost = shown_at - started
            if snapshot.final:
                return
            if self._ended and self._latest is snapshot:
                await self._feeder  # ended without a final snapshot: raise its reason
                return

    async def _wait_for_enough(self, shown_at: float, cost: float) -> None:
        """Until the latest snapshot is worth an update: the end, a changed turn, or
        enough new text (`SNAPSHOT_CHARS`) or time (`SNAPSHOT_WAIT`) since the last."""
        gap = max(SNAPSHOT_GAP, cost / RENDER_SHARE)
        while not self._ended:
            latest = self._latest
            if latest is None or latest.final:
                return
            shown = -1 if self.rendering is None else self.rendering.text_length
            urgent = shown < 0 or self._turn_of(latest) != self._turn_state
            grown = len(latest.answer.content) - shown
            wait = gap if urgent or grown >= SNAPSHOT_CHARS else max(gap, SNAPSHOT_WAIT)
            left = shown_at + wait - time.monotonic()
            if left <= 0:
                return
            self._arrived.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    async def _show(self, snapshot: Snapshot) -> None:
        rendering = self.rendering or SharedRendering(whose=_whose(snapshot))
        if snapshot.final:
            await rendering.conclude(snapshot.answer)
        else:
            await rendering.advance(snapshot.answer.content)
        self.rendering = rendering
        state = self._turn_of(snapshot)
        if state != self._turn_state:
            self._turn_state = state
            self.turn += 1
            self._turn_frames.clear()
        self.snapshot = snapshot
        self._wake()

    @staticmethod
    def _turn_of(snapshot: Snapshot) -> object:
        """What the turn around the answer shows, to tell when it changed (a fit made
        later, a new status, a tool call's progress, the end)."""
        user = json.dumps(message_dict(snapshot.user), default=str, sort_keys=True)
        return (snapshot.final, snapshot.answer.status, user, snapshot.prefill, snapshot.tools)

    def _wake(self) -> None:
        self._woken.set()
        self._woken = asyncio.Event()


def _whose(snapshot: Snapshot) -> str:
    return answer_view(snapshot.answer, snapshot.user).named("answer")


class LivePages:
    """The answers pages follow in this process, by answer id, each followed once."""

    def __init__(self) -> None:
        self._answers: dict[int, tuple[LiveAnswer, int]] = {}

    @contextmanager
    def following(
        self, answer_id: int, snapshots: Callable[[], AsyncIterator[Snapshot]]
    ) -> Iterator[LiveAnswer]:
        """The answer's `LiveAnswer` for one more page (started from `snapshots` when no
        page follows it yet, or its follower failed); stopped when its last page goes."""
        live, pages = self._answers.get(answer_id, (None, 0))
        if live is None or live.failed:
            live, pages = LiveAnswer(snapshots()), 0
        self._answers[answer_id] = (live, pages + 1)
        try:
            yield live
        finally:
            held, pages = self._answers.get(answer_id, (None, 0))
            if held is live and pages > 1:
                self._answers[answer_id] = (live, pages - 1)
            else:
                if held is live:
                    del self._answers[answer_id]
                live.stop()

    def __len__(self) -> int:
        return len(self._answers)


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
