"""Rows built as the ORM builds loaded rows read exactly like rows read back."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, bindparam, insert, select, text
from sqlmodel import Session, SQLModel, col
from sqlmodel.ext.asyncio.session import AsyncSession

from webapp.chat.stored.models import MESSAGE_DEFAULTS, Conversation, Message
from webapp.chat.stored.serialize import message_dict
from webapp.db import Database, as_loaded, create_engine, off_the_loop
from webapp.prepared import Prepared
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
            inserted = await connection.execute(
                insert(Message).returning(col(Message.id)), [values]
            )
            message_id = inserted.scalar_one()
        built = as_loaded(Message, {**values, "id": message_id})
        async with AsyncSession(engine) as session:
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
    tmp_path: Path, sqlite_template: Path
) -> None:
    """What a send reads under its lock cannot change before it writes."""
    path = tmp_path / "lock.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite+aiosqlite:///{path}"
    db = Database(url)

    def read_then_try_a_write_elsewhere(session: Session) -> str:
        session.connection().execute(select(col(Conversation.id))).all()
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
        outcome = await db.write(read_then_try_a_write_elsewhere)
    finally:
        await db.dispose()
    assert outcome == "database is locked"


def test_a_test_run_has_a_postgresql_database_of_its_own(postgres_url: str) -> None:
    """Two runs at once must not truncate each other's tables: each gets a fresh database
    (dropped when the run ends), never the one the server URL names."""
    from sqlalchemy.engine import make_url

    from tests.postgres import POSTGRES_SERVER_URL

    own = make_url(postgres_url).database
    assert own != make_url(POSTGRES_SERVER_URL).database
    assert own is not None and own.startswith(f"webapp_test_{os.getpid()}_")


async def test_a_read_is_not_kept_waiting_by_a_write_in_progress(sqlite_url: str) -> None:
    """Under WAL a read runs beside the one writer, and sees the last committed state."""
    url = sqlite_url
    db = Database(url)
    holding, release = threading.Event(), threading.Event()
    now = utcnow()

    def slow_write(session: Session) -> None:
        conversation = Conversation(owner="w", configuration="c", created_at=now, updated_at=now)
        session.add(conversation)
        session.flush()
        holding.set()
        assert release.wait(10), "the read never finished while the write held its lock"

    def count(session: Session) -> int:
        return len(session.connection().execute(select(col(Conversation.id))).all())

    try:
        writing = asyncio.create_task(db.write(slow_write))
        await asyncio.get_running_loop().run_in_executor(None, holding.wait, 10)
        seen = await db.read(count)
        release.set()
        await writing
        assert seen == 0, "a read sees only what was committed"
        assert await db.read(count) == 1
    finally:
        release.set()
        await db.dispose()


async def test_an_in_memory_database_keeps_its_rows_between_transactions() -> None:
    db = Database("sqlite+aiosqlite:///:memory:")
    now = utcnow()
    try:
        await db.write(lambda session: SQLModel.metadata.create_all(session.connection()))
        conversation = Conversation(owner="m", configuration="c", created_at=now, updated_at=now)
        await db.write(lambda session: session.add(conversation))
        read = await db.read(lambda session: session.get(Conversation, conversation.id))
        assert read is not None and read.owner == "m"
    finally:
        await db.dispose()


async def test_a_write_whose_caller_is_cancelled_still_ends_whole(database_url: str) -> None:
    """A stopped answer or a closed stream cancels the task waiting on a write: the write
    still commits whole and hands its connection back, on both databases (SQLite's thread
    cannot be interrupted; asyncpg's connection must not be, or it leaks)."""
    db = Database(database_url)
    started = threading.Event()
    now = utcnow()

    def slow_write(session: Session) -> None:
        session.add(Conversation(owner="c", configuration="c", created_at=now, updated_at=now))
        session.flush()
        started.set()
        if db.dialect == "sqlite":
            time.sleep(0.3)  # on a thread of its own
        else:
            session.connection().execute(text("SELECT pg_sleep(0.3)"))

    def count(session: Session) -> int:
        return len(session.connection().execute(select(col(Conversation.id))).all())

    writing = asyncio.create_task(db.write(slow_write))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    await db.dispose()  # waits for the write still running
    again = Database(database_url)
    try:
        assert await again.read(count) == 1
    finally:
        await again.dispose()


def _add_conversation(connection: Connection, owner: str) -> str:
    now = utcnow()
    conversation = Conversation(owner=owner, configuration="c", created_at=now, updated_at=now)
    connection.execute(insert(Conversation).values(conversation.model_dump()))
    return threading.current_thread().name


def _add_by_the_driver(connection: Connection, owner: str) -> str:
    """As a send's `Prepared` statements write: on the driver's cursor, not through Core."""
    now = utcnow()
    values = Conversation(
        owner=owner, configuration="c", created_at=now, updated_at=now
    ).model_dump()
    Prepared(insert(Conversation).values({name: bindparam(name) for name in values})).rows(
        connection, values
    )
    return threading.current_thread().name


def _owners(session: Session) -> list[str]:
    query = select(col(Conversation.owner)).order_by(col(Conversation.created_at))
    return list(session.connection().execute(query).scalars())


async def test_a_quick_write_runs_on_the_loop_when_the_writer_thread_is_idle(
    database_url: str,
) -> None:
    """A `quick` unit commits like any other; on a SQLite file with nothing queued on its
    writer thread it runs on the loop's own thread (no hop), whether its statements go
    through Core or straight to the driver."""
    db = Database(database_url)
    try:
        ran_on = await db.write_core(_add_conversation, "core", quick=True)
        by_driver = await db.write_core(_add_by_the_driver, "driver", quick=True)
        on_thread = await db.write_core(_add_conversation, "thread")
        assert await db.read(_owners) == ["core", "driver", "thread"]
        if db.dialect == "sqlite":
            assert ran_on == by_driver == threading.current_thread().name
            assert on_thread.startswith("sqlite-write"), "not quick: on the writer thread"
    finally:
        await db.dispose()


async def test_a_quick_write_waits_its_turn_on_the_writer_thread_while_that_holds_the_lock(
    sqlite_url: str,
) -> None:
    """The loop never waits for SQLite's lock: while the writer thread is inside a
    transaction, a quick unit goes to that thread and runs after it, the loop free
    meanwhile; with the lock free again, a quick unit runs on the loop, whatever else
    the writer thread may have queued."""
    db = Database(sqlite_url)
    inside, release = threading.Event(), threading.Event()

    def holding(connection: Connection) -> str:
        _add_conversation(connection, "holder")
        inside.set()
        release.wait(10)
        return threading.current_thread().name

    try:
        held = asyncio.ensure_future(db.write_core(holding))
        assert await asyncio.to_thread(inside.wait, 10)
        waiting = asyncio.ensure_future(db.write_core(_add_conversation, "waited", quick=True))
        await asyncio.sleep(0.05)  # the loop runs on: the quick unit waits off it
        assert not waiting.done()
        release.set()
        assert (await waiting).startswith("sqlite-write")
        assert (await held).startswith("sqlite-write")
        loop = threading.current_thread().name
        assert await db.write_core(_add_conversation, "free", quick=True) == loop
        assert await db.read(_owners) == ["holder", "waited", "free"]
    finally:
        release.set()
        await db.dispose()


@pytest.mark.parametrize("add", [_add_conversation, _add_by_the_driver])
async def test_a_quick_write_that_fails_on_the_loop_leaves_nothing(
    sqlite_url: str, add: Callable[[Connection, str], str]
) -> None:
    db = Database(sqlite_url)

    def add_then_fail(connection: Connection) -> None:
        add(connection, "lost")
        raise ValueError("refused")

    try:
        with pytest.raises(ValueError, match="refused"):
            await db.write_core(add_then_fail, quick=True)
        assert await db.read(_owners) == []
        assert await db.write_core(add, "after", quick=True) == threading.current_thread().name
        assert await db.read(_owners) == ["after"]
    finally:
        await db.dispose()


async def test_a_quick_write_that_turns_out_long_leaves_the_loop(sqlite_url: str) -> None:
    """`off_the_loop` in a quick unit on the loop rolls back what it wrote there and runs
    it again on the writer thread, where the call does nothing."""
    db = Database(sqlite_url)
    tries: list[str] = []

    def long_after_all(connection: Connection) -> str:
        tries.append(_add_conversation(connection, "once"))
        off_the_loop()
        return tries[-1]

    try:
        assert (await db.write_core(long_after_all, quick=True)).startswith("sqlite-write")
        assert tries[0] == threading.current_thread().name, "tried on the loop first"
        assert await db.read(_owners) == ["once"], "the loop's try left nothing"
    finally:
        await db.dispose()


async def test_a_quick_write_keeps_its_turn_behind_a_write_on_the_thread(sqlite_url: str) -> None:
    """A write already queued or running on the writer thread goes first: the quick unit
    then queues behind it, as any write would."""
    db = Database(sqlite_url)
    holding, release = threading.Event(), threading.Event()

    def slow_write(connection: Connection) -> str:
        name = _add_conversation(connection, "first")
        holding.set()
        assert release.wait(10)
        return name

    try:
        writing = asyncio.create_task(db.write_core(slow_write))
        await asyncio.get_running_loop().run_in_executor(None, holding.wait, 10)
        quick = asyncio.create_task(db.write_core(_add_conversation, "second", quick=True))
        await asyncio.sleep(0.05)
        assert not quick.done()
        release.set()
        assert (await writing).startswith("sqlite-write")
        assert (await quick).startswith("sqlite-write")
        assert await db.read(_owners) == ["first", "second"]
    finally:
        release.set()
        await db.dispose()


async def test_a_quick_write_waits_on_the_thread_while_another_process_writes(
    sqlite_url: str,
) -> None:
    """The loop never waits for SQLite's lock: held elsewhere, the unit goes to the writer
    thread, which waits for it (the busy timeout) and then commits."""
    db = Database(sqlite_url)
    path = sqlite_url.removeprefix("sqlite+aiosqlite:///")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        quick = asyncio.create_task(db.write_core(_add_conversation, "waited", quick=True))
        await asyncio.sleep(0.2)
        assert not quick.done()
        assert time.monotonic() - started < 1, "the loop was held while the lock was busy"
        other.execute("COMMIT")
        assert (await quick).startswith("sqlite-write")
        assert await db.read(_owners) == ["waited"]
        assert await db.write_core(_add_conversation, "again", quick=True) == (
            threading.current_thread().name
        )
    finally:
        other.close()
        await db.dispose()
