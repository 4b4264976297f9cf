"""Every streaming answer's writes, by one writer per process, in as few transactions as
there are moments to write.

Each answer used to flush itself every 250 ms, a write transaction each: with 200
answers streaming that was 800 transactions a second on SQLite's one writer, every one
holding the GIL for its Python half, and a new send waited behind all of them for its
own (its first token came seconds late). Now one `AnswerFlusher` per process writes,
each interval, only the answers whose text moved since it last wrote them, all in one
transaction (one executemany), and a heartbeat for those that stayed quiet for a while,
which is what tells a live writer from a dead worker's leftovers (`stale_stream_after`).
An answer's final row (status, usage, its HTML) goes through the same writer: finals
that arrive while a write is running are written together in the next one (a group
commit), since hundreds of answers that started together also end together.

The same transaction finds the answers that were stopped meanwhile (by any worker:
their row is no longer `streaming`) and tells their writers to stop. On PostgreSQL it
also announces each answer it moved (`webapp.chat.answering.notify`), so watchers on other
workers read the row the moment it is committed; a heartbeat that moved nothing wakes
nobody. Between flushes the new text itself goes out every `TEXT_PACE`, in notices of
its own (`webapp.chat.answering.pieces`): pages on other workers keep pace with the writer's
own, while the row is still written only every interval. So does the engine's reading of
the prompt before the text (`webapp.chat.answering.readings`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from sqlalchemy import bindparam, select, text, update
from sqlmodel import Session, col

from webapp.chat.answering.notify import CHANNEL, MOVED, PROGRESS, TEXT
from webapp.chat.answering.pieces import TEXT_PACE, Piece, payloads
from webapp.chat.answering.readings import Reading, reading_payloads
from webapp.chat.stored.models import Message, Status
from webapp.db import Database
from webapp.llm.providers.base import Prefill
from webapp.tasks import cancel
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
"""One statement for all the notices of a write, however many answers moved."""

Finals = dict[int, dict[str, object]]
READING_REPEAT = 1.0
"""Seconds after which an unchanged reading of the prompt is announced again: a page
that began following meanwhile (a reload) learns it without waiting for the engine's
next batch, which a slow engine reads for seconds."""


def announcement(answer_id: int, length: int) -> str:
    return f"{MOVED} {answer_id} {length}"


@dataclass(slots=True)
class Batch:
    """What one transaction writes."""

    texts: dict[int, str]
    """Moved answers' text so far, by id."""
    quiet: list[int]
    """Answers due a heartbeat."""
    finals: Finals
    """Finished answers' final columns, by id."""

    def __bool__(self) -> bool:
        return bool(self.texts or self.quiet or self.finals)


def _write(session: Session, batch: Batch, announce: bool) -> list[int]:
    """Write a batch; the ids among its moved and quiet answers whose row is no longer
    streaming (stopped by someone, or reaped) come back."""
    connection = session.connection()
    now = utcnow()
    for answer_id, values in batch.finals.items():
        connection.execute(update(Message).where(col(Message.id) == answer_id).values(values))
    if batch.texts:
        rows = [{"answer": i, "so_far": t, "now": now} for i, t in batch.texts.items()]
        connection.execute(_WRITE_TEXT, rows)
    if batch.quiet:
        connection.execute(
            update(Message)
            .where(col(Message.id).in_(batch.quiet), col(Message.status) == Status.STREAMING)
            .values(updated_at=now)
        )
    stopped: list[int] = []
    if batch.texts or batch.quiet:
        streaming = [*batch.texts, *batch.quiet]
        ended = connection.execute(
            select(col(Message.id)).where(
                col(Message.id).in_(streaming), col(Message.status) != Status.STREAMING
            )
        )
        # Ids read back from the table: never NULL, though the model types them optional.
        stopped = cast("list[int]", list(ended.scalars()))
    if announce:
        moved = [announcement(i, len(t)) for i, t in batch.texts.items() if i not in stopped]
        moved += [
            announcement(i, len(str(v.get("content") or ""))) for i, v in batch.finals.items()
        ]
        if moved:
            connection.execute(_ANNOUNCE, {"channel": CHANNEL, "payloads": moved})
    return stopped


def send_text(session: Session, payloads: list[str]) -> None:
    session.connection().execute(_ANNOUNCE, {"channel": CHANNEL, "payloads": payloads})


@dataclass(slots=True)
class _Tracked:
    text: Callable[[], str]
    stop: asyncio.Event
    written: int
    beat: float
    announced: int = 0
    """How much of the text went out in text notices."""
    prefill: Callable[[], Prefill | None] | None = None
    """The engine's newest reading of the prompt, where the answer has one."""
    told: Prefill | None = None
    """The reading that went out last."""
    told_at: float = 0.0


