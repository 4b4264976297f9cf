"""Load what a send may replay, reading only as much history as could possibly be sent.

A conversation of ten thousand turns must not be read whole to send one more.
Messages are read newest first, in one index range scan grown in batches,
until even the largest budget of the route is spent; the head (opening
exchange) is read from the other end. The turns in between are never read,
not even counted: every user row stores `prior_turns`, the number of
replayable turns before it (known when it is written, because every earlier
answer is final by then), so the count is a subtraction. Per-message estimates
were stored when each row was written, so nothing here re-estimates old text.

A turn is replayed only if its answer is worth replaying: complete, stopped or
interrupted with some text. A failed answer stays in the record but is not sent.

What a send reads runs inside its write transaction (see `webapp.db.in_transaction`),
so those functions are synchronous; the page helpers at the end are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from sqlalchemy import ColumnElement, Connection, Select, and_, bindparam, func, select
from sqlalchemy.orm import aliased
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from webapp.chat.models import REPLAYABLE, Message, Role, Status
from webapp.llm.manager import Transcript
from webapp.llm.providers.base import Message as WireMessage

FIRST_BATCH = 64
"""Rows read by the first query of a walk; the next ones are sized from what it found."""

_REPLAYABLE = frozenset(status.value for status in REPLAYABLE)
_COLUMNS = (
    Message.seq,
    Message.role,
    Message.status,
    Message.content,
    Message.estimated_tokens,
    Message.prior_turns,
)


@dataclass(frozen=True, slots=True)
class StoredTurn:
    seq: int
    """The user row's sequence number; its answer is seq + 1."""
    user: str
    answer: str
    user_tokens: int
    answer_tokens: int
    prior_turns: int

    @property
    def tokens(self) -> int:
        return self.user_tokens + self.answer_tokens

    def wire(self) -> list[WireMessage]:
        return [
            {"role": "user", "content": self.user},
            {"role": "assistant", "content": self.answer},
        ]


def is_replayable(status: str, content: str) -> bool:
    return status in _REPLAYABLE and content != ""


USER, ASSISTANT = Role.USER.value, Role.ASSISTANT.value


def _turns(rows: Sequence[tuple], *, newest_first: bool) -> list[StoredTurn]:  # type: ignore[type-arg]
    """Pair user rows with their answers (the row right after) and keep the replayable.

    Rows are plain tuples in `_COLUMNS` order: this loop runs over every kept row of a
    long conversation, so it stays free of attribute look-ups and enum comparisons.
    """
    ordered = rows[::-1] if newest_first else rows
    turns = []
    for user, answer in pairwise(ordered):
        if (
            user[1] == USER
            and answer[1] == ASSISTANT
            and answer[0] == user[0] + 1
            and answer[2] in _REPLAYABLE
            and answer[3]
        ):
            turns.append(StoredTurn(user[0], user[3], answer[3], user[4], answer[4], user[5] or 0))
    return turns[::-1] if newest_first else turns


def _range(*conditions: ColumnElement[bool], newest_first: bool) -> Select:  # type: ignore[type-arg]
    seq = col(Message.seq)
    return (
        select(*_COLUMNS)
        .where(Message.conversation_id == bindparam("conversation_id"), *conditions)
        .order_by(seq.desc() if newest_first else seq)
        .limit(bindparam("limit"))
    )


# Built once: a send runs them every time, and on SQLite building costs what running does.
_NEWEST = _range(newest_first=True)
_NEWEST_BELOW = _range(col(Message.seq) < bindparam("below"), newest_first=True)
_OLDEST_FROM = _range(col(Message.seq) >= bindparam("start"), newest_first=False)


def _rows(connection: Connection, statement: Select, **params: object) -> list[tuple]:  # type: ignore[type-arg]
    """Rows as plain tuples, in one index range scan."""
    return [tuple(row) for row in connection.execute(statement, params)]


@dataclass(frozen=True, slots=True)
class Tail:
    """The newest rows of a conversation, newest first, read once by a send under the
    conversation's lock. They say where the next turn goes and whether an answer is still
    being written, and they are the first batch of the walk back through the history."""

    rows: list[tuple]  # type: ignore[type-arg]
    complete: bool
    """The rows reach back to the conversation's first message."""

    @property
    def next_seq(self) -> int:
        return self.rows[0][0] + 1 if self.rows else 1

    @property
    def prior_turns(self) -> int:
        """`prior_turns` of the user row about to be written: the last turn's count plus
        one if that turn is replayable. Every earlier answer is final by now, so the count
        can never change later."""
        if len(self.rows) < 2 or self.rows[1][1] != USER:
            return 0
        answer, user = self.rows[0], self.rows[1]
        return (user[5] or 0) + int(is_replayable(answer[2], answer[3]))

    @property
    def answering(self) -> bool:
        """The newest answer is still marked as being written (a send's answer is always
        the newest row, and only one is written at a time)."""
        return bool(self.rows) and self.rows[0][2] == Status.STREAMING.value


def read_tail(connection: Connection, conversation_id: str) -> Tail:
    rows = _rows(connection, _NEWEST, conversation_id=conversation_id, limit=FIRST_BATCH)
    return Tail(rows, complete=len(rows) < FIRST_BATCH)


