"""The stored summaries of a conversation (`webapp.llm.summaries`): which apply to a branch,
the newest of them, a new version, the owner's edit.

A summary covers rows [first_seq, last_seq] of the branch it was written on. Along a branch
seqs only grow and every row's ancestors are on every branch through it, so a summary
applies to exactly the branches through its `last_seq`: an edit of a covered turn starts a
branch that never passes through it. A conversation holds one summary per move of its cut
(a few dozen in a very long one), so they are read whole and sorted here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, update
from sqlmodel import Session, col, select

from webapp.chat.stored.history import Branch
from webapp.chat.stored.models import Summary
from webapp.db import as_loaded
from webapp.errors import InvalidInput, NotFound
from webapp.timeutil import as_utc


def on_branch(connection: Connection, conversation_id: str, branch: Branch) -> list[Summary]:
    """The summaries that apply to `branch`, oldest version first."""
    rows = connection.execute(
        select(*Summary.__table__.columns).where(  # type: ignore[attr-defined]
            col(Summary.conversation_id) == conversation_id
        )
    ).all()
    found = [as_loaded(Summary, dict(row._mapping)) for row in rows]
    return sorted((s for s in found if s.last_seq in branch), key=lambda s: (s.version, s.id or 0))


def of_version(summaries: Sequence[Summary], version: int | None) -> Summary | None:
    """The branch's summary of that version (the newest row, should two share it)."""
    matching = [s for s in summaries if s.version == version]
    return matching[-1] if matching else None


def add_version(
    connection: Connection, conversation_id: str, branch: Branch, values: dict[str, Any]
) -> Summary:
    """Store a new version on `branch`: one more than the newest that applies there."""
    known = on_branch(connection, conversation_id, branch)
    version = (known[-1].version if known else 0) + 1
    row = {"conversation_id": conversation_id, "version": version, "edited": False, **values}
    new_id = connection.execute(insert(Summary).values(row).returning(col(Summary.id))).scalar_one()
    return as_loaded(Summary, {**row, "id": new_id})


def edit_newest(
    connection: Connection, conversation_id: str, branch: Branch, summary_id: int, content: str
) -> Summary:
    """The owner's edit of the branch's newest summary, in place (marked `edited`): the next
    send carries the new text, which costs that send one cache miss."""
    known = on_branch(connection, conversation_id, branch)
    if not any(s.id == summary_id for s in known):
        raise NotFound("no such summary")
    if known[-1].id != summary_id:
        raise InvalidInput("only the newest summary can be edited")
    connection.execute(
        update(Summary).where(col(Summary.id) == summary_id).values(content=content, edited=True)
    )
    return as_loaded(Summary, {**known[-1].model_dump(), "content": content, "edited": True})


def summary_dict(row: Summary) -> dict[str, Any]:
    """A summary as the API spells it."""
    return {
        "id": row.id,
        "version": row.version,
        "covers": [row.first_seq, row.last_seq],
        "content": row.content,
        "model": row.model,
        "tokens": row.tokens,
        "created_at": _iso(row.created_at),
        "edited": bool(row.edited),
        "fallback": bool(row.fallback),
    }


def _iso(value: datetime) -> str:
    return as_utc(value).isoformat().replace("+00:00", "Z")


def export_summaries(session: Session, conversation_id: str) -> list[dict[str, Any]]:
    """Every branch's summaries, as the JSON export carries them (and import reads)."""
    rows = (
        session.connection()
        .execute(
            select(*Summary.__table__.columns)  # type: ignore[attr-defined]
            .where(col(Summary.conversation_id) == conversation_id)
            .order_by(col(Summary.id))
        )
        .all()
    )
    return [summary_dict(as_loaded(Summary, dict(row._mapping))) for row in rows]