class AnswerFlusher:
    """The answers this process is writing: their text flushed together every `interval`
    seconds, their final rows together as they end."""

    def __init__(self, db: Database, interval: float, heartbeat: float, *, announce: bool) -> None:
        self._db = db
        self._interval = interval
        self._heartbeat = heartbeat
        self._announce = announce
        self._tracked: dict[int, _Tracked] = {}
        self._finals: dict[int, tuple[dict[str, object], asyncio.Future[None]]] = {}
        self._writing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._telling: asyncio.Task[None] | None = None

    def track(
        self,
        answer_id: int,
        text: Callable[[], str],
        stop: asyncio.Event,
        prefill: Callable[[], Prefill | None] | None = None,
    ) -> None:
        """Flush `text()` for this answer until it finishes; set `stop` if it is stopped;
        announce `prefill()` as it changes. What `text()` holds already (a continued
        answer's stored part) is neither written nor announced again."""
        known = len(text())
        tracked = _Tracked(text, stop, known, time.monotonic(), known, prefill)
        self._tracked[answer_id] = tracked
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="flusher")
        if self._announce and (self._telling is None or self._telling.done()):
            self._telling = asyncio.create_task(self._tell(), name="text-notices")

    def release(self, answer_id: int) -> None:
        """No more flushes for this answer (it is ending)."""
        self._tracked.pop(answer_id, None)

    async def finish(self, answer_id: int, values: dict[str, object]) -> None:
        """Write an answer's final row, with whatever other finals are waiting; returns
        once it is committed, and raises what the write raised."""
        self.release(answer_id)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._finals[answer_id] = (values, done)
        async with self._writing:
            if not done.done():  # else the write that held the lock took it along
                with contextlib.suppress(Exception):  # a failure reaches us through `done`
                    await self._write(Batch({}, [], {}))
        await done

    async def flush(self) -> None:
        """Write every moved answer's text (and any waiting finals) now."""
        async with self._writing:
            await self._write(self._due())

    async def close(self) -> None:
        await cancel(self._task)
        await cancel(self._telling)
        self._task = self._telling = None

    async def _run(self) -> None:
        while self._tracked:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except Exception:  # the next interval tries again; the answers go on
                log.exception("could not write the streaming answers")

    async def _tell(self) -> None:
        """Every `TEXT_PACE`, the text each answer gained and its newest reading of the
        prompt, in notices of their own (not in a flush's transaction, whose notices wait
        for its commit and its interval)."""
        while self._tracked:
            await asyncio.sleep(TEXT_PACE)
            gained: list[Piece] = []
            read: list[Reading] = []
            for answer_id, tracked in self._tracked.items():
                so_far = tracked.text()
                if len(so_far) > tracked.announced:
                    gained.append((answer_id, tracked.announced, so_far[tracked.announced :]))
                    tracked.announced = len(so_far)
                reading = tracked.prefill() if tracked.prefill is not None else None
                now = time.monotonic()
                if reading is not None and (
                    reading != tracked.told or now - tracked.told_at >= READING_REPEAT
                ):
                    read.append((answer_id, reading))
                    tracked.told, tracked.told_at = reading, now
            if not gained and not read:
                continue
            try:
                told = payloads(gained, TEXT) + reading_payloads(read, PROGRESS)
                await self._db.write(send_text, told)
            except Exception as error:  # lost pieces: watchers fill them from the next flush
                log.warning("could not announce the answers' new text: %s", error)

    def _due(self) -> Batch:
        now = time.monotonic()
        batch = Batch({}, [], {})
        for answer_id, tracked in self._tracked.items():
            so_far = tracked.text()
            if len(so_far) != tracked.written:
                batch.texts[answer_id] = so_far
            elif now - tracked.beat >= self._heartbeat:
                batch.quiet.append(answer_id)
        return batch

    async def _write(self, batch: Batch) -> None:
        """Write `batch` with every final waiting; called holding `_writing`."""
        waiting, self._finals = self._finals, {}
        batch.finals = {answer_id: values for answer_id, (values, _) in waiting.items()}
        if not batch:
            return
        try:
            stopped = await self._db.write(_write, batch, self._announce)
        except BaseException as error:
            for _, done in waiting.values():
                if not done.done():
                    done.set_exception(error)
            raise
        for _, done in waiting.values():
            if not done.done():
                done.set_result(None)
        now = time.monotonic()
        for answer_id in [*batch.texts, *batch.quiet]:
            tracked = self._tracked.get(answer_id)
            if tracked is not None:
                tracked.beat = now
                if answer_id in batch.texts:
                    tracked.written = len(batch.texts[answer_id])
        for answer_id in stopped:
            tracked = self._tracked.pop(answer_id, None)
            if tracked is not None:
                tracked.stop.set()
