"""Rows built as the ORM builds loaded rows read exactly like rows read back."""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, insert, select

from webapp.chat.models import MESSAGE_DEFAULTS, Conversation, Message
from webapp.chat.serialize import message_dict
from webapp.db import as_loaded, create_engine, in_transaction, session_factory
from webapp.migrate import upgrade
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


async def test_an_sqlite_transaction_holds_the_write_lock_from_its_first_read(
    tmp_path: Path,
) -> None:
    """What a send reads under its lock cannot change before it writes."""
    path = tmp_path / "lock.db"
    url = f"sqlite+aiosqlite:///{path}"
    upgrade(url)
    engine = create_engine(url)

    def read_then_try_a_write_elsewhere(connection: Connection) -> str:
        connection.execute(select(Conversation.id)).all()
        other = sqlite3.connect(path, timeout=0)
        try:
            other.execute(
                "INSERT INTO model_calibration (model, factor, samples, updated_at) "
                "VALUES ('m', 1.0, 0, '2026-01-01')"
            )
            other.commit()
            return "the other writer got in"
        except sqlite3.OperationalError as refused:
            return str(refused)
        finally:
            other.close()

    try:
        outcome = await in_transaction(session_factory(engine), read_then_try_a_write_elsewhere)
    finally:
        await engine.dispose()
    assert outcome == "database is locked"


def test_a_test_run_has_a_postgresql_database_of_its_own(postgres_url: str) -> None:
    """Two runs at once must not truncate each other's tables: each gets a fresh database
    (dropped when the run ends), never the one the server URL names."""
    from sqlalchemy.engine import make_url

    from tests.conftest import POSTGRES_SERVER_URL

    own = make_url(postgres_url).database
    assert own != make_url(POSTGRES_SERVER_URL).database
    assert own is not None and own.startswith(f"webapp_test_{os.getpid()}_")
