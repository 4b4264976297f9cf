"""What the admin review reads: trimmed conversations, the overview counts, one review.

Everything a list or a chart shows is aggregated in SQL (GROUP BY over the user rows
that carry `dropped_turns > 0`), so the cost follows the number of conversations on a
page, never the number of stored messages. The same statements run on SQLite and
PostgreSQL; the one place they differ, the UTC calendar day of a timestamp, is chosen
by dialect in `_utc_day`, and every per-day figure (trims, the prompt cache) buckets by it.

The review of one conversation reads a page of it (issue 43): the text of the page's turns
only, and of the spans stored on each send a page, picked out of the stored JSON by the
database; of the rest of the history only each row's seq, role, parent, status and model
(turn numbers need them). Which turns a send left out is read from the spans the send
stored (`fit_left_out`), the same record the chat highlights: nothing is re-derived, so
the review can never disagree with what was sent, whatever rule sent it.
"""

from __future__ import annotations

import csv
import io
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Generic, NamedTuple, TypeVar

from sqlalchemy import (
    ColumnElement,
    Date,
    and_,
    case,
    cast,
    exists,
    func,
    literal_column,
    or_,
)
from sqlalchemy import select as sa_select
from sqlalchemy import text as sa_text
from sqlalchemy.orm import aliased, defer
from sqlmodel import Session, col, select

from webapp.accounts.models import User, username_key
from webapp.admin.listing import Listing, ReviewPaging
from webapp.chat.stored.feedback import FEEDBACK
from webapp.chat.stored.history import is_replayable
from webapp.chat.stored.models import Conversation, Message, Role, Status, Summary
from webapp.errors import InvalidInput, NotFound
from webapp.owners import EMBED_OWNER_PREFIX
from webapp.timeutil import as_utc, utcnow

T = TypeVar("T")

UNKNOWN_MODEL = "(unknown)"

