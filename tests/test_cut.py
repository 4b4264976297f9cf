"""The cut that keeps the engine's cache: between two moves every request is the previous
one plus its answer plus the new turn, and a move frees `1 - trim_to` of the budget."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.llm.catalog import ModelSpec
from webapp.llm.window import FitResult, fit, kept_from

MODEL = ModelSpec(name="m", provider="p", model_id="m", context_window=2048, max_output_tokens=256)
SYSTEM = {"role": "system", "content": "You are terse."}


def words(n: int, tag: str) -> str:
    return f"{tag} " + "word " * n


def converse(
    sizes: list[tuple[int, int]], trim_to: float, pinned_turns: frozenset[int] = frozenset()
) -> list[tuple[list[dict], FitResult]]:
    """Send every turn of a conversation, each send keeping the previous send's cut:
    (the messages given to fit, its result) per send."""
    history: list[dict] = [SYSTEM]
    sends: list[tuple[list[dict], FitResult]] = []
    previous: FitResult | None = None
    for index, (asked, answered) in enumerate(sizes):
        messages = [*history, {"role": "user", "content": words(asked, f"q{index}")}]
        pinned = [
            i for i, m in enumerate(messages) if m["role"] == "user" and i // 2 in pinned_turns
        ]
        result = fit(
            messages,
            MODEL,
            trim_to=trim_to,
            keep_from=kept_from(previous.left_out) if previous is not None else 0,
            pinned=pinned,
        )
        sends.append((messages, result))
        history = [*messages, {"role": "assistant", "content": words(answered, f"a{index}")}]
        previous = result
    return sends


TURN_SIZES = st.lists(st.tuples(st.integers(1, 120), st.integers(1, 160)), min_size=2, max_size=60)


@settings(max_examples=150, deadline=None)
@given(TURN_SIZES, st.sampled_from([0.5, 0.6, 0.75, 0.9]))
def test_between_moves_a_request_is_the_previous_one_plus_its_answer_and_the_new_turn(
    sizes: list[tuple[int, int]], trim_to: float
) -> None:
    sends = converse(sizes, trim_to)
    for (before, earlier), (messages, result) in pairwise(sends):
        assert result.trim_to == trim_to
        if not result.cut_moved:
            answer, new_turn = messages[len(before)], messages[-1]
            assert result.messages == [*earlier.messages, answer, new_turn]
        else:
            # A move goes down to trim_to of the budget, unless the floor alone is larger.
            floor = fit(messages, MODEL, trim_to=trim_to, keep_from=len(messages) - 1)
            if floor.estimated_tokens <= trim_to * result.budget:
                assert result.budget - result.estimated_tokens >= (1 - trim_to) * result.budget
            assert result.left_out, "a moved cut leaves something out"
        # Whatever the cut, the head and the newest turn go, and left_out is the rest.
        sent = {id(m) for m in result.messages}
        unsent = {i for first, last in result.left_out for i in range(first, last + 1)}
        assert unsent == {i for i, m in enumerate(messages) if id(m) not in sent}
        assert {0, 1, 2, len(messages) - 1}.isdisjoint(unsent)
        assert result.estimated_tokens <= result.budget


@settings(max_examples=100, deadline=None)
@given(TURN_SIZES, st.frozensets(st.integers(1, 20), max_size=4))
def test_trim_to_one_is_the_plain_rule(
    sizes: list[tuple[int, int]], pinned_turns: frozenset[int]
) -> None:
    for messages, result in converse(sizes, 1.0, pinned_turns):
        pinned = [
            i for i, m in enumerate(messages) if m["role"] == "user" and i // 2 in pinned_turns
        ]
        plain = fit(messages, MODEL, pinned=pinned)
        assert (result.messages, result.left_out) == (plain.messages, plain.left_out)


@settings(max_examples=100, deadline=None)
@given(TURN_SIZES, st.frozensets(st.integers(1, 20), max_size=4))
def test_pins_are_kept_through_every_cut(
    sizes: list[tuple[int, int]], pinned_turns: frozenset[int]
) -> None:
    for messages, result in converse(sizes, 0.75, pinned_turns):
        if result.pins_dropped:
            continue
        sent = {id(m) for m in result.messages}
        for i, message in enumerate(messages[:-1]):
            if message["role"] == "user" and i // 2 in pinned_turns:
                assert id(message) in sent and id(messages[i + 1]) in sent


def test_long_conversation_moves_the_cut_rarely() -> None:
    """Sixty equal turns through a 2k window: most trimmed sends are pure appends."""
    sends = converse([(60, 90)] * 60, 0.75)
    trimmed = [result for _, result in sends if result.dropped_turns]
    moves = [result for result in trimmed if result.cut_moved]
    assert trimmed and len(moves) <= len(trimmed) / 3
    plain = converse([(60, 90)] * 60, 1.0)
    plain_moves = [r for _, r in plain if r.dropped_turns and r.cut_moved]
    assert len(plain_moves) >= len(trimmed) - 1, "the plain rule moves on every trimmed send"


def test_a_fresh_cut_that_must_trim_goes_down_to_trim_to() -> None:
    (messages, _), *_ = converse([(60, 90)] * 40, 0.75)[-1:]
    fresh = fit(messages, MODEL, trim_to=0.75)
    assert fresh.cut_moved and fresh.estimated_tokens <= 0.75 * fresh.budget
    assert fit(messages, MODEL, trim_to=0.75, unread_before=True).cut_moved
