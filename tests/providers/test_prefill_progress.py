"""Prefill you can see: llama.cpp, asked for `return_progress`, streams `prompt_progress`
{total, cache, processed, time_ms} before the first token; the provider hands each on as
a `Prefill` (processed, total, cached), before any text, and a fallback is still possible
after it. The fake upstream reports it the way llama.cpp does."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.upstream import FakeUpstream
from webapp.llm.affinity import CacheKeys
from webapp.llm.providers.base import CallInfo, Prefill, StreamChunk
from webapp.llm.providers.openai import OpenAIProvider

KEYED = CallInfo("m", 100_000, 90_000, 10, 0, cache_key=CacheKeys("s").key("c"))
LONG: list[dict[str, Any]] = [{"role": "user", "content": "rivers and bridges " * 400}]


async def streamed(llm: OpenAIProvider, messages: list[dict[str, Any]]) -> list[StreamChunk]:
    return [chunk async for chunk in llm.stream_chat("small", messages, info=KEYED)]


async def test_llamacpp_reports_its_reading_of_the_prompt_before_the_text(
    upstream: FakeUpstream,
) -> None:
    upstream.set_engine("llamacpp")
    upstream.set_models({"small": 100_000})
    upstream.progress_batch = 256
    async with OpenAIProvider(upstream.base_url) as llm:
        first = await streamed(llm, LONG)
        follow = [*LONG, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "on"}]
        second = await streamed(llm, follow)
    for chunks, record in zip((first, second), upstream.cache_log[-2:], strict=True):
        read = [chunk.progress for chunk in chunks if chunk.progress is not None]
        text_at = next(i for i, chunk in enumerate(chunks) if chunk.text)
        assert all(chunk.progress is None for chunk in chunks[text_at:]), "before the text"
        assert read[-1] == Prefill(record.prompt_tokens, record.prompt_tokens, record.cached_tokens)
        processed = [reading.processed for reading in read]
        assert processed == sorted(processed) and processed[0] > record.cached_tokens
    assert len([c for c in first if c.progress]) > 1, "a long read is reported batch by batch"
    assert second[0].progress is not None and second[0].progress.cached > 1000


def progress_stream(*readings: Any) -> httpx.MockTransport:
    """A stream whose first chunks carry `prompt_progress` as given, then one text chunk."""

    def handle(request: httpx.Request) -> httpx.Response:
        opening = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
        events = [opening | {"prompt_progress": reading} for reading in readings]
        events.append({"choices": [{"index": 0, "delta": {"content": "Hi."}}]})
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    return httpx.MockTransport(handle)


async def test_only_readable_progress_is_handed_on() -> None:
    good = {"total": 12000, "cache": 3000, "processed": 4096, "time_ms": 120}
    transport = progress_stream(
        good,
        {"total": 12000, "cache": "3000", "processed": 5000},  # a string
        {"total": 100, "cache": 200, "processed": 50},  # more cached than the prompt
        "half",
        {"total": 12000, "cache": 3000, "processed": 13000},  # past the end: the end
    )
    async with OpenAIProvider("http://engine.test/v1", transport=transport) as llm:
        chunks = await streamed(llm, [{"role": "user", "content": "x"}])
    read = [chunk.progress for chunk in chunks if chunk.progress is not None]
    assert read == [Prefill(4096, 12000, 3000), Prefill(12000, 12000, 3000)]
    assert read[0].words() == "Reading the conversation: 4,096 of 12,000 tokens, 3,000 from cache"
    assert "".join(chunk.text for chunk in chunks) == "Hi."
