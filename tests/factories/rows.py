"""Rows written straight to the database, for the tests of what the app does with rows it
finds there."""

from __future__ import annotations

from sqlalchemy import insert
from sqlmodel import Session, col

from webapp.chat.stored.models import MESSAGE_DEFAULTS, Conversation, Message, Role, Status
from webapp.timeutil import utcnow


def writing_answers(session: Session, count: int) -> list[int]:
    """A conversation with `count` answers being written; their ids."""
    connection = session.connection()
    conversation = Conversation(owner="embed:flush:visitor", configuration="demo", title="t")
    connection.execute(
        insert(Conversation).values(
            {**conversation.model_dump(), "embed_name": "flush", "visitor": "visitor"}
        )
    )
    now = utcnow()
    rows = [
        {
            **MESSAGE_DEFAULTS,
            "conversation_id": conversation.id,
            "seq": seq,
            "role": Role.ASSISTANT,
            "status": Status.STREAMING,
            "created_at": now,
            "updated_at": now,
        }
        for seq in range(1, count + 1)
    ]
    result = connection.execute(insert(Message).returning(col(Message.id)), rows)
    return sorted(id_of_inserted for id_of_inserted in result.scalars().all() if id_of_inserted)
