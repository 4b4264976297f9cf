"""Sending a message, stage by stage: read the files it names (`sending.files`), count it
with the model that will read it (before the lock: `sending.counting`), then store it in
one transaction (`sending.turn`: admitted, read, planned, inserted). Once that commits
the answer's task starts (`answering.answer`). The message is stored before anything can
go wrong with the provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from webapp.chat.answering.answer import AnswerWriter, RunningAnswer
from webapp.chat.answering.stopping import AnswerStopper
from webapp.chat.files.models import StoredFile
from webapp.chat.naming import Titler
from webapp.chat.reading import ConversationReader
from webapp.chat.sending.admission import Admission, checked_text
from webapp.chat.sending.counting import count_newest
from webapp.chat.sending.file_counts import count_for, is_text
from webapp.chat.sending.files import read_files, with_text_files
from webapp.chat.sending.turn import CONTINUE_PROMPT, NewTurn, drafted, resume_turn, store_turn
from webapp.chat.stored.models import Conversation, Message, Role
from webapp.chat.stored.rows import check_id
from webapp.db import Database
from webapp.errors import InvalidInput
from webapp.llm.manager import LLMManager
from webapp.settings import Settings
from webapp.stored import id_of


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
        attached = await self._files(owner, files)
        attached = await self._counted(owner, conversation_id, attached, draft)
        limit = self._settings.max_message_chars
        text = checked_text(content, limit, may_be_empty=bool(attached))
        if edit_of is not None:
            check_id(edit_of)
        text = with_text_files(text, attached, limit)
        fresh = None if draft is None else drafted(owner, draft)
        conversation_id = conversation_id if fresh is None else fresh.id
        edit = edit_of is not None
        new = NewTurn(owner, conversation_id, text, {}, edit_of, edit, attached, address, fresh)
        send = await asyncio.shield(self._send(new))
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
        attached = await self._files(owner, [a["id"] for a in original.attachments or []])
        attached = await self._counted(owner, conversation_id, attached)
        text = original.content
        new = NewTurn(owner, conversation_id, text, {}, message_id, False, attached, address)
        return await asyncio.shield(self._send(new))

    async def continue_answer(
        self, owner: str, conversation_id: str, answer_id: int, *, address: str = ""
    ) -> Send:
        """Go on with the newest answer of the shown branch, which its length limit cut
        off: the model is sent the history with that answer and asked to continue
        (bounded and admitted like any send), and what it writes is appended to the same
        answer."""
        user, answer = await self._reader.continuable(owner, conversation_id, answer_id)
        return await asyncio.shield(self._continue(owner, conversation_id, user, answer, address))

    async def settle(self, send: Send) -> tuple[Message, Message]:
        """Wait for the answer (it goes on even if the caller goes away); both rows then."""
        return await self._stopper.settle(send.running.task, id_of(send.user), id_of(send.answer))

    async def _files(self, owner: str, ids: object) -> list[StoredFile]:
        return await read_files(self._db, owner, ids, self._settings.max_files_per_message)

    async def _counted(
        self,
        owner: str,
        conversation_id: str,
        attached: list[StoredFile],
        draft: Conversation | None = None,
    ) -> list[StoredFile]:
        """The text files and PDFs counted by the tokenizers of the conversation's route
        (`sending.file_counts`); as they are for a caller sure to be refused."""
        if not any(is_text(f) for f in attached) or self._admission.refused_lately(owner):
            return attached
        configuration = draft.configuration if draft is not None else None
        configuration = configuration or self._reader.recent.get(conversation_id)
        if configuration is None:
            configuration = (await self._reader.get(owner, conversation_id)).configuration
        return await count_for(self._db, self._manager, configuration, attached)

    async def _send(self, new: NewTurn) -> Send:
        recent, conversation_id = self._reader.recent, new.conversation_id
        if new.draft is not None:
            recent.remember(conversation_id, new.draft.configuration)
        # The text as typed (with its text files); pictures add their rules at the fit.
        counts = await self._counts(new.owner, conversation_id, new.text)
        new = dataclasses.replace(new, counts=counts)
        admit, key = self._admission, conversation_id
        turn = await admit.run(self._db, new.owner, store_turn, admit, self._manager, new, key=key)
        recent.remember(conversation_id, turn.conversation.configuration)
        running = self.writer.start(turn.user, turn.answer, turn.planned)
        await running.on_its_way()
        return Send(turn.conversation, turn.user, turn.answer, running)

    async def _continue(
        self, owner: str, conversation_id: str, user: Message, answer: Message, address: str
    ) -> Send:
        counts = await self._counts(owner, conversation_id, CONTINUE_PROMPT)
        asked = (self._admission, self._manager, owner, answer, counts, address)
        run = self._admission.run
        resumed = await run(self._db, owner, resume_turn, *asked, key=conversation_id)
        running = self.writer.start(user, resumed.answer, resumed.planned, continuing=True)
        await running.on_its_way()
        return Send(resumed.conversation, user, resumed.answer, running, continued=True)

    async def _counts(self, owner: str, conversation_id: str, text: str) -> dict[str, int]:
        """The new text's exact counts; none for a caller sure to be refused."""
        if self._admission.refused_lately(owner):
            return {}
        return await count_newest(self._manager, self._reader.recent, conversation_id, text)
