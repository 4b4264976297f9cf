"""Sending a message: whether it may go (`Admission`), store the turn, bounded for the
model that will answer first, and start the answer task; stop it; preview the fit the
next send would make.

A send writes the user's message (and a placeholder for the answer) before anything else
can go wrong, so a failed provider call never loses it. The bound is applied against the
model that will actually serve; its facts go on the user row the moment they are known,
and again if a fallback model takes over (`answer`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, insert, update
from sqlmodel import Session, col, select

from webapp.accounts.preferences import owner_instructions, with_instructions
from webapp.chat.answering.answer import COUNT_TIMEOUT, AnswerRegistry, AnswerWriter, RunningAnswer
from webapp.chat.answering.flushing import AnswerFlusher
from webapp.chat.answering.naming import Titler
from webapp.chat.answering.notify import STOP, notice
from webapp.chat.answering.reaping import reap
from webapp.chat.reading import ConversationReader
from webapp.chat.stored.branches import parent_of
from webapp.chat.stored.budget import (
    MESSAGE_USES,
    RECENT_COUNT,
    Use,
    hold_budget,
    message_budget_wait,
    prune_uses,
    record_use,
)
from webapp.chat.stored.history import Tail, load_transcript, previous_fit, read_tail
from webapp.chat.stored.models import MESSAGE_DEFAULTS, Conversation, Message, Role, Status
from webapp.chat.stored.rows import check_id, fit_columns, owned_in, row_in
from webapp.chat.stored.titles import DEFAULT_TITLE, title_from
from webapp.db import Database, as_loaded, off_the_loop
from webapp.errors import Conflict, InvalidInput, NotFound, TooManyRequests, refuse_nul
from webapp.limits import OWNERS_KEPT, TokenBuckets
from webapp.llm.estimator import estimate_message, estimate_text
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.routing import Route, RoutingError
from webapp.llm.window import FitResult
from webapp.owners import EMBED_OWNER_PREFIX
from webapp.prepared import Prepared
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import as_utc, utcnow

log = logging.getLogger(__name__)

_TOUCH_CONVERSATION = Prepared(
    update(Conversation)
    .where(
        col(Conversation.id) == bindparam("conversation_id"),
        col(Conversation.owner) == bindparam("owned_by"),
    )
    .values(updated_at=bindparam("now"))
    .returning(Conversation, RECENT_COUNT)
)
"""Takes the conversation's lock and counts the owner's recent sends and gateway calls
(`gateway_call` rows, which deleting conversations keeps), in one round trip."""
_TURN_COLUMNS = sorted(
    {*MESSAGE_DEFAULTS, "conversation_id", "seq", "role", "created_at", "updated_at"}
)
_TURN_KEYS = set(_TURN_COLUMNS)
_INSERT_TURN = Prepared(
    insert(Message)
    .values(
        [
            {
                name: bindparam(f"{name}_{row}", type_=Message.__table__.c[name].type)  # type: ignore[attr-defined]
                for name in _TURN_COLUMNS
            }
            for row in range(2)
        ]
    )
    .returning(col(Message.seq), col(Message.id))
)
"""Both rows of a turn in one statement; ids come back by seq (SQLite does not promise
RETURNING in VALUES order, and asking for that order costs a statement per row)."""


def _turn_values(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The insert's parameters: every column of each row, by the row's place."""
    if any(row.keys() != _TURN_KEYS for row in rows):
        raise ValueError("a turn's rows name every column of the insert")
    return {f"{name}_{n}": row[name] for n, row in enumerate(rows) for name in _TURN_COLUMNS}


REQUEST_HEAD_START = 0.25
"""How long a send waits for its answer's request to be written before it answers its
own client (`RunningAnswer.on_its_way`): on an open connection that takes well under a
millisecond, and starting the response first would put a couple of milliseconds of the
app's work before the engine even has the prompt. New connections to a far engine may
take longer; past this the send answers anyway."""