_answer = aliased(Message, name="answer")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    """Rows matching the filters, over all pages."""
    page: int
    per_page: int | None
    """None: everything on one page (the CSV export)."""

    @property
    def pages(self) -> int:
        if not self.per_page:
            return 1
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def has_previous(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages


@dataclass(frozen=True, slots=True)
class TrimmedRow:
    conversation_id: str
    title: str
    owner: str
    """As stored: `user:<id>` or `embed:<name>:<visitor>`."""
    owner_name: str
    """What a person reads: the username, or "embed visitor (<embed name>)"."""
    configuration: str
    models: list[str]
    """Distinct models that served an answer in the conversation, by name."""
    trimmed_turns: int
    most_dropped: int
    """The most turns a single send left out."""
    last_activity: datetime


@dataclass(frozen=True, slots=True)
class DayCount:
    day: date
    trimmed_turns: int


@dataclass(frozen=True, slots=True)
class ModelCount:
    model: str
    """The model the trimmed sends were sized for (the user row's `fit_model`)."""
    trimmed_turns: int


@dataclass(frozen=True, slots=True)
class CacheDay:
    """What the engine's prompt cache served for one model on one UTC day.

    An answer is an assistant row a model served (its `model` is known) that did not
    fail. It has a cache report when the engine said both its prompt tokens and how many
    of them came from its cache; the share is over those answers only, so an engine that
    never says is "unknown" (`share` None), never 0%.
    """

    day: date
    model: str
    """The model that served the answers, and that the sends counted here were sized for."""
    reported: int
    """Answers with a cache report."""
    unreported: int
    """Answers without one (the engine did not say how much came from its cache)."""
    prompt_tokens: int
    """Prompt tokens of the answers with a cache report."""
    cached_tokens: int
    """Of those, the tokens the engine served from its cache."""
    cut_moved: int
    """Sends sized for this model whose cut moved, so the cache could not be reused past
    the head (user rows with `fit_cut_moved` true)."""
    evaluated_tokens: int | None = None
    """Prompt tokens the engine evaluated, over the answers that say it (None: none does)."""
    cache_write_tokens: int | None = None
    """Prompt tokens the engine wrote to its cache, over the answers that say it."""
    cleared: int = 0
    """Sends sized for this model that carried older tool results as stubs (user rows
    with `fit_cleared`: `webapp.llm.clearing`)."""

    @property
    def share(self) -> float | None:
        """cached / prompt tokens over the answers with a report; None when unknown."""
        if not self.reported or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens


@dataclass(frozen=True, slots=True)
class FitFacts:
    model: str | None
    window: int | None
    budget: int | None
    estimated_tokens: int | None
    reserve: int | None
    overflow_at_floor: bool | None

    @classmethod
    def of(cls, row: Message) -> FitFacts:
        return cls(
            model=row.fit_model,
            window=row.fit_window,
            budget=row.fit_budget,
            estimated_tokens=row.fit_estimated_tokens,
            reserve=row.fit_reserve,
            overflow_at_floor=row.fit_overflow_at_floor,
        )


@dataclass(frozen=True, slots=True)
class TrimmedTurn:
    seq: int
    """The trimmed user row's sequence number."""
    dropped_turns: int
    spans: tuple[tuple[int, int], ...]
    """What this send left out, as stored: inclusive [first_seq, last_seq] spans (in a
    review read by pages, the page of them it shows, from `spans_from`)."""
    fit: FitFacts
    pins_dropped: int = 0
    spans_total: int | None = None
    """How many spans the send stored (None: `spans` are all of them)."""
    spans_from: int = 0
    """The index of the first of `spans` among the send's stored spans."""

    @property
    def more_spans(self) -> bool:
        return self.spans_total is not None and self.spans_from + len(self.spans) < self.spans_total


@dataclass(frozen=True, slots=True)
class LeftOutBy:
    """Which sends left one turn out: how many, and the first and last of them."""

    count: int
    first: int
    last: int
    """Turn numbers (as people count turns) of the first and the last send that left the
    turn out: the review shows them as they are."""


@dataclass(frozen=True, slots=True)
class Review:
    conversation: Conversation
    owner_name: str
    messages: list[Message]
    """The stored history the review shows, oldest first: all of it, or a page of turns."""
    trimmed: list[TrimmedTurn]
    """The trimmed sends among `messages`."""
    models: list[str]
    turn_numbers: dict[int, int]
    """User seq -> its turn's number as people count them (1 for the first message)."""
    sendable: list[int] = field(default_factory=list)
    """User seqs of the turns whose answer is replayed, oldest first: the turns a send
    can leave out (a failed turn inside a stored span was never sent, so it is not)."""
    covering: list[TrimmedTurn] | None = None
    """Every trimmed send (oldest first) with the stored spans that reach `messages`: who
    left the shown turns out (None: `trimmed` says it, the review being whole)."""
    stored_messages: int = 0
    turns: int = 0
    """Turns of the whole history (the pages' count)."""
    trimmed_sends: int = 0
    """Trimmed sends of the whole history."""
    paging: ReviewPaging = field(default_factory=ReviewPaging)
    summaries: list[Summary] = field(default_factory=list)
    """Every summary of what the cut left out, of every branch, oldest first."""

    @property
    def pages(self) -> int:
        per_page = self.paging.per_page
        return max(1, math.ceil(self.turns / per_page)) if per_page else 1

    def left_out(self, turn: TrimmedTurn) -> list[int]:
        """User seqs of the sendable turns inside `turn`'s stored spans, oldest first."""
        users = self.sendable
        return [
            seq
            for first, last in turn.spans
            for seq in users[bisect_left(users, first) : bisect_right(users, last)]
        ]

    def left_out_by(self) -> dict[int, LeftOutBy]:
        """User seq of each left-out turn -> the sends that left it out, named by their
        turn numbers.

        Each send's spans are intervals over the turns. Counts come from one running sum
        over interval ends; the first (and last) sender of each turn from painting the
        intervals in send order (and in reverse), each turn painted once, so a long
        conversation where every send trims costs what its spans cost, not their square.
        """
        users = self.sendable
        intervals = [
            (turn.seq, bisect_left(users, first), bisect_right(users, last))
            for turn in (self.trimmed if self.covering is None else self.covering)
            for first, last in turn.spans
        ]
        delta = [0] * (len(users) + 1)
        for _, start, stop in intervals:
            delta[start] += 1
            delta[stop] -= 1
        counts, running = [], 0
        for step in delta[:-1]:
            running += step
            counts.append(running)
        first = _paint(len(users), intervals)
        last = _paint(len(users), reversed(intervals))
        numbers = self.turn_numbers
        return {
            seq: LeftOutBy(count, numbers[by_first], numbers[by_last])
            for seq, count, by_first, by_last in zip(users, counts, first, last, strict=True)
            if count and by_first is not None and by_last is not None
        }


def _paint(size: int, intervals: Iterable[tuple[int, int, int]]) -> list[int | None]:
    """Give each position the label of the first interval covering it; a position is
    never painted twice (skip pointers jump over painted stretches)."""
    label: list[int | None] = [None] * size
    skip = list(range(size + 1))

    def next_free(i: int) -> int:
        root = i
        while skip[root] != root:
            root = skip[root]
        while skip[i] != root:
            skip[i], i = root, skip[i]
        return root

    for name, start, stop in intervals:
        i = next_free(start)
        while i < stop:
            label[i] = name
            skip[i] = i + 1
            i = next_free(i + 1)
    return label


def owner_name(owner: str, username: str | None) -> str:
    if username is not None:
        return username
    kind, _, rest = owner.partition(":")
    if kind == "embed" and rest:
        return f"embed visitor ({rest.split(':', 1)[0]})"
    return owner


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _owner_user_join() -> ColumnElement[bool]:
    return col(Conversation.user_id) == col(User.id)


def _dialect(session: Session) -> str:
    return session.connection().dialect.name


def _utc_day(column: Any, dialect: str) -> ColumnElement[Any]:
    """The UTC calendar day of a stored timestamp. SQLite keeps UTC text (date() reads
    it); PostgreSQL keeps timestamptz, whose date would follow the session's time zone."""
    if dialect == "postgresql":
        return cast(func.timezone(literal_column("'UTC'"), column), Date)
    return func.date(column)


def _as_date(value: date | str) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value)


