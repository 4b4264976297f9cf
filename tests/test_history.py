"""The bounded loader gives exactly what fitting the whole stored history would give."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import insert

from tests.catalogs import upstream_catalog
from tests.upstream import FakeUpstream
from webapp.chat.history import (
    left_out,
    left_out_spans,
    load_transcript,
    next_turn,
    replayable_user_seqs,
)
from webapp.chat.models import Conversation, Message, Status
from webapp.db import create_engine, session_factory
from webapp.llm.calibration import Calibrator
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager, Transcript

STATUSES = [Status.COMPLETE] * 6 + [Status.FAILED, Status.STOPPED, Status.INTERRUPTED]


@pytest.fixture
async def stored(database_url: str) -> AsyncIterator[tuple]:  # type: ignore[type-arg]
    """A conversation of 300 turns with failed, stopped, empty and interrupted answers."""
    rng = random.Random(3)
    engine = create_engine(database_url)
    conversation = Conversation(owner="t", configuration="small")
    rows, full, prior = [], [], 0
    for turn in range(300):
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
        await connection.execute(insert(Message), rows)
    yield engine, conversation.id, full, prior
    await engine.dispose()


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
    newest_seq = 601
    async with session_factory(engine)() as session:
        assert await next_turn(session, conversation_id) == (601, prior)
        bounded = await load_transcript(
            session,
            conversation_id,
            newest,
            estimate_message(newest),
            newest_seq,
            prior,
            budget=manager.largest_budget(route),
        )
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
    fast = manager.fit_for(route, route.primary, bounded)
    slow = manager.fit_for(route, route.primary, everything)
    assert fast.messages == slow.messages
    assert fast.dropped_turns == slow.dropped_turns
    assert fast.estimated_tokens == slow.estimated_tokens
    assert len(bounded.messages) < len(everything.messages) or model == "large"


async def test_left_out_span_matches_the_rebuilt_list(stored: tuple) -> None:  # type: ignore[type-arg]
    engine, conversation_id, full, _ = stored
    async with session_factory(engine)() as session:
        replayable = await replayable_user_seqs(session, conversation_id, 601, 1000)
        assert replayable == [seq for seq, _, _ in full]
        counts = (1, 5, 40, len(full) - 1)
        spans = await left_out_spans(session, conversation_id, [(601, d) for d in counts])
        assert len(spans) == 1, "keyed by the send's seq"
        for dropped in counts:
            (first, last) = (await left_out_spans(session, conversation_id, [(601, dropped)]))[601]
            listed = left_out(replayable, dropped)
            inside = [seq for seq in replayable if first <= seq <= last]
            assert inside == listed
        assert await left_out_spans(session, conversation_id, [(601, 0)]) == {}
