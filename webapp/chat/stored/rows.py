"""One conversation's or message's row, found by its keys (never another owner's), and rows
rebuilt after an UPDATE without reading them back."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import ColumnElement, Connection, bindparam, inspect, update
from sqlmodel import col, select

from webapp.chat.stored.models import Conversation, Message
from webapp.db import as_loaded
from webapp.errors import NotFound
from webapp.llm.window import FitResult, Transcript

Stored = TypeVar("Stored", Conversation, Message)
_COLUMNS = {table: tuple(inspect(table).columns) for table in (Conversation, Message)}
_UPDATE_MESSAGE = update(Message).where(col(Message.id) == bindparam("message_id"))
"""Sets the columns named by the parameters it is executed with."""


def check_id(message_id: int) -> None:
    """Ids are 63-bit: a larger one names no row (and must not reach the database)."""
    if not 0 < message_id < 2**63:
        raise NotFound("no such message")


def owned_in(connection: Connection, owner: str, conversation_id: str) -> Conversation:
    """The conversation, if it is `owner`'s (another owner's is not found either)."""
    keys = col(Conversation.id) == conversation_id, col(Conversation.owner) == owner
    return _found(connection, Conversation, keys, "no such conversation")


def row_in(connection: Connection, conversation_id: str, message_id: int) -> Message:
    """A message of this conversation (a message of another one is not found either)."""
    keys = col(Message.id) == message_id, col(Message.conversation_id) == conversation_id
    return _found(connection, Message, keys, "no such message")


def _found(
    connection: Connection, table: type[Stored], keys: tuple[ColumnElement[bool], ...], missing: str
) -> Stored:
    """The one row of `table` its keys find, read as plain columns and loaded without the
    ORM (`as_loaded`): a lookup by keys wants no session. NotFound says `missing`."""
    row = connection.execute(select(*_COLUMNS[table]).where(*keys)).first()
    if row is None:
        raise NotFound(missing)
    return as_loaded(table, dict(row._mapping))


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
        "fit_cleared": transcript.positions.cleared(fit) if transcript.positions else None,
        "fit_attachments": attachments_fit(fit, transcript),
        "fit_summary": (
            transcript.summary.version if transcript.summary and fit.summary_sent else None
        ),
    }


def attachments_fit(fit: FitResult, transcript: Transcript) -> dict[str, list[str]] | None:
    """The files the send carried and those it left out with their turns (None: the
    transcript carried none)."""
    if not transcript.attachments:
        return None
    unsent = {i for first, last in fit.left_out for i in range(first, last + 1)}
    sent: list[str] = []
    left_out: list[str] = []
    for index, files in sorted(transcript.attachments.items()):
        (left_out if index in unsent else sent).extend(files)
    return {"sent": sent, "left_out": left_out}
