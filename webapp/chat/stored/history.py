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

Pinned turns are read through a partial index, whatever their age. What a send reads
runs inside its write transaction (see `webapp.db.Database.write`), so these
functions are synchronous.

Branches. Editing or regenerating a turn never changes a stored row: it adds a new
turn that continues an earlier row, and the conversation's history becomes a tree.
A *branch* is the path from the root to one leaf. Every row still takes the next
`seq` of the whole conversation, so seq space splits into *runs*: contiguous ranges
of seqs appended to one branch. Only the first row of a run says where it attaches
(`parent_seq`: the row it continues, 0 for the root); every other row continues the
row before it. Hence the run holding row p starts at the greatest run start <= p,
found through a partial index of run starts, and a branch is read newest first as
at most one run per fork point: one recursive query (`read_branch`) lists them, and
every history read (tail, head, the newest-first walk, pins, pages, the API's
history) stays a range scan, now within each run. A conversation that never forked
is one run, [1, newest], read with the same scans as before.

Why runs and not one parent pointer per row: a pointer per row would make a branch a
linked list, walked row by row, and the bound's range scans (its whole speed) would
be lost. Why not copy the shared prefix into each branch: the record would then
hold one send's rows several times, and stored spans and pins would have to be kept
in step across the copies. Along a branch, seqs only grow (a child run starts after
its parent row), so "the rows between two seqs" of a branch is the interval clipped
to the branch's runs (`Branch.clip`), which is how what a send left out is stored.

`conversation.active_seq` names the leaf of the branch being shown and continued;
NULL means the conversation's newest row, which is what every send leaves behind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import ColumnElement, Connection, Integer, Select, bindparam, select, text
from sqlmodel import col

from webapp.chat.stored.models import REPLAYABLE, Message, Role, Status
from webapp.chat.stored.steps import step_wire
from webapp.llm.clearing import through_index
from webapp.llm.estimator import estimate_message
from webapp.llm.providers.base import Message as WireMessage
from webapp.llm.summaries import slot_messages
from webapp.llm.window import Positions, SummarySlot, Transcript, kept_from
from webapp.prepared import Prepared

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
    Message.id,
    Message.pinned,
    Message.turn_number,
    Message.tool_calls,
    Message.tool_call_id,
    Message.tool_name,
)
SEQ, ROLE, STATUS, CONTENT, ESTIMATE, PRIOR, ID, PINNED, TURN, CALLS, CALL_ID, TOOL, COUNTS = range(
    13
)
"""Where each column sits in a row tuple; the counts of the route's tokenizers follow."""

Sizer = tuple[str | None, float, int]
"""How one model sizes a message: (its exact tokenizer or None, the estimate's factor,
template tokens per counted message); see `LLMManager.sizers`."""

Statement = Select[*tuple[Any, ...]]
"""One of the prepared statements below (their columns vary with the tokenizers)."""
RowValues = tuple[Any, ...]
"""A row read as a plain tuple."""