def trimmed_conversations(
    session: Session, listing: Listing, *, everything: bool = False
) -> Page[TrimmedRow]:
    """Conversations with at least one trimmed send, filtered, sorted and paged in SQL;
    `everything` puts every match on one page (the CSV export).

    Ties in any sort are broken by conversation id, so pages never overlap.
    """
    configuration, model, owner = listing.configuration, listing.model, listing.owner
    since, until, sort = listing.since, listing.until, listing.sort
    page, per_page = (1, None) if everything else (listing.page, listing.per_page)

    trims = (
        select(
            col(Message.conversation_id).label("conversation_id"),
            func.count().label("trimmed_turns"),
            func.max(Message.dropped_turns).label("most_dropped"),
        )
        .where(col(Message.role) == Role.USER, col(Message.dropped_turns) > 0)
        .group_by(col(Message.conversation_id))
        .subquery("trims")
    )
    query = (
        # SQLAlchemy's own select: SQLModel's is typed for four columns at most.
        sa_select(
            col(Conversation.id),
            col(Conversation.title),
            col(Conversation.owner),
            col(User.username),
            col(Conversation.configuration),
            trims.c.trimmed_turns,
            trims.c.most_dropped,
            col(Conversation.updated_at),
        ).outerjoin(User, _owner_user_join())
    )
    if listing.feedback is None:
        query = query.join(trims, trims.c.conversation_id == col(Conversation.id))
    else:
        # Rated answers are reviewed whether or not their conversation was trimmed.
        query = query.outerjoin(trims, trims.c.conversation_id == col(Conversation.id)).where(
            exists().where(
                col(_answer.conversation_id) == col(Conversation.id),
                col(_answer.role) == Role.ASSISTANT,
                col(_answer.feedback) == FEEDBACK[listing.feedback],
            )
        )
    if configuration is not None:
        query = query.where(col(Conversation.configuration) == configuration)
    if model is not None:
        query = query.where(
            exists().where(
                col(_answer.conversation_id) == col(Conversation.id),
                col(_answer.role) == Role.ASSISTANT,
                col(_answer.model) == model,
            )
        )
    if owner is not None:
        matches = [
            col(Conversation.owner) == owner,
            col(User.username_key) == username_key(owner),
        ]
        if owner.startswith(EMBED_OWNER_PREFIX) and owner.count(":") == 1:
            matches.append(col(Conversation.embed_name) == owner[len(EMBED_OWNER_PREFIX) :])
        query = query.where(or_(*matches))
    if since is not None:
        query = query.where(col(Conversation.updated_at) >= _day_start(since))
    if until is not None:
        query = query.where(col(Conversation.updated_at) < _day_start(until + timedelta(days=1)))

    total = session.exec(select(func.count()).select_from(query.subquery())).one()

    key: Any
    if sort == "models":
        # Sorted by the alphabetically first model that served; conversations whose every
        # answer failed before a model spoke have none and sort as the empty string.
        first_model = (
            select(
                col(_answer.conversation_id).label("conversation_id"),
                func.min(_answer.model).label("first_model"),
            )
            .where(
                col(_answer.role) == Role.ASSISTANT,
                col(_answer.model).is_not(None),
                col(_answer.conversation_id).in_(select(trims.c.conversation_id)),
            )
            .group_by(col(_answer.conversation_id))
            .subquery("served")
        )
        query = query.outerjoin(first_model, first_model.c.conversation_id == col(Conversation.id))
        key = func.coalesce(first_model.c.first_model, "")
    else:
        key = {
            # Lower-cased so SQLite (binary) and PostgreSQL (locale) agree on the order.
            "owner": func.lower(func.coalesce(col(User.username), col(Conversation.owner))),
            "title": func.lower(col(Conversation.title)),
            "configuration": col(Conversation.configuration),
            # Zero, not NULL, for a rated conversation that was never trimmed: NULLs sort
            # differently in SQLite and PostgreSQL.
            "trimmed_turns": func.coalesce(trims.c.trimmed_turns, 0),
            "most_dropped": func.coalesce(trims.c.most_dropped, 0),
            "last_activity": col(Conversation.updated_at),
        }[sort]
    query = query.order_by(key.desc() if listing.descending else key.asc(), col(Conversation.id))
    if per_page is not None:
        query = query.offset((page - 1) * per_page).limit(per_page)
    rows = session.connection().execute(query).all()

    served = _served_models(session, [row[0] for row in rows])
    items = [
        TrimmedRow(
            conversation_id=cid,
            title=title,
            owner=raw_owner,
            owner_name=owner_name(raw_owner, username),
            configuration=config,
            models=served.get(cid, []),
            trimmed_turns=trimmed or 0,
            most_dropped=most or 0,
            last_activity=as_utc(updated),
        )
        for cid, title, raw_owner, username, config, trimmed, most, updated in rows
    ]
    return Page(items=items, total=total, page=page, per_page=per_page)


