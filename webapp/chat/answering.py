"""The answer task: read the provider, publish what arrives, have the text so far flushed
(the answer's heartbeat), map a failure to what the user reads, and store the final row.

It runs as a task of its own (see `answers.AnswerRegistry`), so the answer outlives the
request that asked for it, can be watched from another worker, and can be stopped from
anywhere: a stop made elsewhere is noticed when a flush finds the row no longer streaming
(or at once, on PostgreSQL, by a notice). Its writes go through the process's one
`flushing.AnswerFlusher`, together with every other answer's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlmodel import Session

from webapp.chat.answers import Channel, Event
from webapp.chat.flushing import AnswerFlusher
from webapp.chat.history import StoredTranscript
from webapp.chat.models import Message, Role, Status
from webapp.chat.reaping import INTERRUPTED_ERROR
from webapp.chat.rows import fit_columns, set_columns, store_counts, updated
from webapp.chat.serialize import message_dict
from webapp.db import Database
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import Counted, Delta, Finished, Fitted, LLMManager, Plan
from webapp.llm.providers.base import ProviderError, StreamBroken
from webapp.llm.routing import RoutingError
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import utcnow
from webapp.web.markdown import render_markdown_async

log = logging.getLogger(__name__)

UNSTORED_ERROR = "The answer could not be stored."
COUNT_TIMEOUT = 3.0
"""The longest a send waits for a message to be counted; then it estimates."""


@dataclass(slots=True)
class Progress:
    """The answer so far, shared by the task that reads the provider and the one that flushes."""

    parts: list[str] = field(default_factory=list)
    length: int = 0
    finished: Finished | None = None
    trying: str | None = None
    """The model the latest fit was sized for: the one being asked now."""
    model: str | None = None
    """The model whose text this is, once any arrived."""

    def add(self, text: str) -> None:
        self.model = self.model or self.trying
        self.parts.append(text)
        self.length += len(text)

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


def stored(plan: Plan) -> StoredTranscript:
    transcript = plan.transcript
    assert isinstance(transcript, StoredTranscript), "a conversation's sends read stored history"
    return transcript


def failure_of(failure: BaseException, progress: Progress) -> tuple[Status, str]:
    """What the answer's row says went wrong. It is read by the user (and by an embed's
    visitors), so it names the model, never the provider's address: the details go to
    the log."""
    if isinstance(failure, ProviderError):
        log.warning("answer failed: %s", failure.message)
        interrupted = isinstance(failure, StreamBroken) or progress.length > 0
        status = Status.INTERRUPTED if interrupted else Status.FAILED
        return status, failure.public(progress.trying or "The model")
    if isinstance(failure, RoutingError):
        return Status.FAILED, str(failure)
    log.error("answer failed", exc_info=failure)
    return Status.FAILED, "The answer failed because of an internal error."


def _set_columns(session: Session, message_id: int, values: dict[str, object]) -> None:
    set_columns(session.connection(), message_id, values)


def _store_counts(session: Session, tokenizer: str, counts: dict[int, int]) -> None:
    store_counts(session.connection(), tokenizer, counts)


class AnswerWriter:
    def __init__(
        self, db: Database, manager: LLMManager, settings: Settings, flusher: AnswerFlusher
    ) -> None:
        self._db = db
        self._manager = manager
        self._settings = settings
        self._flusher = flusher

    async def write(
        self,
        user: Message,
        answer: Message,
        planned: Plan | RoutingError,
        channel: Channel,
        stop: asyncio.Event,
        sent: Callable[[], None] | None = None,
    ) -> None:
        """The whole answer, from the provider's first byte to the stored final row; whoever
        watches hears the end (`done` or `error`), even when the end could not be stored.
        `sent` is called when the request to the engine has been written."""
        assert answer.id is not None
        progress = Progress()
        reader = asyncio.create_task(self._read_provider(user, planned, progress, channel, sent))
        # The text so far is written with every other answer's (`flushing`); that is also
        # the answer's heartbeat, and how a stop made by another worker is noticed.
        self._flusher.track(answer.id, lambda: progress.text, stop)
        stopped = asyncio.create_task(stop.wait())
        status, error = Status.COMPLETE, None
        try:
            await asyncio.wait({reader, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                reader.cancel()
                status = Status.STOPPED
            await asyncio.gather(reader, return_exceptions=True)
            if status is not Status.STOPPED and (failure := reader.exception()) is not None:
                status, error = failure_of(failure, progress)
        except asyncio.CancelledError:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            status, error = Status.INTERRUPTED, INTERRUPTED_ERROR
            raise
        finally:
            self._flusher.release(answer.id)
            stopped.cancel()
            await asyncio.gather(stopped, return_exceptions=True)
            final_row: Message | None = None
            try:
                final_row = await asyncio.shield(self.finish(answer, progress, status, error))
            finally:
                if final_row is None:
                    status, error = Status.FAILED, UNSTORED_ERROR
                final = message_dict(final_row if final_row is not None else answer)
                if status in (Status.COMPLETE, Status.STOPPED):
                    channel.publish(Event("done", final), last=True)
                else:
                    message = error or "the answer failed"
                    channel.publish(
                        Event("error", {"message": message, "assistant": final}), last=True
                    )

    async def _read_provider(
        self,
        user: Message,
        planned: Plan | RoutingError,
        progress: Progress,
        channel: Channel,
        sent: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(planned, RoutingError):
            raise planned
        progress.trying = planned.fit.model
        channel.publish(Event("fit", message_dict(user)))
        async for event in self._manager.stream(planned, sent):
            if isinstance(event, Counted):
                await self._db.write(_store_counts, event.tokenizer, event.counts)
            elif isinstance(event, Fitted):
                # A fit made after the send's own: a fallback model's, a retry's, or one
                # made once history was counted.
                progress.trying = event.fit.model
                columns = fit_columns(event.fit, stored(planned))
                await self._db.write(_set_columns, id_of(user), columns)
                user = updated(user, columns)
                channel.publish(Event("fit", message_dict(user)))
            elif isinstance(event, Delta):
                progress.add(event.text)
                channel.publish(Event("delta", {"text": event.text}, id=str(progress.length)))
            else:
                progress.finished = event

    async def finish(
        self, answer: Message, progress: Progress, status: Status, error: str | None
    ) -> Message:
        """Store the final row: text, its HTML (rendered once more, now that it is whole),
        status, the model that served, usage, and its count by that model's tokenizer."""
        text = progress.text
        finished = progress.finished
        usage = finished.usage if finished is not None else None
        served_by = finished.model if finished is not None else progress.model
        values: dict[str, object] = {
            "token_counts": await self._count_answer(served_by, text),
            "content": text,
            "content_html": str(await render_markdown_async(text)),
            "status": status,
            "error": error,
            "updated_at": utcnow(),
            "estimated_tokens": (
                estimate_message({"role": Role.ASSISTANT.value, "content": text}) if text else 0
            ),
            "model": served_by,
            "finish_reason": finished.finish_reason if finished is not None else None,
            "prompt_tokens": usage.prompt_tokens if usage is not None else None,
            "completion_tokens": usage.completion_tokens if usage is not None else None,
            "cached_tokens": usage.cached_tokens if usage is not None else None,
        }
        await self._flusher.finish(id_of(answer), values)
        return updated(answer, values)

    async def _count_answer(self, model: str | None, text: str) -> dict[str, int] | None:
        """An answer is counted once, when it is final, by the model that wrote it."""
        spec = self._manager.catalog.models.get(model) if model else None
        if spec is None or not text:
            return None
        tokenizer = self._manager.tokenizer_for(spec)
        if not tokenizer.exact:
            return None
        try:
            (count,) = await asyncio.wait_for(tokenizer.count([text]), COUNT_TIMEOUT)
        except Exception as error:  # any failure of a tokenizer: a later send counts it
            log.warning("could not count an answer with %s: %s", tokenizer.id, error)
            return None
        return {tokenizer.id: count}
