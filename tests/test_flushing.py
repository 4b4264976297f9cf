"""The one writer of streaming answers: moved text flushed together, heartbeats for quiet
answers, stops found, finals group-committed; on PostgreSQL, each move announced."""

from __future__ import annotations

import asyncio
from datetime import datetime
from functools import partial

import asyncpg
import pytest
from sqlalchemy import select, update
from sqlalchemy.engine import make_url
from sqlmodel import Session, col

from tests.conftest import empty_tables
from tests.factories import writing_answers
from webapp.chat.answering.flushing import AnswerFlusher
from webapp.chat.answering.notify import CHANNEL
from webapp.chat.stored.models import Message, Status
from webapp.db import Database
from webapp.timeutil import utcnow


def _rows(session: Session, ids: list[int]) -> dict[int, tuple[str, str, datetime]]:
    found = session.connection().execute(
        select(
            col(Message.id), col(Message.content), col(Message.status), col(Message.updated_at)
        ).where(col(Message.id).in_(ids))
    )
    return {id_: (content, status, at) for id_, content, status, at in found if id_ is not None}


def _stop(session: Session, answer_id: int) -> None:
    session.connection().execute(
        update(Message).where(col(Message.id) == answer_id).values(status=Status.STOPPED)
    )


async def test_moved_answers_are_written_together_and_quiet_ones_only_beat(
    db: Database,
) -> None:
    ids = await db.write(writing_answers, 3)
    texts = {answer_id: "" for answer_id in ids}
    stops = {answer_id: asyncio.Event() for answer_id in ids}
    flusher = AnswerFlusher(db, interval=3600, heartbeat=3600, announce=False)
    for answer_id in ids:
        flusher.track(answer_id, partial(texts.__getitem__, answer_id), stops[answer_id])
    texts[ids[0]], texts[ids[1]] = "Hello", "Hi there"
    before = await db.read(_rows, ids)
    await flusher.flush()
    after = await db.read(_rows, ids)
    assert [after[i][0] for i in ids] == ["Hello", "Hi there", ""]
    assert after[ids[2]][2] == before[ids[2]][2], "nothing moved, nothing written"
    # Another worker stops the second answer: the next flush tells its writer.
    await db.write(_stop, ids[1])
    texts[ids[1]] += ", and more"
    await flusher.flush()
    assert stops[ids[1]].is_set() and not stops[ids[0]].is_set()
    assert (await db.read(_rows, ids))[ids[1]][:2] == ("Hi there", Status.STOPPED)
    await flusher.close()


async def test_a_quiet_answer_gets_its_heartbeat(db: Database) -> None:
    (answer_id,) = await db.write(writing_answers, 1)
    flusher = AnswerFlusher(db, interval=3600, heartbeat=0.0, announce=False)
    flusher.track(answer_id, lambda: "", asyncio.Event())
    before = (await db.read(_rows, [answer_id]))[answer_id][2]
    await asyncio.sleep(0.01)
    await flusher.flush()
    assert (await db.read(_rows, [answer_id]))[answer_id][2] > before
    await flusher.close()


async def test_answers_that_end_together_are_stored_whole(db: Database) -> None:
    ids = await db.write(writing_answers, 20)
    flusher = AnswerFlusher(db, interval=0.01, heartbeat=3600, announce=False)
    for answer_id in ids:
        flusher.track(answer_id, partial("text of {}".format, answer_id), asyncio.Event())
    await asyncio.gather(
        *(
            flusher.finish(
                answer_id,
                {
                    "content": f"final {answer_id}",
                    "status": Status.COMPLETE,
                    "updated_at": utcnow(),
                },
            )
            for answer_id in ids
        )
    )
    rows = await db.read(_rows, ids)
    assert {rows[i][:2] for i in ids} == {(f"final {i}", Status.COMPLETE) for i in ids}
    await asyncio.sleep(0.05)  # a flush after the end must not write the text back
    rows = await db.read(_rows, ids)
    assert all(rows[i][0] == f"final {i}" for i in ids)
    await flusher.close()


@pytest.mark.postgres
async def test_each_move_is_announced_on_postgresql(postgres_url: str) -> None:
    await empty_tables(postgres_url)
    db = Database(postgres_url)
    database_url = postgres_url
    ids = await db.write(writing_answers, 2)
    heard: list[str] = []
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    listener = await asyncpg.connect(dsn)
    await listener.add_listener(CHANNEL, lambda *args: heard.append(args[-1]))
    texts = {ids[0]: "", ids[1]: ""}
    flusher = AnswerFlusher(db, interval=3600, heartbeat=0.0, announce=True)
    for answer_id in ids:
        flusher.track(answer_id, partial(texts.__getitem__, answer_id), asyncio.Event())
    try:
        texts[ids[0]] = "Hello"
        await flusher.flush()  # the second only beats: no notice for it
        await flusher.finish(ids[0], {"content": "Hello!", "status": Status.COMPLETE})
        for _ in range(500):
            if len(moves(heard)) >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await listener.close()
        await flusher.close()
        await db.dispose()
    # The text itself may also go out in a text notice, if the writes took longer than
    # the pace of those (`TEXT_PACE`): those are not what is counted here.
    assert moves(heard) == [f"moved {ids[0]} 5", f"moved {ids[0]} 6"]


def moves(heard: list[str]) -> list[str]:
    return [notice for notice in heard if notice.startswith("moved ")]
