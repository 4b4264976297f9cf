"""Rows built as the ORM builds loaded rows read exactly like rows read back."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import insert

from webapp.chat.models import MESSAGE_DEFAULTS, Conversation, Message
from webapp.chat.serialize import message_dict
from webapp.db import as_loaded, create_engine, session_factory
from webapp.timeutil import as_utc, utcnow


def normalized(row: Message) -> dict[str, object]:
    return {
        name: as_utc(value) if isinstance(value, datetime) else value
        for name, value in row.model_dump().items()
    }


async def test_a_row_built_from_written_values_equals_the_row_read_back(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    now = utcnow()
    conversation = Conversation(owner="t", configuration="small", created_at=now, updated_at=now)
    values = {
        **MESSAGE_DEFAULTS,
        "conversation_id": conversation.id,
        "seq": 1,
        "role": "user",
        "content": "hello",
        "estimated_tokens": 3,
        "prior_turns": 0,
        "dropped_turns": 2,
        "fit_model": "small",
        "created_at": now,
        "updated_at": now,
    }
    try:
        async with engine.begin() as connection:
            await connection.execute(insert(Conversation).values(conversation.model_dump()))
            inserted = await connection.execute(insert(Message).returning(Message.id), [values])
            message_id = inserted.scalar_one()
        built = as_loaded(Message, {**values, "id": message_id})
        async with session_factory(engine)() as session:
            read = await session.get(Message, message_id)
        assert read is not None
        assert message_dict(built) == message_dict(read)
        # SQLite gives back naive UTC times; the values written were aware.
        assert normalized(built) == normalized(read)
    finally:
        await engine.dispose()


def test_an_incomplete_row_is_refused() -> None:
    with pytest.raises(ValueError, match="created_at"):
        as_loaded(Message, {**MESSAGE_DEFAULTS, "conversation_id": "c", "seq": 1, "role": "user"})
