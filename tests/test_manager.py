"""The send pipeline over real HTTP: route, bound, dispatch, fall back, learn."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.catalogs import upstream_catalog
from tests.factories import CALLER, collect, finished, long_transcript
from tests.upstream import FakeUpstream, count_chat_tokens
from webapp.llm.calibration import (
    DEFAULT_OVERHEAD,
    FACTOR_STEP,
    MAX_FACTOR,
    MAX_OVERHEAD,
    MIN_FACTOR,
    RECENT,
    Calibrator,
)
from webapp.llm.manager import (
    AllModelsFailed,
    Delta,
    Finished,
    Fitted,
    LLMManager,
)
from webapp.llm.providers.base import ContextLengthExceeded, ProviderError
from webapp.llm.routing import RoutingError, resolve

TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Current weather for a city, with temperature and wind",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
async def manager(tmp_path: Path, upstream: FakeUpstream) -> AsyncIterator[LLMManager]:
    manager = LLMManager(upstream_catalog(tmp_path, upstream), Calibrator())
    yield manager
    await manager.aclose()  # its providers' connections


async def test_stream_is_bounded_before_the_first_chunk(
    manager: LLMManager, upstream: FakeUpstream
) -> None:
    events = await collect(manager, "small", long_transcript(40))
    fits = [e.fit for e in events if isinstance(e, Fitted)]
    deltas = [e.text for e in events if isinstance(e, Delta)]
    assert isinstance(events[0], Fitted) and isinstance(events[-1], Finished)
    assert len(fits) == 1 and fits[0].dropped_turns > 0
    assert len(deltas) >= 3
    sent = upstream.requests[-1]["body"]["messages"]
    assert sent == fits[0].messages
    # The real tokenizer agrees the prompt fits: our estimate errs high.
    assert count_chat_tokens(sent) <= fits[0].estimated_tokens <= fits[0].budget
    usage = finished(events).usage
    assert usage is not None and usage.prompt_tokens == count_chat_tokens(sent)


@pytest.mark.parametrize("status", [429, 503, 500])
async def test_retryable_errors_fall_back_and_refit_for_the_fallback(
    manager: LLMManager, upstream: FakeUpstream, status: int
) -> None:
    upstream.fail_next(status, model="small")
    events = await collect(manager, "small-then-medium", long_transcript(40))
    fits = [e.fit for e in events if isinstance(e, Fitted)]
    assert [f.model for f in fits] == ["small", "medium"]
    assert [f.window for f in fits] == [1024, 4096]
    assert fits[1].dropped_turns < fits[0].dropped_turns
    assert finished(events).model == "medium"
    assert upstream.requests[-1]["body"]["messages"] == fits[1].messages


async def test_connection_refused_falls_back(manager: LLMManager, upstream: FakeUpstream) -> None:
    events = await collect(manager, "unreachable-then-medium", long_transcript(3))
    assert [e.fit.model for e in events if isinstance(e, Fitted)] == ["unreachable", "medium"]
    assert finished(events).model == "medium"


async def test_auth_errors_do_not_fall_back(manager: LLMManager, upstream: FakeUpstream) -> None:
    upstream.fail_next(401, model="small")
    with pytest.raises(ProviderError) as raised:
        await collect(manager, "small-then-medium", long_transcript(2))
    assert not raised.value.retryable
    assert all(r["body"]["model"] == "small" for r in upstream.requests)


async def test_when_every_model_fails_the_error_names_them(
    manager: LLMManager, upstream: FakeUpstream
) -> None:
    upstream.fail_next(503, count=2)
    with pytest.raises(AllModelsFailed) as raised:
        await collect(manager, "small-then-medium", long_transcript(2))
    assert "small" in raised.value.message and "medium" in raised.value.message


async def test_context_length_exceeded_tightens_and_retries_once(
    manager: LLMManager, upstream: FakeUpstream
) -> None:
    # The catalog believes 3072 tokens; the server enforces 1024.
    events = await collect(manager, "optimistic", long_transcript(40))
    fits = [e.fit for e in events if isinstance(e, Fitted)]
    assert len(fits) == 2, "one refused attempt, one re-fitted retry"
    assert fits[1].dropped_turns > fits[0].dropped_turns
    # The refusal named the engine's window: that is learned, and fitted to.
    assert manager.calibrator.window("optimistic") == 1024
    assert fits[1].window == 1024
    assert isinstance(events[-1], Finished)
    # What was learned sticks: the next send fits the first time.
    upstream.reset()
    events = await collect(manager, "optimistic", long_transcript(40))
    assert len([e for e in events if isinstance(e, Fitted)]) == 1


async def test_context_length_exceeded_twice_fails_the_call(
    manager: LLMManager, upstream: FakeUpstream
) -> None:
    upstream.set_models({**upstream.models, "small": 80})
    with pytest.raises(ContextLengthExceeded):
        await collect(manager, "small", long_transcript(10))
    assert len(upstream.requests) == 2


async def test_tool_calls_are_bounded_with_their_schemas_counted(
    manager: LLMManager, upstream: FakeUpstream
) -> None:
    transcript = long_transcript(40)
    transcript.messages[-1]["content"] = "please use tool weather for Oslo"
    route = manager.route("small")
    plain = await manager.chat(manager.plan(route, transcript, caller=CALLER))
    answer, fit, model = await manager.chat(
        manager.plan(route, transcript, caller=CALLER, tools=[TOOL] * 6)
    )
    assert fit.dropped_turns > plain[1].dropped_turns
    assert answer.tool_calls and answer.tool_calls[0]["function"]["name"] == "weather"
    body = upstream.requests[-1]["body"]
    assert count_chat_tokens(body["messages"], body["tools"]) <= fit.estimated_tokens
    assert model == "small"


async def test_criteria_are_resolved_per_call_and_never_written_back(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    catalog = upstream_catalog(tmp_path, upstream)
    assert resolve(catalog, "cheapest-4k").primary.name == "medium"
    assert catalog.configurations["cheapest-4k"].model is None
    cheaper = """
