"""The conversation service: the one object pages, the JSON API, the admin, the gateway and
the embed talk to. It only wires the jobs together; each lives in a module named for it:

- `reading`        a conversation, lists, pages of a branch, the record, search
- `conversations`  create, import, rename, configuration, pins, branch, fork, delete, purge
- `sending`        a send's one transaction, regenerate, preview, stop
- `answering`      the answer task: provider, failure mapping, final row
- `flushing`       the one writer of every answer's text so far, heartbeats and final rows
- `admission`      the rate limit and the one-answer-at-a-time check
- `reaping`        answers whose writer died
- `naming`         the title the model writes after the first answer
"""

from __future__ import annotations

import asyncio

from webapp.chat.admission import Admission
from webapp.chat.answers import AnswerRegistry, RunningAnswer
from webapp.chat.branches import Alternatives
from webapp.chat.conversations import ConversationEditor
from webapp.chat.flushing import AnswerFlusher
from webapp.chat.models import Conversation, Message, Role
from webapp.chat.naming import Titler
from webapp.chat.reading import ConversationReader
from webapp.chat.reaping import Reaper
from webapp.chat.search import Hit
from webapp.chat.sending import RecentConfigurations, Send, Sender
from webapp.db import Database
from webapp.errors import Conflict, InvalidInput
from webapp.llm.catalog import Catalog
from webapp.llm.manager import LLMManager
from webapp.llm.window import FitResult
from webapp.settings import Settings

LENGTH_CUT = "length"
"""The finish reason of an answer that stopped at its token limit, not at its end."""
CONTINUE_PROMPT = "Continue exactly where your last answer stopped, without repeating it."
"""What Continue sends: a turn of its own, so the record shows what the model was asked."""
TITLE_WAIT = 45.0
"""How long the page's request for the model's title is held, at most: a first answer and
the title call after it, on a slow model; past this the title shows on the next load."""
TITLE_POLL = 1.0
"""How often that request looks again when another worker makes the title call."""


