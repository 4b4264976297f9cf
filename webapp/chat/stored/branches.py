"""What a user does with branches: read the one being shown, list a turn's
alternatives, switch to another branch, and copy one out into a new conversation.

The model itself (runs of rows, `parent_seq`, `active_seq`) is described in
`webapp.chat.stored.history`, which reads a branch for a send; this module reads it for
people, with the same `Branch` and the same range scans per run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, inspect, select, text
from sqlmodel import col

from webapp.chat.stored.history import Branch, rows_on_branch
from webapp.chat.stored.models import Message
from webapp.db import as_loaded
from webapp.prepared import Prepared
from webapp.stored import id_of

_COLUMNS = tuple(inspect(Message).columns)
_NAMES = tuple(column.key for column in _COLUMNS)
_seq = col(Message.seq)
_in_conversation = col(Message.conversation_id) == bindparam("conversation_id")
_within = (_seq >= bindparam("first"), _seq <= bindparam("last"))
_NEWEST_IN = Prepared(
    select(*_COLUMNS)
    .where(_in_conversation, *_within)
    .order_by(_seq.desc())
    .limit(bindparam("limit"))
)
_OLDEST_IN = Prepared(
    select(*_COLUMNS).where(_in_conversation, *_within).order_by(_seq).limit(bindparam("limit"))
)
_RUN_STARTS = select(col(Message.id), _seq, col(Message.parent_seq)).where(
    _in_conversation, col(Message.parent_seq).is_not(None)
)
"""Every run start of a conversation, through its partial index: one row per fork."""
_IDS_AT = select(_seq, col(Message.id)).where(
    _in_conversation, _seq.in_(bindparam("seqs", expanding=True))
)
_NEXT_RUN_START = text(
    "SELECT seq FROM message WHERE conversation_id = :conversation_id"
    " AND parent_seq IS NOT NULL AND seq > :seq ORDER BY seq LIMIT 1"
)
_NEWEST_CHILD = text(
    "SELECT seq FROM message WHERE conversation_id = :conversation_id"
    " AND parent_seq = :seq ORDER BY seq DESC LIMIT 1"
)
_NEWEST_SEQ = text("SELECT max(seq) FROM message WHERE conversation_id = :conversation_id")


def _message(row: tuple[Any, ...]) -> Message:
    return as_loaded(Message, dict(zip(_NAMES, row, strict=True)))


def newest_on_branch(
    connection: Connection, conversation_id: str, branch: Branch, below: int, limit: int
) -> list[Message]:
    """Up to `limit` rows of `branch` under seq `below`, newest first."""
    return _read(connection, _NEWEST_IN, conversation_id, branch.newest_first(below), limit)


def oldest_on_branch(
    connection: Connection, conversation_id: str, branch: Branch, start: int, limit: int
) -> list[Message]:
    """Up to `limit` rows of `branch` from seq `start` on, oldest first."""
    return _read(connection, _OLDEST_IN, conversation_id, branch.oldest_first(start), limit)


def _read(
    connection: Connection,
    statement: Prepared,
    conversation_id: str,
    parts: Iterator[tuple[int, int]],
    limit: int,
) -> list[Message]:
    rows = rows_on_branch(connection, statement, conversation_id, parts, limit)
    return [_message(row) for row in rows]


def whole_branch(connection: Connection, conversation_id: str, branch: Branch) -> list[Message]:
    """Every row of `branch`, oldest first."""
    return _read(connection, _OLDEST_IN, conversation_id, branch.oldest_first(branch.first), 2**62)


def parent_of(row: Message) -> int:
    """The seq of the row `row` continues (0: the root)."""
    return row.parent_seq if row.parent_seq is not None else row.seq - 1


@dataclass(frozen=True, slots=True)
class Alternatives:
    """A user turn's alternatives: every user row continuing the same row, oldest first.
    `index` is this row's place in `ids`, from 0."""

    index: int
    count: int
    ids: tuple[int, ...]

    def as_dict(self) -> dict[str, object]:
        return {"index": self.index, "count": self.count, "ids": list(self.ids)}

    @property
    def previous(self) -> int | None:
        return self.ids[self.index - 1] if self.index > 0 else None

    @property
    def next(self) -> int | None:
        return self.ids[self.index + 1] if self.index + 1 < self.count else None


def alternatives(
    connection: Connection, conversation_id: str, users: Iterable[Message]
) -> dict[int, Alternatives]:
    """User row id -> its alternatives, for the rows given that have any. A row has
    alternatives only if some run starts at its parent, so the run starts (one per fork)
    are all that is read, plus the row right after each such parent: it continues the
    parent too unless it starts a run of its own."""
    starts = connection.execute(_RUN_STARTS, {"conversation_id": conversation_id}).all()
    if not starts:
        return {}
    children: dict[int, dict[int, int]] = defaultdict(dict)  # parent -> {seq: id}
    for row_id, seq, parent in starts:
        assert row_id is not None and parent is not None  # a primary key; run starts only
        children[parent][seq] = row_id
    wanted = {parent_of(user) for user in users} & children.keys()
    if not wanted:
        return {}
    run_starts = {seq for _, seq, _ in starts}
    following = connection.execute(
        _IDS_AT, {"conversation_id": conversation_id, "seqs": [p + 1 for p in wanted]}
    ).all()
    for seq, row_id in following:
        assert row_id is not None  # a primary key
        if seq not in run_starts:
            children[seq - 1][seq] = row_id
    found: dict[int, Alternatives] = {}
    for user in users:
        siblings = children.get(parent_of(user))
        if siblings and user.seq in siblings and len(siblings) > 1:
            ids = tuple(siblings[seq] for seq in sorted(siblings))
            user_id = id_of(user)
            found[user_id] = Alternatives(ids.index(user_id), len(ids), ids)
    return found


def _scalar(connection: Connection, statement: Executable, **params: object) -> int | None:
    value: int | None = connection.execute(statement, params).scalar()
    return value


def leaf_through(connection: Connection, conversation_id: str, seq: int) -> int:
    """The leaf of the branch through row `seq`: from the end of its run, follow the
    newest run continuing it, until none does."""
    newest = _scalar(connection, _NEWEST_SEQ, conversation_id=conversation_id) or 0
    while True:
        following = _scalar(connection, _NEXT_RUN_START, conversation_id=conversation_id, seq=seq)
        end = following - 1 if following is not None else newest
        child = _scalar(connection, _NEWEST_CHILD, conversation_id=conversation_id, seq=end)
        if child is None:
            return end
        seq = child


def renumbered(rows: list[Message], conversation_id: str) -> list[dict[str, object]]:
    """A branch's rows (oldest first) as rows of a new, linear conversation: seqs 1..n,
    everything else kept, the stored left-out spans said in the new seqs (a send's spans
    lie on its own branch, so every seq they name is among these rows)."""
    new_seq = {row.seq: number for number, row in enumerate(rows, start=1)}
    copies = []
    for row in rows:
        values = row.model_dump(exclude={"id"})
        values.update(conversation_id=conversation_id, seq=new_seq[row.seq], parent_seq=None)
        if row.fit_left_out:
            values["fit_left_out"] = [
                [new_seq[first], new_seq[last]]
                for first, last in row.fit_left_out
                if first in new_seq and last in new_seq
            ]
        copies.append(values)
    return copies
