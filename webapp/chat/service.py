"""The conversation service: create conversations, send messages, stream and store answers.

A send writes the user's message (and a placeholder for the answer) before
anything else can go wrong, so a failed provider call never loses it. The bound
is then applied against the model that will actually serve; its facts go on the
user row the moment they are known, and again if a fallback model takes over.
The answer is written by a task of its own, flushed to the database as it grows,
so it outlives the request, can be watched from another worker, and can be
stopped from anywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import Connection, Select, Update, bindparam, delete, func, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from webapp.chat.answers import AnswerRegistry, Channel, Event, RunningAnswer
from webapp.chat.branches import (
    Alternatives,
    alternatives,
    leaf_through,
    newest_on_branch,
    parent_of,
    renumbered,
    whole_branch,
)
from webapp.chat.history import (
    StoredTranscript,
    Tail,
    is_replayable,
    left_out_seqs,
    load_transcript,
    read_branch,
    read_tail,
)
from webapp.chat.models import (
    EMBED_OWNER_PREFIX,
    MESSAGE_DEFAULTS,
    Conversation,
    GatewayCall,
    Message,
    Role,
    Status,
    owner_columns,
)
from webapp.chat.search import Hit, search_messages, search_words
from webapp.chat.serialize import message_dict
from webapp.chat.transfer import parse_export
from webapp.db import as_loaded, in_transaction, transaction
from webapp.errors import Conflict, InvalidInput, NotFound, TooManyRequests, refuse_nul
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import Counted, Delta, Finished, Fitted, LLMManager, Plan
from webapp.llm.providers.base import ProviderError, StreamBroken
from webapp.llm.routing import Route, RoutingError
from webapp.llm.window import FitResult
from webapp.settings import Settings
from webapp.timeutil import as_utc, utcnow
from webapp.web.markdown import render_markdown

log = logging.getLogger(__name__)
Statement = TypeVar("Statement", bound=Select | Update)  # type: ignore[type-arg]

DEFAULT_TITLE = "New conversation"
TITLE_MAX = 200
INTERRUPTED_ERROR = "The server stopped before this answer was finished."
UNSTORED_ERROR = "The answer could not be stored."
COUNT_TIMEOUT = 3.0
"""The longest a send waits for its new message to be counted; then it estimates."""

# The statements every send runs, built once: on SQLite, building and caching a statement
# costs about as much as running it.
_RECENT_SENDS = (
    select(Message.created_at)
    .where(
        # Every send touches its conversation, so only conversations touched inside the
        # window can hold sends inside it; each is read by (conversation_id, created_at).
        col(Message.conversation_id).in_(
            select(Conversation.id).where(
                col(Conversation.owner) == bindparam("owned_by"),
                col(Conversation.updated_at) > bindparam("since"),
            )
        ),
        col(Message.role) == Role.USER,
        col(Message.created_at) > bindparam("since"),
    )
    .order_by(col(Message.created_at))
    .limit(bindparam("limit"))
)
"""The owner's sends in the rate limit's window, oldest first, as many as the limit. (No
join: SQLite's RETURNING, where it is also counted, names columns without their table.)"""
_RECENT_CALLS = (
    select(GatewayCall.called_at)
    .where(
        col(GatewayCall.owner) == bindparam("owned_by"),
        col(GatewayCall.called_at) > bindparam("since"),
    )
    .order_by(col(GatewayCall.called_at))
    .limit(bindparam("limit"))
)
"""The owner's gateway calls that stored no message: they count against the same limit."""
_TOUCH_CONVERSATION = (
    update(Conversation)
    .where(
        col(Conversation.id) == bindparam("conversation_id"),
        col(Conversation.owner) == bindparam("owned_by"),
    )
    .values(updated_at=bindparam("now"))
    .returning(
        Conversation,
        select(func.count()).select_from(_RECENT_SENDS.subquery()).scalar_subquery()
        + select(func.count()).select_from(_RECENT_CALLS.subquery()).scalar_subquery(),
    )
)
"""Takes the conversation's lock and counts the owner's recent sends and gateway calls,
in one round trip."""
_INSERT_MESSAGES = insert(Message).returning(col(Message.seq), col(Message.id))
"""Both rows of a turn in one statement; ids come back by seq (SQLite does not promise
RETURNING in VALUES order, and asking for that order costs a statement per row)."""
_UPDATE_MESSAGE = update(Message).where(col(Message.id) == bindparam("message_id"))
"""Sets the columns named by the parameters it is executed with."""


def fit_columns(fit: FitResult, transcript: StoredTranscript) -> dict[str, object]:
    """The facts of a bound, as the user row stores them: what was left out is written
    as seq spans, so no reader has to rebuild it."""
    return {
        "dropped_turns": fit.dropped_turns,
        "fit_model": fit.model,
        "fit_window": fit.window,
        "fit_reserve": fit.reserve,
        "fit_budget": fit.budget,
        "fit_estimated_tokens": fit.estimated_tokens,
        "fit_overflow_at_floor": fit.overflow_at_floor,
        "fit_counted_by": fit.counted_by,
        "fit_left_out": left_out_seqs(transcript, fit),
        "fit_pins_dropped": fit.pins_dropped,
    }


def _store_counts(connection: Connection, tokenizer: str, counts: dict[int, int]) -> None:
    """Add one tokenizer's counts to rows' `token_counts`, keeping the others'."""
    rows = connection.execute(
        select(Message.id, Message.token_counts).where(col(Message.id).in_(list(counts)))
    ).all()
    if rows:
        connection.execute(
            _UPDATE_MESSAGE,
            [
                {"message_id": row_id, "token_counts": {**(known or {}), tokenizer: counts[row_id]}}
                for row_id, known in rows
            ],
        )


def _set_columns(connection: Connection, message_id: int, values: dict[str, object]) -> None:
    connection.execute(_UPDATE_MESSAGE, {**values, "message_id": message_id})


def _flush(connection: Connection, answer_id: int, text: str) -> bool:
    """Store an answer's text so far, unless it was stopped meanwhile: whether it wasn't."""
    result = connection.execute(
        update(Message)
        .where(col(Message.id) == answer_id, col(Message.status) == Status.STREAMING)
        .values(content=text, updated_at=utcnow())
    )
    return result.rowcount > 0


def updated(row: Message, values: dict[str, object]) -> Message:
    """`row` as it reads after an UPDATE that set `values`; no need to read it back."""
    return as_loaded(Message, {**row.model_dump(), **values})


def _stored(plan: Plan) -> StoredTranscript:
    transcript = plan.transcript
    assert isinstance(transcript, StoredTranscript), "a conversation's sends read stored history"
    return transcript


def _check_id(message_id: int) -> None:
    """Ids are 63-bit: a larger one names no row (and must not reach the database)."""
    if not 0 < message_id < 2**63:
        raise NotFound("no such message")


def _owned_in(connection: Connection, owner: str, conversation_id: str) -> Conversation:
    row = connection.execute(
        select(*Conversation.__table__.columns).where(  # type: ignore[attr-defined]
            col(Conversation.id) == conversation_id, col(Conversation.owner) == owner
        )
    ).first()
    if row is None:
        raise NotFound("no such conversation")
    return as_loaded(Conversation, dict(row._mapping))


def _row_in(connection: Connection, conversation_id: str, message_id: int) -> Message:
    """A message of this conversation (a message of another one is not found either)."""
    row = connection.execute(
        select(*Message.__table__.columns).where(  # type: ignore[attr-defined]
            col(Message.id) == message_id, col(Message.conversation_id) == conversation_id
        )
    ).first()
    if row is None:
        raise NotFound("no such message")
    return as_loaded(Message, dict(row._mapping))


def _users(rows: list[Message]) -> list[Message]:
    return [row for row in rows if row.role == Role.USER]


def _fork_title(title: str) -> str:
    suffix = " (fork)"
    return title[: TITLE_MAX - len(suffix)] + suffix


class _RecentConfigurations:
    """Which configuration this process last saw each conversation use: only a hint (for
    counting a new message before its send), so a stale entry costs a re-count, never a
    wrong fit."""

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._known: OrderedDict[str, str] = OrderedDict()

    def get(self, conversation_id: str) -> str | None:
        return self._known.get(conversation_id)

    def remember(self, conversation_id: str, configuration: str) -> None:
        self._known[conversation_id] = configuration
        self._known.move_to_end(conversation_id)
        if len(self._known) > self._size:
            self._known.popitem(last=False)


@dataclass(slots=True)
class Send:
    conversation: Conversation
    user: Message
    answer: Message
    running: RunningAnswer


@dataclass(slots=True)
class Progress:
    """The answer so far, shared by the task that reads the provider and the one that flushes."""

    parts: list[str] = field(default_factory=list)
    length: int = 0
    flushed: int = 0
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


def clean_title(title: str) -> str:
    title = " ".join(refuse_nul(title, "the title").split())
    if not title:
        raise InvalidInput("the title is empty")
    if len(title) > TITLE_MAX:
        raise InvalidInput(f"the title is {len(title)} characters; the limit is {TITLE_MAX}")
    return title


def title_from(content: str) -> str:
    words = " ".join(content.split())
    return words if len(words) <= 60 else words[:57].rstrip() + "..."


class ConversationService:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        manager: LLMManager,
        settings: Settings,
        answers: AnswerRegistry | None = None,
    ) -> None:
        self.sessions = sessions
        self.manager = manager
        self.settings = settings
        self.answers = answers or AnswerRegistry()
        self._configurations = _RecentConfigurations()

    # Conversations

    async def create(
        self, owner: str, configuration: str | None = None, title: str | None = None
    ) -> Conversation:
        configuration = configuration or self.manager.catalog.default_configuration
        self.check_configuration(configuration)
        conversation = Conversation(
            owner=owner,
            **owner_columns(owner),
            configuration=configuration,
            title=clean_title(title) if title is not None else DEFAULT_TITLE,
        )
        async with transaction(self.sessions) as session:
            session.add(conversation)
        self._configurations.remember(conversation.id, conversation.configuration)
        return conversation

    async def list(self, owner: str, limit: int = 200, offset: int = 0) -> list[Conversation]:
        async with self.sessions() as session:
            query = (
                select(Conversation)
                .where(Conversation.owner == owner)
                .order_by(col(Conversation.updated_at).desc(), col(Conversation.id))
                .offset(offset)
                .limit(limit)
            )
            return list(await session.exec(query))

    async def search(self, owner: str, query: object) -> list[Hit]:
        """`owner`'s finished messages that contain every word of `query`, best first."""
        words = search_words(query)  # a bad query is refused before any database work
        engine: AsyncEngine = self.sessions.kw["bind"]
        async with engine.connect() as connection:
            return await connection.run_sync(search_messages, owner, " ".join(words))

    async def import_conversation(self, owner: str, data: object) -> Conversation:
        """A new conversation of `owner` holding a JSON export's messages and fit facts,
        as they were; `prior_turns` is recounted, answers are rendered once more."""
        catalog = self.manager.catalog
        imported = parse_export(
            data,
            default_configuration=catalog.default_configuration,
            known=set(catalog.configurations),
        )
        now = utcnow()
        conversation = Conversation(
            owner=owner,
            **owner_columns(owner),
            configuration=imported.configuration,
            title=clean_title(imported.title),
            created_at=imported.created_at or now,
            updated_at=now,
        )
        conversation.active_seq = imported.active_seq
        # prior_turns speaks of each row's own branch: the replayable turns on the path up
        # to the row it continues (`upto`, by seq; 0 is the very start).
        rows: list[dict[str, object]] = []
        upto = {0: 0}
        for values in imported.messages:
            values = {**values, "created_at": values["created_at"] or now, "updated_at": now}
            seq = values["seq"]
            parent = values["parent_seq"] if values["parent_seq"] is not None else seq - 1
            if values["estimated_tokens"] is None:
                values["estimated_tokens"] = estimate_message(values)
            if values["role"] == Role.USER:
                values["prior_turns"] = upto[parent]
                upto[seq] = upto[parent]
            else:
                upto[seq] = upto[parent] + is_replayable(values["status"], values["content"])
                values["content_html"] = str(render_markdown(values["content"]))
            rows.append(values)
        async with transaction(self.sessions) as session:
            session.add(conversation)
            await session.flush()
            session.add_all(Message(conversation_id=conversation.id, **values) for values in rows)
        self._configurations.remember(conversation.id, conversation.configuration)
        return conversation

    async def record(self, owner: str, conversation_id: str) -> tuple[Conversation, list[Message]]:
        """Every stored message of every branch, in seq order: what an export carries."""
        async with self.sessions() as session:
            conversation = await self._owned(session, owner, conversation_id)
            query = (
                select(Message)
                .where(Message.conversation_id == conversation_id)
                .order_by(col(Message.seq))
            )
            return conversation, list(await session.exec(query))

    async def get(self, owner: str, conversation_id: str) -> Conversation:
        async with self.sessions() as session:
            return await self._owned(session, owner, conversation_id)

    async def history(self, owner: str, conversation_id: str) -> tuple[Conversation, list[Message]]:
        """The active branch, oldest first (see `alternatives_of` for its alternatives)."""
        await self.reap_stale(conversation_id)
        async with self.sessions() as session:
            conversation = await self._owned(session, owner, conversation_id)

            def read(connection: Connection) -> list[Message]:
                branch = read_branch(connection, conversation_id, conversation.active_seq)
                return whole_branch(connection, conversation_id, branch)

            rows = await (await session.connection()).run_sync(read)
            return conversation, rows

    async def page(
        self,
        owner: str,
        conversation_id: str,
        *,
        before_seq: int | None = None,
        turns: int = 50,
        through_message: int | None = None,
    ) -> tuple[Conversation, list[Message], bool]:
        """The newest `turns` turns of the active branch before `before_seq` (default: the
        newest of all), oldest first, and whether older ones exist. A page of a long
        conversation reads only that; `through_message` (a search hit) reaches back far
        enough to include that message when it is on the active branch."""
        await self.reap_stale(conversation_id)
        async with self.sessions() as session:
            conversation = await self._owned(session, owner, conversation_id)
            wanted = await session.get(Message, through_message) if through_message else None
            if wanted is not None and wanted.conversation_id != conversation_id:
                wanted = None

            def read(connection: Connection) -> tuple[list[Message], bool]:
                branch = read_branch(connection, conversation_id, conversation.active_seq)
                below = branch.leaf + 1 if before_seq is None else before_seq
                size = 2 * turns
                if wanted is not None:
                    # Seqs of other branches lie between: reading by seq distance is enough.
                    size = max(size, below - wanted.seq + 2)
                rows = newest_on_branch(connection, conversation_id, branch, below, size)
                if rows and rows[-1].role == Role.ASSISTANT:
                    rows.pop()  # start a page on a user row so a turn is never split
                rows.reverse()
                return rows, bool(rows) and rows[0].seq > branch.first

            rows, has_older = await (await session.connection()).run_sync(read)
        return conversation, rows, has_older

    async def alternatives_of(
        self, conversation_id: str, rows: list[Message]
    ) -> dict[int, Alternatives]:
        """The alternatives of the user rows among `rows` (of a conversation already checked)."""
        async with self.sessions() as session:
            connection = await session.connection()
            return await connection.run_sync(alternatives, conversation_id, _users(rows))

    async def message(self, owner: str, conversation_id: str, message_id: int) -> Message:
        _check_id(message_id)
        async with self.sessions() as session:
            await self._owned(session, owner, conversation_id)
            row = await session.get(Message, message_id)
            if row is None or row.conversation_id != conversation_id:
                raise NotFound("no such message")
            return row

    async def user_row_of(self, answer: Message) -> Message:
        """The user row an answer answers: always the row just before it."""
        async with self.sessions() as session:
            rows = await session.exec(
                select(Message).where(
                    Message.conversation_id == answer.conversation_id,
                    Message.seq == answer.seq - 1,
                )
            )
            return rows.one()

    async def rename(self, owner: str, conversation_id: str, title: str) -> Conversation:
        title = clean_title(title)
        async with transaction(self.sessions) as session:
            conversation = await self._owned(session, owner, conversation_id)
            conversation.title = title
            conversation.updated_at = utcnow()
            session.add(conversation)
        return conversation

    async def delete(self, owner: str, conversation_id: str) -> None:
        running = await self._streaming_answer_id(owner, conversation_id)
        if running is not None and self.answers.request_stop(running):
            await self._settle(running)
        async with transaction(self.sessions) as session:
            conversation = await self._owned(session, owner, conversation_id)
            await session.delete(conversation)

    def check_configuration(self, configuration: str) -> None:
        catalog = self.manager.catalog
        if configuration not in catalog.configurations:
            known = ", ".join(catalog.configurations)
            raise InvalidInput(f"unknown configuration {configuration!r}; known: {known}")

    async def set_configuration(
        self, owner: str, conversation_id: str, configuration: str
    ) -> Conversation:
        """Switch the conversation to another configuration: the next send is bounded
        against its model. Nothing already stored changes."""
        self.check_configuration(configuration)
        async with transaction(self.sessions) as session:
            conversation = await self._owned(session, owner, conversation_id)
            conversation.configuration = configuration
            conversation.updated_at = utcnow()
            session.add(conversation)
        self._configurations.remember(conversation_id, configuration)
        return conversation

    async def pin(
        self, owner: str, conversation_id: str, message_id: int, pinned: bool = True
    ) -> Message:
        """Pin (or unpin) a user turn: a pinned turn is sent on every later send, after the
        head, as long as head, pins and the newest turn fit."""
        _check_id(message_id)
        async with transaction(self.sessions) as session:
            await self._owned(session, owner, conversation_id)
            row = await session.get(Message, message_id)
            if row is None or row.conversation_id != conversation_id:
                raise NotFound("no such message")
            if row.role != Role.USER:
                raise InvalidInput("only a user's message can be pinned: it pins its whole turn")
            row.pinned = pinned
            row.updated_at = utcnow()
            session.add(row)
        return row

    async def preview(self, owner: str, conversation_id: str, content: object) -> Message:
        """The user row the next send of `content` would write, with its fit, stored
        nowhere: what the context meter shows while the user types. Read without the
        conversation's lock, so it may be a send behind; the send itself fits again."""
        text = self.validate_content(content)
        async with self.sessions() as session:
            conversation = await self._owned(session, owner, conversation_id)
        route = self._route(conversation)
        if isinstance(route, RoutingError):
            raise InvalidInput(str(route))
        # The text being typed is estimated, not sent to the engine's tokenizer on every
        # pause: the history's counts are stored already, and the send counts it exactly.
        counts: dict[str, int] = {}
        newest = {"role": Role.USER.value, "content": text}

        def plan(connection: Connection) -> Plan:
            tokenizers = self.manager.exact_tokenizers(route)
            tail = read_tail(connection, conversation_id, tokenizers, conversation.active_seq)
            return self._plan(
                connection, conversation, route, tail, newest, estimate_message(newest), counts
            )

        async with self.sessions() as session:
            connection = await session.connection()
            planned = await connection.run_sync(plan)
            await session.rollback()
        now = utcnow()
        return as_loaded(
            Message,
            {
                **MESSAGE_DEFAULTS,
                "id": None,
                "conversation_id": conversation_id,
                "seq": planned.transcript.seqs[-1],  # type: ignore[attr-defined]
                "role": Role.USER,
                "content": text,
                "created_at": now,
                "updated_at": now,
                "token_counts": counts or None,
                **fit_columns(planned.fit, _stored(planned)),
            },
        )

    async def purge_idle(self, days: float, *, dry_run: bool = False) -> list[Conversation]:
        """Delete conversations nobody touched for `days` days (messages go with them)."""
        cutoff = utcnow() - timedelta(days=days)
        async with transaction(self.sessions) as session:
            idle = list(
                await session.exec(
                    select(Conversation)
                    .where(col(Conversation.updated_at) < cutoff)
                    .order_by(col(Conversation.updated_at))
                )
            )
            if not dry_run and idle:
                await session.execute(
                    delete(Conversation).where(col(Conversation.id).in_([c.id for c in idle]))
                )
        return idle

    # Sending

    def validate_content(self, content: object) -> str:
        if not isinstance(content, str):
            raise InvalidInput("content must be a string")
        if not content.strip():
            raise InvalidInput("the message is empty")
        refuse_nul(content, "the message")
        limit = self.settings.max_message_chars
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
            _check_id(edit_of)
        return await asyncio.shield(self._send(owner, conversation_id, text, edit_of))

    async def regenerate(self, owner: str, conversation_id: str, message_id: int) -> Send:
        """A new answer to a user turn: the same message sent again as an alternative to it,
        so the original send, its answer and its fit facts stay on record as they were."""
        original = await self.message(owner, conversation_id, message_id)
        if original.role != Role.USER:
            raise InvalidInput("regenerate names a user's message: its turn gets a new answer")
        return await asyncio.shield(
            self._send(owner, conversation_id, original.content, message_id)
        )

    async def _send(
        self, owner: str, conversation_id: str, text: str, alternative_to: int | None = None
    ) -> Send:
        counts = await self._count_newest(conversation_id, text)
        conversation, user, answer, planned = await in_transaction(
            self.sessions, self._store_turn, owner, conversation_id, text, counts, alternative_to
        )
        self._configurations.remember(conversation.id, conversation.configuration)
        running = self.answers.start(
            answer.id,  # type: ignore[arg-type]
            lambda channel, stop: self._write_answer(user, answer, planned, channel, stop),
        )
        return Send(conversation, user, answer, running)

    async def branch(self, owner: str, conversation_id: str, message_id: int) -> Conversation:
        """Show and continue the branch through a message, down to its newest leaf."""
        _check_id(message_id)

        def switch(connection: Connection) -> Conversation:
            conversation = _owned_in(connection, owner, conversation_id)
            row = _row_in(connection, conversation_id, message_id)
            leaf = leaf_through(connection, conversation_id, row.seq)
            newest = connection.execute(
                select(func.max(Message.seq)).where(Message.conversation_id == conversation_id)
            ).scalar()
            active = None if leaf == newest else leaf
            connection.execute(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(active_seq=active)
            )
            return as_loaded(Conversation, {**conversation.model_dump(), "active_seq": active})

        return await in_transaction(self.sessions, switch)

    async def fork(self, owner: str, conversation_id: str, message_id: int) -> Conversation:
        """A new conversation (same owner and configuration) holding the branch up to and
        including the turn of a message, renumbered from 1, every fit fact kept."""
        _check_id(message_id)

        def copy(connection: Connection) -> Conversation:
            source = _owned_in(connection, owner, conversation_id)
            row = _row_in(connection, conversation_id, message_id)
            end = row.seq + 1 if row.role == Role.USER else row.seq
            rows = whole_branch(
                connection, conversation_id, read_branch(connection, conversation_id, end)
            )
            if any(r.status == Status.STREAMING for r in rows):
                raise Conflict("this answer is still being written; fork it once it is done")
            now = utcnow()
            fork = Conversation(
                owner=owner,
                **owner_columns(owner),
                configuration=source.configuration,
                title=_fork_title(source.title),
                created_at=now,
                updated_at=now,
            )
            connection.execute(insert(Conversation).values(fork.model_dump()))
            copies = renumbered(rows, fork.id)
            if copies:
                connection.execute(insert(Message), copies)
            return fork

        fork = await in_transaction(self.sessions, copy)
        self._configurations.remember(fork.id, fork.configuration)
        return fork

    async def _count_newest(self, conversation_id: str, text: str) -> dict[str, int]:
        """Count a new message with the tokenizer of the model that will be asked first,
        before the send's transaction (counting may mean a request to the engine, which
        must not hold the conversation's lock). Which model that is comes from what this
        process last saw of the conversation; when it does not know, or the tokenizer
        fails, the answer task counts it instead (`LLMManager.count_missing`)."""
        configuration = self._configurations.get(conversation_id)
        if configuration is None:
            return {}
        try:
            route = self.manager.route(configuration)
        except RoutingError:
            return {}
        tokenizer = self.manager.tokenizer_for(route.primary)
        if not tokenizer.exact:
            return {}
        try:
            (count,) = await asyncio.wait_for(tokenizer.count([text]), COUNT_TIMEOUT)
        except Exception as error:  # any failure of a tokenizer: the send estimates instead
            log.warning("could not count a new message with %s: %s", tokenizer.id, error)
            return {}
        return {tokenizer.id: count}

    def _store_turn(
        self,
        connection: Connection,
        owner: str,
        conversation_id: str,
        text: str,
        counts: dict[str, int] | None = None,
        alternative_to: int | None = None,
    ) -> tuple[Conversation, Message, Message, Plan | RoutingError]:
        """The send's one transaction. It starts by taking the conversation's lock (a row
        lock on PostgreSQL, the write lock on SQLite), so two sends can never interleave
        their rows, and the history the bound reads is exactly the history the new row
        follows: the active branch, or, for an alternative to a user turn, the branch up
        to the row that turn continued. The new turn becomes the active branch's leaf."""
        now = utcnow()
        limit = self.rate_limit_for(owner)
        touched = connection.execute(
            _TOUCH_CONVERSATION,
            {
                "conversation_id": conversation_id,
                "owned_by": owner,
                "now": now,
                "since": now - timedelta(seconds=self.settings.rate_limit_window),
                "limit": max(limit, 0),
            },
        ).first()
        if touched is None:
            raise NotFound("no such conversation")
        *columns, recent_sends = touched
        conversation = as_loaded(Conversation, dict(zip(touched._fields, columns, strict=False)))
        if limit > 0 and recent_sends >= limit:
            self._refuse_too_many(connection, owner, limit, now)
        leaf = conversation.active_seq
        if alternative_to is not None:
            original = _row_in(connection, conversation_id, alternative_to)
            if original.role != Role.USER:
                raise InvalidInput("edit_of names a user's message: an answer is regenerated")
            leaf = parent_of(original)
        route = self._route(conversation)
        tokenizers = self.manager.exact_tokenizers(route) if isinstance(route, Route) else []
        tail = read_tail(connection, conversation_id, tokenizers, leaf)
        if tail.answering:
            self._refuse_if_busy(connection, conversation_id)
            tail = read_tail(connection, conversation_id, tokenizers, leaf)
        newest = {"role": Role.USER.value, "content": text}
        user_tokens = estimate_message(newest)
        planned = (
            self._plan(connection, conversation, route, tail, newest, user_tokens, counts)
            if isinstance(route, Route)
            else route
        )
        common = {"conversation_id": conversation_id, "created_at": now, "updated_at": now}
        rows = [
            {
                **MESSAGE_DEFAULTS,
                **common,
                "seq": tail.next_seq,
                "parent_seq": tail.parent_seq,
                "role": Role.USER,
                "content": text,
                "estimated_tokens": user_tokens,
                "prior_turns": tail.prior_turns,
                "token_counts": counts or None,
                **(fit_columns(planned.fit, _stored(planned)) if isinstance(planned, Plan) else {}),
            },
            {
                **MESSAGE_DEFAULTS,
                **common,
                "seq": tail.next_seq + 1,
                "role": Role.ASSISTANT,
                "status": Status.STREAMING,
            },
        ]
        ids = dict(connection.execute(_INSERT_MESSAGES, rows).all())
        user, answer = (as_loaded(Message, {**row, "id": ids[row["seq"]]}) for row in rows)
        if isinstance(planned, Plan):
            # The new message is stored now: counts made for it later are kept on its row.
            stored = _stored(planned)
            with_id = dataclasses.replace(stored, ids=[*(stored.ids or [])[:-1], user.id])
            planned = dataclasses.replace(planned, transcript=with_id)
        if conversation.active_seq is not None:  # the new answer is the newest row again
            connection.execute(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(active_seq=None)
            )
            conversation.active_seq = None
        if user.seq == 1 and conversation.title == DEFAULT_TITLE:
            conversation.title = title_from(text)
            connection.execute(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(title=conversation.title)
            )
        return conversation, user, answer, planned

    def _route(self, conversation: Conversation) -> Route | RoutingError:
        """A configuration that no longer routes anywhere is the answer's failure, not the
        send's: the message is kept all the same."""
        try:
            return self.manager.route(conversation.configuration)
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
    ) -> Plan:
        """Read as much history as the route could send and fit it for the model that will
        be asked first."""
        system = route.configuration.system_prompt
        system_message = {"role": "system", "content": system} if system else None
        transcript = load_transcript(
            connection,
            conversation.id,
            tail,
            newest,  # type: ignore[arg-type]
            newest_tokens,
            budget=self.manager.largest_budget(route),
            system_prompt=system_message,  # type: ignore[arg-type]
            system_tokens=estimate_message(system_message) if system_message else 0,
            system_counts=self.manager.system_counts(route, system) if system else None,
            sizers=self.manager.sizers(route),
            newest_counts=newest_counts,
        )
        return self.manager.plan(route, transcript)

    async def settle(self, send: Send) -> tuple[Message, Message]:
        """Wait for the answer (it goes on even if the caller goes away) and reload both rows."""
        await asyncio.shield(send.running.task)
        async with self.sessions() as session:
            user = await session.get(Message, send.user.id)
            answer = await session.get(Message, send.answer.id)
            assert user is not None and answer is not None
            return user, answer

    async def stop(self, owner: str, conversation_id: str) -> Message | None:
        """Stop the answer being written, wherever it runs; the text so far is kept."""
        answer_id = await self._streaming_answer_id(owner, conversation_id)
        if answer_id is None:
            return None
        async with transaction(self.sessions) as session:
            await session.execute(
                update(Message)
                .where(col(Message.id) == answer_id, col(Message.status) == Status.STREAMING)
                .values(status=Status.STOPPED, updated_at=utcnow())
            )
        if self.answers.request_stop(answer_id):
            await self._settle(answer_id)
        async with self.sessions() as session:
            return await session.get(Message, answer_id)

    async def reap_stale(self, conversation_id: str | None = None) -> int:
        """Mark answers whose writer died (no heartbeat for a while) as interrupted. Pages
        and watchers ask often and there is almost never anything to reap: a read answers
        that, and only a reap takes the write lock."""
        async with self.sessions() as session:
            stale = await session.exec(self._stale(select(Message.id), conversation_id).limit(1))
            if stale.first() is None:
                return 0
        return await in_transaction(self.sessions, self._reap, conversation_id)

    # Internals

    async def _owned(self, session: AsyncSession, owner: str, conversation_id: str) -> Conversation:
        conversation = await session.get(Conversation, conversation_id)
        if conversation is None or conversation.owner != owner:
            raise NotFound("no such conversation")
        self._configurations.remember(conversation.id, conversation.configuration)
        return conversation

    async def _streaming_answer_id(self, owner: str, conversation_id: str) -> int | None:
        async with self.sessions() as session:
            await self._owned(session, owner, conversation_id)
            rows = await session.exec(
                select(Message.id).where(
                    Message.conversation_id == conversation_id,
                    Message.status == Status.STREAMING,
                )
            )
            return rows.first()

    async def _settle(self, answer_id: int, timeout: float = 10.0) -> None:
        running = self.answers.get(answer_id)
        if running is not None:
            await asyncio.wait([running.task], timeout=timeout)

    def _refuse_if_busy(self, connection: Connection, conversation_id: str) -> None:
        """One answer at a time per conversation; an answer whose writer died is reaped."""
        streaming = connection.execute(
            select(Message.updated_at).where(
                Message.conversation_id == conversation_id,
                Message.status == Status.STREAMING,
            )
        )
        heartbeats = [as_utc(updated) for updated in streaming.scalars()]
        cutoff = utcnow() - timedelta(seconds=self.settings.stale_stream_after)
        if any(beat >= cutoff for beat in heartbeats):
            raise Conflict(
                "an answer is still being written in this conversation; "
                "wait for it or stop it first"
            )
        if heartbeats:
            self._reap(connection, conversation_id)

    def rate_limit_for(self, owner: str) -> int:
        if owner.startswith(EMBED_OWNER_PREFIX):
            return self.settings.embed_rate_limit_messages
        return self.settings.rate_limit_messages

    def _refuse_too_many(
        self, connection: Connection, owner: str, limit: int, now: datetime
    ) -> None:
        """The owner has sent `limit` messages (or gateway calls) within the window: say
        when enough of them leave it. The count comes from stored rows, so every worker
        sees the same."""
        window = self.settings.rate_limit_window
        since = now - timedelta(seconds=window)
        params = {"owned_by": owner, "since": since, "limit": limit}
        times = sorted(
            as_utc(t)
            for statement in (_RECENT_SENDS, _RECENT_CALLS)
            for t in connection.execute(statement, params).scalars()
        )
        # Sends may go on once enough of them have left the window to be under the limit.
        leaving = times[len(times) - limit] if len(times) >= limit else None
        wait = max(1, math.ceil((leaving - since).total_seconds())) if leaving else 1
        raise TooManyRequests(
            f"You have sent {limit} messages in the last {window:g} seconds; "
            f"try again in {wait} seconds.",
            retry_after=wait,
        )

    def _stale(self, statement: Statement, conversation_id: str | None) -> Statement:
        """`statement` narrowed to answers still marked streaming whose writer went quiet."""
        cutoff = utcnow() - timedelta(seconds=self.settings.stale_stream_after)
        statement = statement.where(
            col(Message.status) == Status.STREAMING, col(Message.updated_at) < cutoff
        )
        if conversation_id is not None:
            statement = statement.where(col(Message.conversation_id) == conversation_id)
        return statement

    def _reap(self, connection: Connection, conversation_id: str | None) -> int:
        statement = self._stale(update(Message), conversation_id)
        result = connection.execute(
            statement.values(status=Status.INTERRUPTED, error=INTERRUPTED_ERROR)
        )
        return result.rowcount

    async def _record_fit(self, user: Message, fit: FitResult, planned: Plan) -> Message:
        """Store a fit made after the send's own: a fallback model's, a retry's, or one
        made once history was counted."""
        columns = fit_columns(fit, _stored(planned))
        await self._update_message(user, columns)
        return updated(user, columns)

    async def _read_provider(
        self, user: Message, planned: Plan | RoutingError, progress: Progress, channel: Channel
    ) -> None:
        if isinstance(planned, RoutingError):
            raise planned
        progress.trying = planned.fit.model
        channel.publish(Event("fit", message_dict(user)))
        async for event in self.manager.stream(planned):
            if isinstance(event, Counted):
                await in_transaction(self.sessions, _store_counts, event.tokenizer, event.counts)
            elif isinstance(event, Fitted):
                progress.trying = event.fit.model
                user = await self._record_fit(user, event.fit, planned)
                channel.publish(Event("fit", message_dict(user)))
            elif isinstance(event, Delta):
                progress.add(event.text)
                channel.publish(Event("delta", {"text": event.text}, id=str(progress.length)))
            else:
                progress.finished = event

    async def _flush_while_running(
        self, answer_id: int, progress: Progress, stop: asyncio.Event, finished: asyncio.Event
    ) -> None:
        """Write the text so far every little while, which is also the answer's heartbeat;
        notice a stop made by another worker. Never cancelled mid-write: it is told to end."""
        interval = min(self.settings.stream_flush_interval, self.settings.stale_stream_after / 3)
        while True:
            try:
                await asyncio.wait_for(finished.wait(), timeout=interval)
                return
            except TimeoutError:
                pass
            text = progress.text
            still_streaming = await in_transaction(self.sessions, _flush, answer_id, text)
            progress.flushed = len(text)
            if not still_streaming:
                stop.set()
                return

    async def _write_answer(
        self,
        user: Message,
        answer: Message,
        planned: Plan | RoutingError,
        channel: Channel,
        stop: asyncio.Event,
    ) -> None:
        assert answer.id is not None
        progress = Progress()
        reader = asyncio.create_task(self._read_provider(user, planned, progress, channel))
        finished = asyncio.Event()
        flusher = asyncio.create_task(
            self._flush_while_running(answer.id, progress, stop, finished)
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
                status, error = self._failure(failure, progress)
        except asyncio.CancelledError:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            status, error = Status.INTERRUPTED, INTERRUPTED_ERROR
            raise
        finally:
            finished.set()
            stopped.cancel()
            await asyncio.gather(flusher, stopped, return_exceptions=True)
            stored: Message | None = None
            try:
                stored = await asyncio.shield(self._finish(answer, progress, status, error))
            finally:
                # Whoever watches hears the end, even when the end could not be stored.
                if stored is None:
                    status, error = Status.FAILED, UNSTORED_ERROR
                final = message_dict(stored or answer)
                if status in (Status.COMPLETE, Status.STOPPED):
                    channel.publish(Event("done", final), last=True)
                else:
                    message = error or "the answer failed"
                    channel.publish(
                        Event("error", {"message": message, "assistant": final}), last=True
                    )

    def _failure(self, failure: BaseException, progress: Progress) -> tuple[Status, str]:
        """What the answer's row says went wrong. It is read by the user (and by an embed's
        visitors), so it names the model, never the provider's address: the details go
        to the log."""
        if isinstance(failure, ProviderError):
            log.warning("answer failed: %s", failure.message)
            interrupted = isinstance(failure, StreamBroken) or progress.length > 0
            status = Status.INTERRUPTED if interrupted else Status.FAILED
            return status, failure.public(progress.trying or "The model")
        if isinstance(failure, RoutingError):
            return Status.FAILED, str(failure)
        log.error("answer failed", exc_info=failure)
        return Status.FAILED, "The answer failed because of an internal error."

    async def _finish(
        self, answer: Message, progress: Progress, status: Status, error: str | None
    ) -> Message:
        text = progress.text
        finished = progress.finished
        usage = finished.usage if finished is not None else None
        served_by = finished.model if finished is not None else progress.model
        values: dict[str, object] = {
            "token_counts": await self._count_answer(served_by, text),
            "content": text,
            "content_html": str(render_markdown(text)),
            "status": status,
            "error": error,
            "updated_at": utcnow(),
            "estimated_tokens": (
                estimate_message({"role": Role.ASSISTANT.value, "content": text}) if text else 0
            ),
            "model": finished.model if finished is not None else progress.model,
            "finish_reason": finished.finish_reason if finished is not None else None,
            "prompt_tokens": usage.prompt_tokens if usage is not None else None,
            "completion_tokens": usage.completion_tokens if usage is not None else None,
        }
        await self._update_message(answer, values)
        return updated(answer, values)

    async def _count_answer(self, model: str | None, text: str) -> dict[str, int] | None:
        """An answer is counted once, when it is final, by the model that wrote it."""
        spec = self.manager.catalog.models.get(model) if model else None
        if spec is None or not text:
            return None
        tokenizer = self.manager.tokenizer_for(spec)
        if not tokenizer.exact:
            return None
        try:
            (count,) = await asyncio.wait_for(tokenizer.count([text]), COUNT_TIMEOUT)
        except Exception as error:  # any failure of a tokenizer: a later send counts it
            log.warning("could not count an answer with %s: %s", tokenizer.id, error)
            return None
        return {tokenizer.id: count}

    async def _update_message(self, row: Message, values: dict[str, object]) -> None:
        await in_transaction(self.sessions, _set_columns, row.id, values)