[[models]]
name = "bargain"
provider = "up"
model_id = "large"
context_window = 16384
max_output_tokens = 400
cost_input = 0.01
cost_output = 0.01
"""
    richer = upstream_catalog(tmp_path, upstream, extra=cheaper)
    manager = LLMManager(richer, Calibrator())
    try:
        events = await collect(manager, "cheapest-4k", long_transcript(2))
    finally:
        await manager.aclose()
    assert finished(events).model == "bargain"
    assert richer.configurations["cheapest-4k"].model is None
    with pytest.raises(RoutingError):
        resolve(catalog, "no-such-configuration")


async def test_completion_overflow_is_reported_not_pruned(
    manager: LLMManager, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.set_models({**upstream.models, "small": 100_000})
    prompt = "Once upon a time " * 400
    with caplog.at_level(logging.WARNING, logger="webapp.llm.manager"):
        result, report = await manager.complete("small", prompt)
    assert report is not None and report.model == "small"
    assert report.estimated_tokens > report.budget
    assert upstream.requests[-1]["body"]["prompt"] == prompt
    assert "model=small" in caplog.text and f"budget={report.budget}" in caplog.text
    assert result.text
    _, report = await manager.complete("small", "Hello")
    assert report is None


async def test_embeddings_are_not_bounded(manager: LLMManager, upstream: FakeUpstream) -> None:
    texts = ["word " * 700, "short"]
    vectors = await manager.embed("small", texts)
    assert len(vectors) == 2
    assert upstream.requests[-1]["body"]["input"] == texts
    # Too long for the model: sent as it is, and the provider's refusal reaches the caller.
    too_long = ["word " * 3000]
    with pytest.raises(ContextLengthExceeded):
        await manager.embed("small", too_long)
    assert upstream.requests[-1]["body"]["input"] == too_long


async def test_calibration_learns_from_reported_usage(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    manager = LLMManager(upstream_catalog(tmp_path, upstream), Calibrator())
    calibrator = manager.calibrator
    await calibrator.observe("small", 100, 150, caller=CALLER)
    assert calibrator.factor("small", CALLER) == pytest.approx(1 + FACTOR_STEP), "one step up"
    for _ in range(2):
        await calibrator.observe("small", 100, 150, caller=CALLER)
    assert calibrator.factor("small", CALLER) == pytest.approx(1.5 * 1.05), "then the rest"
    for _ in range(RECENT):
        await calibrator.observe("small", 100, 10_000, caller=CALLER)
    assert calibrator.factor("small", CALLER) == MAX_FACTOR, "bounded above"
    # An over-count lowers the factor slowly, below 1.0 too (the estimate is 2.5x high on
    # some scripts), but only within bounds; and only once the recent answers agree.
    for _ in range(RECENT // 2 + 1):
        await calibrator.observe("small", 100, 50, caller=CALLER)
    once = calibrator.factor("small", CALLER)
    assert MAX_FACTOR * 0.8 < once < MAX_FACTOR, "one over-count moves it a little"
    for _ in range(200):
        await calibrator.observe("small", 100, 50, caller=CALLER)
    assert calibrator.factor("small", CALLER) == pytest.approx(0.5 * 1.05, rel=0.05)
    for _ in range(200):
        await calibrator.observe("small", 100, 5, caller=CALLER)
    assert calibrator.factor("small", CALLER) == MIN_FACTOR, "bounded below"
    # An under-count raises it a bounded step per answer, once the recent answers agree.
    for _ in range(2 * RECENT):
        await calibrator.observe("small", 100, 120, caller=CALLER)
    assert calibrator.factor("small", CALLER) == pytest.approx(1.2 * 1.05)


async def test_template_overhead_is_learned_both_ways_and_bounded() -> None:
    calibrator = Calibrator()
    assert calibrator.overhead("m", CALLER) == DEFAULT_OVERHEAD

    async def observe(prompt: int, *, content: int = 500, messages: int = 10) -> int:
        return await calibrator.observe_overhead(
            "m", content, messages, prompt, fixed=3, caller=CALLER
        )

    # 10 messages, 500 content tokens, the provider counted 573: 7 per message (+3 priming).
    assert await observe(573) == 8  # 7.0 + 0.5 up
    assert await observe(503) == 8, "falls slowly"
    for _ in range(100):
        await observe(503)
    assert calibrator.overhead("m", CALLER) == 1, "settles just above what is observed (0)"
    assert await observe(603) == 1, "one is outvoted"
    for _ in range(RECENT):
        await observe(603)
    assert calibrator.overhead("m", CALLER) == 11, "up, a bounded step per answer, once they agree"
    assert await observe(10_000, content=0, messages=1) == 11
    for _ in range(RECENT * 40):
        await observe(10_000, content=0, messages=1)
    assert calibrator.overhead("m", CALLER) == MAX_OVERHEAD, "bounded above"
    assert await calibrator.tighten_overhead("m", caller=CALLER) == MAX_OVERHEAD
