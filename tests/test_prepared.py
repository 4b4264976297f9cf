"""Prepared statements return exactly what Core returns, on SQLite and PostgreSQL, and
the sign-in lookup on a SQLite file never holds the loop for a busy database."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Connection, Float, Integer, Numeric, bindparam, insert, literal, select
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from tests.factories import TEST_HASHER
from webapp.accounts.models import User
from webapp.accounts.service import _TOKEN_OWNER, AccountService, digest
from webapp.chat.sending.admission import _TOUCH_CONVERSATION
from webapp.chat.stored import branches, history
from webapp.chat.stored.budget import Use, record_use
from webapp.chat.stored.models import MESSAGE_DEFAULTS, Conversation, Message, Role, Status
from webapp.db import Database
from webapp.prepared import Prepared
from webapp.timeutil import utcnow

TOKENIZER = "tiktoken:o200k_base"


def fill(session: Session) -> str:
    """A conversation whose rows use every kind of column: JSON, enums, booleans, NULLs,
    datetimes with microseconds."""
    now = utcnow()
    conversation = Conversation(
        owner="alice", configuration="small", created_at=now, updated_at=now
    )
    session.add(conversation)
    session.flush()
    rows: list[dict[str, Any]] = []
    for seq in range(1, 7):
        user = seq % 2 == 1
        rows.append(
            {
                **MESSAGE_DEFAULTS,
                "conversation_id": conversation.id,
                "seq": seq,
                "parent_seq": 0 if seq == 1 else None,
                "role": Role.USER if user else Role.ASSISTANT,
                "status": Status.COMPLETE,
                "content": f"row {seq} \u00e9\U0001f600",
                "estimated_tokens": 10 + seq,
                "prior_turns": seq // 2,
                "pinned": seq == 3,
                "token_counts": {TOKENIZER: 7 * seq} if seq != 5 else None,
                "created_at": now + timedelta(microseconds=seq),
                "updated_at": now,
            }
        )
    session.connection().execute(insert(Message), rows)
    return conversation.id


def both(connection: Connection, statement: Any, values: dict[str, Any]) -> tuple[Any, Any]:
    core = [tuple(row) for row in connection.execute(statement, values)]
    return core, Prepared(statement).rows(connection, values)


async def test_prepared_rows_equal_core_rows(db: Database) -> None:
    conversation_id = await db.write(fill)
    statements = history._statements((TOKENIZER,))
    ranged = {"conversation_id": conversation_id, "first": 1, "last": 6, "limit": 10}

    def compare(session: Session) -> list[tuple[Any, Any]]:
        connection = session.connection()
        return [
            both(connection, branches._NEWEST_IN.statement, ranged),
            both(connection, statements.newest_in.statement, ranged),
            both(connection, statements.oldest_in.statement, {**ranged, "limit": 2}),
            both(
                connection,
                statements.pinned_between.statement,
                {"conversation_id": conversation_id, "after": 0, "before": 7},
            ),
            both(
                connection,
                history._RUNS.statement,
                {"conversation_id": conversation_id, "leaf": None},
            ),
            both(
                connection,
                select(col(Message.seq), literal(None), literal("fixed")).where(
                    col(Message.conversation_id) == bindparam("conversation_id")
                ),
                {"conversation_id": conversation_id},
            ),
        ]

    for core, prepared in await db.read(compare):
        assert core, "every comparison reads rows"
        assert prepared == core
        assert [type(v) for v in prepared[0]] == [type(v) for v in core[0]]


async def test_a_prepared_update_returns_what_core_returns(db: Database) -> None:
    conversation_id = await db.write(fill)
    now = utcnow()
    values = {
        "conversation_id": conversation_id,
        "owned_by": "alice",
        "now": now,
        "since": now - timedelta(hours=1),
        "limit": 100,
    }

    def touch(session: Session) -> tuple[Any, Any]:
        connection = session.connection()
        for second in range(3):  # the owner's three sends in the window, as recorded
            record_use(connection, "alice", Use.SEND, now - timedelta(seconds=second))
        return both(connection, _TOUCH_CONVERSATION.statement, values)

    core, prepared = await db.write(touch)
    assert prepared == core
    assert (
        dict(zip(_TOUCH_CONVERSATION.names, prepared[0], strict=False))["updated_at"]
        == (core[0][_TOUCH_CONVERSATION.names.index("updated_at")])
    )
    assert prepared[0][-1] == 3, "the owner's three sends in the window are counted"

    def stored(session: Session) -> Any:
        return session.get(Conversation, conversation_id)

    assert (await db.read(stored)).updated_at.replace(tzinfo=None) == now.replace(tzinfo=None)


def test_an_in_list_cannot_be_prepared() -> None:
    statement = select(col(Message.seq)).where(
        col(Message.seq).in_(bindparam("seqs", expanding=True))
    )
    with pytest.raises(ValueError, match="expanding"):
        Prepared(statement).compiled(create_sync_engine("sqlite://").dialect)


async def signed_in_user(db: Database) -> str:
    accounts = AccountService(db, hasher=TEST_HASHER)
    user = await accounts.create_user("alice", "correct horse battery")
    assert user.id is not None
    _, plain = await accounts.create_token(user.id, "script")
    return plain


async def test_the_sign_in_lookup_equals_its_core_read(db: Database) -> None:
    plain = await signed_in_user(db)
    (looked_up,) = await db.lookup(_TOKEN_OWNER, {"secret": digest(plain)})

    def core(session: Session) -> tuple[Any, ...]:
        row = session.connection().execute(_TOKEN_OWNER.statement, {"secret": digest(plain)})
        return tuple(row.one())

    assert looked_up == await db.read(core)
    assert await db.lookup(_TOKEN_OWNER, {"secret": digest("tk-unknown")}) == []
    user = await AccountService(db, hasher=TEST_HASHER).user_for_token(plain)
    assert isinstance(user, User) and user.username == "alice" and user.active is True


async def test_a_lookup_waits_out_a_locked_file_without_holding_the_loop(
    sqlite_url: str,
) -> None:
    """A connection in exclusive locking mode (taken while no other connection had the
    file open) keeps even WAL readers out: the lookup meets SQLITE_BUSY at once on the
    loop, takes a reader thread's way (which waits for the lock), and the loop goes on
    running meanwhile."""
    setup = Database(sqlite_url)
    plain = await signed_in_user(setup)
    await setup.dispose()
    db = Database(sqlite_url)
    try:
        path = sqlite_url.split("///", 1)[1]
        locked, release = threading.Event(), threading.Event()

        def hold_the_file() -> None:
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("PRAGMA locking_mode=EXCLUSIVE")
            other.execute("BEGIN EXCLUSIVE")
            other.execute(
                "UPDATE api_token SET name = 'renamed' WHERE token_hash = ?", (digest(plain),)
            )
            locked.set()
            release.wait(10)
            other.execute("COMMIT")
            other.close()

        holder = threading.Thread(target=hold_the_file)
        holder.start()
        assert await asyncio.to_thread(locked.wait, 10)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        lookup = asyncio.create_task(db.lookup(_TOKEN_OWNER, {"secret": digest(plain)}))
        await asyncio.sleep(0.3)
        assert not lookup.done(), "the lookup waits for the lock"
        assert ticks >= 10, "the loop went on running while the lookup waited"
        release.set()
        rows = await lookup
        ticker.cancel()
        await asyncio.to_thread(holder.join)
        assert len(rows) == 1 and time.monotonic() - started >= 0.3
    finally:
        await db.dispose()


async def test_a_revoked_token_stops_signing_in_at_once(db: Database) -> None:
    accounts = AccountService(db, hasher=TEST_HASHER)
    plain = await signed_in_user(db)
    user = await accounts.user_for_token(plain)
    assert user is not None and user.id is not None
    (token,) = await accounts.list_tokens(user.id)
    assert token.id is not None
    assert await accounts.revoke_token(user.id, token.id)
    assert await accounts.user_for_token(plain) is None


def test_statements_whose_values_core_computes_are_refused() -> None:
    dialect = create_sync_engine("sqlite://").dialect
    defaults = insert(Conversation).values(
        id=bindparam("id"), owner=bindparam("owner"), configuration=bindparam("configuration")
    )
    with pytest.raises(ValueError, match="defaults"):
        Prepared(defaults).compiled(dialect)
    computed: Any = select(bindparam("when", callable_=utcnow))
    with pytest.raises(ValueError, match="computed"):
        Prepared(computed).compiled(dialect)


@pytest.mark.parametrize("paramstyle", ["qmark", "named"])
def test_defaults_give_way_to_the_callers_values_in_either_paramstyle(paramstyle: str) -> None:
    engine = create_sync_engine("sqlite://", paramstyle=paramstyle)
    statement: Any = select(bindparam("v", value=1, type_=Integer), literal(5), bindparam("x"))
    with engine.connect() as connection:
        for values in ({"x": "a"}, {"x": "b", "v": 99}):
            core = [tuple(row) for row in connection.execute(statement, values)]
            assert Prepared(statement).rows(connection, values) == core
    engine.dispose()


async def test_numbers_come_back_as_core_returns_them(db: Database) -> None:
    statement = select(
        literal(Decimal("1.25"), Numeric(10, 2)), literal(2.5, Float()), literal(3, Integer)
    )

    def compare(session: Session) -> tuple[Any, Any]:
        return both(session.connection(), statement, {})

    core, prepared = await db.read(compare)
    assert prepared == core == [(Decimal("1.25"), 2.5, 3)]
    assert [type(v) for v in prepared[0]] == [type(v) for v in core[0]]


async def test_a_drivers_error_is_raised_as_core_raises_it(db: Database) -> None:
    conversation_id = await db.write(fill)
    duplicate = Prepared(
        insert(Conversation).values(
            id=bindparam("id"),
            owner=bindparam("owner"),
            configuration=bindparam("configuration"),
            title=bindparam("title"),
            created_at=bindparam("now"),
            updated_at=bindparam("now"),
            # Columns with defaults are named, or Core computes or fetches them.
            cut_reset=False,
            pinned=False,
            archived=False,
            kind="original",
        )
    )
    values = {
        "id": conversation_id,
        "owner": "bob",
        "configuration": "small",
        "title": "t",
        "now": utcnow(),
    }

    def insert_again(session: Session) -> None:
        duplicate.rows(session.connection(), values)

    with pytest.raises(IntegrityError) as raised:
        await db.write(insert_again)
    assert raised.value.orig is not None


async def test_a_lookup_after_dispose_is_refused(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    plain = await signed_in_user(db)
    assert await db.lookup(_TOKEN_OWNER, {"secret": digest(plain)})
    await db.dispose()
    with pytest.raises(RuntimeError, match="disposed"):
        await db.lookup(_TOKEN_OWNER, {"secret": digest(plain)})
