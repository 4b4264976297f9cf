"""The bounded loader gives exactly what fitting the whole stored history would give."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, insert

from tests.catalogs import upstream_catalog
from tests.upstream import FakeUpstream
from webapp.chat.history import Tail, load_transcript, read_tail
from webapp.chat.models import Conversation, Message, Status
from webapp.db import create_engine, in_transaction, session_factory
from webapp.llm.calibration import Calibrator
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager, Transcript
from webapp.llm.window import FitResult

STATUSES = [Status.COMPLETE] * 6 + [Status.FAILED, Status.STOPPED, Status.INTERRUPTED]


async def store(database_url: str, turns: int, seed: int = 3) -> tuple:  # type: ignore[type-arg]
    """A conversation of `turns` turns with failed, stopped, empty and interrupted answers:
    (engine, its id, the replayable turns, their count)."""
    rng = random.Random(seed)
    engine = create_engine(database_url)
    conversation = Conversation(owner="t", configuration="small")
    rows, full, prior = [], [], 0
    for turn in range(turns):
        user = f"turn {turn}: " + "word " * rng.randint(1, 60)
        status = rng.choice(STATUSES)
        answer = (
            ""
            if status == Status.INTERRUPTED and rng.random() < 0.5
            else "ok " * rng.randint(1, 40)
        )
        user_row = {"role": "user", "content": user, "status": "complete", "prior_turns": prior}
        answer_row = {
            "role": "assistant",
            "content": answer,
            "status": status.value,
            "prior_turns": None,
        }
        for offset, row in enumerate((user_row, answer_row)):
            row.update(
                conversation_id=conversation.id,
                seq=2 * turn + 1 + offset,
                estimated_tokens=estimate_message(row) if row["content"] else 0,
            )
            rows.append(row)
        if status != Status.FAILED and answer:
            full.append((2 * turn + 1, user_row, answer_row))
            prior += 1
    async with engine.begin() as connection:
        await connection.execute(insert(Conversation).values(conversation.model_dump()))
        if rows:
            await connection.execute(insert(Message), rows)
    return engine, conversation.id, full, prior


@pytest.fixture
async def stored(database_url: str) -> AsyncIterator[tuple]:  # type: ignore[type-arg]
    """A conversation of 300 turns."""
    engine, *rest = await store(database_url, 300)
    yield engine, *rest
    await engine.dispose()


def fit_everything(manager: LLMManager, route, full, newest) -> FitResult:  # type: ignore[no-untyped-def]
    everything = Transcript(
        [
            m
            for _, u, a in full
            for m in (
                {"role": "user", "content": u["content"]},
                {"role": "assistant", "content": a["content"]},
            )
        ]
        + [newest],
        [e for _, u, a in full for e in (u["estimated_tokens"], a["estimated_tokens"])]
        + [estimate_message(newest)],
    )
    return manager.fit_for(route, route.primary, everything)


async def bounded_fit(manager: LLMManager, route, engine, conversation_id, newest):  # type: ignore[no-untyped-def]
    """What a send does: read the tail, then as much history as the route could send."""

    def load(connection: Connection) -> tuple[Tail, Transcript]:
        tail = read_tail(connection, conversation_id)
        transcript = load_transcript(
            connection,
            conversation_id,
            tail,
            newest,
            estimate_message(newest),
            budget=manager.largest_budget(route),
        )
        return tail, transcript

    tail, transcript = await in_transaction(session_factory(engine), load)
    return tail, transcript, manager.fit_for(route, route.primary, transcript)


@pytest.mark.parametrize("model", ["small", "medium", "large"])
async def test_bounded_load_equals_fitting_everything(
    stored: tuple,
    model: str,
    tmp_path: Path,
    upstream: FakeUpstream,  # type: ignore[type-arg]
) -> None:
    engine, conversation_id, full, prior = stored
    manager = LLMManager(upstream_catalog(tmp_path, upstream), Calibrator())
    route = manager.route(model)
    newest = {"role": "user", "content": "and now?"}
    tail, bounded, fast = await bounded_fit(manager, route, engine, conversation_id, newest)
    assert (tail.next_seq, tail.prior_turns) == (601, prior)
    slow = fit_everything(manager, route, full, newest)
    assert fast.messages == slow.messages
    assert fast.dropped_turns == slow.dropped_turns
    assert fast.estimated_tokens == slow.estimated_tokens
    assert len(bounded.messages) < 2 * len(full) + 1 or model == "large", "read less"


@pytest.mark.parametrize("turns", [0, 1, 2, 31, 32, 33, 40, 97])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_every_length_around_the_first_batch_loads_like_everything(
    database_url: str, turns: int, seed: int, tmp_path: Path, upstream: FakeUpstream
) -> None:
    """The tail a send reads first may hold the whole conversation, end exactly at its
    start, or stop mid-way (on an answer whose question is older): each loads the same."""
    engine, conversation_id, full, prior = await store(database_url, turns, seed)
    manager = LLMManager(upstream_catalog(tmp_path, upstream), Calibrator())
    newest = {"role": "user", "content": "and now?"}
    try:
        for model in ("small", "large"):
            route = manager.route(model)
            tail, _, fast = await bounded_fit(manager, route, engine, conversation_id, newest)
            assert (tail.next_seq, tail.prior_turns) == (2 * turns + 1, prior)
            slow = fit_everything(manager, route, full, newest)
            assert (fast.messages, fast.dropped_turns) == (slow.messages, slow.dropped_turns)
    finally:
        await engine.dispose()
