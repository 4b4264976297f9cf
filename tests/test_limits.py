"""The one sliding window and the one lock that every limit uses (`webapp.limits`), on
SQLite and PostgreSQL: rows read back from either database give the same wait, the wait
is whole seconds and never zero, a row at the window's start is out of it, the four
limiters agree on which row must leave, and the lock lasts as long as the transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert
from sqlmodel import Session

from tests.factories import TEST_HASHER, settings_on
from webapp.accounts.models import SignInAttempt
from webapp.accounts.service import AccountService
from webapp.chat.sending.admission import Admission
from webapp.chat.stored.budget import ImportQuota, Use, message_budget_wait, record_use
from webapp.chat.stored.models import GatewayCall
from webapp.db import Database, create_engine
from webapp.embed.models import EmbedSend
from webapp.embed.quota import EmbedQuota
from webapp.errors import TooManyRequests
from webapp.gateway.limits import RateLimit
from webapp.limits import SlidingWindow, advisory_lock, try_advisory_lock
from webapp.timeutil import utcnow

MINUTE = SlidingWindow(timedelta(seconds=60))
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


async def sent(db: Database, *seconds_ago: float, now: datetime = NOW) -> None:
    """Alice's sends, that many seconds before `now`, as the record keeps them."""

    def record(session: Session) -> None:
        for ago in seconds_ago:
            record_use(session.connection(), "user:1", Use.SEND, now - timedelta(seconds=ago))

    await db.write(record)


async def wait_of(db: Database, limit: int, now: datetime = NOW) -> int | None:
    def read(session: Session) -> int | None:
        return message_budget_wait(session.connection(), "user:1", limit, 60, now)

    return await db.write(read)


# ---- the window --------------------------------------------------------------------------


async def test_the_wait_is_until_the_row_past_the_allowed_leaves(db: Database) -> None:
    """Read back from the database (naive on SQLite, aware on PostgreSQL): the row that must
    leave is the `limit`-th newest, and the wait rounds up to whole seconds."""
    await sent(db, 5, 10, 30.5)
    assert await wait_of(db, 4) is None, "three in the window leave room for a fourth"
    assert await wait_of(db, 3) == 30, "the oldest leaves in 29.5 seconds"
    assert await wait_of(db, 2) == 50
    assert await wait_of(db, 1) == 55


async def test_a_row_about_to_leave_still_means_a_second(db: Database) -> None:
    await sent(db, 59.999)
    assert await wait_of(db, 1) == 1


async def test_a_row_at_the_windows_start_is_out_of_it(db: Database) -> None:
    await sent(db, 60, 61)
    assert await wait_of(db, 1) is None


def test_naive_times_are_read_as_utc() -> None:
    rows = [NOW - timedelta(seconds=10), NOW - timedelta(seconds=20.25)]
    naive = [row.replace(tzinfo=None) for row in rows]
    assert MINUTE.wait(naive, 1, NOW) == MINUTE.wait(rows, 1, NOW) == 40


def test_rows_past_the_one_that_must_leave_do_not_matter() -> None:
    """A caller may read more rows than `allowed + 1` (imports read the whole window)."""
    rows = [NOW - timedelta(seconds=ago) for ago in (1, 2, 3, 4)]
    assert MINUTE.wait(rows, 1, NOW) == 58
    assert MINUTE.wait(rows, 4, NOW) is None


def test_none_allowed_waits_for_the_newest() -> None:
    assert MINUTE.wait([], 0, NOW) is None
    assert MINUTE.wait([NOW - timedelta(seconds=1)], 0, NOW) == 59
    assert MINUTE.wait([NOW], 0, NOW) == 60


def test_the_window_starts_its_span_before_now() -> None:
    assert MINUTE.start(NOW) == NOW - timedelta(minutes=1)
    assert SlidingWindow.of_seconds(0.5).start(NOW) == NOW - timedelta(milliseconds=500)


# ---- the four limiters read it alike -----------------------------------------------------

Limiter = Callable[[Database, datetime], Awaitable[int]]
"""Stores two spendings, 10 and 30.01 seconds before the given time, in the limiter's own
table; then spends once more (allowed: two in 60 seconds) and returns the Retry-After."""


async def rows_at(db: Database, model: type, now: datetime, **columns: object) -> None:
    def store(session: Session) -> None:
        at = next(name for name, value in columns.items() if value is None)
        values = {name: value for name, value in columns.items() if value is not None}
        for ago in (10, 30.01):
            session.connection().execute(
                insert(model).values(**values, **{at: now - timedelta(seconds=ago)})
            )

    await db.write(store)


