"""What one caller's traffic teaches sizes that caller's sends first; a model's shared
figure moves only when distinct callers agree (issue 43).

The attack: thirty gateway calls of one caller, each a prompt the estimate over-counts,
pulled the model's shared factor toward its floor, and another user's estimate fell
under the provider's real count. Now those calls teach the caller's own factor; the
shared one follows the callers' own figures only when at least three distinct voters (a
user with all its tokens is one; every visitor of an embed together is one) are on one
side of it, by a bounded step. Over real HTTP against the fake upstream, and the rule
against the calibrator itself, stored on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.catalogs import upstream_catalog
from tests.factories import collect, finished, long_transcript
from tests.factories.settings import settings_for
from tests.served import Gateway, gateway_on, webapp_of
from tests.upstream import FakeUpstream
from webapp.db import Database
from webapp.llm.agreement import QUORUM
from webapp.llm.calibration import (
    DECAY,
    DEFAULT_OVERHEAD,
    FACTOR_STEP,
    MIN_FACTOR,
    OVERHEAD_STEP,
    Calibrator,
)
from webapp.llm.manager import Fitted, LLMManager

RULE = "=" * 2000
"""A rule of 2,000 "=": the estimate puts 670 tokens on it, cl100k 31, so every answer to
it says the estimate is twenty times too high."""


PROSE = "The rivers and bridges of the old town are crossed by many people every day. " * 4
"""English prose, which the estimate counts closest (about 1.3 times cl100k)."""


@pytest.fixture
def gateway(database_url: str, tmp_path: Path, upstream: FakeUpstream) -> Iterator[Gateway]:
    settings = settings_for(database_url, tmp_path, upstream, rate_limit_messages=0)
    with gateway_on(settings, ("mallory", "bob", "carol")) as served:
        upstream.forget_requests()
        yield served


def chats(upstream: FakeUpstream) -> int:
    return sum(r["path"] == "/v1/chat/completions" for r in upstream.requests)


def victims_call(gateway: Gateway, user: str) -> tuple[dict[str, Any], int]:
    """`user`'s call with a long English transcript: its fit report and what the provider
    counted for the prompt that was sent."""
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": "You are terse."}]
    for turn in range(60):
        messages.append({"role": "user", "content": f"question {turn}: {PROSE}"})
        messages.append({"role": "assistant", "content": f"answer {turn}: {PROSE}"})
    messages.append({"role": "user", "content": "and the newest question?"})
    answer = gateway.client(user).chat.completions.create(
        model="small", messages=messages, max_tokens=50
    )
    assert answer.usage is not None
    return webapp_of(answer), answer.usage.prompt_tokens


def test_thirty_gateway_calls_of_one_caller_leave_another_users_estimate_and_cut(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    baseline, _ = victims_call(gateway, "carol")  # a user with no figure of her own yet
    assert baseline["dropped_turns"] > 0 and baseline["counted_by"] == "estimate"

    mallory = gateway.client("mallory")
    for _ in range(30):
        mallory.chat.completions.create(
            model="small", messages=[{"role": "user", "content": RULE}], max_tokens=20
        )

    before = chats(upstream)
    report, real = victims_call(gateway, "bob")  # another user with no figure of his own
    assert chats(upstream) == before + 1, "fitted right the first time, not refused"
    assert report["estimated_tokens"] >= real, "the estimate is not under the real count"
    assert report["dropped_turns"] == baseline["dropped_turns"]
    assert report["estimated_tokens"] == baseline["estimated_tokens"]


async def test_a_refused_callers_retry_fits_and_no_one_elses_figure_moves(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A caller who taught itself a factor far too low (answers to rules of "=", then prose) is
    refused once; the refusal tightens its own factor and its retry is answered. Another
    caller and the shared figure are as they were."""
    manager = LLMManager(upstream_catalog(tmp_path, upstream), Calibrator())
    calibrator = manager.calibrator
    try:
        for _ in range(40):
            await calibrator.observe("small", raw_estimate=100, prompt_tokens=10, caller="user:1")
        assert calibrator.factor("small", "user:1") == MIN_FACTOR
        events = await collect(manager, "small", long_transcript(40), caller="user:1")
        fits = [event.fit for event in events if isinstance(event, Fitted)]
        assert len(fits) == 2, "refused, then re-fitted"
        assert fits[1].dropped_turns > fits[0].dropped_turns
        assert finished(events).usage is not None, "the retry was answered"
        assert calibrator.factor("small", "user:1") > MIN_FACTOR
        assert calibrator.factor("small", "user:2") == calibrator.factor("small") == 1.0
    finally:
        await manager.aclose()


