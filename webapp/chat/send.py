"""Sending a message, stage by stage: read the files it names (`sending.files`), count it
with the model that will read it (before the lock: `sending.counting`), then store it in
one transaction (`sending.turn`: admitted, read, planned, inserted). Once that commits
the answer's task starts (`answering.answer`). The message is stored before anything can
go wrong with the provider.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from webapp.chat.answering.answer import AnswerWriter, RunningAnswer
from webapp.chat.answering.stopping import AnswerStopper
from webapp.chat.files.models import StoredFile
from webapp.chat.naming import Titler
from webapp.chat.reading import ConversationReader
from webapp.chat.sending.admission import Admission, checked_text
from webapp.chat.sending.counting import count_newest
from webapp.chat.sending.files import has_pictures, read_files, with_text_files
from webapp.chat.sending.turn import NewTurn, drafted, store_turn
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.chat.stored.rows import check_id
from webapp.db import Database
from webapp.errors import Conflict, InvalidInput, TooManyRequests
from webapp.llm.manager import LLMManager
from webapp.settings import Settings
from webapp.stored import id_of

LENGTH_CUT = "length"
"""The finish reason of an answer that stopped at its token limit, not at its end."""
CONTINUE_PROMPT = "Continue exactly where your last answer stopped, without repeating it."
"""What Continue sends: a turn of its own, so the record shows what the model was asked."""


@dataclass(slots=True)
class Send:
    conversation: Conversation
    user: Message
    answer: Message
    running: RunningAnswer


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
        files: object = (),
        *,
        address: str = "",
        draft: Conversation | None = None,
    ) -> Send:
        """Store the message, bounded, and start its answer; once begun, a send finishes
        even if its caller goes away. With `edit_of` (a user message id) the message is
        an alternative to that turn, on a branch of its own, its cut fitted afresh. With
        `files` (ids), the caller's files go with it (`sending.files`). With `draft` (an
        embed visitor's first send) the conversation is stored by the send's own
        transaction, so a refused send stores nothing. `address` is the client's, for the
        caller quotas."""
        text = checked_text(content, self._settings.max_message_chars)
        if edit_of is not None:
            check_id(edit_of)
        attached = await read_files(self._db, owner, files, self._settings.max_files_per_message)
        text = with_text_files(text, attached, self._settings.max_message_chars)
        fresh = None if draft is None else drafted(owner, draft)
        if fresh is not None:
            conversation_id = fresh.id
        send = await asyncio.shield(
            self._send(
                owner,
                conversation_id,
                text,
                edit_of,
                edit_of is not None,
                attached,
                address=address,
                draft=fresh,
            )
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
        ids = [a["id"] for a in original.attachments or []]
        attached = await read_files(self._db, owner, ids, self._settings.max_files_per_message)
        return await asyncio.shield(
            self._send(
                owner,
                conversation_id,
                original.content,
                message_id,
                False,
                attached,
                address=address,
            )
        )

    async def continue_answer(
        self, owner: str, conversation_id: str, answer_id: int, *, address: str = ""
    ) -> Send:
        """Go on with the newest answer of the shown branch, which its length limit cut
        off: a new turn asking the model to continue, bounded (and admitted) like any send."""
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
        return await self.send(owner, conversation_id, CONTINUE_PROMPT, address=address)

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
        files: list[StoredFile] | None = None,
        *,
        address: str = "",
        draft: Conversation | None = None,
    ) -> Send:
        admission, recent = self._admission, self._reader.recent
        if draft is not None:
            recent.remember(conversation_id, draft.configuration)
        # Sure to be refused: not worth a count; pictures: sized by their rules alone.
        uncounted = admission.refused_lately(owner) or has_pictures(files or [])
        counts = (
            {} if uncounted else await count_newest(self._manager, recent, conversation_id, text)
        )
        new = NewTurn(
            owner, conversation_id, text, counts, alternative_to, edit, files or [], address, draft
        )
        admit, manager = self._admission, self._manager
        try:
            turn = await self._db.write_core(store_turn, admit, manager, new, key=conversation_id)
        except TooManyRequests as refused:
            admission.remember_refusal(owner, refused)
            raise
        recent.remember(conversation_id, turn.conversation.configuration)
        running = self.writer.start(turn.user, turn.answer, turn.planned)
        await running.on_its_way()
        return Send(turn.conversation, turn.user, turn.answer, running)
