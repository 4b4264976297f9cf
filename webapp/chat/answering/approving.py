"""The owner's Allow or Deny on a tool call (`POST /api/conversations/{id}/tool-calls/{call
id}`), wherever its answer is written.

The call waits in the memory of the process writing its answer (`approvals`). Taken by
that process, the decision settles the wait at once, and a call never asked about, or
already decided, is told apart (404, 409). Taken by another worker on PostgreSQL, the
decision goes as a notice to every process, as Stop does (`notify.APPROVE`), and the
writer applies it if the call still waits: this worker cannot know whether it does, so it
says the decision was forwarded. SQLite has no notices: there the deciding worker must be
the writing one (one process, the usual SQLite deployment); another answers 409.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import Connection

from webapp.chat.answering.answer import AnswerRegistry
from webapp.chat.answering.approvals import AlreadyDecided, Approvals, UnknownCall
from webapp.chat.answering.notify import approval_notice
from webapp.chat.answering.stopping import streaming_answer_id
from webapp.db import Database
from webapp.errors import Conflict, NotFound

Decided = Literal["decided", "forwarded"]
MAX_CALL_ID = 200
"""The longest call id a decision may name (providers' ids are a few dozen characters;
a stored step's is at most 200)."""


class ToolCallApprover:
    def __init__(self, db: Database, approvals: Approvals, answers: AnswerRegistry) -> None:
        self._db = db
        self._approvals = approvals
        self._answers = answers

    async def decide(
        self, owner: str, conversation_id: str, call_id: str, approve: bool
    ) -> Decided:
        """Allow or deny the call: "decided" here, or "forwarded" to the writing worker.
        NotFound: not the owner's conversation, or no call of that id waits; Conflict:
        decided already (or its wait is over)."""
        if not call_id or len(call_id) > MAX_CALL_ID:
            raise NotFound(f"no tool call {call_id[:40]!r}… waits for a decision")
        answer_id = await self._db.read(streaming_answer_id, owner, conversation_id)
        if answer_id is None:
            raise NotFound("no answer is being written in this conversation: no call waits")
        if self._approvals.knows(answer_id) or self._answers.get(answer_id) is not None:
            try:
                self._approvals.decide(answer_id, call_id, approve)
            except UnknownCall:
                raise NotFound(f"no tool call {call_id!r} waits for a decision") from None
            except AlreadyDecided:
                raise Conflict(f"tool call {call_id!r} was decided already") from None
            return "decided"
        if self._db.dialect != "postgresql":
            raise Conflict(
                "the answer is written by another process, which cannot be told on SQLite"
            )
        await self._db.write_core(_announce, answer_id, call_id, approve)
        return "forwarded"


def _announce(connection: Connection, answer_id: int, call_id: str, approve: bool) -> None:
    connection.execute(approval_notice(answer_id, call_id, approve))