def _served_models(session: Session, ids: Sequence[str]) -> dict[str, list[str]]:
    """The distinct models that answered in each of `ids`: one query for the page."""
    if not ids:
        return {}
    query = (
        select(col(Message.conversation_id), col(Message.model))
        .where(
            col(Message.conversation_id).in_(ids),
            col(Message.role) == Role.ASSISTANT,
            col(Message.model).is_not(None),
        )
        .distinct()
        .order_by(col(Message.conversation_id), col(Message.model))
    )
    served: dict[str, list[str]] = {}
    for cid, name in session.exec(query).all():
        assert name is not None  # only answers whose model is known
        served.setdefault(cid, []).append(name)
    return served


def _days_ending(days: int, today: date | None) -> tuple[date, date]:
    """The first and the last of the `days` UTC days ending `today` (default: today)."""
    if days < 1:
        raise InvalidInput(f"days must be 1 or more, not {days}")
    today = today or utcnow().date()
    return today - timedelta(days=days - 1), today


def _created_within(first: date, last: date) -> ColumnElement[bool]:
    """Rows created on the UTC days `first` to `last`, both included."""
    created = col(Message.created_at)
    return and_(created >= _day_start(first), created < _day_start(last + timedelta(days=1)))


def trimmed_per_day(
    session: Session, days: int = 30, *, today: date | None = None
) -> list[DayCount]:
    """Trimmed sends per UTC day of the user row, for the `days` days ending `today`
    (default: today in UTC), oldest first, days without any included as zero."""
    first, today = _days_ending(days, today)
    day = _utc_day(col(Message.created_at), _dialect(session)).label("day")
    query = (
        select(day, func.count())
        .where(
            col(Message.role) == Role.USER,
            col(Message.dropped_turns) > 0,
            _created_within(first, today),
        )
        .group_by(literal_column("day"))
    )
    counts = {_as_date(value): count for value, count in session.exec(query).all()}
    return [
        DayCount(first + timedelta(days=offset), counts.get(first + timedelta(days=offset), 0))
        for offset in range(days)
    ]


