"""The send's third stage: the turn's rows, written in one statement (or, for a
continuation, the answer it goes on with made streaming again).

`insert_turn` is the one place a send writes: the user's row with the facts of its fit
(what was kept, what was left out, for which model), the answer's placeholder after it,
and the conversation's changes (the new turn becomes the active leaf, a cut reset is
spent, a first message names the conversation). Stored before the answer starts, the
message survives whatever the provider does next.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, insert, update
from sqlmodel import col

from webapp.chat.sending.files import LINKS, file_links, first_title, with_left_out_files
from webapp.chat.sending.history import ForSend
from webapp.chat.stored.models import MESSAGE_DEFAULTS, Conversation, Message, Role, Status
from webapp.chat.stored.rows import fit_columns, updated
from webapp.chat.stored.titles import DEFAULT_TITLE
from webapp.db import as_loaded
from webapp.errors import Conflict
from webapp.llm.estimator import estimate_text
from webapp.llm.manager import Plan
from webapp.llm.routing import RoutingError
from webapp.prepared import Prepared
from webapp.stored import id_of

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


@dataclasses.dataclass(frozen=True, slots=True)
class StoredTurn:
    conversation: Conversation
    """As it is after the turn (title, leaf and cut reset changed)."""
    user: Message
    answer: Message
    """The placeholder the answer task fills."""
    planned: Plan | RoutingError
    """The plan, its transcript knowing the new row's id; or why nothing could be planned."""


def insert_turn(
    connection: Connection,
    conversation: Conversation,
    read: ForSend,
    planned: Plan | RoutingError,
    counts: dict[str, int] | None,
    now: datetime,
) -> StoredTurn:
    """Store the turn `read` prepared and `planned` fitted (`counts`: the new message's
    exact counts, by tokenizer)."""
    tail = read.tail
    common = {"conversation_id": conversation.id, "created_at": now, "updated_at": now}
    fit = _fit_values(planned, read.instructions) if isinstance(planned, Plan) else {}
    fit = with_left_out_files(connection, conversation.id, fit)
    rows: list[dict[str, Any]] = [
        {
            **MESSAGE_DEFAULTS,
            **common,
            "seq": tail.next_seq,
            "parent_seq": tail.parent_seq,
            "role": Role.USER,
            "content": read.text,
            "estimated_tokens": read.tokens,
            "prior_turns": tail.prior_turns,
            "turn_number": tail.turn_number,
            "token_counts": counts or None,
            "attachments": read.attachments,
            **fit,
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
    if read.files:
        connection.execute(insert(LINKS), file_links(id_of(user), read.files))
    if isinstance(planned, Plan):
        # The new message is stored now: counts made for it later are kept on its row.
        transcript = planned.transcript
        with_id = dataclasses.replace(transcript, ids=[*(transcript.ids or [])[:-1], user.id])
        planned = dataclasses.replace(planned, transcript=with_id)
    return StoredTurn(_after_turn(connection, conversation, user), user, answer, planned)


def resume_answer(connection: Connection, answer: Message, now: datetime) -> Message:
    """The answer a continuation goes on with, streaming again in the same row: its text
    stays (the continuation is appended to it), no turn is added. Conflict if it changed
    since it was read (another continuation, a stop, a new branch shown)."""
    done = connection.execute(
        update(Message)
        .where(
            col(Message.id) == answer.id,
            col(Message.status) == Status.COMPLETE,
            col(Message.finish_reason) == answer.finish_reason,
            col(Message.content) == answer.content,
        )
        .values(status=Status.STREAMING, error=None, updated_at=now)
    )
    if done.rowcount == 0:
        raise Conflict("that answer changed meanwhile: reload to see it")
    return updated(answer, {"status": Status.STREAMING, "error": None, "updated_at": now})


def _after_turn(connection: Connection, conversation: Conversation, user: Message) -> Conversation:
    """The conversation's changes a new turn makes, written and applied."""
    changes: dict[str, object] = {}
    if conversation.active_seq is not None:  # the new answer is the newest row again
        changes["active_seq"] = None
    if conversation.cut_reset:  # this send started the cut afresh
        changes["cut_reset"] = False
    if user.seq == 1 and conversation.title == DEFAULT_TITLE:
        changes["title"] = first_title(user.content)
    if not changes:
        return conversation
    connection.execute(
        update(Conversation).where(col(Conversation.id) == conversation.id).values(**changes)
    )
    return as_loaded(Conversation, {**conversation.model_dump(), **changes})


def _turn_values(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The insert's parameters: every column of each row, by the row's place."""
    if any(row.keys() != _TURN_KEYS for row in rows):
        raise ValueError("a turn's rows name every column of the insert")
    return {f"{name}_{n}": row[name] for n, row in enumerate(rows) for name in _TURN_COLUMNS}


def _fit_values(planned: Plan, instructions: str) -> dict[str, object]:
    """The user row's fit columns, and how much of the head the owner's instructions took."""
    return {
        **fit_columns(planned.fit, planned.transcript),
        "fit_instructions_tokens": estimate_text(instructions) if instructions else None,
    }
