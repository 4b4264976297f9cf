"""Every streaming answer's text so far, written by one task in one transaction.

Each answer used to flush itself every 250 ms, a write transaction each: with 200
answers streaming that was 800 transactions a second on SQLite's one writer, every one
holding the GIL for its Python half, and a new send waited behind all of them for its
own (its first token came seconds late). Now one `AnswerFlusher` per process writes,
each interval, only the answers whose text moved since it last wrote them, all in one
transaction (one executemany), and a heartbeat for those that stayed quiet for a while,
which is what tells a live writer from a dead worker's leftovers (`stale_stream_after`).

The same transaction finds the answers that were stopped meanwhile (by any worker:
their row is no longer `streaming`) and tells their writers to stop. On PostgreSQL it
also announces each moved answer (`webapp.chat.notify`), so watchers on other workers
read the text the moment it is committed, and a heartbeat that moved nothing wakes
nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import bindparam, select, text, update
from sqlmodel import Session, col

from webapp.chat.models import Message, Status
from webapp.chat.notify import CHANNEL, MOVED
from webapp.db import Database
from webapp.timeutil import utcnow

log = logging.getLogger(__name__)

_WRITE_TEXT = (
    update(Message)
    .where(col(Message.id) == bindparam("answer"), col(Message.status) == Status.STREAMING)
    .values(content=bindparam("so_far"), updated_at=bindparam("now"))
)
_ANNOUNCE = text(
    "SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS text[])) AS payload"
)
"""One statement for all the notices of a flush, however many answers moved."""


def announcement(answer_id: int, length: int) -> str:
    return f"{MOVED} {answer_id} {length}"


def _write(session: Session, texts: dict[int, str], quiet: list[int], announce: bool) -> list[int]:
    """Write the moved answers' text and the quiet ones' heartbeat; the ids of those that
    are no longer streaming (stopped, or reaped) come back."""
    connection = session.connection()
    now = utcnow()
    if texts:
        connection.execute(
            _WRITE_TEXT, [{"answer": i, "so_far": t, "now": now} for i, t in texts.items()]
        )
    if quiet:
        connection.execute(
            update(Message)
            .where(col(Message.id).in_(quiet), col(Message.status) == Status.STREAMING)
            .values(updated_at=now)
        )
    ids = [*texts, *quiet]
    ended = connection.execute(
        select(Message.id).where(col(Message.id).in_(ids), col(Message.status) != Status.STREAMING)
    )
    stopped = list(ended.scalars())
    if announce and texts:
        moved = [announcement(i, len(t)) for i, t in texts.items() if i not in stopped]
        if moved:
            connection.execute(_ANNOUNCE, {"channel": CHANNEL, "payloads": moved})
    return stopped


@dataclass(slots=True)
class _Tracked:
    text: Callable[[], str]
    stop: asyncio.Event
    written: int
    beat: float


class AnswerFlusher:
    """The answers this process is writing, flushed together every `interval` seconds."""

    def __init__(self, db: Database, interval: float, heartbeat: float, *, announce: bool) -> None:
        self._db = db
        self._interval = interval
        self._heartbeat = heartbeat
        self._announce = announce
        self._tracked: dict[int, _Tracked] = {}
        self._task: asyncio.Task[None] | None = None

    def track(self, answer_id: int, text: Callable[[], str], stop: asyncio.Event) -> None:
        """Flush `text()` for this answer until `release`; set `stop` if it is stopped."""
        self._tracked[answer_id] = _Tracked(text, stop, 0, time.monotonic())
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="answer-flusher")

    def release(self, answer_id: int) -> None:
        """The answer is ending: its final write is its own (status, usage, HTML)."""
        self._tracked.pop(answer_id, None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while self._tracked:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except Exception:  # the next interval tries again; the answers go on
                log.exception("could not write the streaming answers")

    async def flush(self) -> None:
        now = time.monotonic()
        texts: dict[int, str] = {}
        quiet: list[int] = []
        for answer_id, tracked in list(self._tracked.items()):
            so_far = tracked.text()
            if len(so_far) != tracked.written:
                texts[answer_id] = so_far
            elif now - tracked.beat >= self._heartbeat:
                quiet.append(answer_id)
        if not texts and not quiet:
            return
        stopped = await self._db.write(_write, texts, quiet, self._announce)
        for answer_id, so_far in texts.items():
            tracked = self._tracked.get(answer_id)
            if tracked is not None:
                tracked.written, tracked.beat = len(so_far), now
        for answer_id in quiet:
            tracked = self._tracked.get(answer_id)
            if tracked is not None:
                tracked.beat = now
        for answer_id in stopped:
            tracked = self._tracked.pop(answer_id, None)
            if tracked is not None:
                tracked.stop.set()