class ConversationService:
    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        settings: Settings,
        answers: AnswerRegistry | None = None,
    ) -> None:
        self.db = db
        self.manager = manager
        self._settings = settings
        self._answers = answers or AnswerRegistry()
        recent = RecentConfigurations()
        self._admission = Admission(settings)
        self._reaper = Reaper(db, settings.stale_stream_after)
        self._reader = ConversationReader(db, self._reaper, recent)
        self._editor = ConversationEditor(db, manager, self._reader, recent)
        # One writer for every answer this process writes (flushes, heartbeats, finals).
        self._flusher = AnswerFlusher(
            db,
            interval=min(settings.stream_flush_interval, settings.stale_stream_after / 3),
            heartbeat=settings.stale_stream_after / 3,
            announce=db.dialect == "postgresql",
        )
        self._sender = Sender(
            db, manager, settings, self._answers, self._admission, recent, self._flusher
        )
        self._titler = Titler(db, manager, enabled=settings.model_titles)

    @property
    def max_message_chars(self) -> int:
        return self._settings.max_message_chars

    @property
    def catalog(self) -> Catalog:
        return self.manager.catalog

    # Reading
    async def get(self, owner: str, conversation_id: str) -> Conversation:
        return await self._reader.get(owner, conversation_id)

    async def conversations(
        self, owner: str, limit: int = 200, offset: int = 0
    ) -> list[Conversation]:
        return await self._reader.conversations(owner, limit, offset)

    async def search(self, owner: str, query: object) -> list[Hit]:
        return await self._reader.search(owner, query)

    async def record(self, owner: str, conversation_id: str) -> tuple[Conversation, list[Message]]:
        return await self._reader.record(owner, conversation_id)

    async def history(self, owner: str, conversation_id: str) -> tuple[Conversation, list[Message]]:
        return await self._reader.history(owner, conversation_id)

    async def page(
        self,
        owner: str,
        conversation_id: str,
        *,
        before_seq: int | None = None,
        turns: int = 50,
        through_message: int | None = None,
    ) -> tuple[Conversation, list[Message], bool]:
        return await self._reader.page(
            owner,
            conversation_id,
            before_seq=before_seq,
            turns=turns,
            through_message=through_message,
        )

    async def alternatives_of(
        self, conversation_id: str, rows: list[Message]
    ) -> dict[int, Alternatives]:
        return await self._reader.alternatives_of(conversation_id, rows)

    async def message(self, owner: str, conversation_id: str, message_id: int) -> Message:
        return await self._reader.message(owner, conversation_id, message_id)

    async def user_row_of(self, answer: Message) -> Message:
        return await self._reader.user_row_of(answer)

    # Changing conversations
    def check_configuration(self, configuration: str) -> None:
        self._editor.check_configuration(configuration)

    async def create(
        self, owner: str, configuration: str | None = None, title: str | None = None
    ) -> Conversation:
        return await self._editor.create(owner, configuration, title)

    async def fresh(self, owner: str, configuration: str | None = None) -> Conversation:
        return await self._editor.fresh(owner, configuration)

    async def import_conversation(self, owner: str, data: object) -> Conversation:
        return await self._editor.import_conversation(owner, data)

    async def rename(self, owner: str, conversation_id: str, title: str) -> Conversation:
        return await self._editor.rename(owner, conversation_id, title)

    async def title_after(
        self, owner: str, conversation_id: str, was: str, timeout: float = TITLE_WAIT
    ) -> Conversation:
        """The conversation once its title is no longer `was` (the model named it, or its
        owner did), or as it is when the model's call ends without a title or `timeout`
        passes: what the page asks for after its first answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            conversation = await self.get(owner, conversation_id)
            left = deadline - loop.time()
            if conversation.title != was or left <= 0:
                return conversation
            if await self._titler.wait(conversation_id, min(left, TITLE_POLL)):
                return await self.get(owner, conversation_id)

    async def set_configuration(
        self, owner: str, conversation_id: str, configuration: str
    ) -> Conversation:
        return await self._editor.set_configuration(owner, conversation_id, configuration)

    async def pin(
        self, owner: str, conversation_id: str, message_id: int, pinned: bool = True
    ) -> Message:
        return await self._editor.pin(owner, conversation_id, message_id, pinned)

    async def feedback(
        self,
        owner: str,
        conversation_id: str,
        answer_id: int,
        value: int | None,
        *,
        toggle: bool = False,
    ) -> Message:
        return await self._editor.feedback(owner, conversation_id, answer_id, value, toggle=toggle)

    async def branch(self, owner: str, conversation_id: str, message_id: int) -> Conversation:
        return await self._editor.branch(owner, conversation_id, message_id)

    async def fork(self, owner: str, conversation_id: str, message_id: int) -> Conversation:
        return await self._editor.fork(owner, conversation_id, message_id)

    async def delete(self, owner: str, conversation_id: str) -> None:
        await self._sender.halt(owner, conversation_id)
        await self._editor.delete(owner, conversation_id)

    async def purge_idle(self, days: float, *, dry_run: bool = False) -> list[Conversation]:
        return await self._editor.purge_idle(days, dry_run=dry_run)

    # Sending and answers
    def validate_content(self, content: object) -> str:
        return self._sender.validate_content(content)

    def rate_limit_for(self, owner: str) -> int:
        return self._admission.rate_limit_for(owner)

    async def send(
        self, owner: str, conversation_id: str, content: object, edit_of: int | None = None
    ) -> Send:
        """Store the message, bounded for the model that will answer first, and a placeholder
        for the answer; then start writing the answer. Once begun, a send finishes even if
        its caller goes away: the message is stored and answered all the same.

        With `edit_of` (a user message id) the message is an alternative to that turn: it
        continues what that turn continued, on a branch of its own."""
        send = await self._sender.send(owner, conversation_id, content, edit_of)
        self._titler.follow(owner, send)
        return send

    async def regenerate(self, owner: str, conversation_id: str, message_id: int) -> Send:
        """A new answer to a user turn: the same message sent again as an alternative to it,
        so the original send, its answer and its fit facts stay on record as they were."""
        return await self._sender.regenerate(owner, conversation_id, message_id)

    async def continue_answer(self, owner: str, conversation_id: str, answer_id: int) -> Send:
        """Go on with an answer its length limit cut off: a new turn asking the model to
        continue, bounded like any send. Only the newest answer of the shown branch, so the
        continuation follows the text it continues."""
        answer = await self.message(owner, conversation_id, answer_id)
        if answer.role != Role.ASSISTANT or answer.finish_reason != LENGTH_CUT:
            raise InvalidInput("only an answer cut off by its length limit can be continued")
        _, rows, _ = await self.page(owner, conversation_id, turns=1)
        if not rows or rows[-1].id != answer_id:
            raise Conflict("only the newest answer can be continued: send a message instead")
        return await self.send(owner, conversation_id, CONTINUE_PROMPT)

    async def preview(self, owner: str, conversation_id: str, content: object) -> Message:
        return await self._sender.preview(owner, conversation_id, content)

    async def preview_fit(
        self, owner: str, conversation_id: str, content: object
    ) -> tuple[Message, FitResult]:
        return await self._sender.preview_fit(owner, conversation_id, content)

    async def settle(self, send: Send) -> tuple[Message, Message]:
        return await self._sender.settle(send)

    async def stop(self, owner: str, conversation_id: str) -> Message | None:
        return await self._sender.stop(owner, conversation_id)

    def request_stop(self, answer_id: int) -> bool:
        """Stop an answer if this worker writes it (a stop made on another worker)."""
        return self._answers.request_stop(answer_id)

    @property
    def recheck_interval(self) -> float:
        """How long a watcher of an answer written elsewhere waits for a notice before it
        looks for itself: a writer that died sends none, and its answer is reaped once
        it has been quiet for `stale_stream_after`."""
        return self._settings.stale_stream_after / 3

    def running(self, answer_id: int) -> RunningAnswer | None:
        """The answer this worker is writing under that id, if it is (to follow it live)."""
        return self._answers.get(answer_id)

    @property
    def poll_interval(self) -> float:
        """How often a watcher of an answer written elsewhere looks at the database again:
        the writer's flush interval, as nothing changes in between."""
        return self._settings.stream_flush_interval

    async def reap_stale(self, conversation_id: str | None = None) -> int:
        return await self._reaper.reap_stale(conversation_id)

    async def shutdown(self) -> None:
        """End this worker's answers (marked interrupted): a graceful server stop."""
        await self._answers.shutdown()
        await self._titler.shutdown()
        await self._flusher.close()
