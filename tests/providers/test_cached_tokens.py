"""Cached prompt tokens: read from every shape an engine reports them in, and the fake
upstream's prefix cache that produces them.

The shapes are first served verbatim (canned bodies through httpx's MockTransport: what
is tested is the reading, including shapes the fake does not produce, such as broken
values); then the fake upstream serves them over real HTTP, engine by engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.upstream import Engine, FakeUpstream
from webapp.llm.providers.base import StreamChunk, Usage
from webapp.llm.providers.openai import OpenAIProvider

# ---- the shapes, served verbatim ---------------------------------------------------------


def usage(prompt: int = 100, completion: int = 5, **extra: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **extra,
    }


def timings(cache_n: Any, prompt_n: Any, predicted_n: int = 5) -> dict[str, Any]:
    """llama.cpp's timings object, with the fields it always has."""
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": 12.5,
        "prompt_per_token_ms": 1.25,
        "prompt_per_second": 800.0,
        "predicted_n": predicted_n,
        "predicted_ms": 50.0,
        "predicted_per_token_ms": 10.0,
        "predicted_per_second": 100.0,
    }


def details(cached: Any) -> dict[str, Any]:
    return {"prompt_tokens_details": {"cached_tokens": cached}}


# name -> (the fields the answer carries besides choices, the Usage to read from them)
ANSWERS: dict[str, tuple[dict[str, Any], Usage | None]] = {
    "openai": (
        {"usage": usage(2000, **details(1920), completion_tokens_details={"reasoning_tokens": 0})},
        Usage(2000, 5, 1920),
    ),
    "openai, nothing cached": ({"usage": usage(**details(0))}, Usage(100, 5, 0)),
    "vllm": ({"usage": usage(**details(48))}, Usage(100, 5, 48)),
    "vllm without details": (
        {"usage": usage(prompt_tokens_details=None)},
        Usage(100, 5, None),
    ),
    "llama.cpp": ({"usage": usage(), "timings": timings(90, 10)}, Usage(100, 5, 90, 10)),
    "llama.cpp, newer: both": (
        {"usage": usage(**details(90)), "timings": timings(90, 10)},
        Usage(100, 5, 90, 10),
    ),
    "llama.cpp timings without usage": ({"timings": timings(90, 10, 7)}, Usage(100, 7, 90, 10)),
    "no engine says": ({"usage": usage()}, Usage(100, 5, None)),
    "no usage at all": ({}, None),
    "negative": ({"usage": usage(**details(-1))}, Usage(100, 5, None)),
    "a string": ({"usage": usage(**details("12"))}, Usage(100, 5, None)),
    "a float": ({"usage": usage(**details(12.0))}, Usage(100, 5, None)),
    "a bool": ({"usage": usage(**details(True))}, Usage(100, 5, None)),
    "null": ({"usage": usage(**details(None))}, Usage(100, 5, None)),
    "more than the prompt": ({"usage": usage(**details(101))}, Usage(100, 5, None)),
    "details not an object": (
        {"usage": usage(prompt_tokens_details=[12])},
        Usage(100, 5, None),
    ),
    "timings not an object": ({"usage": usage(), "timings": "fast"}, Usage(100, 5, None)),
    "cache_n broken": ({"usage": usage(), "timings": timings("90", 10)}, Usage(100, 5, None, 10)),
    "cache_n more than the prompt": (
        {"usage": usage(), "timings": timings(150, 10)},
        Usage(100, 5, None, 10),
    ),
    "timings without usage, prompt_n broken": ({"timings": timings(90, None)}, None),
    "bad details, good timings": (
        {"usage": usage(**details(-5)), "timings": timings(90, 10)},
        Usage(100, 5, 90, 10),
    ),
    "openai-style cache writes": (
        {
            "usage": usage(
                2000, prompt_tokens_details={"cached_tokens": 0, "cache_write_tokens": 1900}
            )
        },
        Usage(2000, 5, 0, None, 1900),
    ),
    "cache writes more than the prompt": (
        {"usage": usage(prompt_tokens_details={"cache_write_tokens": 101})},
        Usage(100, 5, None),
    ),
}


def serving(
    answer: dict[str, Any] | None = None, events: list[Any] | None = None
) -> httpx.MockTransport:
    """A transport that answers every call with `answer` (JSON), or with `events` as an
    event stream (each JSON-encoded, then [DONE])."""

    def handle(request: httpx.Request) -> httpx.Response:
        if events is None:
            return httpx.Response(200, json=answer)
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    return httpx.MockTransport(handle)


