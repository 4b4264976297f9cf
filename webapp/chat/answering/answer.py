"""An answer, from its task to its final row.

An answer runs as its own task, not inside the request that asked for it
(`AnswerRegistry`): a client that disconnects does not stop it, and it is completed and
stored all the same. Whoever wants to watch (the SSE response, a page reloaded
mid-answer) subscribes to its channel and first receives everything published so far,
so nothing is duplicated or lost by arriving late.

The task (`AnswerWriter`) reads the provider, publishes what arrives, has the text so far
flushed (the answer's heartbeat), maps a failure to what the user reads, and stores the
final row. It can be watched from another worker and stopped from anywhere: a stop made
elsewhere is noticed when a flush finds the row no longer streaming (or at once, on
PostgreSQL, by a notice). Its writes go through the process's one
`flushing.AnswerFlusher`, together with every other answer's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session

from webapp.chat.answering.approvals import Approvals, Decision
from webapp.chat.answering.flushing import AnswerFlusher
from webapp.chat.answering.pictures import with_pictures
from webapp.chat.answering.reaping import INTERRUPTED_ERROR
from webapp.chat.answering.summarizing import Summarizer
from webapp.chat.answering.tool_loop import (
    Answered,
    Approve,
    Calling,
    Stepped,
    ToolCall,
    ToolResult,
    run_tools,
)
from webapp.chat.stored.models import Message, Role, Status
from webapp.chat.stored.rows import fit_columns, set_columns, store_counts, updated
from webapp.chat.stored.serialize import message_dict
from webapp.chat.stored.steps import append_rows, step_wire
from webapp.db import Database
from webapp.llm.catalog import McpServerSpec
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import Counted, Delta, Finished, Fitted, LLMManager, Plan, Prefilling
from webapp.llm.providers.base import Prefill, ProviderError, StreamBroken, Usage
from webapp.llm.routing import RoutingError
from webapp.llm.window import FitResult
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import utcnow
from webapp.tools.connections import McpConnections
from webapp.tools.toolset import gather
from webapp.web.markdown import render_markdown_async

log = logging.getLogger(__name__)

TEXT_PACE = 0.03
"""Seconds between two writes of an answer's text to one client. Each write costs the
server about as much as reading a chunk from the model: a model sending a token every
few milliseconds (or hundreds of answers at once) would otherwise cost one write each;
30 ms is faster than anyone reads and leaves the first token untouched."""


REQUEST_HEAD_START = 0.25
"""How long a send waits for its answer's request to be written before it answers its
own client (`RunningAnswer.on_its_way`): on an open connection that takes well under a
millisecond, and answering first would put a couple of milliseconds of the app's work
before the engine even has the prompt. New connections to a far engine may take longer;
past this the send answers anyway."""


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: dict[str, Any]
    id: str | None = None


class Channel:
    """An append-only log of one answer's events with any number of live readers.

    Readers wait on one shared future that the next publish resolves: a delta costs an
    append and a wake-up, however many readers there are.
    """

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._closed = False
        self._next: asyncio.Future[None] | None = None
        self._resting: set[asyncio.Future[None]] = set()

    def publish(self, event: Event, *, last: bool = False) -> None:
        self._events.append(event)
        self._closed = self._closed or last
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        waiting, self._next = self._next, None
        if waiting is not None:
            _settle(waiting)
        if self._closed:
            for rested in self._resting:
                _settle(rested)

    async def follow(self) -> AsyncIterator[Event]:
        async for batch in self.batches():
            for event in batch:
                yield event

    async def batches(self, pace: float = 0.0) -> AsyncIterator[list[Event]]:
        """Everything published since the reader last looked, at once. A reader that falls
        behind (hundreds of answers streaming on one core) catches up in one step, and
        one write to its client, instead of one per event: the work follows the reader's
        wake-ups, not the provider's chunks.

        With a `pace`, a batch that carried text is followed by at least `pace` seconds
        before the next (the end of the answer cuts the wait short): text comes in
        pieces of that rhythm, each one write to the client, however fast the model
        sends. The first piece of text is never held back, so the time to the first
        token is the model's."""
        position = 0
        while True:
            if position < len(self._events):
                batch = self._events[position:]
                position += len(batch)
                yield batch
                if pace > 0 and not self._closed and any(e.name == "delta" for e in batch):
                    await self._rest(pace)
                continue
            if self._closed:
                return
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._next)

    async def _rest(self, pace: float) -> None:
        """Wait `pace` seconds, or less if the channel closes meanwhile; what is published
        in between does not wake the reader (that is the point)."""
        loop = asyncio.get_running_loop()
        rested: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(pace, _settle, rested)
        self._resting.add(rested)
        try:
            await rested
        finally:
            timer.cancel()
            self._resting.discard(rested)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(slots=True)