async def learn(calibrator: Calibrator, caller: str, ratio: float, times: int = 30) -> None:
    for _ in range(times):
        await calibrator.observe("m", 100, round(100 * ratio), caller=caller)


async def test_a_shared_factor_moves_only_when_distinct_callers_agree_both_ways(
    db: Database,
) -> None:
    calibrator = Calibrator(db)
    # One user, however many prompts (and tokens), is one voter; so is every visitor
    # of one embed together: anyone can come back as a new visitor.
    await learn(calibrator, "user:1", 0.4)
    for visitor in range(5):
        await learn(calibrator, f"embed:site:{visitor}", 0.4, 10)
    assert calibrator.factor("m") == 1.0, "two voters are not an agreement"
    assert calibrator.factor("m", "user:1") < 0.5, "the caller's own figure learned"
    assert calibrator.factor("m", "user:2") == 1.0, "another caller's did not"

    # A third distinct voter agrees: the shared factor follows, a bounded step a vote.
    seen = [calibrator.factor("m")]
    for _ in range(30):
        await learn(calibrator, "user:3", 0.4, 1)
        seen.append(calibrator.factor("m"))
    # The median vote now: the embed's (its last visitor's own factor).
    assert seen[-1] == pytest.approx(calibrator.factor("m", "embed:site:4"))
    assert seen[-1] < 0.7
    assert all(b >= a * (1 - DECAY) - 1e-9 for a, b in pairwise(seen))

    # Up too: two callers whose answers say the estimate is three times too low move
    # nothing; from the third on, it rises, by at most FACTOR_STEP a vote, led by the
    # median of all voters.
    low = calibrator.factor("m")
    for caller in ("user:4", "user:5"):
        await learn(calibrator, caller, 3.0)
    assert calibrator.factor("m") == low
    seen = [low]
    for caller in ("user:6", "user:7", "user:8"):
        for _ in range(30):
            await learn(calibrator, caller, 3.0, 1)
            seen.append(calibrator.factor("m"))
    risen = seen[-1]
    assert risen > 2 * low
    assert all(b <= a * (1 + FACTOR_STEP) + 1e-9 for a, b in pairwise(seen))

    restarted = Calibrator(db)
    await restarted.load()
    assert restarted.factor("m") == pytest.approx(risen)
    assert restarted.factor("m", "user:1") == pytest.approx(calibrator.factor("m", "user:1"))
    assert restarted.factor("m", "user:9") == pytest.approx(risen)
    # The votes came back with the figures: one more caller is no new agreement.
    await learn(restarted, "user:9", 0.4, 1)
    assert restarted.factor("m") == pytest.approx(risen)


async def test_refusals_tighten_the_callers_own_overhead_and_the_shared_one_by_agreement(
    db: Database,
) -> None:
    calibrator = Calibrator(db)
    for caller in [f"user:{n}" for n in range(1, QUORUM)]:
        assert await calibrator.tighten_overhead("m", caller=caller) == 2 * DEFAULT_OVERHEAD
    assert calibrator.overhead("m") == DEFAULT_OVERHEAD
    assert calibrator.overhead("m", "user:99") == DEFAULT_OVERHEAD
    await calibrator.tighten_overhead("m", caller=f"user:{QUORUM}")
    assert calibrator.overhead("m") == DEFAULT_OVERHEAD + OVERHEAD_STEP, "one bounded step"
    restarted = Calibrator(db)
    await restarted.load()
    assert restarted.overhead("m") == DEFAULT_OVERHEAD + OVERHEAD_STEP
    assert restarted.overhead("m", "user:1") == 2 * DEFAULT_OVERHEAD
