"""Stopping an answer, wherever it is written, and waiting for one to end.

Stop marks the answer stopped in the database first, so the worker writing it (this one
or another, told at once by a notice on PostgreSQL) ends it at its next step; the text
so far is kept.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import Connection, update
from sqlmodel import Session, col, select

from webapp.chat.answering.answer import AnswerRegistry
from webapp.chat.answering.notify import STOP, notice
from webapp.chat.stored.models import Message, Status
from webapp.chat.stored.rows import owned_in
from webapp.db import Database
from webapp.timeutil import utcnow


class AnswerStopper:
    def __init__(self, db: Database, answers: AnswerRegistry) -> None:
        self._db = db
        self._answers = answers

    async def stop(self, owner: str, conversation_id: str) -> Message | None:
        """Stop the answer being written in the conversation; its row once it ended."""
        answer_id = await self._db.read(streaming_answer_id, owner, conversation_id)
        if answer_id is None:
            return None
        announce = self._db.dialect == "postgresql"
        await self._db.write_core(_mark_stopped, answer_id, announce)
        if self._answers.request_stop(answer_id):
            await self._ended(answer_id)
        return await self._db.read(lambda session: session.get(Message, answer_id))

    async def halt(self, owner: str, conversation_id: str) -> None:
        """End the answer this worker writes in the conversation, if any (before deleting it)."""
        answer_id = await self._db.read(streaming_answer_id, owner, conversation_id)
        if answer_id is not None and self._answers.request_stop(answer_id):
            await self._ended(answer_id)

    async def settle(
        self, task: asyncio.Task[None], user_id: int, answer_id: int
    ) -> tuple[Message, Message]:
        """Wait for an answer's task (it goes on if the caller goes away) and reload the
        turn's rows."""
        await asyncio.shield(task)
        return await self._db.read(_turn, user_id, answer_id)

    async def _ended(self, answer_id: int, timeout: float = 10.0) -> None:
        running = self._answers.get(answer_id)
        if running is not None:
            await asyncio.wait([running.task], timeout=timeout)


def _turn(session: Session, user_id: int, answer_id: int) -> tuple[Message, Message]:
    user, answer = session.get(Message, user_id), session.get(Message, answer_id)
    assert user is not None and answer is not None, "a turn's rows are never deleted alone"
    return user, answer


def streaming_answer_id(session: Session, owner: str, conversation_id: str) -> int | None:
    connection = session.connection()
    owned_in(connection, owner, conversation_id)
    return connection.execute(
        select(Message.id).where(
            Message.conversation_id == conversation_id,
            Message.status == Status.STREAMING,
        )
    ).scalar()


def _mark_stopped(connection: Connection, answer_id: int, announce: bool) -> None:
    connection.execute(
        update(Message)
        .where(col(Message.id) == answer_id, col(Message.status) == Status.STREAMING)
        .values(status=Status.STOPPED, updated_at=utcnow())
    )
    if announce:
        connection.execute(notice(STOP, answer_id))
