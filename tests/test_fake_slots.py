"""The fake llama.cpp's slot-local caches (`tests.upstream.slots`), which the slot benchmark
measures keys against: each slot keeps its last prompt only; a request naming a slot takes
it; any other takes the slot llama.cpp's server chooses (the most similar prompt above
`--slot-prompt-similarity`, else the least recently used)."""

from __future__ import annotations

from typing import Any

from tests.upstream import FakeUpstream
from tests.upstream.slots import Slots
from webapp.llm.affinity import CacheKeys, slot_for
from webapp.llm.providers.base import CallInfo
from webapp.llm.providers.openai import OpenAIProvider

A, B, C = [1] * 100, [2] * 100, [3] * 100


def test_a_named_slot_is_taken_and_wraps_round() -> None:
    slots = Slots(4)
    assert slots.take(A, 2) == 0 and slots.take([*A, 9], 6) == 100, "6 is slot 2 again"
    assert slots.take(B, 2) == 0 and slots.prompts[2] == B, "the slot keeps its last only"
    assert slots.chosen == [2, 2, 2]


def test_the_most_similar_slot_above_the_threshold_else_the_least_recently_used() -> None:
    slots = Slots(3)
    assert [slots.take(p, None) for p in (A, B, C)] == [0, 0, 0]
    assert slots.chosen == [2, 1, 0], "empty slots by least recent use, the last of equals"
    # A follow-up of A finds A's slot although B and C came after it.
    assert slots.take(A + [7] * 20, None) == 100 and slots.chosen[-1] == 2
    # Something new shares nothing: the least recently used slot (B's) takes it.
    assert slots.take([4] * 50, None) == 0 and slots.chosen[-1] == 1
    # Sharing 10 of 100 tokens with A is not above 0.1: least recently used (C's slot).
    assert slots.take(A[:10] + [5] * 90, None) == 0 and slots.chosen[-1] == 0
    # Sharing 11 of 100 with A is: A's slot, though it is the most recently used.
    assert slots.take(A[:11] + [6] * 89, None) == 11 and slots.chosen[-1] == 2


def test_with_the_search_off_a_follow_up_goes_where_least_recently_used() -> None:
    slots = Slots(2, similarity=0)
    slots.take(A, None)
    slots.take(B, None)
    assert slots.take([*B, 1], None) == 0 and slots.chosen == [1, 0, 1]


def test_equally_old_slots_give_the_last_of_them() -> None:
    """llama.cpp's `<=`: among slots never used, the last one is taken first."""
    slots = Slots(3, similarity=0)
    slots.take(A, None)
    assert slots.chosen == [2]


async def test_the_fake_serves_from_the_slot_a_request_takes(upstream: FakeUpstream) -> None:
    upstream.set_engine("llamacpp")
    upstream.slot_local = 0.1
    upstream.slot_count = 2
    key = CacheKeys("s").key("c")
    long: list[dict[str, Any]] = [{"role": "user", "content": "rivers and bridges " * 100}]
    more = [*long, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "on"}]
    other: list[dict[str, Any]] = [{"role": "user", "content": "mountains " * 100}]
    info = CallInfo("m", 100_000, 90_000, 10, 0, cache_key=key)
    async with OpenAIProvider(upstream.base_url) as llm:
        await llm.chat("small", long, info=info)
        await llm.chat("small", other)  # no key: the least recently used slot
        await llm.chat("small", other, info=info)  # keyed: the key's slot, A's prompt
        answer = await llm.chat("small", more, info=info)
    taken = upstream.slots_taken("small")
    assert taken[0] == taken[2] == taken[3] == slot_for(key, 2) != taken[1]
    # The unkeyed call went elsewhere, the keyed one evicted A from the key's slot.
    assert answer.usage is not None and answer.usage.cached_tokens is not None
    assert answer.usage.cached_tokens < 10, "only the template's opening is shared"