def trimmed_per_model(session: Session) -> list[ModelCount]:
    """Trimmed sends per model they were sized for, most first."""
    model = col(Message.fit_model)
    count = func.count()
    query = (
        select(model, count)
        .where(col(Message.role) == Role.USER, col(Message.dropped_turns) > 0)
        .group_by(model)
        .order_by(count.desc(), model)
    )
    rows = session.exec(query).all()
    return [ModelCount(name or UNKNOWN_MODEL, n) for name, n in rows]


def prompt_cache_per_model_day(
    session: Session, days: int = 30, *, today: date | None = None
) -> list[CacheDay]:
    """The engine's prompt cache per model and UTC day, for the `days` days ending
    `today` (default: today in UTC): newest day first, then by model; only the (model,
    day) pairs with an answer or a send that moved the cut.

    One statement over the message rows: answers are bucketed by the model that served
    them, sends that moved the cut by the model they were sized for (`fit_model`), each
    on the UTC day of its row, by the same `_utc_day` as the trim chart.
    """
    first, today = _days_ending(days, today)
    is_answer = and_(
        col(Message.role) == Role.ASSISTANT,
        col(Message.model).is_not(None),
        col(Message.status) != Status.FAILED,
    )
    moved_cut = and_(col(Message.role) == Role.USER, col(Message.fit_cut_moved).is_(True))
    cleared = and_(col(Message.role) == Role.USER, col(Message.fit_cleared).is_not(None))
    said = and_(col(Message.cached_tokens).is_not(None), col(Message.prompt_tokens).is_not(None))
    reported, unreported = and_(is_answer, said), and_(is_answer, ~said)

    def total(when: ColumnElement[bool], value: Any = 1) -> ColumnElement[Any]:
        return func.sum(case((when, value), else_=0))

    # Grouped by the labels: each CASE carries bound parameters, which PostgreSQL would
    # not recognise as the same expression if it were written out again in GROUP BY.
    model = case(
        (col(Message.role) == Role.ASSISTANT, col(Message.model)), else_=col(Message.fit_model)
    )
    query = (
        sa_select(
            _utc_day(col(Message.created_at), _dialect(session)).label("day"),
            model.label("cache_model"),
            total(reported),
            total(unreported),
            total(reported, col(Message.prompt_tokens)),
            total(reported, col(Message.cached_tokens)),
            total(moved_cut),
            _said_sum(is_answer, col(Message.evaluated_tokens)),
            _said_sum(is_answer, col(Message.cache_write_tokens)),
            total(cleared),
        )
        .where(or_(is_answer, moved_cut, cleared), _created_within(first, today))
        .group_by(literal_column("day"), literal_column("cache_model"))
    )
    rows = [
        CacheDay(
            _as_date(day),
            name or UNKNOWN_MODEL,
            int(reported),
            int(unreported),
            int(prompt),
            int(cached),
            int(moved),
            None if evaluated is None else int(evaluated),
            None if written is None else int(written),
            int(stubbed),
        )
        for day, name, reported, unreported, prompt, cached, moved, evaluated, written, stubbed in (
            session.connection().execute(query).all()
        )
    ]
    # Sorted here, once NULL is UNKNOWN_MODEL: the two databases sort NULLs at opposite ends.
    return sorted(rows, key=lambda row: (-row.day.toordinal(), row.model))