class RunningAnswer:
    answer_id: int
    channel: Channel
    task: asyncio.Task[None]
    stop: asyncio.Event
    sent: asyncio.Future[None]
    """Settled once the answer's request is on its way to the engine, or the answer ended
    without one."""
    prefix: str = ""
    """The text the answer had before this run (a continuation's earlier part): the
    channel's deltas carry only what follows it."""

    async def on_its_way(self, limit: float | None = None) -> None:
        """Wait (at most `limit` seconds, `REQUEST_HEAD_START` by default) until the
        answer's request has been written: what a send does after that, such as starting
        its response, then runs while the engine reads the prompt, not before it has it.
        A request slow to connect only costs the wait's limit."""
        await asyncio.wait((self.sent,), timeout=REQUEST_HEAD_START if limit is None else limit)


class AnswerRegistry:
    """The answers this process is writing, by assistant message id."""

    def __init__(self) -> None:
        self._running: dict[int, RunningAnswer] = {}

    def start(
        self,
        answer_id: int,
        run: Callable[[Channel, asyncio.Event, Callable[[], None]], Coroutine[Any, Any, None]],
        prefix: str = "",
    ) -> RunningAnswer:
        """Run an answer in a task of its own: `run(channel, stop, sent)`, where `sent` is
        called when its request has been written (see `RunningAnswer.sent`); `prefix` is
        the text it goes on from."""
        channel = Channel()
        stop = asyncio.Event()
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            run(channel, stop, lambda: _settle(sent)), name=f"answer-{answer_id}"
        )
        task.add_done_callback(lambda _: _settle(sent))
        running = RunningAnswer(answer_id, channel, task, stop, sent, prefix)
        self._running[answer_id] = running
        task.add_done_callback(lambda _: self._running.pop(answer_id, None))
        return running

    def get(self, answer_id: int) -> RunningAnswer | None:
        return self._running.get(answer_id)

    def request_stop(self, answer_id: int) -> bool:
        running = self._running.get(answer_id)
        if running is None:
            return False
        running.stop.set()
        return True

    async def shutdown(self) -> None:
        """Cancel what is still running; each answer stores itself as interrupted."""
        tasks = [running.task for running in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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
    earlier: Message | None = None
    """The answer as it stood before this run, when this run continues it: its text
    begins this one's, its usage is added to this run's."""
    prefill: Prefill | None = None
    """The engine's newest reading of the prompt, until text comes (other workers' pages
    hear it through the flusher's notices)."""

    @classmethod
    def continuing(cls, answer: Message) -> Progress:
        return cls(parts=[answer.content], length=len(answer.content), earlier=answer)

    def add(self, text: str) -> None:
        self.model = self.model or self.trying
        self.parts.append(text)
        self.length += len(text)

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


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


def _append_rows(
    session: Session, conversation_id: str, rows: list[dict[str, Any]]
) -> list[Message]:
    return append_rows(session.connection(), conversation_id, rows)


def step_row(event: Calling) -> dict[str, Any]:
    """A model step that called tools, as its assistant row stores it."""
    usage = event.result.usage
    values: dict[str, Any] = {
        "role": Role.ASSISTANT,
        "content": event.result.content or "",
        "tool_calls": [
            {"id": c.id[:200], "name": c.name[:200], "arguments": c.arguments} for c in event.calls
        ],
    }
    return values | {
        "status": Status.COMPLETE,
        "estimated_tokens": estimate_message(step_wire(values)),
        "model": event.model,
        "finish_reason": event.result.finish_reason,
        "prompt_tokens": usage.prompt_tokens if usage is not None else None,
        "completion_tokens": usage.completion_tokens if usage is not None else None,
        "cached_tokens": usage.cached_tokens if usage is not None else None,
    }


def result_row(event: ToolResult) -> dict[str, Any]:
    """A call's result, as its tool row stores it (`status`: the call's outcome)."""
    values: dict[str, Any] = {
        "role": Role.TOOL,
        "content": event.outcome.content,
        # The model's id and name, as long as the columns hold (200 characters).
        "tool_call_id": event.call.id[:200],
        "tool_name": event.call.name[:200],
    }
    return values | {
        "status": event.outcome.status,
        "estimated_tokens": estimate_message(step_wire(values)),
    }


class AnswerWriter:
    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        settings: Settings,
        flusher: AnswerFlusher,
        answers: AnswerRegistry,
        tools: McpConnections | None = None,
        approvals: Approvals | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self._summarizer = summarizer
        self._db = db
        self._manager = manager
        self._settings = settings
        self._flusher = flusher
        self._answers = answers
        self._tools = tools if tools is not None else McpConnections()
        self._approvals = approvals if approvals is not None else Approvals()

    async def aclose(self) -> None:
        """End the MCP sessions this process's answers held open, and summary calls."""
        await self._tools.aclose()
        if self._summarizer is not None:
            await self._summarizer.shutdown()

    def start(
        self,
        user: Message,
        answer: Message,
        planned: Plan | RoutingError,
        *,
        continuing: bool = False,
    ) -> RunningAnswer:
        """Write the answer to a stored turn in a task of this worker's own (`write`);
        `continuing`: go on from the answer's stored text, in the same row."""
        progress = Progress.continuing(answer) if continuing else Progress()
        return self._answers.start(
            id_of(answer),
            lambda channel, stop, sent: self.write(
                user, answer, planned, channel, stop, sent, progress
            ),
            prefix=progress.text,
        )

    async def write(
        self,
        user: Message,
        answer: Message,
        planned: Plan | RoutingError,
        channel: Channel,
        stop: asyncio.Event,
        sent: Callable[[], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        """The whole answer, from the provider's first byte to the stored final row; whoever
        watches hears the end (`done` or `error`), even when the end could not be stored.
        `sent` is called when the request to the engine has been written; `progress`
        holds the earlier part of an answer this run continues."""
        assert answer.id is not None
        progress = progress or Progress()
        reader = asyncio.create_task(
            self._read_provider(user, planned, progress, channel, sent, answer.id)
        )
        # The text so far is written with every other answer's (`flushing`); that is also
        # the answer's heartbeat, and how a stop made by another worker is noticed.
        self._flusher.track(
            answer.id,
            lambda: progress.text,
            stop,
            lambda: None if progress.length else progress.prefill,
        )
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
            self._approvals.forget(answer.id)
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
        answer_id: int | None = None,
    ) -> None:
        if isinstance(planned, RoutingError):
            raise planned
        progress.trying = planned.fit.model
        tooled = bool(planned.route.configuration.tools)
        if not tooled:
            user, planned = await self._summarized(user, planned, progress)
        channel.publish(Event("fit", message_dict(user)))
        seconds = self._settings.file_read_seconds
        planned = await with_pictures(self._db, self._manager, planned, seconds)
        if tooled:
            approve = self._asker(answer_id, channel) if answer_id is not None else None
            if await self._answer_with_tools(user, planned, progress, channel, sent, approve):
                return
            # No tool could be offered: the send goes as one without tools.
            user, planned = await self._summarized(user, planned, progress)
        async for event in self._manager.stream(planned, sent):
            if isinstance(event, Counted):
                await self._db.write(_store_counts, event.tokenizer, event.counts)
            elif isinstance(event, Fitted):
                # A fit made after the send's own: a fallback model's, a retry's, or one
                # made once history was counted.
                user = await self._refitted(user, event.fit, planned, progress, channel)
            elif isinstance(event, Prefilling):
                read = progress.prefill = event.progress
                progress_event = {"processed": read.processed, "total": read.total}
                channel.publish(Event("progress", progress_event | {"cached": read.cached}))
            elif isinstance(event, Delta):
                progress.add(event.text)
                channel.publish(Event("delta", {"text": event.text}, id=str(progress.length)))
            else:
                progress.finished = event

    async def _summarized(
        self, user: Message, planned: Plan, progress: Progress
    ) -> tuple[Message, Plan]:
        """A move of the cut folds what it left out into the summary first (briefly), for
        the fit the first request will be sent with."""
        if self._summarizer is None or progress.earlier is not None:
            return user, planned
        summarized = await self._summarizer.at_send(user, planned)
        if summarized is not planned and summarized.transcript.summary is not None:
            user = updated(user, {"fit_summary": summarized.transcript.summary.version})
            return user, summarized
        return user, planned

    async def _refitted(
        self, user: Message, fit: FitResult, planned: Plan, progress: Progress, channel: Channel
    ) -> Message:
        """Store a fit made after the send's own on the user's row, and say so (not a
        continuation's: the turn's facts are its own send's)."""
        progress.trying = fit.model
        if progress.earlier is not None:
            return user
        columns = fit_columns(fit, planned.transcript)
        await self._db.write(_set_columns, id_of(user), columns)
        user = updated(user, columns)
        channel.publish(Event("fit", message_dict(user)))
        return user

    async def _answer_with_tools(
        self,
        user: Message,
        planned: Plan,
        progress: Progress,
        channel: Channel,
        sent: Callable[[], None] | None,
        approve: Approve | None = None,
    ) -> bool:
        """An answer whose configuration offers tools (`tool_loop`): each call and result
        is published as it happens (`tool_call`, `tool_result`, and `approval` while a call
        waits for the owner) and stored on the turn as it happens (`webapp.chat.stored.steps`:
        a Stop or a crash keeps what was done), each step's fit stored on the user's row; the
        answer's text arrives whole, once the model gives it. False, having done nothing, when
        no tool can be offered (every server down): the answer then streams as one without
        tools."""
        configuration, catalog = planned.route.configuration, self._manager.catalog
        toolset = await gather(self._tools, configuration.tools, catalog.mcp_servers)
        if not toolset:
            return False
        # The first step's fit, with the tools' schemas (the plan was made before they were
        # known): a move it makes is the one the summary folds.
        offered = toolset.tools if configuration.max_tool_steps > 1 else None
        first = self._manager.fit_for(
            planned.route,
            planned.route.primary,
            planned.transcript,
            caller=planned.caller,
            tools=offered,
            max_tokens=planned.max_tokens,
        )
        planned = dataclasses.replace(planned, fit=first, tools=offered)
        user = await self._refitted(user, first, planned, progress, channel)
        user, planned = await self._summarized(user, planned, progress)
        if sent is not None:
            sent()
        steps = run_tools(
            self._manager, planned, toolset, self._tools, configuration.max_tool_steps, approve
        )
        model = planned.fit.model
        async for event in steps:
            if isinstance(event, Stepped):
                model = event.model
                if event.fit is not planned.fit:
                    user = await self._refitted(user, event.fit, planned, progress, channel)
            elif isinstance(event, Calling):
                await self._db.write(_append_rows, user.conversation_id, [step_row(event)])
            elif isinstance(event, ToolCall):
                asked = {"id": event.id, "name": event.name, "arguments": event.arguments}
                channel.publish(Event("tool_call", asked))
            elif isinstance(event, ToolResult):
                outcome, call = event.outcome, event.call
                await self._db.write(_append_rows, user.conversation_id, [result_row(event)])
                result = {"id": call.id, "name": call.name, "content": outcome.content}
                channel.publish(Event("tool_result", result | {"status": outcome.status}))
            elif isinstance(event, Answered):
                answer = event.result
                if answer.content:
                    progress.add(answer.content)
                    channel.publish(
                        Event("delta", {"text": answer.content}, id=str(progress.length))
                    )
                progress.finished = Finished(model, answer.finish_reason, answer.usage)
        return True

    def _asker(self, answer_id: int, channel: Channel) -> Approve:
        """How the answer's loop asks its owner about a call: an `approval` event (the page
        shows Allow and Deny), then the wait (`Approvals.ask`, bounded by
        `tool_approval_seconds`), then an `approval` event with the decision."""

        async def approve(call: ToolCall, spec: McpServerSpec) -> Decision:
            asked = {"id": call.id, "name": call.name, "arguments": call.arguments}
            asked |= {"server": spec.name}
            channel.publish(Event("approval", asked | {"state": "waiting"}))
            seconds = self._settings.tool_approval_seconds
            decision = await self._approvals.ask(answer_id, call.id, seconds)
            channel.publish(Event("approval", asked | {"state": decision}))
            return decision

        return approve

    async def finish(
        self, answer: Message, progress: Progress, status: Status, error: str | None
    ) -> Message:
        """Store the final row: text, its HTML (rendered once more, now that it is whole),
        status, the model that served, usage, and its count by that model's tokenizer."""
        text = progress.text
        finished = progress.finished
        usage = finished.usage if finished is not None else None
        served_by = finished.model if finished is not None else progress.model
        earlier = progress.earlier
        if served_by is None and earlier is not None:
            served_by = earlier.model
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
            **_usage_columns(usage, earlier),
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


def _usage_columns(usage: Usage | None, earlier: Message | None) -> dict[str, int | None]:
    """The answer's usage: this run's, plus the earlier parts' when it continues an
    answer (each part was a request of its own, and each is paid for)."""
    now = {
        "prompt_tokens": usage.prompt_tokens if usage is not None else None,
        "completion_tokens": usage.completion_tokens if usage is not None else None,
        "cached_tokens": usage.cached_tokens if usage is not None else None,
        "evaluated_tokens": usage.evaluated if usage is not None else None,
        "cache_write_tokens": usage.cache_write_tokens if usage is not None else None,
    }
    if earlier is None:
        return now
    return {name: _added(count, getattr(earlier, name)) for name, count in now.items()}


def _added(a: int | None, b: int | None) -> int | None:
    """Two parts' counts together; None only if neither part has one."""
    return None if a is None and b is None else (a or 0) + (b or 0)
