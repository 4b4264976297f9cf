"""Answers whose writer died: still marked streaming, but no heartbeat (flush) for a while.
They are marked interrupted, so the conversation can take a send again.

A row says nothing of which process writes it, so "quiet for `stale_stream_after`" is the
rule while the server runs: a live writer flushes, or beats, more often than that. At
start a process can do better, with `Liveness`: every serving process holds a shared
lease on its database for as long as it lives, and the operating system (SQLite: a
`flock` on a file beside the database) or PostgreSQL (a session advisory lock) ends the
lease the moment the process dies, `kill -9` included. A starting process that can take
the lease exclusively knows that no other process is serving, so every answer still
marked streaming was left by a dead one: all are marked interrupted at once (it has not
started any of its own yet). If another process holds the lease, the answers may be its
own, and only the quiet ones are reaped, as always. Either way it then holds the lease
shared, and no later starter takes it exclusively while it lives.

Limits: a process of a version without the lease does not hold it (stop the old ones
before starting new ones); on PostgreSQL a machine that vanishes without closing its
connection holds the lease until the server drops the connection (keepalives, some 30
s), and meanwhile starters only reap quiet answers; a worker whose lease connection
drops takes the lease again at once, but in between a starter could interrupt its
answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, update
from sqlalchemy.engine import make_url
from sqlmodel import Session, col, select

from webapp.chat.stored.models import Message, Status
from webapp.db import Database
from webapp.tasks import cancel
from webapp.timeutil import utcnow

log = logging.getLogger(__name__)

INTERRUPTED_ERROR = "The server stopped before this answer was finished."
LEASE_SUFFIX = "-lease"
"""SQLite: the lease is a `flock` on this file beside the database (`webapp.db-lease`)."""
LEASE_KEY = 0x7765626170700001
"""PostgreSQL: the advisory lock key of the lease (per database)."""
LEASE_CHECK_INTERVAL = 5.0
"""PostgreSQL: how often a process makes sure its lease connection is still alive."""
LEASE_RETRY = 0.05
LEASE_KEEPALIVES = (
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
)
"""So that PostgreSQL drops the lease of a machine that vanished within about 25 s."""


def stale(conversation_id: str | None, after: float | None) -> list[ColumnElement[bool]]:
    """What picks answers still marked streaming whose writer went quiet (`after` None:
    every answer still marked streaming)."""
    conditions = [col(Message.status) == Status.STREAMING]
    if after is not None:
        conditions.append(col(Message.updated_at) < utcnow() - timedelta(seconds=after))
    if conversation_id is not None:
        conditions.append(col(Message.conversation_id) == conversation_id)
    return conditions


def reap(connection: Connection, conversation_id: str | None, after: float | None) -> int:
    statement = update(Message).where(*stale(conversation_id, after))
    result = connection.execute(
        statement.values(status=Status.INTERRUPTED, error=INTERRUPTED_ERROR)
    )
    return result.rowcount


class Reaper:
    def __init__(self, db: Database, stale_after: float | None) -> None:
        self._db = db
        self._after = stale_after

    async def reap_stale(self, conversation_id: str | None = None) -> int:
        """Mark answers whose writer died as interrupted. Pages and watchers ask often and
        there is almost never anything to reap: a read answers that, and only a reap
        takes the write lock."""
        if not await self._db.read(self._any_stale, conversation_id):
            return 0
        return await self._db.write(self._reap, conversation_id)

    def _any_stale(self, session: Session, conversation_id: str | None) -> bool:
        query = select(col(Message.id)).where(*stale(conversation_id, self._after)).limit(1)
        return session.connection().execute(query).first() is not None

    def _reap(self, session: Session, conversation_id: str | None) -> int:
        return reap(session.connection(), conversation_id, self._after)


class Liveness:
    """This process's lease on its database (see the module's docstring): `start` takes
    it, exclusively if no other process holds it, and says so; `share` lets others have
    it too (once the dead processes' answers are reaped); `stop` gives it back (so does
    death)."""

    def __init__(self, database_url: str) -> None:
        url = make_url(database_url)
        self._postgres = url.get_backend_name() == "postgresql"
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        database = url.database if url.get_backend_name() == "sqlite" else None
        self._path = f"{database}{LEASE_SUFFIX}" if database and database != ":memory:" else None
        self._fd: int | None = None
        self._exclusive = False
        self._connection: Any = None
        self._keeper: asyncio.Task[None] | None = None

    async def start(self) -> bool:
        """Hold the lease; True if no other process held it: every answer still marked
        streaming was left by a dead process, and no other process starts serving before
        `share`."""
        if self._postgres:
            self._connection = await self._connect()
            self._exclusive = bool(
                await self._connection.fetchval("SELECT pg_try_advisory_lock($1)", LEASE_KEY)
            )
            if not self._exclusive:  # waits while a starter holds it exclusively
                await self._connection.execute("SELECT pg_advisory_lock_shared($1)", LEASE_KEY)
            self._keeper = asyncio.create_task(self._keep(), name="liveness-lease")
            return self._exclusive
        if self._path is None:
            return True  # SQLite in memory: no other process can see it
        try:
            import fcntl
        except ImportError:  # no flock (Windows): assume others, reap only quiet answers
            return False
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._exclusive = True
        except BlockingIOError:
            await self._share_file()
        return self._exclusive

    async def share(self) -> None:
        """From exclusive to shared: other processes may start now."""
        if not self._exclusive:
            return
        self._exclusive = False
        if self._connection is not None:
            # A session's own locks never conflict: take it shared, then let go of the
            # exclusive hold, and nobody can take it exclusively in between.
            await self._connection.execute("SELECT pg_advisory_lock_shared($1)", LEASE_KEY)
            await self._connection.execute("SELECT pg_advisory_unlock($1)", LEASE_KEY)
        elif self._fd is not None:
            # Not atomic for flock: another starter may take it exclusively in between,
            # which is right, as this process has no answer of its own yet.
            await self._share_file()

    async def stop(self) -> None:
        await cancel(self._keeper)
        self._keeper = None
        await self._close_connection()
        if self._fd is not None:
            os.close(self._fd)  # and with it the flock
            self._fd = None

    async def _share_file(self) -> None:
        import fcntl

        assert self._fd is not None
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:  # a starter holds it exclusively while it reaps
                await asyncio.sleep(LEASE_RETRY)

    async def _connect(self) -> Any:
        import asyncpg

        connection = await asyncpg.connect(self._dsn)
        for setting in LEASE_KEEPALIVES:
            with contextlib.suppress(asyncpg.PostgresError):
                await connection.execute(setting)
        return connection

    async def _keep(self) -> None:
        """Make sure the lease's connection lives; if it was lost, take the lease again,
        shared (this process may have answers of its own by now)."""
        while True:
            await asyncio.sleep(LEASE_CHECK_INTERVAL)
            try:
                async with asyncio.timeout(LEASE_CHECK_INTERVAL):
                    await self._connection.fetchval("SELECT 1")
                continue
            except Exception as error:
                log.warning("the liveness lease connection was lost (%s); taking it again", error)
            await self._close_connection()
            try:
                self._connection = await self._connect()
                await self._connection.execute("SELECT pg_advisory_lock_shared($1)", LEASE_KEY)
            except Exception as error:  # refused, dropped: try again at the next check
                log.warning("cannot take the liveness lease (%s); retrying", error)

    async def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.shield(connection.close(timeout=2))


async def reap_at_start(db: Database, liveness: Liveness, stale_after: float) -> int:
    """Take this process's lease and mark interrupted the answers dead processes left:
    all those still streaming if no other process is alive, else the quiet ones."""
    alone = await liveness.start()
    try:
        return await Reaper(db, None if alone else stale_after).reap_stale()
    finally:
        await liveness.share()
