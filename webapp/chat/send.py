"""Sending a message, stage by stage: count the new message with the model that will
read it (before the lock: `sending.counting`), then in one transaction `Admission.admit`
(the lock, the rate limit, one answer at a time), `read_for_send` (the tail, the cut, as
much history as the budget could hold), `LLMManager.plan` (the bound, for the model
that answers first) and `insert_turn` (the user's row with its fit, and the answer's
placeholder). Once that commits the answer's task starts (`answering.answer`). The
message is stored before anything can go wrong with the provider.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy import Connection, insert

from webapp.chat.answering.answer import AnswerWriter, RunningAnswer
from webapp.chat.answering.stopping import AnswerStopper
from webapp.chat.naming import Titler
from webapp.chat.reading import ConversationReader
from webapp.chat.sending.admission import Admission, checked_text
from webapp.chat.sending.counting import count_newest
from webapp.chat.sending.history import ForSend, read_for_send
from webapp.chat.sending.store import StoredTurn, insert_turn, resume_answer
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.chat.stored.rows import check_id
from webapp.db import Database
from webapp.errors import Conflict, InvalidInput, TooManyRequests
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.routing import RoutingError
from webapp.owners import owner_columns
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import utcnow

LENGTH_CUT = "length"
"""The finish reason of an answer that stopped at its token limit, not at its end."""
CONTINUE_PROMPT = "Continue exactly where your last answer stopped, without repeating it."
"""What Continue asks the model, after the cut answer. It goes with the request only: the
continuation is appended to that answer, and nothing of the asking is stored or shown."""


@dataclass(slots=True)
class Send:
    conversation: Conversation
    user: Message
    answer: Message
    running: RunningAnswer
    continued: bool = False
    """The answer is an earlier one going on (Continue), `user` the turn it answers."""


class Sender:
    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        settings: Settings,
        reader: ConversationReader,
        titler: Titler,
        writer: AnswerWriter,
        stopper: AnswerStopper,
        admission: Admission,
    ) -> None:
        self._db, self._manager, self._settings = db, manager, settings
        self._reader, self._titler = reader, titler
        self._admission, self.writer, self._stopper = admission, writer, stopper

    async def send(
        self,
        owner: str,
        conversation_id: str,
        content: object,
        edit_of: int | None = None,
        *,
        address: str = "",
        draft: Conversation | None = None,
    ) -> Send:
        """Store the message, bounded, and start its answer; once begun, a send finishes
        even if its caller goes away. With `edit_of` (a user message id) the message is
        an alternative to that turn, on a branch of its own, its cut fitted afresh. With
        `draft` (an embed visitor's first send) the conversation is stored by the send's
        own transaction, so a refused send stores nothing. `address` is the client's,
        for the caller quotas."""
        text = checked_text(content, self._settings.max_message_chars)
        if edit_of is not None:
            check_id(edit_of)
        fresh = None
        if draft is not None:
            fresh = Conversation(
                owner=owner,
                **owner_columns(owner),
                configuration=draft.configuration,
                title=draft.title,
            )
            conversation_id = fresh.id
        send = await asyncio.shield(
            self._send(owner, conversation_id, text, edit_of, edit_of is not None, address, fresh)
        )
        self._titler.follow(owner, send.conversation, send.user, send.running)
        return send

    async def regenerate(
        self, owner: str, conversation_id: str, message_id: int, *, address: str = ""
    ) -> Send:
        """A new answer to a user turn: the same message sent again as an alternative to it,
        so the original send, its answer and its fit facts stay on record as they were."""
        check_id(message_id)
        original = await self._reader.message(owner, conversation_id, message_id)
        if original.role != Role.USER:
            raise InvalidInput("regenerate names a user's message: its turn gets a new answer")
        return await asyncio.shield(
            self._send(owner, conversation_id, original.content, message_id, address=address)
        )

    async def continue_answer(
        self, owner: str, conversation_id: str, answer_id: int, *, address: str = ""
    ) -> Send:
        """Go on with the newest answer of the shown branch, which its length limit cut
        off: the model is sent the history with that answer and asked to continue
        (bounded and admitted like any send), and what it writes is appended to the same
        answer."""
        answer = await self._reader.message(owner, conversation_id, answer_id)
        if answer.role != Role.ASSISTANT or answer.finish_reason != LENGTH_CUT:
            raise InvalidInput("only an answer cut off by its length limit can be continued")
        if answer.status != Status.COMPLETE:
            # An import may carry any finish reason on a failed or stopped row.
            raise Conflict(
                f"this answer is {answer.status}, not complete: it cannot be continued; "
                "retry it or send a message instead"
            )
        _, rows, _ = await self._reader.page(owner, conversation_id, turns=1)
        if not rows or rows[-1].id != answer_id:
            raise Conflict("only the newest answer can be continued: send a message instead")
        user = await self._reader.user_row_of(answer)
        return await asyncio.shield(self._continue(owner, conversation_id, user, answer, address))

    async def settle(self, send: Send) -> tuple[Message, Message]:
        """Wait for the answer (it goes on even if the caller goes away); both rows then."""
        return await self._stopper.settle(send.running.task, id_of(send.user), id_of(send.answer))

    async def _send(
        self,
        owner: str,
        conversation_id: str,
        text: str,
        alternative_to: int | None = None,
        edit: bool = False,
        address: str = "",
        draft: Conversation | None = None,
    ) -> Send:
        admission, recent = self._admission, self._reader.recent
        if draft is not None:
            recent.remember(conversation_id, draft.configuration)
        doomed = admission.refused_lately(owner)  # sure to be refused: not worth a count
        counts = {} if doomed else await count_newest(self._manager, recent, conversation_id, text)
        message = (owner, conversation_id, text, counts, alternative_to, edit, address, draft)
        try:
            turn = await self._db.write_core(self._turn, *message, key=conversation_id)
        except TooManyRequests as refused:
            admission.remember_refusal(owner, refused)
            raise
        recent.remember(conversation_id, turn.conversation.configuration)
        running = self.writer.start(turn.user, turn.answer, turn.planned)
        await running.on_its_way()
        return Send(turn.conversation, turn.user, turn.answer, running)

    async def _continue(
        self, owner: str, conversation_id: str, user: Message, answer: Message, address: str
    ) -> Send:
        admission, recent = self._admission, self._reader.recent
        doomed = admission.refused_lately(owner)
        counts = (
            {}
            if doomed
            else await count_newest(self._manager, recent, conversation_id, CONTINUE_PROMPT)
        )
        asked = (owner, conversation_id, answer, counts, address)
        try:
            conversation, resumed, planned = await self._db.write_core(
                self._resumption, *asked, key=conversation_id
            )
        except TooManyRequests as refused:
            admission.remember_refusal(owner, refused)
            raise
        running = self.writer.start(user, resumed, planned, continuing=True)
        await running.on_its_way()
        return Send(conversation, user, resumed, running, continued=True)

    def _resumption(
        self,
        connection: Connection,
        owner: str,
        conversation_id: str,
        answer: Message,
        counts: dict[str, int],
        address: str,
    ) -> tuple[Conversation, Message, Plan | RoutingError]:
        """A continuation's one transaction: admitted like a send, the history read with
        the cut answer last and the request to go on after it, and the answer made
        streaming again; no row is added."""
        now = utcnow()
        conversation = self._admission.admit(connection, owner, conversation_id, now, address)
        read = read_for_send(
            connection, self._manager, owner, conversation, CONTINUE_PROMPT, counts
        )
        planned = self._planned(read, owner, conversation_id)
        return conversation, resume_answer(connection, answer, now), planned

    def _planned(self, read: ForSend, owner: str, conversation_id: str) -> Plan | RoutingError:
        """The bound for what was read; a configuration that routes nowhere is the
        answer's failure, not the send's."""
        if isinstance(read.route, RoutingError):
            return read.route
        assert read.transcript is not None, "a routed read has its transcript"
        return self._manager.plan(
            read.route, read.transcript, caller=owner, cache_scope=conversation_id
        )

    def _turn(
        self,
        connection: Connection,
        owner: str,
        conversation_id: str,
        text: str,
        counts: dict[str, int],
        alternative_to: int | None,
        edit: bool,
        address: str,
        draft: Conversation | None,
    ) -> StoredTurn:
        """The send's one transaction. A configuration that routes nowhere is the answer's
        failure, not the send's: the message is stored all the same."""
        now = utcnow()
        if draft is not None:
            connection.execute(insert(Conversation).values(draft.model_dump()))
        conversation = self._admission.admit(connection, owner, conversation_id, now, address)
        read = read_for_send(
            connection, self._manager, owner, conversation, text, counts, alternative_to, edit
        )
        planned = self._planned(read, owner, conversation_id)
        return insert_turn(connection, conversation, read, planned, counts, now)
