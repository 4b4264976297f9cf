"""The native providers (`kind = "anthropic"`, `kind = "gemini"`) against the fake vendors
whose wire shapes the official SDKs accept (test_vendor_fakes.py): answers, streams, tool
calls both ways, usage with cached tokens, overflow with the numbers, retryable errors, and
cache breakpoints where the cut keeps the prefix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.vendors import ANTHROPIC_KEY, GEMINI_KEY, FakeVendors
from webapp.llm.manager import cache_marks
from webapp.llm.providers.anthropic import AnthropicProvider, to_messages_request
from webapp.llm.providers.base import (
    CallInfo,
    ContextLengthExceeded,
    Message,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    StreamBroken,
    StreamChunk,
)
from webapp.llm.providers.gemini import GeminiProvider
from webapp.llm.providers.http import HTTPProvider

HELLO: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello there"},
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
KINDS = ("anthropic", "gemini")


def provider(kind: str, vendors: FakeVendors, key: str | None = None) -> HTTPProvider:
    if kind == "anthropic":
        return AnthropicProvider(vendors.base_url, api_key=key or ANTHROPIC_KEY, timeout=5)
    return GeminiProvider(vendors.base_url, api_key=key or GEMINI_KEY, timeout=5)


def model(kind: str) -> str:
    return "claude-small" if kind == "anthropic" else "gemini-small"


async def collect(chunks: Any) -> list[StreamChunk]:
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_answer_with_its_usage_and_the_vendors_headers(
    kind: str, vendors: FakeVendors
) -> None:
    async with provider(kind, vendors) as llm:
        answer = await llm.chat(model(kind), HELLO, max_tokens=100)
    assert answer.content.startswith(f"Echo from {model(kind)}: I saw 1 messages")
    assert answer.finish_reason == "stop" and answer.tool_calls == []
    assert answer.usage is not None
    assert answer.usage.completion_tokens == vendors.count(answer.content)
    request = vendors.requests[-1]
    if kind == "anthropic":
        assert request["headers"]["x-api-key"] == ANTHROPIC_KEY
        assert request["headers"]["anthropic-version"]
        assert request["body"]["system"] == [{"type": "text", "text": "You are terse."}]
        assert request["body"]["max_tokens"] == 100
    else:
        assert request["headers"]["x-goog-api-key"] == GEMINI_KEY
        assert request["body"]["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
        assert request["body"]["contents"] == [{"role": "user", "parts": [{"text": "Hello there"}]}]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_then_its_finish_and_usage(kind: str, vendors: FakeVendors) -> None:
    async with provider(kind, vendors) as llm:
        whole = await llm.chat(model(kind), HELLO, max_tokens=100)
        chunks = await collect(llm.stream_chat(model(kind), HELLO, max_tokens=100))
    texts = [chunk.text for chunk in chunks if chunk.text]
    assert len(texts) >= 3 and "".join(texts) == whole.content
    last = chunks[-1]
    assert last.finish_reason == "stop"
    assert last.usage == whole.usage


@pytest.mark.parametrize("kind", KINDS)
async def test_tool_calls_both_ways(kind: str, vendors: FakeVendors) -> None:
    question = [{"role": "user", "content": "Weather in Oslo?"}]
    async with provider(kind, vendors) as llm:
        call = await llm.chat(model(kind), question, max_tokens=100, tools=[WEATHER])
        assert call.finish_reason == "tool_calls"
        [tool_call] = call.tool_calls
        assert tool_call["type"] == "function"
        assert tool_call["function"]["name"] == "get_weather"
        assert tool_call["function"]["arguments"] == '{"city": "echo"}'
        transcript: list[Message] = [
            *question,
            {"role": "assistant", "content": None, "tool_calls": call.tool_calls},
            {"role": "tool", "tool_call_id": tool_call["id"], "content": "Sunny, 21 C"},
        ]
        answer = await llm.chat(model(kind), transcript, max_tokens=100, tools=[WEATHER])
    assert answer.finish_reason == "stop" and answer.content.startswith("Echo from")
    body = vendors.requests[-1]["body"]
    if kind == "anthropic":
        assert body["tools"][0]["input_schema"] == WEATHER["function"]["parameters"]  # type: ignore[index]
        result = body["messages"][2]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == tool_call["id"]
    else:
        response = body["contents"][2]["parts"][0]["functionResponse"]
        assert response == {"name": "get_weather", "response": {"result": "Sunny, 21 C"}}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_prompt_over_the_window_names_its_numbers(kind: str, vendors: FakeVendors) -> None:
    long = [{"role": "user", "content": "word " * 5000}]
    async with provider(kind, vendors) as llm:
        with pytest.raises(ContextLengthExceeded) as refused:
            await llm.chat(model(kind), long, max_tokens=100)
        with pytest.raises(ContextLengthExceeded) as streamed:
            await collect(llm.stream_chat(model(kind), long, max_tokens=100))
    assert refused.value.limit == 4096 == streamed.value.limit
    assert refused.value.prompt_tokens is not None and refused.value.prompt_tokens > 4096
    assert not refused.value.retryable


@pytest.mark.parametrize(
    ("kind", "status"), [("anthropic", 529), ("anthropic", 500), ("gemini", 503), ("gemini", 500)]
)
async def test_overload_and_server_errors_let_a_fallback_try(
    kind: str, status: int, vendors: FakeVendors
) -> None:
    async with provider(kind, vendors) as llm:
        vendors.fail_next(status)
        with pytest.raises(ProviderUnavailable) as failed:
            await llm.chat(model(kind), HELLO, max_tokens=50)
        vendors.fail_next(status)
        with pytest.raises(ProviderUnavailable):
            await collect(llm.stream_chat(model(kind), HELLO, max_tokens=50))
    assert failed.value.retryable and failed.value.status == status


@pytest.mark.parametrize("kind", KINDS)
async def test_a_rate_limit_says_when_to_come_back(kind: str, vendors: FakeVendors) -> None:
    async with provider(kind, vendors) as llm:
        vendors.fail_next(429, retry_after=7)
        with pytest.raises(RateLimited) as limited:
            await llm.chat(model(kind), HELLO, max_tokens=50)
    assert limited.value.retryable and limited.value.retry_after == 7


@pytest.mark.parametrize("kind", KINDS)
async def test_an_error_in_the_stream_before_and_after_text(
    kind: str, vendors: FakeVendors
) -> None:
    async with provider(kind, vendors) as llm:
        vendors.break_stream_after(0)
        with pytest.raises(ProviderUnavailable):
            await collect(llm.stream_chat(model(kind), HELLO, max_tokens=50))
        vendors.break_stream_after(2)
        with pytest.raises(StreamBroken):
            await collect(llm.stream_chat(model(kind), HELLO, max_tokens=50))
        vendors.break_stream_after(2, error=False)
        with pytest.raises(StreamBroken):
            await collect(llm.stream_chat(model(kind), HELLO, max_tokens=50))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_refused_key_is_not_retried_and_never_quoted(
    kind: str, vendors: FakeVendors
) -> None:
    secret = "sk-wrong-VERY-SECRET-42"
    async with provider(kind, vendors, key=secret) as llm:
        with pytest.raises(ProviderError) as refused:
            await llm.chat(model(kind), HELLO, max_tokens=50)
    assert not refused.value.retryable
    assert "credentials" in refused.value.reason
    assert secret not in refused.value.message


async def test_gemini_unknown_model_is_a_plain_error(vendors: FakeVendors) -> None:
    async with provider("gemini", vendors) as llm:
        with pytest.raises(ProviderError) as missing:
            await llm.chat("gemini-nope", HELLO)
    assert missing.value.status == 404 and not missing.value.retryable


async def test_gemini_embeds_a_batch_in_order_and_anthropic_serves_none(
    vendors: FakeVendors,
) -> None:
    texts = ["Hello, world!", "नमस्ते दुनिया", "Hello, world!"]
    async with provider("gemini", vendors) as llm:
        vectors = await llm.embed("gemini-embedding", texts)
        assert await llm.embed("gemini-embedding", []) == []
        with pytest.raises(ProviderError) as refused:
            await llm.embed("gemini-small", texts)
    assert len(vectors) == 3 and vectors[0] == vectors[2] != vectors[1]
    assert refused.value.status == 404 and not refused.value.retryable
    request = next(r for r in vendors.requests if r["path"].endswith(":batchEmbedContents"))
    assert request["headers"]["x-goog-api-key"] == GEMINI_KEY
    assert [r["content"]["parts"] for r in request["body"]["requests"]] == [
        [{"text": text}] for text in texts
    ]
    async with provider("anthropic", vendors) as llm:
        with pytest.raises(ProviderError, match="serves no embeddings"):
            await llm.embed("claude-small", texts)


async def test_anthropic_max_tokens_falls_back_to_the_bounds_reserve(vendors: FakeVendors) -> None:
    info = CallInfo("claude-small", 4096, 3000, 20, 0, reserve=321)
    async with provider("anthropic", vendors) as llm:
        await llm.chat("claude-small", HELLO, info=info)
    assert vendors.requests[-1]["body"]["max_tokens"] == 321


# ---- cache breakpoints --------------------------------------------------------------------


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Rules of the house. " * 30}]
    for number in range(turns):
        messages.append({"role": "user", "content": f"Question {number}: " + "why? " * 40})
        messages.append({"role": "assistant", "content": f"Answer {number}: " + "because. " * 40})
    return messages


def test_breakpoints_end_the_head_and_the_prompt() -> None:
    messages = [*conversation(3), {"role": "user", "content": "And now?"}]
    marks = cache_marks(messages)
    assert marks == (2, len(messages) - 1)  # after the opening exchange; after the newest turn
    body = to_messages_request("claude-small", messages, max_tokens=10, cache_marks=marks)
    marked = [
        (i, block["text"][:10])
        for i, turn in enumerate(body["messages"])
        for block in turn["content"]
        if "cache_control" in block
    ]
    assert marked == [(1, "Answer 0: "), (len(body["messages"]) - 1, "And now?")]
    assert all("cache_control" not in block for block in body["system"])
    # Only a system prompt and the newest turn: the head ends with the system prompt.
    assert cache_marks([messages[0], messages[-1]]) == (0, 1)
    alone = to_messages_request("m", [messages[0], messages[-1]], max_tokens=5, cache_marks=(0, 1))
    assert "cache_control" in alone["system"][-1]


async def test_a_pure_append_reads_the_previous_prompt_and_a_moved_cut_the_head(
    vendors: FakeVendors,
) -> None:
    vendors.min_cacheable = 100
    vendors.set_window("claude-small", 100_000)
    history = conversation(4)
    async with provider("anthropic", vendors) as llm:
        usages = []
        for sent in (
            history[:-1],
            [*history, {"role": "user", "content": "More?"}],
        ):
            info = CallInfo("claude-small", 100_000, 90_000, 0, 0, cache_marks=cache_marks(sent))
            answer = await llm.chat("claude-small", sent, max_tokens=50, info=info)
            usages.append(answer.usage)
        # The cut moves: turns after the head are left out, the head is still read.
        moved = [*history[:3], {"role": "user", "content": "Moved on"}]
        info = CallInfo("claude-small", 100_000, 90_000, 0, 0, cache_marks=cache_marks(moved))
        after_cut = (await llm.chat("claude-small", moved, max_tokens=50, info=info)).usage
    first, append = usages
    assert first is not None and append is not None and after_cut is not None
    assert first.cached_tokens == 0
    assert append.cached_tokens == first.prompt_tokens  # the whole previous prompt
    # The ledger: the first prompt written to the cache and evaluated whole; the append
    # evaluates (and writes) only what follows what it read.
    assert first.cache_write_tokens and first.evaluated_tokens == first.prompt_tokens
    assert append.evaluated_tokens == append.prompt_tokens - append.cached_tokens
    assert append.cache_write_tokens and append.cache_write_tokens <= append.evaluated_tokens
    log = vendors.cache_log
    head_tokens = log[-1].read
    assert 0 < head_tokens < append.cached_tokens and after_cut.cached_tokens == head_tokens
