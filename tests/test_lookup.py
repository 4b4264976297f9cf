"""The sign-in lookup: on a SQLite file it reads on the loop, returns what a read unit
returns, and never holds the loop for a busy database."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import pytest
from sqlmodel import Session

from tests.factories import TEST_HASHER
from webapp.accounts.models import User
from webapp.accounts.service import _TOKEN_OWNER, AccountService, digest
from webapp.db import Database


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
        row = session.connection().execute(_TOKEN_OWNER, {"secret": digest(plain)})
        return tuple(row.one())

    assert tuple(looked_up) == await db.read(core)
    assert not await db.lookup(_TOKEN_OWNER, {"secret": digest("tk-unknown")})
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


async def test_a_lookup_after_dispose_is_refused(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    plain = await signed_in_user(db)
    assert await db.lookup(_TOKEN_OWNER, {"secret": digest(plain)})
    await db.dispose()
    with pytest.raises(RuntimeError, match="disposed"):
        await db.lookup(_TOKEN_OWNER, {"secret": digest(plain)})
