"""Hearing that an answer written by another worker (or machine) has moved on.

A page that follows an answer running elsewhere used to ask the database every 250 ms,
two queries and a reap each time, whether or not anything had changed: a hundred such
watchers kept a server busy doing nothing. Now each process has one `AnswerNotices`:

* on PostgreSQL, one connection that `LISTEN`s; the writer of an answer sends a
  `NOTIFY` in the same transaction as each flush, so it arrives when the text is
  committed, and between flushes the text itself, in pieces (`TEXT`,
  `webapp.chat.answering.pieces`); the listener wakes, in memory, just the watchers of that
  answer. An idle watcher costs an entry in a dict. A notice can also ask the worker
  that runs an answer to stop it at once, or carry the engine's reading of the prompt
  before any text (`PROGRESS`, `webapp.chat.answering.readings`).
* on SQLite (one machine; its workers share a file), one poll per process for every
  answer watched, a single indexed query per interval, which wakes only the watchers
  whose answer changed.

Titles are heard the same way: a page that asks for a new conversation's title
(`webapp.chat.naming`) watches the conversation, and whoever writes its title (the model's
title call, a rename) sends a `TITLE` notice with it on PostgreSQL; on SQLite the same
poll reads the titles watched. A waiting page costs no query of its own.

Either way a watcher woken by a moved row reads the rows it shows, and pieces of text say
where they start, so a lost notice (a dropped connection) costs at most a late snapshot: after
reconnecting every watcher is woken once, and watchers re-read on their own, slowly, in
case a writer died without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy import Connection, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.sql import Select
from sqlmodel import Session, col

from webapp.chat.answering.pieces import parse
from webapp.chat.answering.readings import parse_readings
from webapp.chat.stored.models import Conversation, Message
from webapp.db import Database
from webapp.llm.providers.base import Prefill
from webapp.tasks import cancel

log = logging.getLogger(__name__)
K = TypeVar("K", int, str)

CHANNEL = "webapp_answers"
MOVED = "moved"
"""An answer's stored row changed: new text, a new status, or its end."""
STOP = "stop"
"""Stop an answer: the worker writing it stops it now, not at its next flush."""
TEXT = "text"
"""New text of answers being written, between flushes (`webapp.chat.answering.pieces`)."""
TITLE = "title"
"""A conversation's title was written: "title CONVERSATION_ID"."""
PROGRESS = "progress"
"""How far engines have read answers' prompts (`webapp.chat.answering.readings`)."""
APPROVE = "approve"
"""The owner decided on a tool call that waits in the worker writing the answer:
"approve ANSWER_ID 1|0 CALL_ID" (`webapp.chat.answering.approving`)."""
RECONNECT_DELAY = 1.0


def notice(kind: str, answer_id: int, length: int | None = None) -> Select[Any]:
    """The statement that sends a notice when the transaction it runs in commits
    (PostgreSQL only): "KIND ANSWER_ID [LENGTH]", the length of the text stored, for
    whoever wants to match a notice to what it announced (the load benchmark does)."""
    payload = f"{kind} {answer_id}" if length is None else f"{kind} {answer_id} {length}"
    return select(func.pg_notify(CHANNEL, payload))


def approval_notice(answer_id: int, call_id: str, approve: bool) -> Select[Any]:
    """The statement that forwards a decision on a tool call to every process (PostgreSQL
    only); the call id goes last, as it is whatever the model's provider named it."""
    payload = f"{APPROVE} {answer_id} {int(approve)} {call_id}"
    return select(func.pg_notify(CHANNEL, payload))


