"""One conversation's or message's row, found by its keys (never another owner's), and rows
rebuilt after an UPDATE without reading them back."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, inspect, update
from sqlmodel import col, select

from webapp.chat.models import Conversation, Message
from webapp.db import as_loaded
from webapp.errors import NotFound
from webapp.llm.window import FitResult, Transcript

_CONVERSATION_COLUMNS = tuple(inspect(Conversation).columns)
_MESSAGE_COLUMNS = tuple(inspect(Message).columns)
_UPDATE_MESSAGE = update(Message).where(col(Message.id) == bindparam("message_id"))
"""Sets the columns named by the parameters it is executed with."""


def check_id(message_id: int) -> None:
    """Ids are 63-bit: a larger one names no row (and must not reach the database)."""
    if not 0 < message_id < 2**63:
        raise NotFound("no such message")


def owned_in(connection: Connection, owner: str, conversation_id: str) -> Conversation:
    row = connection.execute(
        select(*_CONVERSATION_COLUMNS).where(
            col(Conversation.id) == conversation_id, col(Conversation.owner) == owner
        )
    ).first()
    if row is None:
        raise NotFound("no such conversation")
    return as_loaded(Conversation, dict(row._mapping))


def row_in(connection: Connection, conversation_id: str, message_id: int) -> Message:
    """A message of this conversation (a message of another one is not found either)."""
    row = connection.execute(
        select(*_MESSAGE_COLUMNS).where(
            col(Message.id) == message_id, col(Message.conversation_id) == conversation_id
        )
    ).first()
    if row is None:
        raise NotFound("no such message")
    return as_loaded(Message, dict(row._mapping))


def set_columns(connection: Connection, message_id: int, values: dict[str, object]) -> None:
    connection.execute(_UPDATE_MESSAGE, {**values, "message_id": message_id})


def store_counts(connection: Connection, tokenizer: str, counts: dict[int, int]) -> None:
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


def updated(row: Message, values: dict[str, object]) -> Message:
    """`row` as it reads after an UPDATE that set `values`; no need to read it back."""
    return as_loaded(Message, {**row.model_dump(), **values})


def fit_columns(fit: FitResult, transcript: Transcript) -> dict[str, object]:
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
        "fit_left_out": transcript.positions.left_out(fit) if transcript.positions else [],
        "fit_pins_dropped": fit.pins_dropped,
        "fit_trim_to": fit.trim_to,
        "fit_cut_moved": fit.cut_moved,
    }