async def a_send(db: Database, now: datetime) -> int:
    await sent(db, 10, 30.01, now=now)
    admission = Admission(settings_on(db.url, None, rate_limit_window=60))

    def send(session: Session) -> None:
        admission.refuse_too_many(session.connection(), "user:1", 2, now)

    with pytest.raises(TooManyRequests) as refused:
        await db.write(send)
    assert "sent 2 messages in the last 60 seconds" in str(refused.value)
    return refused.value.retry_after


async def a_gateway_call(db: Database, now: datetime) -> int:
    await rows_at(db, GatewayCall, now, owner="user:1", kind="call", size=0, called_at=None)
    admission = Admission(settings_on(db.url, None, rate_limit_messages=2, rate_limit_window=60))
    with pytest.raises(TooManyRequests) as refused:
        await RateLimit(db, admission).admit("user:1")
    assert "sent 2 messages in the last 60 seconds" in str(refused.value)
    return refused.value.retry_after


async def an_import(db: Database, now: datetime) -> int:
    await rows_at(db, GatewayCall, now, owner="user:1", kind="import", size=10, called_at=None)
    limits = {"import_limit": 2, "import_limit_bytes": 0, "import_window": 60}
    quota = ImportQuota(db, settings_on(db.url, None, **limits))
    with pytest.raises(TooManyRequests) as refused:
        await quota.take("user:1", 10)
    assert "imported 2 conversations (20 bytes)" in str(refused.value)
    return refused.value.retry_after


async def an_embed_send(db: Database, now: datetime) -> int:
    await rows_at(db, EmbedSend, now, embed_name="support", client="10.0.0.1", sent_at=None)
    quota = EmbedQuota(per_client=2, per_embed=0, window=timedelta(seconds=60))
    with pytest.raises(TooManyRequests) as refused:
        await db.write(
            lambda session: quota.take(session.connection(), "embed:support:v", "10.0.0.1", now)
        )
    assert "2 messages were sent from your address" in str(refused.value)
    return refused.value.retry_after


async def a_sign_in(db: Database, now: datetime) -> int:
    await rows_at(
        db, SignInAttempt, now, username_key="alice", client="10.0.0.1", attempted_at=None
    )
    accounts = AccountService(
        db, hasher=TEST_HASHER, failures_allowed=2, failure_window=timedelta(seconds=60)
    )
    with pytest.raises(TooManyRequests) as refused:
        await accounts.authenticate("alice", "wrong", client="10.0.0.1")
    assert "try again in 1 minute." in str(refused.value)
    return refused.value.retry_after


@pytest.mark.parametrize(
    "spend", [a_send, a_gateway_call, an_import, an_embed_send, a_sign_in], ids=lambda f: f.__name__
)
async def test_every_limiter_waits_for_its_oldest_row_to_leave(
    db: Database, spend: Limiter
) -> None:
    """Two in the window reach the limit; the third may go once the older leaves, in 29.99
    seconds less the time the test takes (under a second)."""
    assert await spend(db, utcnow()) in (29, 30)


# ---- the lock ----------------------------------------------------------------------------


async def test_the_lock_lasts_until_the_transaction_ends(database_url: str) -> None:
    """On PostgreSQL a key is held by one transaction at a time, from the statement that
    takes it to the commit; other keys are free. SQLite's transactions need no lock of
    this kind (its writers hold the whole database), so it never refuses."""
    engine = create_engine(database_url)
    postgres = engine.dialect.name == "postgresql"
    try:
        async with engine.connect() as holder, engine.connect() as other:
            await holder.run_sync(advisory_lock, "rate user:1")
            assert await other.run_sync(try_advisory_lock, "rate user:1") is not postgres
            assert await other.run_sync(try_advisory_lock, "rate user:2")
            await other.rollback()
            waiting = asyncio.ensure_future(other.run_sync(advisory_lock, "rate user:1"))
            await asyncio.sleep(0.3)
            assert waiting.done() is not postgres, "the second waits for the first's commit"
            await holder.commit()
            await asyncio.wait_for(waiting, 10)
            assert await holder.run_sync(try_advisory_lock, "rate user:1") is not postgres
            await other.rollback()
            assert await holder.run_sync(try_advisory_lock, "rate user:1")
    finally:
        await engine.dispose()