def announce_title(connection: Connection, conversation_id: str) -> None:
    """Tell the watchers of the conversation's title, in every worker, that it was written
    (PostgreSQL: a notice sent when the transaction commits; SQLite's poll needs none)."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_notify(CHANNEL, f"{TITLE} {conversation_id}")))


class Watch:
    """One watcher's wake-up: set by a notice, cleared when the watcher takes it; with
    what it heard since it last took: pieces of text, and whether the row moved."""

    __slots__ = ("_event", "_moved", "_pieces", "prefill")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._pieces: list[tuple[int, str]] = []
        self._moved = False
        self.prefill: Prefill | None = None
        """The newest reading of the prompt heard (a state, not a piece: kept, not taken)."""

    def wake(self) -> None:
        """The row moved (or may have: a lost connection): the watcher reads it."""
        self._moved = True
        self._event.set()

    def hear(self, start: int, piece: str) -> None:
        self._pieces.append((start, piece))
        self._event.set()

    def read(self, prefill: Prefill) -> None:
        self.prefill = prefill
        self._event.set()

    def take(self) -> tuple[list[tuple[int, str]], bool]:
        """The pieces heard (start, text) and whether the row moved, since the last take."""
        pieces, moved = self._pieces, self._moved
        self._pieces, self._moved = [], False
        return pieces, moved

    async def wait(self, timeout: float) -> bool:
        """Whether the answer moved (True) or `timeout` seconds passed without a word."""
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return False
        self._event.clear()
        return True


class AnswerNotices:
    """The watchers of this process, by answer id; subclasses decide what wakes them."""

    def __init__(self) -> None:
        self._watchers: dict[int, set[Watch]] = {}
        self._titles: dict[str, set[Watch]] = {}

    @contextlib.contextmanager
    def watch(self, answer_id: int) -> Iterator[Watch]:
        with _watching(self._watchers, answer_id) as watch:
            yield watch

    @contextlib.contextmanager
    def watch_title(self, conversation_id: str) -> Iterator[Watch]:
        """Woken when the conversation's title may have been written (`announce_title`)."""
        with _watching(self._titles, conversation_id) as watch:
            yield watch

    def watching(self) -> int:
        return sum(map(len, self._watchers.values())) + sum(map(len, self._titles.values()))

    def wake_title(self, conversation_id: str) -> None:
        for watch in self._titles.get(conversation_id, ()):
            watch.wake()

    def wake(self, answer_id: int) -> None:
        for watch in self._watchers.get(answer_id, ()):
            watch.wake()

    def hear(self, answer_id: int, start: int, piece: str) -> None:
        for watch in self._watchers.get(answer_id, ()):
            watch.hear(start, piece)

    def heard_reading(self, answer_id: int, prefill: Prefill) -> None:
        for watch in self._watchers.get(answer_id, ()):
            watch.read(prefill)

    def wake_all(self) -> None:
        for watchers in [*self._watchers.values(), *self._titles.values()]:
            for watch in watchers:
                watch.wake()

    @property
    def sends_notices(self) -> bool:
        """Whether writers must send notices (`notice`) for watchers to hear them."""
        return False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


@contextlib.contextmanager
def _watching(watchers: dict[K, set[Watch]], key: K) -> Iterator[Watch]:
    """A new watch among `watchers[key]`, for as long as this lasts."""
    watch = Watch()
    watchers.setdefault(key, set()).add(watch)
    try:
        yield watch
    finally:
        watching = watchers.get(key)
        if watching is not None:
            watching.discard(watch)
            if not watching:
                del watchers[key]


