"""How a process hears of answers written elsewhere: one shared poll (SQLite), one
listening connection (PostgreSQL) that survives losing its connection."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text, update
from sqlmodel import Session, col

from tests.conftest import empty_tables
from tests.factories import writing_answers
from webapp.chat.answering.flushing import send_text
from webapp.chat.answering.notify import STOP, TEXT, PollingNotices, PostgresNotices, notice
from webapp.chat.answering.pieces import FollowedText, payloads
from webapp.chat.stored.models import Message
from webapp.db import Database


def _grow(session: Session, answer_id: int) -> None:
    session.connection().execute(
        update(Message).where(col(Message.id) == answer_id).values(content="more text")
    )


async def test_one_poll_wakes_only_the_watchers_of_an_answer_that_moved(db: Database) -> None:
    moving, still = await db.write(writing_answers, 2)
    notices = PollingNotices(db, interval=0.02)
    with (
        notices.watch(moving) as a,
        notices.watch(moving) as b,
        notices.watch(still) as quiet,
    ):
        # The first poll sees every answer for the first time: each watcher reads once.
        assert all(await asyncio.gather(a.wait(1), b.wait(1), quiet.wait(1)))
        await db.write(_grow, moving)
        assert await a.wait(1) and await b.wait(1), "both watchers of the answer hear it"
        assert not await quiet.wait(0.1), "the other answer did not move"
        assert notices.watching() == 3
    assert notices.watching() == 0
    await notices.stop()


def _send(session: Session, answer_id: int) -> None:
    session.connection().execute(notice(STOP, answer_id))


@pytest.mark.postgres
async def test_a_listener_that_loses_its_connection_listens_again(postgres_url: str) -> None:
    await empty_tables(postgres_url)
    db = Database(postgres_url)
    stopped: list[int] = []
    notices = PostgresNotices(postgres_url, on_stop=stopped.append)
    await notices.start()
    try:
        await asyncio.wait_for(notices.listening.wait(), 10)
        with notices.watch(41) as watch:
            await db.write(_send, 41)
            assert await watch.wait(5) and stopped == [41], "a stop reaches the writer's process"
            await db.write(
                lambda session: session.connection().execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE query LIKE 'LISTEN%' AND datname = current_database()"
                    )
                )
            )
            # Whatever was said while nobody listened may be lost: every watcher is woken
            # once the listener is back, to read for itself.
            assert await watch.wait(10), "woken after reconnecting"
            await asyncio.wait_for(notices.listening.wait(), 10)
            await db.write(_send, 41)
            for _ in range(500):
                if len(stopped) == 2:
                    break
                await asyncio.sleep(0.01)
            assert stopped == [41, 41], "and it hears again"
    finally:
        await notices.stop()
        await db.dispose()


@pytest.mark.postgres
async def test_text_notices_carry_a_long_append_in_pieces_that_fit(postgres_url: str) -> None:
    """An append far past one NOTIFY payload (escaped, 9,000 "é" are 54 KB) goes out in
    pieces PostgreSQL accepts, and the watcher puts them back together exactly once."""
    await empty_tables(postgres_url)
    db = Database(postgres_url)
    notices = PostgresNotices(postgres_url)
    await notices.start()
    long = "é" * 9000 + " end"
    try:
        await asyncio.wait_for(notices.listening.wait(), 10)
        with notices.watch(7) as watch, notices.watch(8) as other:
            sent = payloads([(7, 0, "Hello, "), (8, 0, "elsewhere"), (7, 7, long)], TEXT)
            assert len(sent) > 6 and all(len(p.encode()) < 8000 for p in sent)
            await db.write(send_text, sent)
            followed = FollowedText("")
            for _ in range(50):
                await watch.wait(1)
                pieces, moved = watch.take()
                for start, piece in pieces:
                    followed.add(start, piece)
                if len(followed.text) >= 7 + len(long):
                    break
            assert not moved
            assert followed.text == "Hello, " + long
            assert other.take()[0] == [(0, "elsewhere")]
    finally:
        await notices.stop()
        await db.dispose()


def test_followed_text_never_repeats_nor_skips() -> None:
    followed = FollowedText("Hel")
    followed.add(0, "He")  # heard before the row was read: already shown
    followed.add(5, " world")  # the piece before it was missed: it waits
    assert (followed.text, followed.waiting) == ("Hel", True)
    followed.add(2, "llo")
    assert (followed.text, followed.waiting) == ("Hello world", False)
    followed.add(0, "Hello")  # a row behind the pieces takes nothing back
    followed.add(0, "Hello world, again")  # a row ahead of them fills the rest
    assert (followed.text, followed.waiting) == ("Hello world, again", False)