@dataclass(frozen=True, slots=True)
class Step:
    """A row of a turn's tool calls (stored after its answer's row, sent before it): an
    assistant row that called tools, or a tool's result."""

    seq: int
    id: int
    message: WireMessage
    tokens: int
    counts: tuple[int | None, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredTurn:
    seq: int
    """The user row's sequence number; its answer is seq + 1 (its tool steps, if any,
    follow the answer's row: `steps`)."""
    user: str
    answer: str
    user_tokens: int
    answer_tokens: int
    prior_turns: int
    user_id: int = 0
    answer_id: int = 0
    pinned: bool = False
    user_counts: tuple[int | None, ...] = ()
    answer_counts: tuple[int | None, ...] = ()
    """Exact content counts, one per tokenizer the history was read for."""
    steps: tuple[Step, ...] = ()
    """The turn's tool calls and results, in the order they happened."""

    @property
    def tokens(self) -> int:
        return self.user_tokens + self.answer_tokens + sum(step.tokens for step in self.steps)

    @property
    def last(self) -> int:
        """The seq of the turn's last stored row."""
        return self.steps[-1].seq if self.steps else self.seq + 1

    def cost(self, sizers: Sequence[Sizer], positions: dict[str, int]) -> float:
        """The least any model of the route would pay for this turn: a walk for the route
        must read on while any of them could still take more."""
        if not sizers:
            return self.tokens
        if len(sizers) == 1 and sizers[0][0] is None:
            return self.tokens * sizers[0][1]  # the common case, estimated: no look-ups
        return min(
            _cost(self.user_tokens, self.user_counts, sizer, positions)
            + _cost(self.answer_tokens, self.answer_counts, sizer, positions)
            + sum(_cost(step.tokens, step.counts, sizer, positions) for step in self.steps)
            for sizer in sizers
        )

    def wire(self) -> list[WireMessage]:
        return [
            {"role": "user", "content": self.user},
            *(step.message for step in self.steps),
            {"role": "assistant", "content": self.answer},
        ]

    def columns(self) -> tuple[list[int], list[int], list[int], list[tuple[int | None, ...]]]:
        """Estimates, ids, seqs and counts of `wire()`'s messages, in its order."""
        steps = self.steps
        return (
            [self.user_tokens, *(s.tokens for s in steps), self.answer_tokens],
            [self.user_id, *(s.id for s in steps), self.answer_id],
            [self.seq, *(s.seq for s in steps), self.seq + 1],
            [self.user_counts, *(s.counts for s in steps), self.answer_counts],
        )


def _cost(
    estimate: int, counts: tuple[int | None, ...], sizer: Sizer, positions: dict[str, int]
) -> float:
    tokenizer, factor, overhead = sizer
    if tokenizer is not None:
        count = counts[positions[tokenizer]]
        if count is not None:
            return count + overhead
    return estimate * factor


def is_replayable(status: str, content: str) -> bool:
    return status in _REPLAYABLE and content != ""


USER, ASSISTANT = Role.USER.value, Role.ASSISTANT.value


TOOL_ROLE = Role.TOOL.value


def is_step(row: RowValues) -> bool:
    """A row of a turn's tool calls: a result, or an assistant row that called tools."""
    return row[ROLE] == TOOL_ROLE or (row[ROLE] == ASSISTANT and bool(row[CALLS]))


def step_message(row: RowValues) -> WireMessage:
    """A step row as the model is sent it (`steps.step_wire`)."""
    return step_wire(
        {
            "role": row[ROLE],
            "content": row[CONTENT],
            "tool_calls": row[CALLS],
            "tool_call_id": row[CALL_ID],
            "tool_name": row[TOOL],
        }
    )


def _paired(rows: Sequence[RowValues]) -> tuple[Step, ...]:
    """A turn's step rows as sent: never a call without its result, nor a result without
    its call (a turn stopped or cut off between the two keeps only the pairs it has; an
    import may hold anything)."""
    steps = [row for row in rows if is_step(row)]
    answered = {row[CALL_ID] for row in steps if row[ROLE] == TOOL_ROLE}
    asked = {call.get("id") for row in steps if row[ROLE] != TOOL_ROLE for call in row[CALLS]}
    if answered != asked:
        kept: list[RowValues] = []
        for row in steps:
            if row[ROLE] == TOOL_ROLE:
                if row[CALL_ID] in asked:
                    kept.append(row)
                continue
            calls = [call for call in row[CALLS] if call.get("id") in answered]
            if calls:
                kept.append((*row[:CALLS], calls, *row[CALLS + 1 :]))
        steps = kept
    return tuple(
        Step(row[SEQ], row[ID], step_message(row), row[ESTIMATE], row[COUNTS:]) for row in steps
    )


def _turns(
    rows: Sequence[RowValues], *, newest_first: bool, whole_end: bool = True
) -> list[StoredTurn]:
    """Group rows into turns (a user row and the rows after it up to the next user row:
    its answer right after it, then its tool steps) and keep the replayable.
    `whole_end`: the rows' last turn in seq order is known to be whole (the read reached
    the branch's end, or the next user row); otherwise it is left out.

    Rows are plain tuples in `_COLUMNS` order: this loop runs over every kept row of a
    long conversation, so it stays free of attribute look-ups and enum comparisons.
    """
    ordered = rows[::-1] if newest_first else rows
    turns = []
    count = len(ordered)
    index = 0
    while index < count:
        user = ordered[index]
        end = index + 1
        while end < count and ordered[end][ROLE] != USER:
            end += 1
        if user[ROLE] != USER or end - index < 2 or (end == count and not whole_end):
            index = end
            continue
        answer = ordered[index + 1]
        if (
            answer[ROLE] == ASSISTANT
            and answer[SEQ] == user[SEQ] + 1
            and answer[STATUS] in _REPLAYABLE
            and answer[CONTENT]
        ):
            steps = _paired(ordered[index + 2 : end])
            turns.append(
                StoredTurn(
                    user[SEQ],
                    user[CONTENT],
                    answer[CONTENT],
                    user[ESTIMATE],
                    answer[ESTIMATE],
                    user[PRIOR] or 0,
                    user[ID],
                    answer[ID],
                    bool(user[PINNED]),
                    user[COUNTS:],
                    answer[COUNTS:],
                    steps,
                )
            )
        index = end
    return turns[::-1] if newest_first else turns


@dataclass(frozen=True, slots=True)
class Branch:
    """The path from the root to one leaf, as its runs: inclusive (first, last) seq
    ranges, newest first. Empty for a conversation without rows (or a leaf of 0)."""

    runs: tuple[tuple[int, int], ...] = ()

    @property
    def leaf(self) -> int:
        return self.runs[0][1] if self.runs else 0

    @property
    def first(self) -> int:
        return self.runs[-1][0] if self.runs else 1

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and any(first <= seq <= last for first, last in self.runs)

    def newest_first(self, below: int) -> Iterator[tuple[int, int]]:
        """The parts of the runs under `below`, newest first."""
        for start, end in self.runs:
            if start < below:
                yield start, min(end, below - 1)

    def oldest_first(self, start: int) -> Iterator[tuple[int, int]]:
        """The parts of the runs from `start` on, oldest first."""
        for first, last in reversed(self.runs):
            if last >= start:
                yield max(first, start), last


_RUNS = Prepared(
    text(
        """
    WITH RECURSIVE run(run_last, run_first) AS (
        SELECT leaf.seq, COALESCE((
            SELECT s.seq FROM message s
            WHERE s.conversation_id = :conversation_id AND s.parent_seq IS NOT NULL
              AND s.seq <= leaf.seq
            ORDER BY s.seq DESC LIMIT 1), 1)
        FROM (SELECT COALESCE(:leaf, (
            SELECT max(n.seq) FROM message n WHERE n.conversation_id = :conversation_id
        )) AS seq) AS leaf
        WHERE leaf.seq > 0
        UNION ALL
        SELECT start.parent_seq, COALESCE((
            SELECT s.seq FROM message s
            WHERE s.conversation_id = :conversation_id AND s.parent_seq IS NOT NULL
              AND s.seq <= start.parent_seq
            ORDER BY s.seq DESC LIMIT 1), 1)
        FROM run JOIN message start
          ON start.conversation_id = :conversation_id AND start.seq = run.run_first
        WHERE start.parent_seq > 0
    )
    SELECT run_first, run_last FROM run
    """
    ).bindparams(bindparam("leaf", type_=Integer))
)
"""A branch's runs from its leaf (NULL: the newest row) back to the root, newest first:
each step finds the run start at or before the row the previous run continues,
through the partial index of run starts (matched literally: `parent_seq IS NOT NULL`)."""


def read_branch(connection: Connection, conversation_id: str, leaf: int | None = None) -> Branch:
    """The branch ending at `leaf` (None: at the conversation's newest row)."""
    if leaf == 0:
        return Branch()
    result = _RUNS.rows(connection, {"conversation_id": conversation_id, "leaf": leaf})
    return Branch(tuple((first, last) for first, last in result))


@dataclass(frozen=True, slots=True)
class _Statements:
    """The statements of a history walk, for one set of tokenizers."""

    newest_in: Prepared
    """Rows of one run's part, newest first."""
    oldest_in: Prepared
    pinned_between: Prepared
    """User seqs of pinned turns in a range, through the partial index on pinned rows."""
    seqs_in: Statement
    """Rows by seq (an IN list: a Core statement, its SQL differs by the list's length)."""


@lru_cache(maxsize=64)
def _statements(tokenizers: tuple[str, ...]) -> _Statements:
    """Built once per set of tokenizers: a send runs them every time, and on SQLite
    building costs what running does."""
    counts = col(Message.token_counts)
    columns = (*_COLUMNS, *(counts[t].as_integer() for t in tokenizers))
    seq = col(Message.seq)

    def ranged(*conditions: ColumnElement[bool], newest_first: bool) -> Prepared:
        return Prepared(
            select(*columns)
            .where(col(Message.conversation_id) == bindparam("conversation_id"), *conditions)
            .order_by(seq.desc() if newest_first else seq)
            .limit(bindparam("limit"))
        )

    within = (seq >= bindparam("first"), seq <= bindparam("last"))
    return _Statements(
        newest_in=ranged(*within, newest_first=True),
        oldest_in=ranged(*within, newest_first=False),
        pinned_between=Prepared(
            select(seq).where(
                col(Message.conversation_id) == bindparam("conversation_id"),
                col(Message.pinned),
                seq > bindparam("after"),
                seq < bindparam("before"),
            )
        ),
        seqs_in=select(*columns)
        .where(
            col(Message.conversation_id) == bindparam("conversation_id"),
            seq.in_(bindparam("seqs", expanding=True)),
        )
        .order_by(seq),
    )


def _rows(
    connection: Connection, statement: Prepared | Statement, **params: object
) -> list[RowValues]:
    """Rows as plain tuples, in one index range scan."""
    if isinstance(statement, Prepared):
        return statement.rows(connection, params)
    return [tuple(row) for row in connection.execute(statement, params)]


def rows_on_branch(
    connection: Connection,
    statement: Prepared,
    conversation_id: str,
    parts: Iterator[tuple[int, int]],
    limit: int,
) -> list[RowValues]:
    """Up to `limit` rows of a branch, one range scan per run part (`Branch.newest_first`
    or `Branch.oldest_first`), in that order. `statement` takes :first, :last, :limit."""
    rows: list[RowValues] = []
    for first, last in parts:
        rows += _rows(
            connection,
            statement,
            conversation_id=conversation_id,
            first=first,
            last=last,
            limit=limit - len(rows),
        )
        if len(rows) >= limit:
            break
    return rows


_NEWEST_ROW = Prepared(
    text(
        "SELECT seq, status FROM message WHERE conversation_id = :conversation_id"
        " ORDER BY seq DESC LIMIT 1"
    )
)


@dataclass(frozen=True, slots=True)
class Tail:
    """The newest rows of a branch, newest first, read once by a send under the
    conversation's lock. They say what the next turn continues, and they are the first
    batch of the walk back through the branch; `next_seq` and `answering` speak of the
    whole conversation."""

    rows: list[RowValues]
    complete: bool
    """The rows reach back to the branch's first message."""
    tokenizers: tuple[str, ...] = ()
    """The tokenizers whose counts the rows carry, after the fixed columns."""
    branch: Branch = Branch()
    next_seq: int = 1
    """The seq the next row of the conversation takes, whichever branch it goes on."""
    answering: bool = False
    """The conversation's newest answer is still marked as being written (a send's answer
    is always the newest row, and only one is written at a time)."""

    @property
    def parent_seq(self) -> int | None:
        """`parent_seq` of the next row: the branch's leaf, unless that is the newest row."""
        leaf = self.branch.leaf
        return None if leaf == self.next_seq - 1 else leaf

    def _last_turn(self) -> tuple[RowValues, RowValues] | None:
        """The branch's last turn as (user row, the row after it), past its tool steps."""
        rows = self.rows
        for index in range(1, len(rows)):
            if rows[index][ROLE] == USER:
                return (rows[index], rows[index - 1]) if not is_step(rows[index - 1]) else None
            if not is_step(rows[index - 1]):
                return None
        return None

    @property
    def turn_number(self) -> int:
        """`turn_number` of the user row about to be written: one past the last turn's,
        failed or not (from its `prior_turns` on rows stored before turn numbers)."""
        last = self._last_turn()
        if last is None:
            return 1
        user = last[0]
        return (user[TURN] or (user[PRIOR] or 0) + 1) + 1

    @property
    def prior_turns(self) -> int:
        """`prior_turns` of the user row about to be written: the last turn's count plus
        one if that turn is replayable. Every earlier answer is final by now, so the count
        can never change later."""
        last = self._last_turn()
        if last is None:
            return 0
        user, answer = last
        return (user[PRIOR] or 0) + int(is_replayable(answer[STATUS], answer[CONTENT]))


_NEWEST_ANSWER = Prepared(
    text(
        "SELECT status FROM message WHERE conversation_id = :conversation_id"
        " AND role <> 'tool' AND tool_calls IS NULL ORDER BY seq DESC LIMIT 1"
    )
)
"""The status of the conversation's newest row that is not a tool step: its newest
answer's, while one is being written (its steps are stored after it)."""


def read_tail(
    connection: Connection,
    conversation_id: str,
    tokenizers: Sequence[str] = (),
    leaf: int | None = None,
) -> Tail:
    """The tail of the branch ending at `leaf` (None: the conversation's newest row)."""
    tokenizers = tuple(tokenizers)
    branch = read_branch(connection, conversation_id, leaf)
    statement = _statements(tokenizers).newest_in
    parts = branch.newest_first(branch.leaf + 1)
    rows = rows_on_branch(connection, statement, conversation_id, parts, FIRST_BATCH)
    if leaf is None:
        newest = (rows[0][SEQ], rows[0][STATUS]) if rows else None
    else:
        newest = _NEWEST_ROW.first(connection, {"conversation_id": conversation_id})
    status = newest[1] if newest else None
    if newest is not None and (leaf is not None or is_step(rows[0])):
        found = _NEWEST_ANSWER.first(connection, {"conversation_id": conversation_id})
        status = found[0] if found else None
    return Tail(
        rows,
        complete=len(rows) < FIRST_BATCH,
        tokenizers=tokenizers,
        branch=branch,
        next_seq=newest[0] + 1 if newest else 1,
        answering=status == Status.STREAMING.value,
    )


def head_turn(connection: Connection, conversation_id: str, tail: Tail) -> StoredTurn | None:
    """The branch's first replayable turn: almost always its first two rows."""
    if tail.complete:
        turns = _turns(tail.rows, newest_first=True)
        return turns[-1] if turns else None
    statement = _statements(tail.tokenizers).oldest_in
    branch = tail.branch
    start, size = branch.first, 8
    while start <= branch.leaf:
        parts = branch.oldest_first(start)
        rows = rows_on_branch(connection, statement, conversation_id, parts, size)
        turns = _turns(rows, newest_first=False, whole_end=len(rows) < size)
        if turns:
            return turns[0]
        if len(rows) < size:
            return None
        # Re-read from the last turn's user row: a turn may straddle the edge.
        users = [row[SEQ] for row in rows if row[ROLE] == USER]
        start, size = (users[-1] if users else rows[-1][SEQ]), size * 2
    return None


def newest_turns(
    connection: Connection,
    conversation_id: str,
    tail: Tail,
    after_seq: int,
    budget: int,
    sizers: Sequence[Sizer] = (),
    back_to: int | None = None,
) -> list[StoredTurn]:
    """Replayable turns after `after_seq`, newest first, until their sizes pass `budget`,
    and at least back to the turn at `back_to` (where the previous send's cut is kept:
    the fit must see all it kept to know whether that still fits).

    The walk starts from the tail the send already read; each next batch is sized from
    the tokens per row seen so far and the budget left, so a large window is read in two
    or three queries and a small one in none, without reading much past the cut.
    """
    back_to = tail.next_seq if back_to is None else back_to
    positions = {t: i for i, t in enumerate(tail.tokenizers)}
    statement = _statements(tail.tokenizers).newest_in
    kept: list[StoredTurn] = []
    spent = 0.0
    rows_read = 0
    batch, complete = tail.rows, tail.complete
    below, size = tail.branch.leaf + 1, FIRST_BATCH
    while True:
        rows = [row for row in batch if row[SEQ] > after_seq]
        complete = complete or len(rows) < len(batch)
        # A batch may end inside a turn whose user row is in the next batch: leave it.
        if not complete:
            end = len(rows)
            while end and rows[end - 1][ROLE] != USER:
                end -= 1
            if end == 0 and rows:  # one turn longer than the batch: read it again, larger
                size = len(batch) * 2
                parts = tail.branch.newest_first(below)
                batch = rows_on_branch(connection, statement, conversation_id, parts, size)
                complete = len(batch) < size
                continue
            del rows[end:]
        for turn in _turns(rows, newest_first=True):
            spent += turn.cost(sizers, positions)
            if spent > budget and turn.seq < back_to:
                return kept
            kept.append(turn)
        if complete or not rows:
            return kept
        rows_read += len(rows)
        per_row = max(1.0, spent / rows_read)
        size = max(FIRST_BATCH, int((budget - spent) / per_row * 1.1) + 8)
        below = rows[-1][SEQ]
        parts = tail.branch.newest_first(below)
        batch = rows_on_branch(connection, statement, conversation_id, parts, size)
        complete = len(batch) < size


def pinned_turns(
    connection: Connection, conversation_id: str, tail: Tail, after_seq: int, before_seq: int
) -> list[StoredTurn]:
    """The pinned turns of the tail's branch strictly between two seqs, oldest first,
    through the partial index on pinned rows: as cheap in a conversation of ten thousand
    turns as in one of ten. Pins on other branches are read there too, and passed over."""
    if before_seq - after_seq <= 2:
        return []
    statements = _statements(tail.tokenizers)
    pinned = [
        user
        for (user,) in statements.pinned_between.rows(
            connection,
            {"conversation_id": conversation_id, "after": after_seq, "before": before_seq},
        )
    ]
    branch = tail.branch
    seqs = [s for user in pinned if user in branch for s in (user, user + 1, user + 2)]
    if not seqs:
        return []
    rows = _rows(connection, statements.seqs_in, conversation_id=conversation_id, seqs=seqs)
    # A pinned turn with tool steps (a step row right after its answer) is read whole.
    stepped = {row[SEQ] - 2 for row in rows if is_step(row) and row[SEQ] - 2 in branch}
    rows = [row for row in rows if not is_step(row)]
    turns = []
    for user in sorted(set(pinned) & {row[SEQ] for row in rows}):
        if user in stepped:
            parts = branch.oldest_first(user)
            whole = rows_on_branch(connection, statements.oldest_in, conversation_id, parts, 512)
            found = _turns(whole, newest_first=False, whole_end=len(whole) < 512)
            turns += found[:1] if found and found[0].seq == user else []
        else:
            pair = [row for row in rows if row[SEQ] in (user, user + 1)]
            turns += _turns(pair, newest_first=False)
    return turns


@dataclass(frozen=True, slots=True)
class PreviousFit:
    """What the previous send of a branch stored of its bound: where its cut was."""

    seq: int
    model: str | None
    left_out: list[list[int]]
    cleared: list[dict[str, int]] | None = None
    """The tool results its request carried as stubs (`webapp.llm.clearing`)."""
    summary: int | None = None
    """The version of the summary it carried."""

    @property
    def cleared_seq(self) -> int:
        """The newest result it cleared (0: none): the next send clears as far."""
        return max((span["last_seq"] for span in self.cleared or ()), default=0)

    @property
    def kept_from(self) -> int:
        """The seq from which that send kept every turn (0: it left nothing out)."""
        return kept_from(self.left_out)


_PREVIOUS_FIT = Prepared(
    select(
        col(Message.fit_model),
        col(Message.fit_left_out),
        col(Message.fit_cleared),
        col(Message.fit_summary),
    ).where(
        col(Message.conversation_id) == bindparam("conversation_id"),
        col(Message.seq) == bindparam("seq"),
        col(Message.dropped_turns).is_not(None),
    )
)


def previous_fit(connection: Connection, conversation_id: str, tail: Tail) -> PreviousFit | None:
    """The fit of the newest user turn on the tail's branch (None: there is none, or no
    fit was evaluated for it), whatever became of its answer."""
    user = next((row for row in tail.rows if row[ROLE] == USER), None)
    if user is None:
        return None
    found = _PREVIOUS_FIT.first(connection, {"conversation_id": conversation_id, "seq": user[SEQ]})
    if found is None:
        return None
    model, left_out, cleared, summary = found
    return PreviousFit(user[SEQ], model, list(left_out or []), cleared, summary)


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
    sizers: Sequence[Sizer] = (),
    newest_counts: Mapping[str, int] | None = None,
    system_counts: Mapping[str, int] | None = None,
    cut: int = 0,
    clear_keep: int | None = None,
    cleared_seq: int = 0,
    summary: SummarySlot | None = None,
    summary_text: str = "",
) -> Transcript:
    """The transcript for sending `newest` (to be stored right after `tail`), with only
    the history that `budget` (the largest budget of the route) could hold: the head,
    every pinned turn, and the newest turns. Sizes are what the route's models would
    pay (`sizers`), so exact counts read as far back as they allow. `cut` is the seq
    from which the previous send kept every turn (`PreviousFit.kept_from`; 0: none);
    `clear_keep` the configuration's `keep_tool_results`, `cleared_seq` the newest tool
    result the previous send cleared (`PreviousFit.cleared_seq`). With a `summary` slot
    (its index is set here), `summary_text` goes right after the head and the turns it
    covers are not read (pins among them are, and stay)."""
    tokenizers = tail.tokenizers
    head = head_turn(connection, conversation_id, tail)
    turns: list[StoredTurn] = []
    omitted = 0
    if head is None:
        summary = None
    covered = summary.covers[1] if summary is not None and summary.covers else 0
    if covered:
        cut = max(cut, covered + 1)  # what the summary stands for is never sent again
    if head is not None:
        after = max(head.last, covered)
        rest = newest_turns(
            connection, conversation_id, tail, after, budget, sizers, back_to=cut or None
        )
        oldest_walked = rest[-1].seq if rest else tail.next_seq
        pins = pinned_turns(connection, conversation_id, tail, head.last, oldest_walked)
        # prior_turns counts the head too: what lies between, not read, is one less.
        oldest_prior = rest[-1].prior_turns if rest else tail.prior_turns
        omitted = max(0, oldest_prior - 1 - len(pins))
        turns = [head, *pins, *reversed(rest)]

    # Built column by column: this runs over every kept turn of a long conversation.
    first = 1 if system_prompt is not None else 0
    if any(turn.steps for turn in turns):
        messages, estimates, ids, seqs, counts, pinned = _stepped_columns(turns, tokenizers, first)
    else:
        messages = [m for turn in turns for m in turn.wire()]
        estimates = [n for turn in turns for n in (turn.user_tokens, turn.answer_tokens)]
        ids = [i for turn in turns for i in (turn.user_id, turn.answer_id)]
        seqs = [s for turn in turns for s in (turn.seq, turn.seq + 1)]
        counts = {
            t: [c for turn in turns for c in (turn.user_counts[i], turn.answer_counts[i])]
            for i, t in enumerate(tokenizers)
        }
        pinned = tuple(first + 2 * i for i, turn in enumerate(turns) if turn.pinned)
    if system_prompt is not None:
        messages.insert(0, system_prompt)
        estimates.insert(0, system_tokens)
        ids.insert(0, None)
        seqs.insert(0, None)
        for t, column in counts.items():
            column.insert(0, (system_counts or {}).get(t))
    messages.append(newest)
    estimates.append(newest_tokens)
    ids.append(None)
    seqs.append(tail.next_seq)
    for t, column in counts.items():
        column.append((newest_counts or {}).get(t))
    if summary is not None and turns:  # right after the head (and its steps)
        at = first + 2 + len(turns[0].steps)
        messages[at:at] = slot_messages(summary_text)
        estimates[at:at] = [estimate_message(m) for m in messages[at : at + 2]]
        ids[at:at] = [None, None]
        seqs[at:at] = [None, None]
        for column in counts.values():
            column[at:at] = [None, None]
        pinned = tuple(p + 2 if p >= at else p for p in pinned)
        summary = dataclasses.replace(summary, index=at)
    prior_turns = {turn.seq: turn.prior_turns for turn in turns}
    prior_turns[tail.next_seq] = tail.prior_turns
    keep_from = 0
    if head is not None and cut > head.last:
        # Turns are in seq order: the first message at or after the cut, past the head.
        keep_from = next(
            i for i, seq in enumerate(seqs) if seq is not None and seq >= cut and seq > head.last
        )
    return Transcript(
        messages=messages,
        estimates=estimates,
        omitted_turns=omitted,
        counts=counts,
        pinned=pinned,
        ids=ids,
        keep_from=keep_from,
        clear_keep=clear_keep,
        cleared_through=through_index(seqs, messages, cleared_seq) if clear_keep is not None else 0,
        summary=summary,
        positions=Positions(
            tuple(seqs),
            prior_turns,
            head.seq if head is not None else None,
            tail.branch.runs,
        ),
    )


def _stepped_columns(
    turns: Sequence[StoredTurn], tokenizers: Sequence[str], first: int
) -> tuple[
    list[WireMessage],
    list[int],
    list[int | None],
    list[int | None],
    dict[str, list[int | None]],
    tuple[int, ...],
]:
    """`load_transcript`'s columns when some turn carries tool steps (messages per turn
    vary): messages, estimates, ids, seqs, counts by tokenizer, pinned user indices."""
    messages: list[WireMessage] = []
    estimates: list[int] = []
    ids: list[int | None] = []
    seqs: list[int | None] = []
    counts: dict[str, list[int | None]] = {t: [] for t in tokenizers}
    pinned: list[int] = []
    for turn in turns:
        if turn.pinned:
            pinned.append(first + len(messages))
        messages += turn.wire()
        sizes, row_ids, row_seqs, row_counts = turn.columns()
        estimates += sizes
        ids += row_ids
        seqs += row_seqs
        for i, t in enumerate(tokenizers):
            counts[t] += [c[i] for c in row_counts]
    return messages, estimates, ids, seqs, counts, tuple(pinned)
