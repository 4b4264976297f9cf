"""Answers whose writer died: still marked streaming, but no heartbeat (flush) for a while.
They are marked interrupted, so the conversation can take a send again."""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from sqlalchemy import Connection, Select, Update, update
from sqlmodel import Session, col, select

from webapp.chat.models import Message, Status
from webapp.db import Database
from webapp.timeutil import utcnow

Statement = TypeVar("Statement", bound=Select | Update)  # type: ignore[type-arg]

INTERRUPTED_ERROR = "The server stopped before this answer was finished."


def stale(statement: Statement, conversation_id: str | None, after: float) -> Statement:
    """`statement` narrowed to answers still marked streaming whose writer went quiet."""
    cutoff = utcnow() - timedelta(seconds=after)
    statement = statement.where(
        col(Message.status) == Status.STREAMING, col(Message.updated_at) < cutoff
    )
    if conversation_id is not None:
        statement = statement.where(col(Message.conversation_id) == conversation_id)
    return statement


def reap(connection: Connection, conversation_id: str | None, after: float) -> int:
    statement = stale(update(Message), conversation_id, after)
    result = connection.execute(
        statement.values(status=Status.INTERRUPTED, error=INTERRUPTED_ERROR)
    )
    return result.rowcount


class Reaper:
    def __init__(self, db: Database, stale_after: float) -> None:
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
        query = stale(select(Message.id), conversation_id, self._after).limit(1)
        return session.connection().execute(query).first() is not None

    def _reap(self, session: Session, conversation_id: str | None) -> int:
        return reap(session.connection(), conversation_id, self._after)