class PostgresNotices(AnswerNotices):
    """One LISTENing connection per process, fanned out in memory."""

    def __init__(
        self,
        database_url: str,
        on_stop: Callable[[int], object] | None = None,
        on_approve: Callable[[int, str, bool], object] | None = None,
    ) -> None:
        super().__init__()
        url = make_url(database_url).set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._on_stop = on_stop
        self._on_approve = on_approve
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()
        """Set while the connection listens (tests wait for it)."""

    @property
    def sends_notices(self) -> bool:
        return True

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="notices-listener")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    def _received(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        kind, _, rest = payload.partition(" ")
        if kind == TEXT:
            self._heard_text(rest)
            return
        if kind == TITLE:
            self.wake_title(rest)
            return
        if kind == PROGRESS:
            self._heard_readings(rest)
            return
        if kind == APPROVE:
            self._heard_approval(rest)
            return
        try:
            answer_id = int(rest.split(" ", 1)[0])
        except ValueError:
            log.warning("ignored a malformed answer notice: %r", payload)
            return
        if kind == STOP and self._on_stop is not None:
            self._on_stop(answer_id)
        self.wake(answer_id)

    def _heard_approval(self, body: str) -> None:
        answer, approve, call_id = [*body.split(" ", 2), "", ""][:3]
        if not answer.isdecimal() or approve not in ("0", "1") or not call_id:
            log.warning("ignored a malformed approval notice: %.200r", body)
            return
        if self._on_approve is not None:
            self._on_approve(int(answer), call_id, approve == "1")

    def _heard_text(self, body: str) -> None:
        try:
            pieces = parse(body)
        except ValueError:
            log.warning("ignored a malformed text notice: %.200r", body)
            return
        for answer_id, start, piece in pieces:
            self.hear(answer_id, start, piece)

    def _heard_readings(self, body: str) -> None:
        try:
            readings = parse_readings(body)
        except ValueError:
            log.warning("ignored a malformed progress notice: %.200r", body)
            return
        for answer_id, prefill in readings:
            self.heard_reading(answer_id, prefill)

    async def _listen(self) -> None:
        import asyncpg

        while True:
            lost = asyncio.Event()
            connection = None
            try:
                connection = await asyncpg.connect(self._dsn)
                connection.add_termination_listener(lambda _c, lost=lost: lost.set())
                await connection.add_listener(CHANNEL, self._received)
                self.listening.set()
                # Whatever was sent while nobody listened is read now.
                self.wake_all()
                await lost.wait()
                log.warning("the answer notices connection was lost; reconnecting")
            except Exception as error:  # refused, dropped, timed out: try again shortly
                log.warning("cannot listen for answer notices (%s); retrying", error)
            finally:
                self.listening.clear()
                if connection is not None and not connection.is_closed():
                    with contextlib.suppress(Exception):
                        await asyncio.shield(connection.close(timeout=2))
            self.wake_all()  # watchers re-read while there is no connection
            await asyncio.sleep(RECONNECT_DELAY)


class PollingNotices(AnswerNotices):
    """SQLite: one query per interval for all the answers watched in this process; only
    the watchers of an answer whose row changed are woken."""

    def __init__(self, db: Database, interval: float) -> None:
        super().__init__()
        self._db = db
        self._interval = interval
        self._seen: dict[int, tuple[object, ...] | None] = {}
        self._seen_titles: dict[str, str | None] = {}
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watch(self, answer_id: int) -> Iterator[Watch]:
        self._polling()
        with super().watch(answer_id) as watch:
            yield watch

    @contextlib.contextmanager
    def watch_title(self, conversation_id: str) -> Iterator[Watch]:
        self._polling()
        with super().watch_title(conversation_id) as watch:
            yield watch

    def _polling(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="notices-poll")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    async def _poll(self) -> None:
        while self._watchers or self._titles:
            await asyncio.sleep(self._interval)
            try:
                if answers := list(self._watchers):
                    self._wake_moved(answers, await self._db.read(_states, answers))
                if conversations := list(self._titles):
                    self._wake_retitled(conversations, await self._db.read(_titles, conversations))
            except Exception as error:  # a busy or broken database: wake all to re-read
                log.warning("could not poll the answers watched: %s", error)
                self.wake_all()

    def _wake_moved(self, ids: list[int], states: dict[int, tuple[object, ...]]) -> None:
        for answer_id in ids:
            state = states.get(answer_id)
            if self._seen.get(answer_id, ()) != state:
                self._seen[answer_id] = state
                self.wake(answer_id)
        for gone in self._seen.keys() - self._watchers.keys():
            del self._seen[gone]

    def _wake_retitled(self, ids: list[str], titles: dict[str, str]) -> None:
        """A title that changed since the last poll wakes its watchers; so does the first
        poll of a conversation (it may have changed after its watchers read it)."""
        for conversation_id in ids:
            title = titles.get(conversation_id)
            if conversation_id not in self._seen_titles or (
                self._seen_titles[conversation_id] != title
            ):
                self._seen_titles[conversation_id] = title
                self.wake_title(conversation_id)
        for gone in self._seen_titles.keys() - self._titles.keys():
            del self._seen_titles[gone]


def _states(session: Session, ids: list[int]) -> dict[int, tuple[object, ...]]:
    """What tells that an answer moved: its status and the length of its text."""
    rows = session.connection().execute(
        select(col(Message.id), col(Message.status), func.length(col(Message.content))).where(
            col(Message.id).in_(ids)
        )
    )
    return {row[0]: tuple(row[1:]) for row in rows}


def _titles(session: Session, ids: list[str]) -> dict[str, str]:
    """The titles of the conversations watched."""
    rows = session.connection().execute(
        select(col(Conversation.id), col(Conversation.title)).where(col(Conversation.id).in_(ids))
    )
    return {row[0]: row[1] for row in rows}


def answer_notices(
    database_url: str,
    db: Database,
    interval: float,
    on_stop: Callable[[int], object] | None = None,
    on_approve: Callable[[int, str, bool], object] | None = None,
) -> AnswerNotices:
    """LISTEN/NOTIFY on PostgreSQL, a shared poll on SQLite (and any other engine)."""
    if make_url(database_url).get_backend_name() == "postgresql":
        return PostgresNotices(database_url, on_stop, on_approve)
    return PollingNotices(db, interval)
