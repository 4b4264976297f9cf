"""The bounded loader gives exactly what fitting the whole stored history would give."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.catalogs import upstream_catalog
from tests.dbutil import written
from tests.factories import CALLER
from tests.upstream import FakeUpstream
from webapp.chat.stored.history import Tail, load_transcript, read_tail
from webapp.chat.stored.models import Conversation, Message, Status
from webapp.db import create_engine
from webapp.llm.calibration import Calibrator
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager
from webapp.llm.routing import Route
from webapp.llm.window import FitResult, Transcript

Row = dict[str, Any]
"""A message row as the tests build it: its columns by name."""

STATUSES = [Status.COMPLETE] * 6 + [Status.FAILED, Status.STOPPED, Status.INTERRUPTED]


async def store(database_url: str, turns: int, seed: int = 3) -> tuple:
    """A conversation of `turns` turns with failed, stopped, empty and interrupted answers:
    (engine, its id, the replayable turns, their count)."""
    rng = random.Random(seed)
    engine = create_engine(database_url)
    conversation = Conversation(owner="t", configuration="small")
    rows: list[Row] = []
    full: list[tuple[int, Row, Row]] = []
    prior = 0
    for turn in range(turns):
        user = f"turn {turn}: " + "word " * rng.randint(1, 60)
        status = rng.choice(STATUSES)
        answer = (
            ""
            if status == Status.INTERRUPTED and rng.random() < 0.5
            else "ok " * rng.randint(1, 40)
        )
        user_row: Row = {
            "role": "user",
            "content": user,
            "status": "complete",
            "prior_turns": prior,
        }
        answer_row: Row = {
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
async def stored(database_url: str) -> AsyncIterator[tuple]:
    """A conversation of 300 turns."""
    engine, *rest = await store(database_url, 300)
    yield engine, *rest
    await engine.dispose()


def fit_everything(
    manager: LLMManager, route: Route, full: list[tuple[int, Row, Row]], newest: Row
) -> FitResult:
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
    return manager.fit_for(route, route.primary, everything, caller=CALLER)


async def bounded_fit(
    manager: LLMManager, route: Route, engine: AsyncEngine, conversation_id: str, newest: Row
) -> tuple[Tail, Transcript, FitResult]:
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

    tail, transcript = await written(engine, load)
    return tail, transcript, manager.fit_for(route, route.primary, transcript, caller=CALLER)


@pytest.mark.parametrize("model", ["small", "medium", "large"])
async def test_bounded_load_equals_fitting_everything(
    stored: tuple,
    model: str,
    tmp_path: Path,
    upstream: FakeUpstream,
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


async def store_tree(database_url: str, seed: int) -> tuple:
    """A conversation that forked many times, runs of every length (some shorter than a
    turn's two rows are impossible: a turn is always written whole): (engine, its id,
    rows by seq, the leaves)."""
    rng = random.Random(seed)
    engine = create_engine(database_url)
    conversation = Conversation(owner="t", configuration="small")
    by_seq: dict[int, Row] = {}
    leaves = [0]
    next_seq = 1

    def path(leaf: int) -> list[int]:
        seqs = []
        while leaf > 0:
            seqs.append(leaf)
            parent = by_seq[leaf]["parent_seq"]
            leaf = parent if parent is not None else leaf - 1
        return seqs[::-1]

    for _ in range(rng.randint(3, 9)):
        # Continue a random leaf, or a random turn boundary of an existing branch.
        leaf = rng.choice(leaves)
        if leaf and rng.random() < 0.6:
            leaf = rng.choice([0, *[s for s in path(leaf) if by_seq[s]["role"] == "assistant"]])
        prior = sum(
            1
            for s in path(leaf)
            if by_seq[s]["role"] == "assistant"
            and by_seq[s]["status"] != Status.FAILED.value
            and by_seq[s]["content"]
        )
        for turn in range(rng.randint(1, 45)):
            status = rng.choice(STATUSES)
            answer = (
                ""
                if status == Status.INTERRUPTED and rng.random() < 0.5
                else "ok " * rng.randint(1, 40)
            )
            user: Row = {
                "role": "user",
                "content": f"t{next_seq}: " + "word " * rng.randint(1, 60),
                "status": "complete",
                "prior_turns": prior,
            }
            reply: Row = {
                "role": "assistant",
                "content": answer,
                "status": status.value,
                "prior_turns": None,
            }
            for offset, row in enumerate((user, reply)):
                row.update(
                    conversation_id=conversation.id,
                    seq=next_seq + offset,
                    parent_seq=(leaf if leaf != next_seq - 1 else None)
                    if turn == 0 and offset == 0
                    else None,
                    estimated_tokens=estimate_message(row) if row["content"] else 0,
                )
                by_seq[row["seq"]] = row
            next_seq += 2
            prior += int(status != Status.FAILED and bool(answer))
        leaf = next_seq - 1
        leaves.append(leaf)
    async with engine.begin() as connection:
        await connection.execute(insert(Conversation).values(conversation.model_dump()))
        await connection.execute(insert(Message), list(by_seq.values()))
    return engine, conversation.id, by_seq, leaves[1:], path


@pytest.mark.parametrize("seed", range(1, 9))
async def test_a_branch_loads_like_fitting_that_branch_whole(
    database_url: str, seed: int, tmp_path: Path, upstream: FakeUpstream
) -> None:
    """On every leaf of a tree of runs, the bounded load (tail, head, walk over runs)
    keeps what fitting the branch's own turns whole keeps."""
    engine, conversation_id, by_seq, leaves, path = await store_tree(database_url, seed)
    manager = LLMManager(upstream_catalog(tmp_path, upstream), Calibrator())
    newest = {"role": "user", "content": "and now?"}
    try:
        for leaf in leaves:
            seqs = path(leaf)
            full = [
                (s, by_seq[s], by_seq[s + 1])
                for s in seqs
                if by_seq[s]["role"] == "user"
                and by_seq[s + 1]["status"] != Status.FAILED.value
                and by_seq[s + 1]["content"]
            ]
            for model in ("small", "large"):
                route = manager.route(model)

                def load(
                    connection: Connection, leaf: int = leaf, route: Route = route
                ) -> tuple[Tail, Transcript]:
                    tail = read_tail(connection, conversation_id, leaf=leaf)
                    return tail, load_transcript(
                        connection,
                        conversation_id,
                        tail,
                        newest,
                        estimate_message(newest),
                        budget=manager.largest_budget(route),
                    )

                tail, transcript = await written(engine, load)
                assert [
                    s for run in reversed(tail.branch.runs) for s in range(run[0], run[1] + 1)
                ] == seqs
                assert tail.next_seq == max(by_seq) + 1 and tail.prior_turns == len(full)
                assert tail.parent_seq == (None if leaf == max(by_seq) else leaf)
                fast = manager.fit_for(route, route.primary, transcript, caller=CALLER)
                slow = fit_everything(manager, route, full, newest)
                assert (fast.messages, fast.dropped_turns) == (slow.messages, slow.dropped_turns)
    finally:
        await engine.dispose()