def head_turn(connection: Connection, conversation_id: str, tail: Tail) -> StoredTurn | None:
    """The first replayable turn: almost always the first two rows."""
    if tail.complete:
        turns = _turns(tail.rows, newest_first=True)
        return turns[-1] if turns else None
    start, size = 1, 8
    while start < tail.next_seq:
        rows = _rows(
            connection, _OLDEST_FROM, conversation_id=conversation_id, start=start, limit=size
        )
        turns = _turns(rows, newest_first=False)
        if turns:
            return turns[0]
        if len(rows) < size:
            return None
        start, size = rows[-1][0], size * 2  # re-read one row: a turn may straddle the edge
    return None


def newest_turns(
    connection: Connection, conversation_id: str, tail: Tail, after_seq: int, budget: int
) -> list[StoredTurn]:
    """Replayable turns after `after_seq`, newest first, until their estimates pass `budget`.

    The walk starts from the tail the send already read; each next batch is sized from
    the tokens per row seen so far and the budget left, so a large window is read in two
    or three queries and a small one in none, without reading much past the cut.
    """
    kept: list[StoredTurn] = []
    spent = 0
    rows_read = 0
    batch, complete = tail.rows, tail.complete
    while True:
        rows = [row for row in batch if row[0] > after_seq]
        complete = complete or len(rows) < len(batch)
        # A batch may end on an answer whose user row is in the next batch: leave it.
        if not complete and rows and rows[-1][1] == ASSISTANT:
            rows.pop()
        for turn in _turns(rows, newest_first=True):
            spent += turn.tokens
            if spent > budget:
                return kept
            kept.append(turn)
        if complete or not rows:
            return kept
        rows_read += len(rows)
        per_row = max(1.0, spent / rows_read)
        size = max(FIRST_BATCH, int((budget - spent) / per_row * 1.1) + 8)
        batch = _rows(
            connection,
            _NEWEST_BELOW,
            conversation_id=conversation_id,
            below=rows[-1][0],
            limit=size,
        )
        complete = len(batch) < size


def load_transcript(
    connection: Connection,
    conversation_id: str,
    tail: Tail,
    newest: WireMessage,
    newest_tokens: int,
    *,
    budget: int,
    system_prompt: WireMessage | None = None,
    system_tokens: int = 0,
) -> Transcript:
    """The transcript for sending `newest` (to be stored right after `tail`), with only
    the history that `budget` (the largest budget of the route, in raw tokens) could hold."""
    messages: list[WireMessage] = []
    estimates: list[int] = []
    if system_prompt is not None:
        messages.append(system_prompt)
        estimates.append(system_tokens)
    head = head_turn(connection, conversation_id, tail)
    omitted = 0
    if head is not None:
        messages.extend(head.wire())
        estimates.extend((head.user_tokens, head.answer_tokens))
        rest = newest_turns(connection, conversation_id, tail, head.seq + 1, budget)
        # prior_turns counts the head too: what lies between is one less.
        oldest_prior = rest[-1].prior_turns if rest else tail.prior_turns
        omitted = max(0, oldest_prior - 1)
        for turn in reversed(rest):
            messages.extend(turn.wire())
            estimates.extend((turn.user_tokens, turn.answer_tokens))
    messages.append(newest)
    estimates.append(newest_tokens)
    return Transcript(messages=messages, estimates=estimates, omitted_turns=omitted)


async def left_out_spans(
    session: AsyncSession, conversation_id: str, sends: Sequence[tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """For each trimmed send, given as (user seq, dropped_turns): the seqs from the first
    to the last row of the turns it left out, rebuilt from the stored count and the
    bound's rule (the head is kept; the `dropped_turns` oldest replayable turns after it
    are not sent). `prior_turns` grows by at most one per turn, so the first user row
    with prior_turns == k exists for every k up to the newest: one indexed query answers
    every send on a page."""
    wanted = {1} | {dropped + 1 for _, dropped in sends if dropped > 0}
    query = (
        select(Message.prior_turns, func.min(Message.seq))
        .where(
            Message.conversation_id == conversation_id,
            Message.role == Role.USER,
            col(Message.prior_turns).in_(sorted(wanted)),
        )
        .group_by(Message.prior_turns)
    )
    connection = await session.connection()
    first_with = {prior: seq for prior, seq in await connection.execute(query)}
    start = first_with.get(1)
    spans = {}
    for seq, dropped in sends:
        if dropped <= 0 or start is None or start >= seq:
            continue
        spans[seq] = (start, min(first_with.get(dropped + 1, seq), seq) - 1)
    return spans


_user = aliased(Message, name="u")
_answer = aliased(Message, name="a")


async def replayable_user_seqs(
    session: AsyncSession, conversation_id: str, before_seq: int, limit: int
) -> list[int]:
    """The oldest `limit` replayable turns before `before_seq`, by their user row's seq."""
    query = (
        select(_user.seq)
        .join(
            _answer,
            and_(
                _answer.conversation_id == _user.conversation_id,
                _answer.seq == _user.seq + 1,
            ),
        )
        .where(
            _user.conversation_id == conversation_id,
            _user.role == Role.USER,
            _user.seq < before_seq,
            _answer.role == Role.ASSISTANT,
            _answer.status.in_(_REPLAYABLE),
            _answer.content != "",
        )
        .order_by(_user.seq)
        .limit(limit)
    )
    return list((await session.exec(query)).scalars())  # type: ignore[call-overload]


def left_out(replayable: list[int], dropped_turns: int) -> list[int]:
    """Which turns a send left out, rebuilt from its stored count and the bound's rule:
    the head (first replayable turn) is kept and the `dropped_turns` oldest turns after
    it were not sent. `replayable` are the replayable turns before that send, in order."""
    return replayable[1 : 1 + dropped_turns]
