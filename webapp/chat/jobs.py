"""The chat's jobs, built once per process: what the `chat` dependency gives a handler.

Each job lives in a module named for it, and a handler calls the one it needs by name
(`chat.sender.send(...)`, `chat.reader.page(...)`); nothing here stands between them:

- `reader`   (`reading`)        a conversation, lists, pages of a branch, the record, search
- `editor`   (`conversations`)  create, import, rename, configuration, pins, branch, fork,
                                delete, purge
- `sender`   (`send`)           a send, stage by stage (`sending/`), regenerate, continue
- `admission` (`sending.admission`) whether a call may reach a model: every send's, and
                                the gateway's calls that store nothing
- `previewer` (`sending.preview`) the fit the next send would make, for the meter
- `stopper`  (`answering.stopping`) stop an answer wherever it is written
- `answers`  (`answer`)         this worker's running answers and their channels
- `approver` (`answering.approving`) the owner's Allow or Deny on a tool call, wherever
                                its answer is written
- `titler`   (`naming`)         the title the model writes after the first answer
- `reaper`   (`reaping`)        answers whose writer died
- `flusher`  (`flushing`)       the one writer of every answer's text so far and final rows
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webapp.chat.answering.answer import AnswerRegistry, AnswerWriter
from webapp.chat.answering.approvals import Approvals
from webapp.chat.answering.approving import ToolCallApprover
from webapp.chat.answering.flushing import AnswerFlusher
from webapp.chat.answering.notify import AnswerNotices, PollingNotices
from webapp.chat.answering.reaping import Reaper
from webapp.chat.answering.stopping import AnswerStopper
from webapp.chat.answering.summarizing import Summarizer
from webapp.chat.conversations import ConversationEditor
from webapp.chat.naming import Titler
from webapp.chat.presets import Presets
from webapp.chat.reading import ConversationReader
from webapp.chat.send import Sender
from webapp.chat.sending.admission import Admission, CallerQuota
from webapp.chat.sending.counting import RecentConfigurations
from webapp.chat.sending.preview import Previewer
from webapp.db import Database
from webapp.llm.catalog import Catalog
from webapp.llm.manager import LLMManager
from webapp.settings import Settings


@dataclass(frozen=True, slots=True)
class ChatJobs:
    db: Database
    manager: LLMManager
    settings: Settings
    answers: AnswerRegistry
    reader: ConversationReader
    editor: ConversationEditor
    sender: Sender
    admission: Admission
    previewer: Previewer
    stopper: AnswerStopper
    titler: Titler
    reaper: Reaper
    flusher: AnswerFlusher
    notices: AnswerNotices
    """How this process hears of answers and titles other workers write."""
    presets: Presets
    approver: ToolCallApprover

    @property
    def catalog(self) -> Catalog:
        """The manager's: discovery at start replaces it, so it is never kept elsewhere."""
        return self.manager.catalog

    async def shutdown(self) -> None:
        """End this worker's answers (marked interrupted): a graceful server stop."""
        await self.answers.shutdown()
        await self.titler.shutdown()
        await self.flusher.close()
        await self.notices.stop()
        await self.sender.writer.aclose()


def chat_jobs(
    db: Database,
    manager: LLMManager,
    settings: Settings,
    answers: AnswerRegistry | None = None,
    notices: AnswerNotices | None = None,
    quotas: Sequence[CallerQuota] = (),
    approvals: Approvals | None = None,
) -> ChatJobs:
    """The jobs; `notices`: the process's (`answer_notices`), without, a poll of its own
    (scripts); `quotas` are the caller quotas every admission asks besides the owner's
    rate limit (the embed's); `approvals`: the tool calls waiting for their owner in this
    process (the app's, which its notices also hear)."""
    answers = answers or AnswerRegistry()
    notices = notices or PollingNotices(db, settings.stream_flush_interval)
    recent = RecentConfigurations()
    reaper = Reaper(db, settings.stale_stream_after)
    reader = ConversationReader(db, reaper, recent)
    titler = Titler(
        db,
        manager,
        reader,
        notices,
        enabled=settings.model_titles,
        waits_per_owner=settings.title_waits_per_user,
    )
    # One writer for every answer this process writes (flushes, heartbeats, finals).
    flusher = AnswerFlusher(
        db,
        interval=min(settings.stream_flush_interval, settings.stale_stream_after / 3),
        heartbeat=settings.stale_stream_after / 3,
        announce=db.dialect == "postgresql",
    )
    stopper = AnswerStopper(db, answers)
    approvals = approvals if approvals is not None else Approvals()
    summarizer = Summarizer(db, manager, settings)
    writer = AnswerWriter(
        db, manager, settings, flusher, answers, approvals=approvals, summarizer=summarizer
    )
    admission = Admission(settings, quotas)
    sender = Sender(db, manager, settings, reader, titler, writer, stopper, admission)
    previewer = Previewer(db, manager, settings, recent)
    editor = ConversationEditor(db, manager, reader, stopper)
    return ChatJobs(
        db,
        manager,
        settings,
        answers,
        reader,
        editor,
        sender,
        admission,
        previewer,
        stopper,
        titler,
        reaper,
        flusher,
        notices,
        Presets(db, manager),
        ToolCallApprover(db, approvals, answers),
    )