def chat_answer(**fields: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": "Hi."}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [choice], **fields}


def chunk(delta: dict[str, Any] | None, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    """A stream chunk; `delta=None` makes it a choices-less (usage) chunk."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices, **fields}


async def final_chunk(transport: httpx.MockTransport) -> StreamChunk:
    async with OpenAIProvider("http://engine.test/v1", transport=transport) as provider:
        chunks = [c async for c in provider.stream_chat("m", [{"role": "user", "content": "x"}])]
    assert "".join(c.text for c in chunks) == "Hi."
    assert chunks[-1].finish_reason == "stop"
    return chunks[-1]


@pytest.mark.parametrize("name", ANSWERS)
async def test_cached_tokens_of_a_whole_answer(name: str) -> None:
    fields, expected = ANSWERS[name]
    transport = serving(chat_answer(**fields))
    async with OpenAIProvider("http://engine.test/v1", transport=transport) as provider:
        result = await provider.chat("m", [{"role": "user", "content": "x"}])
    assert result.usage == expected


async def test_cached_tokens_of_a_completion() -> None:
    choice = {"text": "Hi.", "index": 0, "finish_reason": "stop"}
    answer = {"choices": [choice], "usage": usage(), "timings": timings(60, 40)}
    async with OpenAIProvider("http://engine.test/v1", transport=serving(answer)) as provider:
        result = await provider.complete("m", "x")
    assert result.usage == Usage(100, 5, 60, 40)


@pytest.mark.parametrize("name", ANSWERS)
async def test_cached_tokens_on_the_usage_chunk_of_a_stream(name: str) -> None:
    """As OpenAI, vLLM and today's llama.cpp send them: everything on the last chunk,
    the usage chunk (without choices) after the one with finish_reason."""
    fields, expected = ANSWERS[name]
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hi."}),
        chunk({}, "stop"),
        chunk(None, **fields),
    ]
    assert (await final_chunk(serving(events=events))).usage == expected


@pytest.mark.parametrize("name", ANSWERS)
async def test_cached_tokens_on_the_finish_chunk_of_a_stream(name: str) -> None:
    """As llama.cpp does without a usage chunk (and did before it sent one): the fields
    ride on the chunk with finish_reason."""
    fields, expected = ANSWERS[name]
    events = [chunk({"content": "Hi."}), chunk({}, "stop", **fields)]
    assert (await final_chunk(serving(events=events))).usage == expected


async def test_timings_and_usage_in_different_chunks_are_combined() -> None:
    """llama.cpp's timings on the finish chunk, its usage on a chunk of its own: the
    cached tokens of the one are kept with the counts of the other."""
    events = [
        chunk({"content": "Hi."}),
        chunk({}, "stop", timings=timings(90, 10)),
        chunk(None, usage=usage(100, 6)),
    ]
    assert (await final_chunk(serving(events=events))).usage == Usage(100, 6, 90, 10)
    events = [
        chunk({"content": "Hi."}),
        chunk({}, "stop", usage=usage(100, 6)),
        chunk(None, usage=None, timings=timings(90, 10, 6)),
    ]
    assert (await final_chunk(serving(events=events))).usage == Usage(100, 6, 90, 10)


async def test_a_stream_that_says_nothing_has_no_usage() -> None:
    """llama-cpp-python: no usage on a stream, hence nothing cached either (not 0)."""
    events = [chunk({"content": "Hi."}), chunk({}, "stop")]
    assert (await final_chunk(serving(events=events))).usage is None


# ---- the fake's prefix cache, over real HTTP -------------------------------------------

SYSTEM = {
    "role": "system",
    "content": " ".join(f"Rule {n}: answer plainly and cite section {n * 7}." for n in range(120)),
}
"""A long system prompt (about 1,800 tokens): OpenAI caches nothing under 1,024."""


def conversation(*turns: str) -> list[dict[str, Any]]:
    """SYSTEM, then the user's turns, each but the last answered as the fake answers."""
    messages: list[dict[str, Any]] = [SYSTEM]
    for number, text in enumerate(turns, start=1):
        messages.append({"role": "user", "content": text})
        if number < len(turns):
            reply = f"Echo from large: I saw {len(messages)} messages; last said: {text[:40]}"
            messages.append({"role": "assistant", "content": reply})
    return messages


FIRST = "What does rule 3 say about citations?"
SECOND = "And rule 4?"


def shared(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


@pytest.fixture
async def provider(upstream: FakeUpstream) -> AsyncIterator[OpenAIProvider]:
    client = OpenAIProvider(upstream.base_url, timeout=10.0)
    yield client
    await client.aclose()


async def usage_of(
    provider: OpenAIProvider, messages: list[dict[str, Any]], stream: bool
) -> Usage | None:
    if not stream:
        return (await provider.chat("large", messages)).usage
    return [c async for c in provider.stream_chat("large", messages)][-1].usage


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_appended_turn_is_served_from_the_cache_up_to_the_change(
    stream: bool,
    upstream: FakeUpstream,
    provider: OpenAIProvider,
) -> None:
    """llama.cpp reuses any exact prefix: the whole previous prompt when a turn is
    appended, only what precedes the change when an earlier message changes."""
    upstream.set_engine("llamacpp")
    first, second = conversation(FIRST), conversation(FIRST, SECOND)
    changed = conversation(FIRST.replace("citations", "sources"), SECOND)

    cold = await usage_of(provider, first, stream)
    assert cold is not None and (cold.prompt_tokens, cold.cached_tokens) == (
        upstream.count_chat(first),
        0,
    )
    after = await usage_of(provider, second, stream)
    assert after is not None
    assert after.cached_tokens == upstream.count_chat(first), "the previous prompt, whole"
    edited = await usage_of(provider, changed, stream)
    before_change = shared(upstream.tokenize_chat(second), upstream.tokenize_chat(changed))
    assert edited is not None and edited.cached_tokens == before_change
    assert upstream.count_chat([SYSTEM]) - 3 < before_change < upstream.count_chat(first)
    assert [(r.prompt_tokens, r.cached_tokens) for r in upstream.cache_log] == [
        (upstream.count_chat(first), 0),
        (upstream.count_chat(second), upstream.count_chat(first)),
        (upstream.count_chat(changed), before_change),
    ]


@pytest.mark.parametrize(
    ("engine", "unit"), [("openai", 128), ("vllm", 16)], ids=["openai", "vllm"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_openai_and_vllm_report_whole_units_of_the_shared_prefix(
    engine: Engine,
    unit: int,
    stream: bool,
    upstream: FakeUpstream,
    provider: OpenAIProvider,
) -> None:
    upstream.set_engine(engine)
    first, second = conversation(FIRST), conversation(FIRST, SECOND)
    cold = await usage_of(provider, first, stream)
    # OpenAI says 0; vLLM says nothing when nothing was cached.
    assert cold is not None and cold.cached_tokens == (0 if engine == "openai" else None)
    warm = await usage_of(provider, second, stream)
    assert warm is not None and warm.cached_tokens is not None
    previous = upstream.count_chat(first)
    assert previous - unit < warm.cached_tokens <= previous
    assert warm.cached_tokens % unit == 0
    assert upstream.cache_log[-1].cached_tokens == warm.cached_tokens


async def test_openai_caches_nothing_under_1024_tokens(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    short = [{"role": "user", "content": "word " * 600}]
    for _ in range(2):
        result = await provider.chat("large", short)
        assert result.usage is not None and result.usage.cached_tokens == 0
    upstream.set_engine("llamacpp")
    result = await provider.chat("large", short)
    assert result.usage is not None and result.usage.cached_tokens == upstream.count_chat(short) - 1


@pytest.mark.parametrize("engine", ["llama-cpp-python", "ollama", "lmstudio"])
async def test_engines_that_do_not_say_leave_it_none(
    engine: Engine, upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.set_engine(engine)
    messages = conversation(FIRST)
    for _ in range(2):
        result = await provider.chat("large", messages)
        assert result.usage is not None and result.usage.cached_tokens is None
        final = [c async for c in provider.stream_chat("large", messages)][-1]
        assert final.usage is None or final.usage.cached_tokens is None
    # The engine reused its cache all the same; it only did not say.
    assert upstream.cache_log[-1].cached_tokens == upstream.count_chat(messages) - 1


async def test_vllm_without_prompt_tokens_details_says_nothing(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.set_engine("vllm")
    upstream.enable_prompt_tokens_details = False
    messages = conversation(FIRST)
    for stream in (False, True):
        found = await usage_of(provider, messages, stream)
        assert found is not None and found.cached_tokens is None
    assert upstream.cache_log[-1].cached_tokens > 0
    upstream.reset()
    assert upstream.enable_prompt_tokens_details is True


async def test_the_cache_keeps_the_last_four_prompts_of_each_model(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.set_engine("llamacpp")
    prompts = [[{"role": "user", "content": f"{word} " * 50}] for word in "abcdef"]
    for messages in prompts[:5]:
        await provider.chat("large", messages)
    await provider.chat("medium", prompts[4])  # another model: a cache of its own
    assert upstream.cache_log[-1].cached_tokens < 5
    await provider.chat("large", prompts[0])  # pushed out by the four after it
    assert upstream.cache_log[-1].cached_tokens < 5
    await provider.chat("large", prompts[4])  # the same prompt: all but its last token
    assert upstream.cache_log[-1].cached_tokens == upstream.count_chat(prompts[4]) - 1
    upstream.reset()
    assert upstream.cache_log == []
    await provider.chat("large", prompts[4])
    assert upstream.cache_log[-1].cached_tokens == 0, "reset empties the cache"


async def first_text_after(provider: OpenAIProvider, messages: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    async for piece in provider.stream_chat("large", messages):
        if piece.text:
            return time.perf_counter() - started
    raise AssertionError("no text")


async def test_prefill_time_grows_with_the_tokens_not_cached(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.set_engine("llamacpp")
    first, second = conversation(FIRST), conversation(FIRST, SECOND)
    upstream.set_prefill(0.5 / upstream.count_chat(first))  # 0.5 s for the whole first prompt
    cold = await first_text_after(provider, first)
    warm = await first_text_after(provider, second)
    assert cold >= 0.45
    assert warm < cold / 3, (cold, warm)

    async def whole(model: str) -> float:
        started = time.perf_counter()
        await provider.chat(model, first)
        return time.perf_counter() - started

    cold, warm = await whole("huge"), await whole("huge")  # a cache of its own, at first empty
    assert cold >= 0.45
    assert warm < cold / 3, (cold, warm)
    upstream.reset()
    assert await whole("medium") < 0.3, "reset takes the prefill time away"
