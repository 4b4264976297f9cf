"""The bound: fit() keeps the head and the newest turn, drops whole turns oldest first."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.llm.catalog import DEFAULT_WINDOW, ModelSpec
from webapp.llm.estimator import REPLY_PRIMING, estimate_message, estimate_tools
from webapp.llm.window import budget_for, default_reserve, fit, split_turns

WORDS = st.text(alphabet='abcdefghij klmnop,.ÄöПрив日本語😀{}":', min_size=1, max_size=400)
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up in the dictionary and return its definitions",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


def model(window: int | None = 2048, max_output: int | None = 256) -> ModelSpec:
    return ModelSpec(
        name="m", provider="p", model_id="m", context_window=window, max_output_tokens=max_output
    )


def turn(user: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def tool_turn(user: str, result: str, answer: str, call_id: str) -> list[dict]:
    call = {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
        {"role": "assistant", "content": answer},
    ]


@st.composite
def conversations(draw: st.DrawFn) -> list[dict]:
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(WORDS)})
    for index in range(draw(st.integers(min_value=1, max_value=14))):
        if draw(st.integers(0, 3)) == 0:
            messages += tool_turn(draw(WORDS), draw(WORDS), draw(WORDS), f"call_{index}")
        else:
            messages += turn(draw(WORDS), draw(WORDS))
    messages.append({"role": "user", "content": draw(WORDS)})
    return messages


@settings(max_examples=300, deadline=None)
@given(
    messages=conversations(),
    window=st.integers(min_value=300, max_value=6000),
    reserve=st.integers(min_value=0, max_value=200),
    calibration=st.floats(min_value=1.0, max_value=3.0),
    with_tools=st.booleans(),
)
def test_fit_invariants(
    messages: list[dict], window: int, reserve: int, calibration: float, with_tools: bool
) -> None:
    tools = [TOOL] if with_tools else None
    result = fit(messages, model(window), tools, reserve, calibration=calibration)
    preamble, turns = split_turns(messages)
    head = [messages[i] for i in preamble + turns[0]]
    newest = [messages[i] for i in turns[-1]]
    middle = turns[1:-1]

    # The head and the newest turn are always sent, in order, first and last.
    assert result.messages[: len(head)] == head
    if len(turns) > 1:
        assert result.messages[-len(newest) :] == newest
    # What was left out is exactly the oldest `dropped_turns` turns after the head:
    # whole turns, so a tool call is never sent without its result.
    kept_middle = middle[result.dropped_turns :]
    expected = head + [messages[i] for t in kept_middle for i in t]
    if len(turns) > 1:
        expected += newest
    assert result.messages == expected
    assert result.kept_turns == len(turns) - result.dropped_turns
    for index, message in enumerate(result.messages):
        if message["role"] == "tool":
            assert result.messages[index - 1].get("tool_calls") or (
                result.messages[index - 1]["role"] == "tool"
            )
    # The estimate is what it claims to be, and a fit that fits is within the budget.
    raw = sum(estimate_message(m) for m in result.messages) + estimate_tools(tools) + REPLY_PRIMING
    assert result.estimated_tokens == math.ceil(raw * calibration)
    assert result.budget == budget_for(model(window), reserve)
    if not result.overflow_at_floor:
        assert result.estimated_tokens <= result.budget
    else:
        assert result.dropped_turns == len(middle)
    # Nothing was dropped that could have been kept: one more turn would not fit.
    if result.dropped_turns and not result.overflow_at_floor:
        one_more = middle[result.dropped_turns - 1]
        extra = sum(estimate_message(messages[i]) for i in one_more)
        assert math.ceil((raw + extra) * calibration) > result.budget


def test_everything_fits_so_everything_is_sent() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        *turn("hi", "hello"),
        {"role": "user", "content": "how are you?"},
    ]
    result = fit(messages, model(8192))
    assert result.messages == messages
    assert (result.dropped_turns, result.kept_turns, result.overflow_at_floor) == (0, 2, False)


def test_long_conversation_drops_oldest_turns_after_the_head() -> None:
    messages = [{"role": "system", "content": "Be brief."}]
    for index in range(40):
        messages += turn(f"question {index} " + "word " * 40, f"answer {index} " + "word " * 40)
    messages.append({"role": "user", "content": "and now?"})
    result = fit(messages, model(2048))
    assert result.dropped_turns > 0
    sent_questions = [m["content"].split()[1] for m in result.messages if m["role"] == "user"][:-1]
    first_kept = 1 + result.dropped_turns
    assert sent_questions == ["0", *[str(i) for i in range(first_kept, 40)]]
    assert result.estimated_tokens <= result.budget


def test_overflow_at_the_floor_is_sent_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    huge = "lorem ipsum " * 2000
    messages = [*turn(huge, "ok"), *turn("middle", "ok"), {"role": "user", "content": huge}]
    with caplog.at_level(logging.WARNING, logger="webapp.llm.window"):
        result = fit(messages, model(2048))
    assert result.overflow_at_floor
    assert result.dropped_turns == 1
    assert [m["content"] for m in result.messages] == [huge, "ok", huge]
    warning = caplog.records[-1].getMessage()
    assert "model=m" in warning and f"budget={result.budget}" in warning
    assert f"estimate={result.estimated_tokens}" in warning


def test_tool_schemas_count_against_the_budget() -> None:
    messages = []
    for index in range(12):
        messages += turn(f"q{index} " + "text " * 30, "a " * 30)
    messages.append({"role": "user", "content": "last"})
    tools = [TOOL] * 8
    without = fit(messages, model(1400, 100))
    with_tools = fit(messages, model(1400, 100), tools)
    assert with_tools.dropped_turns > without.dropped_turns
    assert with_tools.estimated_tokens <= with_tools.budget


def test_the_newest_turn_alone_is_the_head_too() -> None:
    result = fit([{"role": "user", "content": "hello"}], model())
    assert result.messages == [{"role": "user", "content": "hello"}]
    assert (result.dropped_turns, result.kept_turns) == (0, 1)


def test_reserve_and_budget_follow_the_design() -> None:
    assert default_reserve(model(10_000, 700)) == 700
    assert default_reserve(model(10_000, None)) == 1000
    assert default_reserve(model(200_000, None)) == 4000
    assert model(None).window == DEFAULT_WINDOW
    # budget = window - reserve - 3% safety
    assert budget_for(model(10_000), 700) == 10_000 - 700 - 300
    result = fit([{"role": "user", "content": "x"}], model(None, None))
    assert (result.window, result.reserve) == (DEFAULT_WINDOW, 1000)
    assert result.budget == DEFAULT_WINDOW - 1000 - math.ceil(DEFAULT_WINDOW * 0.03)


def test_stored_estimates_are_used_instead_of_re_estimating() -> None:
    messages = [*turn("a", "b"), *turn("c", "d"), *turn("e", "f"), {"role": "user", "content": "g"}]
    # Pretend the middle turns were stored as huge: they must be dropped on that word alone.
    estimates = [5, 5, 900, 900, 5, 5, 5]
    result = fit(messages, model(1200, 100), estimates=estimates)
    assert result.dropped_turns == 1
    assert [m["content"] for m in result.messages] == ["a", "b", "e", "f", "g"]


def test_calibration_makes_the_bound_stricter() -> None:
    messages = []
    for index in range(60):
        messages += turn(f"q{index} " + "text " * 20, "a " * 20)
    messages.append({"role": "user", "content": "last"})
    plain = fit(messages, model(2048))
    assert plain.dropped_turns > 0
    strict = fit(messages, model(2048), calibration=1.6)
    assert strict.dropped_turns > plain.dropped_turns
    assert strict.estimated_tokens <= strict.budget


# ---- pins and exact counts ---------------------------------------------------------------


@st.composite
def pinned_conversations(draw: st.DrawFn) -> tuple[list[dict], list[int]]:
    messages = draw(conversations())
    _, turns = split_turns(messages)
    middle = [turn[0] for turn in turns[1:-1]]
    pins = draw(st.lists(st.sampled_from(middle), unique=True)) if middle else []
    return messages, pins


@settings(max_examples=300, deadline=None)
@given(
    drawn=pinned_conversations(),
    window=st.integers(min_value=300, max_value=6000),
    calibration=st.floats(min_value=0.35, max_value=4.0),
)
def test_a_fit_with_pins_keeps_every_pin_that_fits(
    drawn: tuple[list[dict], list[int]], window: int, calibration: float
) -> None:
    messages, pins = drawn
    result = fit(messages, model(window), reserve=50, calibration=calibration, pinned=pins)
    preamble, turns = split_turns(messages)
    kept = {id(m) for m in result.messages}
    turn_kept = [all(id(messages[i]) in kept for i in turn) for turn in turns]
    assert all(
        turn_kept[t] or not any(id(messages[i]) in kept for i in turns[t])
        for t in range(len(turns))
    ), "whole turns"
    assert turn_kept[0] and turn_kept[-1], "head and newest always"
    assert result.messages == [m for m in messages if id(m) in kept], "order kept"
    turn_of = {turn[0]: t for t, turn in enumerate(turns)}
    pinned_turns = sorted(turn_of[i] for i in pins)
    kept_pins = [t for t in pinned_turns if turn_kept[t]]
    dropped_pins = [t for t in pinned_turns if not turn_kept[t]]
    assert result.pins_dropped == len(dropped_pins)
    # The newest pins are kept first: what goes is always the oldest ones.
    assert all(d < k for d in dropped_pins for k in kept_pins)
    sizes = [estimate_message(m) * calibration for m in messages]
    floor = sum(sizes[i] for i in preamble) + sum(
        sizes[i] for t in {0, len(turns) - 1} for i in turns[t]
    )
    fixed = REPLY_PRIMING * calibration
    if dropped_pins:
        # A pin went only because it did not fit; then no unpinned old turn was kept.
        pins_cost = sum(sizes[i] for t in [*kept_pins, dropped_pins[-1]] for i in turns[t])
        assert math.ceil(fixed + floor + pins_cost) > result.budget
        unpinned = [t for t in range(1, len(turns) - 1) if t not in pinned_turns]
        assert not any(turn_kept[t] for t in unpinned)
    elif (
        math.ceil(fixed + floor + sum(sizes[i] for t in pinned_turns for i in turns[t]))
        <= result.budget
    ):
        assert len(kept_pins) == len(pinned_turns), "every pin that fits is kept"
    # What was left out is exactly the rest, as spans of indices.
    unsent = {i for a, b in result.left_out for i in range(a, b + 1)}
    assert unsent == {i for i, m in enumerate(messages) if id(m) not in kept}
    assert result.dropped_turns == turn_kept.count(False)


def test_exact_counts_size_messages_with_the_template_overhead() -> None:
    messages = [*turn("a " * 300, "b " * 300), *turn("c " * 300, "d " * 300)]
    messages.append({"role": "user", "content": "last"})
    counts = [10, 10, 10, 10, 2]
    exact = fit(messages, model(300, 100), counts=counts, overhead=5, counted_by="server:m")
    assert exact.dropped_turns == 0 and exact.counted_by == "server:m"
    assert exact.estimated_tokens == sum(counts) + 5 * len(counts) + REPLY_PRIMING
    assert exact.counted_tokens == sum(counts) and exact.sent_messages == 5
    estimated = fit(messages, model(300, 100))
    assert estimated.dropped_turns == 1 and estimated.counted_by == "estimate"
    # A message without a count is estimated, and the fit says so.
    partial = fit(messages, model(8000, 100), counts=[None, 10, 10, 10, 2], counted_by="server:m")
    assert partial.counted_by == "server:m+estimate" and partial.counted_tokens is None
    assert partial.estimated_tokens == estimate_message(messages[0]) + 32 + REPLY_PRIMING
    # The one that was left out is said as a span of indices.
    pinned_out = fit(messages, model(300, 100), counts=counts, overhead=60)
    assert pinned_out.dropped_turns == 1 and pinned_out.left_out == ((2, 3),)