def unreported_models(days: list[CacheDay]) -> list[str]:
    """The models whose answers, over `days`, never carried a cache report."""
    reported: dict[str, bool] = {}
    for row in days:
        if row.reported or row.unreported:
            reported[row.model] = reported.get(row.model, False) or row.reported > 0
    return sorted(model for model, said in reported.items() if not said)


def _said_sum(among: ColumnElement[bool], value: Any) -> ColumnElement[Any]:
    """The sum of `value` over the rows `among` that carry one: NULL when none does (an
    engine that never said is unknown, not 0)."""
    return func.sum(case((and_(among, value.is_not(None)), value), else_=None))


class _Skeleton(NamedTuple):
    """What the review reads of every row: no text, no spans."""

    seq: int
    role: str
    parent_seq: int | None
    status: str
    has_text: bool
    model: str | None


def review(session: Session, conversation_id: str, paging: ReviewPaging | None = None) -> Review:
    """One conversation's stored history and, for each trimmed send, what it left out:
    all of it, or (with `paging`) a page of its turns and a page of each send's spans.

    Of the rows outside the page only their seq, role, parent, status and model are read
    (turn numbers and which turns were sendable need them); of the stored spans, the page
    of spans of each send shown, and those of the other sends that reach the page's turns,
    picked out by the database from the JSON it stores."""
    paging = paging or ReviewPaging()
    conversation = session.get(Conversation, conversation_id)
    if conversation is None:
        raise NotFound("no such conversation")
    in_conversation = col(Message.conversation_id) == conversation_id
    connection = session.connection()
    skeleton = [
        _Skeleton(*row)
        for row in connection.execute(
            sa_select(
                col(Message.seq),
                col(Message.role),
                col(Message.parent_seq),
                col(Message.status),
                col(Message.content) != "",
                col(Message.model),
            )
            .where(in_conversation)
            .order_by(col(Message.seq))
        ).all()
    ]
    starts = [row.seq for index, row in enumerate(skeleton) if row.role == Role.USER or index == 0]
    low, high = _page_window(starts, skeleton[-1].seq if skeleton else 0, paging)
    query = (
        select(Message)
        .options(defer(Message.fit_left_out))  # type: ignore[arg-type]
        .where(in_conversation, col(Message.seq) >= low, col(Message.seq) <= high)
        .order_by(col(Message.seq))
    )
    messages = list(session.exec(query).all())
    username = _username(session, conversation.user_id)

    shown = [row for row in messages if row.role == Role.USER and row.dropped_turns]
    spans_from = (paging.spans - 1) * (paging.spans_per_page or 0)
    spans_of = _send_spans(connection, conversation_id, low, high, paging, spans_from)
    totals = _span_counts(connection, conversation_id, [row.seq for row in shown])
    limited = paging.spans_per_page is not None
    trimmed = [
        TrimmedTurn(
            row.seq,
            row.dropped_turns or 0,
            tuple(spans_of.get(row.seq, ())),
            FitFacts.of(row),
            row.fit_pins_dropped or 0,
            spans_total=totals.get(row.seq, 0) if limited else None,
            spans_from=spans_from,
        )
        for row in shown
    ]
    covering = [
        TrimmedTurn(seq, 0, tuple(spans), FitFacts(None, None, None, None, None, None))
        for seq, spans in _covering_spans(connection, conversation_id, low, high).items()
    ]
    by_seq = {row.seq: row for row in skeleton}
    sendable = [
        row.seq
        for row in skeleton
        if row.role == Role.USER
        and (answer := by_seq.get(row.seq + 1)) is not None
        and answer.role == Role.ASSISTANT
        and is_replayable(answer.status, "x" if answer.has_text else "")
    ]
    models = sorted({row.model for row in skeleton if row.role == Role.ASSISTANT and row.model})
    trimmed_sends = session.exec(
        select(func.count()).where(
            in_conversation, col(Message.role) == Role.USER, col(Message.dropped_turns) > 0
        )
    ).one()
    return Review(
        conversation=conversation,
        owner_name=owner_name(conversation.owner, username),
        messages=messages,
        trimmed=trimmed,
        models=models,
        turn_numbers=turn_numbers(skeleton),
        sendable=sendable,
        covering=covering,
        stored_messages=len(skeleton),
        turns=len(starts),
        trimmed_sends=trimmed_sends,
        paging=paging,
        summaries=list(
            session.exec(
                select(Summary)
                .where(col(Summary.conversation_id) == conversation_id)
                .order_by(col(Summary.id))
            ).all()
        ),
    )