QUICK_UNIT = 0.003
"""A send's transaction that took less than this may run on the event loop itself the next
time the same conversation sends (`Database.write_core`'s `quick`), whenever SQLite's
write lock is free at that moment: that saves the send the two hops to SQLite's writer
thread and back and a session, 0.3-0.6 ms on an idle server, and under a burst of sends
the hops were a quarter of the TTFT p99 (bench-load, N = 200). A long history's read
and fit take longer: those stay on the thread, where the loop keeps its turns while
they run."""
CONVERSATIONS_KEPT = 10_000
"""Conversations whose speed a process remembers (the oldest go)."""


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


class Admission:
    """Whether a send may go: the owner's rate limit, and one answer at a time per
    conversation."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._refused_until: OrderedDict[str, float] = OrderedDict()

    def refused_lately(self, owner: str) -> bool:
        """Whether this process refused the owner a send whose wait is not over: only a
        hint (the send's transaction decides), so that a send sure to be refused does not
        first ask the engine to count its message."""
        until = self._refused_until.get(owner)
        return until is not None and time.monotonic() < until

    def remember_refusal(self, owner: str, refused: TooManyRequests) -> None:
        self._refused_until[owner] = time.monotonic() + refused.retry_after
        self._refused_until.move_to_end(owner)
        if len(self._refused_until) > OWNERS_KEPT:
            self._refused_until.popitem(last=False)

    def rate_limit_for(self, owner: str) -> int:
        if owner.startswith(EMBED_OWNER_PREFIX):
            return self._settings.embed_rate_limit_messages
        return self._settings.rate_limit_messages

    @property
    def window(self) -> float:
        return self._settings.rate_limit_window

    def refuse_too_many(
        self, connection: Connection, owner: str, limit: int, now: datetime
    ) -> None:
        """The owner has sent `limit` messages (or gateway calls) within the window: say
        when enough of them leave it."""
        window = self.window
        wait = message_budget_wait(connection, owner, limit, window, now) or 1
        raise TooManyRequests(
            f"You have sent {limit} messages in the last {window:g} seconds; "
            f"try again in {wait} seconds.",
            retry_after=wait,
        )

    def refuse_if_busy(self, connection: Connection, conversation_id: str) -> None:
        """One answer at a time per conversation; an answer whose writer died is reaped."""
        streaming = connection.execute(
            select(Message.updated_at).where(
                Message.conversation_id == conversation_id,
                Message.status == Status.STREAMING,
            )
        )
        heartbeats = [as_utc(updated) for updated in streaming.scalars()]
        after = self._settings.stale_stream_after
        cutoff = utcnow() - timedelta(seconds=after)
        if any(beat >= cutoff for beat in heartbeats):
            raise Conflict(
                "an answer is still being written in this conversation; "
                "wait for it or stop it first"
            )
        if heartbeats:
            reap(connection, conversation_id, after)

    def spend(self, connection: Connection, owner: str, now: datetime) -> None:
        """Count an admitted send (its transaction has checked the limit)."""
        record_use(connection, owner, Use.SEND, now)
        prune_uses(connection, MESSAGE_USES, self.window, now)


class Sender:
    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        settings: Settings,
        answers: AnswerRegistry,
        admission: Admission,
        reader: ConversationReader,
        titler: Titler,
        flusher: AnswerFlusher,
    ) -> None:
        self._db = db
        self._manager = manager
        self._settings = settings
        self._answers = answers
        self._admission = admission
        self._reader = reader
        self._recent = reader.recent
        self._titler = titler
        self._previews = TokenBuckets(settings.preview_rate, settings.preview_burst)
        self._quick: OrderedDict[str, None] = OrderedDict()
        """Conversations whose last send's transaction took under `QUICK_UNIT`."""
        self.writer = AnswerWriter(db, manager, settings, flusher)

    def validate_content(self, content: object) -> str:
        if not isinstance(content, str):
            raise InvalidInput("content must be a string")
        if not content.strip():
            raise InvalidInput("the message is empty")
        refuse_nul(content, "the message")
        limit = self._settings.max_message_chars
        if len(content) > limit:
            raise InvalidInput(
                f"the message is {len(content):,} characters; the limit is {limit:,}"
            )
        return content

    async def send(
        self, owner: str, conversation_id: str, content: object, edit_of: int | None = None
    ) -> Send:
        """Store the message, bounded for the model that will answer first, and a placeholder
        for the answer; then start writing the answer. Once begun, a send finishes even if
        its caller goes away: the message is stored and answered all the same.

        With `edit_of` (a user message id) the message is an alternative to that turn: it
        continues what that turn continued, on a branch of its own."""
        text = self.validate_content(content)
        if edit_of is not None:
            check_id(edit_of)
        send = await asyncio.shield(
            self._send(owner, conversation_id, text, edit_of, edit=edit_of is not None)
        )
        self._titler.follow(owner, send)
        return send

    async def regenerate(self, owner: str, conversation_id: str, message_id: int) -> Send:
        """A new answer to a user turn: the same message sent again as an alternative to it,
        so the original send, its answer and its fit facts stay on record as they were."""
        check_id(message_id)
        original = await self._db.read(_message_of, owner, conversation_id, message_id)
        if original.role != Role.USER:
            raise InvalidInput("regenerate names a user's message: its turn gets a new answer")
        return await asyncio.shield(
            self._send(owner, conversation_id, original.content, message_id)
        )

    async def continue_answer(self, owner: str, conversation_id: str, answer_id: int) -> Send:
        """Go on with an answer its length limit cut off: a new turn asking the model to
        continue, bounded like any send. Only the newest answer of the shown branch, so the
        continuation follows the text it continues."""
        answer = await self._reader.message(owner, conversation_id, answer_id)
        if answer.role != Role.ASSISTANT or answer.finish_reason != LENGTH_CUT:
            raise InvalidInput("only an answer cut off by its length limit can be continued")
        _, rows, _ = await self._reader.page(owner, conversation_id, turns=1)
        if not rows or rows[-1].id != answer_id:
            raise Conflict("only the newest answer can be continued: send a message instead")
        return await self.send(owner, conversation_id, CONTINUE_PROMPT)

    async def _send(
        self,
        owner: str,
        conversation_id: str,
        text: str,
        alternative_to: int | None = None,
        *,
        edit: bool = False,
    ) -> Send:
        admission = self._admission
        counts = (
            {}
            if admission.refused_lately(owner)
            else await self._count_newest(conversation_id, text)
        )
        try:
            conversation, user, answer, planned, took = await self._db.write_core(
                self._store_turn,
                owner,
                conversation_id,
                text,
                counts,
                alternative_to,
                edit,
                quick=conversation_id in self._quick,
            )
        except TooManyRequests as refused:
            admission.remember_refusal(owner, refused)
            raise
        self._remember_speed(conversation.id, took)
        self._recent.remember(conversation.id, conversation.configuration)
        running = self._answers.start(
            id_of(answer),
            lambda channel, stop, sent: self.writer.write(
                user, answer, planned, channel, stop, sent
            ),
        )
        await running.on_its_way(REQUEST_HEAD_START)
        return Send(conversation, user, answer, running)

    def _remember_speed(self, conversation_id: str, took: float) -> None:
        quick = self._quick
        if took >= QUICK_UNIT:
            quick.pop(conversation_id, None)
            return
        quick[conversation_id] = None
        quick.move_to_end(conversation_id)
        if len(quick) > CONVERSATIONS_KEPT:
            quick.popitem(last=False)

    async def _count_newest(self, conversation_id: str, text: str) -> dict[str, int]:
        """Count a new message with the tokenizer of the model that will be asked first,
        before the send's transaction (counting may mean a request to the engine, which
        must not hold the conversation's lock). Which model that is comes from what this
        process last saw of the conversation; when it does not know, or the tokenizer
        fails, the answer task counts it instead (`LLMManager.count_missing`)."""
        configuration = self._recent.get(conversation_id)
        if configuration is None:
            return {}
        try:
            route = self._manager.route(configuration)
        except RoutingError:
            return {}
        tokenizer = self._manager.tokenizer_for(route.primary)
        if not tokenizer.exact:
            return {}
        try:
            (count,) = await asyncio.wait_for(tokenizer.count([text]), COUNT_TIMEOUT)
        except Exception as error:  # any failure of a tokenizer: the send estimates instead
            log.warning("could not count a new message with %s: %s", tokenizer.id, error)
            return {}
        return {tokenizer.id: count}

    def _route(self, conversation: Conversation) -> Route | RoutingError:
        """A configuration that no longer routes anywhere is the answer's failure, not the
        send's: the message is kept all the same."""
        try:
            return self._manager.route(conversation.configuration)
        except RoutingError as error:
            return error

    def _plan(
        self,
        connection: Connection,
        conversation: Conversation,
        route: Route,
        tail: Tail,
        newest: dict[str, str],
        newest_tokens: int,
        newest_counts: dict[str, int] | None = None,
        afresh: bool = False,
        instructions: str = "",
    ) -> Plan:
        """Read as much history as the route could send and fit it for the model that will
        be asked first, keeping the cut of the branch's previous send unless the cut is to
        start afresh (an edit, or a pin, configuration or branch switch since that send).
        The owner's custom `instructions` go with the system prompt: the head counts them."""
        manager = self._manager
        previous = (
            None
            if afresh or conversation.cut_reset
            else previous_fit(connection, conversation.id, tail)
        )
        cut = previous.kept_from if previous and previous.model == route.primary.name else 0
        system = with_instructions(route.configuration.system_prompt, instructions)
        system_message = {"role": "system", "content": system} if system else None
        transcript = load_transcript(
            connection,
            conversation.id,
            tail,
            newest,
            newest_tokens,
            budget=manager.largest_budget(route),
            system_prompt=system_message,
            system_tokens=estimate_message(system_message) if system_message else 0,
            system_counts=manager.system_counts(route, system) if system else None,
            sizers=manager.sizers(route),
            newest_counts=newest_counts,
            cut=cut,
        )
        return manager.plan(route, transcript)

    def _store_turn(
        self,
        connection: Connection,
        owner: str,
        conversation_id: str,
        text: str,
        counts: dict[str, int] | None = None,
        alternative_to: int | None = None,
        edit: bool = False,
    ) -> tuple[Conversation, Message, Message, Plan | RoutingError, float]:
        """The send's one transaction (and the CPU seconds its work took: on a busy writer
        thread its wall time is mostly other threads' turns, and what a quick unit costs
        the loop is its work). It starts by taking
        the conversation's lock (a row lock on PostgreSQL, the write lock on SQLite), so
        two sends can never interleave their rows, and the history the bound reads is
        exactly the history the new row follows: the active branch, or, for an
        alternative to a user turn, the branch up to the row that turn continued. The new
        turn becomes the active branch's leaf."""
        started = time.thread_time()
        now = utcnow()
        admission = self._admission
        limit = admission.rate_limit_for(owner)
        if limit > 0:
            hold_budget(connection, owner)
        touched = _TOUCH_CONVERSATION.first(
            connection,
            {
                "conversation_id": conversation_id,
                "owned_by": owner,
                "now": now,
                "since": now - timedelta(seconds=admission.window),
                "limit": max(limit, 0),
            },
        )
        if touched is None:
            raise NotFound("no such conversation")
        *columns, recent_sends = touched
        conversation = as_loaded(
            Conversation, dict(zip(_TOUCH_CONVERSATION.names, columns, strict=False))
        )
        if limit > 0:
            if recent_sends >= limit:
                admission.refuse_too_many(connection, owner, limit, now)
            admission.spend(connection, owner, now)
        if edit or conversation.cut_reset:
            off_the_loop()  # the cut starts afresh: the whole history is read and fitted
        leaf = conversation.active_seq
        if alternative_to is not None:
            original = row_in(connection, conversation_id, alternative_to)
            if original.role != Role.USER:
                raise InvalidInput("edit_of names a user's message: an answer is regenerated")
            leaf = parent_of(original)
        route = self._route(conversation)
        tokenizers = self._manager.exact_tokenizers(route) if isinstance(route, Route) else []
        tail = read_tail(connection, conversation_id, tokenizers, leaf)
        if tail.answering:
            admission.refuse_if_busy(connection, conversation_id)
            tail = read_tail(connection, conversation_id, tokenizers, leaf)
        newest = {"role": Role.USER.value, "content": text}
        user_tokens = estimate_message(newest)
        instructions = owner_instructions(connection, owner)
        planned = (
            self._plan(
                connection,
                conversation,
                route,
                tail,
                newest,
                user_tokens,
                counts,
                afresh=edit,
                instructions=instructions,
            )
            if isinstance(route, Route)
            else route
        )
        common = {"conversation_id": conversation_id, "created_at": now, "updated_at": now}
        rows: list[dict[str, Any]] = [
            {
                **MESSAGE_DEFAULTS,
                **common,
                "seq": tail.next_seq,
                "parent_seq": tail.parent_seq,
                "role": Role.USER,
                "content": text,
                "estimated_tokens": user_tokens,
                "prior_turns": tail.prior_turns,
                "turn_number": tail.turn_number,
                "token_counts": counts or None,
                **(_fit_values(planned, instructions) if isinstance(planned, Plan) else {}),
            },
            {
                **MESSAGE_DEFAULTS,
                **common,
                "seq": tail.next_seq + 1,
                "role": Role.ASSISTANT,
                "status": Status.STREAMING,
            },
        ]
        ids: dict[int, int] = dict(_INSERT_TURN.rows(connection, _turn_values(rows)))
        user, answer = (as_loaded(Message, {**row, "id": ids[row["seq"]]}) for row in rows)
        if isinstance(planned, Plan):
            # The new message is stored now: counts made for it later are kept on its row.
            transcript = planned.transcript
            with_id = dataclasses.replace(transcript, ids=[*(transcript.ids or [])[:-1], user.id])
            planned = dataclasses.replace(planned, transcript=with_id)
        changes: dict[str, object] = {}
        if conversation.active_seq is not None:  # the new answer is the newest row again
            changes["active_seq"] = None
        if conversation.cut_reset:  # this send started the cut afresh
            changes["cut_reset"] = False
        if user.seq == 1 and conversation.title == DEFAULT_TITLE:
            changes["title"] = title_from(text)
        if changes:
            connection.execute(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(**changes)
            )
            conversation = as_loaded(Conversation, {**conversation.model_dump(), **changes})
        return conversation, user, answer, planned, time.thread_time() - started

    async def preview(self, owner: str, conversation_id: str, content: object) -> Message:
        """The user row the next send of `content` would write, with its fit, stored
        nowhere: what the context meter shows while the user types. Read without the
        conversation's lock, so it may be a send behind; the send itself fits again."""
        row, _ = await self.preview_fit(owner, conversation_id, content)
        return row

    async def preview_fit(
        self, owner: str, conversation_id: str, content: object
    ) -> tuple[Message, FitResult]:
        """`preview`'s row, and the fit it was made from (what the row does not keep, such
        as how many more turns fit before the cut must move). Throttled per owner
        (`TokenBuckets`): it stores nothing, but each one reads and fits a history."""
        wait = self._previews.take(owner)
        if wait:
            raise TooManyRequests(
                "Too many previews at once; the meter catches up when you pause.",
                retry_after=max(1, math.ceil(wait)),
            )
        text = self.validate_content(content)
        # The text being typed is estimated, not sent to the engine's tokenizer on every
        # pause: the history's counts are stored already, and the send counts it exactly.
        newest = {"role": Role.USER.value, "content": text}

        def plan(session: Session) -> tuple[Plan, int]:
            connection = session.connection()
            conversation = owned_in(connection, owner, conversation_id)
            self._recent.remember(conversation.id, conversation.configuration)
            route = self._route(conversation)
            if isinstance(route, RoutingError):
                raise InvalidInput(str(route))
            tokenizers = self._manager.exact_tokenizers(route)
            tail = read_tail(connection, conversation_id, tokenizers, conversation.active_seq)
            planned = self._plan(
                connection,
                conversation,
                route,
                tail,
                newest,
                estimate_message(newest),
                {},
                instructions=owner_instructions(connection, owner),
            )
            return planned, tail.next_seq

        planned, seq = await self._db.read(plan)
        now = utcnow()
        row = as_loaded(
            Message,
            {
                **MESSAGE_DEFAULTS,
                "id": None,
                "conversation_id": conversation_id,
                "seq": seq,
                "role": Role.USER,
                "content": text,
                "created_at": now,
                "updated_at": now,
                "token_counts": None,
                **fit_columns(planned.fit, planned.transcript),
            },
        )
        return row, planned.fit

    async def settle(self, send: Send) -> tuple[Message, Message]:
        """Wait for the answer (it goes on even if the caller goes away) and reload both rows."""
        await asyncio.shield(send.running.task)

        def reload(session: Session) -> tuple[Message, Message]:
            user = session.get(Message, send.user.id)
            answer = session.get(Message, send.answer.id)
            assert user is not None and answer is not None
            return user, answer

        return await self._db.read(reload)

    async def stop(self, owner: str, conversation_id: str) -> Message | None:
        """Stop the answer being written, wherever it runs; the text so far is kept."""
        answer_id = await self._db.read(_streaming_answer_id, owner, conversation_id)
        if answer_id is None:
            return None
        # On PostgreSQL the worker writing it hears of it at once (a notice), not at its
        # next flush.
        await self._db.write(_mark_stopped, answer_id, self._db.dialect == "postgresql")
        if self._answers.request_stop(answer_id):
            await self._settle(answer_id)
        return await self._db.read(lambda session: session.get(Message, answer_id))

    async def halt(self, owner: str, conversation_id: str) -> None:
        """End the answer this worker writes in the conversation, if any (before deleting it)."""
        answer_id = await self._db.read(_streaming_answer_id, owner, conversation_id)
        if answer_id is not None and self._answers.request_stop(answer_id):
            await self._settle(answer_id)

    async def _settle(self, answer_id: int, timeout: float = 10.0) -> None:
        running = self._answers.get(answer_id)
        if running is not None:
            await asyncio.wait([running.task], timeout=timeout)


def _fit_values(planned: Plan, instructions: str) -> dict[str, object]:
    """The user row's fit columns, and how much of the head the owner's instructions took."""
    return {
        **fit_columns(planned.fit, planned.transcript),
        "fit_instructions_tokens": estimate_text(instructions) if instructions else None,
    }


def _message_of(session: Session, owner: str, conversation_id: str, message_id: int) -> Message:
    connection = session.connection()
    owned_in(connection, owner, conversation_id)
    return row_in(connection, conversation_id, message_id)


def _streaming_answer_id(session: Session, owner: str, conversation_id: str) -> int | None:
    connection = session.connection()
    owned_in(connection, owner, conversation_id)
    return connection.execute(
        select(Message.id).where(
            Message.conversation_id == conversation_id,
            Message.status == Status.STREAMING,
        )
    ).scalar()


def _mark_stopped(session: Session, answer_id: int, announce: bool) -> None:
    connection = session.connection()
    connection.execute(
        update(Message)
        .where(col(Message.id) == answer_id, col(Message.status) == Status.STREAMING)
        .values(status=Status.STOPPED, updated_at=utcnow())
    )
    if announce:
        connection.execute(notice(STOP, answer_id))