def _page_window(starts: list[int], last: int, paging: ReviewPaging) -> tuple[int, int]:
    """The first and last seq of the page's turns (`starts`: each turn's first seq)."""
    if paging.per_page is None or not starts:
        return 1, last
    first = (paging.page - 1) * paging.per_page
    if first >= len(starts):
        if paging.page > 1:
            raise NotFound(f"the review has {math.ceil(len(starts) / paging.per_page)} pages")
        return 1, last
    stop = first + paging.per_page
    return starts[first], starts[stop] - 1 if stop < len(starts) else last


_SPANS_FROM = {
    "sqlite": (
        "FROM message m, json_each(CASE WHEN json_type(m.fit_left_out) = 'array'"
        " THEN m.fit_left_out ELSE '[]' END) j",
        "CAST(j.key AS INTEGER)",
        "json_extract(j.value, '$[0]')",
        "json_extract(j.value, '$[1]')",
    ),
    "postgresql": (
        "FROM message m CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN"
        " jsonb_typeof(m.fit_left_out) = 'array' THEN m.fit_left_out ELSE '[]'::jsonb END)"
        " WITH ORDINALITY AS j(span, ordinal)",
        "(j.ordinal - 1)",
        "(j.span ->> 0)::integer",
        "(j.span ->> 1)::integer",
    ),
}
"""The stored spans of a conversation's trimmed sends, one row each, read by the database
from the JSON it stores (SQLite's `json_each`, PostgreSQL's `jsonb_array_elements`): the
index of the span in its send, its first and its last seq."""

_TRIMMED_SENDS = "m.conversation_id = :conversation AND m.role = 'user' AND m.dropped_turns > 0"


def _spans_sql(connection: Any, where: str, order: str) -> Any:
    source, index, first, last = _SPANS_FROM[connection.dialect.name]
    return sa_text(
        f"SELECT m.seq, {index} AS ix, {first} AS first_seq, {last} AS last_seq {source}"
        f" WHERE {_TRIMMED_SENDS} AND {where} ORDER BY {order}"
    )


def _send_spans(
    connection: Any,
    conversation_id: str,
    low: int,
    high: int,
    paging: ReviewPaging,
    spans_from: int,
) -> dict[int, list[tuple[int, int]]]:
    """The page of spans of each trimmed send between seqs `low` and `high`."""
    _, index, _, _ = _SPANS_FROM[connection.dialect.name]
    stop = spans_from + paging.spans_per_page if paging.spans_per_page is not None else None
    window = f"m.seq >= :low AND m.seq <= :high AND {index} >= :start"
    if stop is not None:
        window += f" AND {index} < :stop"
    statement = _spans_sql(connection, window, "m.seq, ix")
    found: dict[int, list[tuple[int, int]]] = {}
    parameters = {
        "conversation": conversation_id,
        "low": low,
        "high": high,
        "start": spans_from,
        "stop": stop,
    }
    for seq, _, first, last in connection.execute(statement, parameters):
        found.setdefault(seq, []).append((first, last))
    return found


def _covering_spans(
    connection: Any, conversation_id: str, low: int, high: int
) -> dict[int, list[tuple[int, int]]]:
    """Each trimmed send's stored spans that reach seqs `low` to `high`, sends oldest
    first (a send leaves out only what came before it: sends after `low`)."""
    _, _, first, last = _SPANS_FROM[connection.dialect.name]
    reach = f"m.seq > :low AND {first} <= :high AND {last} >= :low"
    statement = _spans_sql(connection, reach, "m.seq, ix")
    found: dict[int, list[tuple[int, int]]] = {}
    parameters = {"conversation": conversation_id, "low": low, "high": high}
    for seq, _, first_seq, last_seq in connection.execute(statement, parameters):
        found.setdefault(seq, []).append((first_seq, last_seq))
    return found


def _span_counts(connection: Any, conversation_id: str, seqs: list[int]) -> dict[int, int]:
    """How many spans each of the sends at `seqs` stored."""
    if not seqs:
        return {}
    length = {
        "sqlite": "json_array_length(m.fit_left_out)",
        "postgresql": "jsonb_array_length(m.fit_left_out)",
    }[connection.dialect.name]
    kind = {"sqlite": "json_type", "postgresql": "jsonb_typeof"}[connection.dialect.name]
    statement = sa_text(
        f"SELECT m.seq, CASE WHEN {kind}(m.fit_left_out) = 'array' THEN {length} ELSE 0 END"
        f" FROM message m WHERE {_TRIMMED_SENDS} AND m.seq >= :low AND m.seq <= :high"
    )
    parameters = {"conversation": conversation_id, "low": min(seqs), "high": max(seqs)}
    return {seq: count for seq, count in connection.execute(statement, parameters)}


def turn_numbers(skeleton: list[_Skeleton]) -> dict[int, int]:
    """User seq -> its turn's number on its own branch (an alternative to turn 5 is turn 5
    too), from the parent pointers: every branch of the record is shown, each counted as
    the user saw it."""
    numbers: dict[int, int] = {}
    for row in skeleton:  # by seq: a row's parent comes before it
        if row.role == Role.USER:
            parent = row.parent_seq if row.parent_seq is not None else row.seq - 1
            numbers[row.seq] = numbers.get(parent - 1, 0) + 1
    return numbers


def _username(session: Session, user_id: int | None) -> str | None:
    user = session.get(User, user_id) if user_id is not None else None
    return user.username if user is not None else None


CSV_COLUMNS = (
    "conversation_id",
    "title",
    "owner",
    "owner_name",
    "configuration",
    "models",
    "trimmed_turns",
    "most_dropped",
    "last_activity",
)


FORMULA_STARTS = ("=", "+", "-", "@", ";", "\t", "\r", "\n")
"""What makes a spreadsheet read a cell as a formula (`;` too: some take it as a separator
and read what follows it)."""


def _cell(value: str) -> str:
    """Titles and names are typed by users: a cell starting like a formula is quoted with
    an apostrophe, so a spreadsheet shows it rather than running it."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def to_csv(rows: Iterable[TrimmedRow]) -> str:
    """The list as CSV (RFC 4180 quoting, a header row, models joined by spaces)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow(
            [
                row.conversation_id,
                _cell(row.title),
                _cell(row.owner),
                _cell(row.owner_name),
                _cell(row.configuration),
                _cell(" ".join(row.models)),
                row.trimmed_turns,
                row.most_dropped,
                row.last_activity.isoformat().replace("+00:00", "Z"),
            ]
        )
    return out.getvalue()
