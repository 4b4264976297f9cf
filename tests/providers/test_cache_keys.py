"""Each conversation on its cache: the key a send carries reaches the fakes in each wire
format (OpenAI-style `prompt_cache_key`, llama.cpp `id_slot` over the slots its
`/slots` lists, a router's session header), and a call without one carries nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.upstream import FakeUpstream
from tests.vendors import ANTHROPIC_KEY, GEMINI_KEY, FakeVendors
from webapp.llm.affinity import Affinity, CacheKeys, slot_for
from webapp.llm.providers.anthropic import AnthropicProvider
from webapp.llm.providers.base import CallInfo
from webapp.llm.providers.gemini import GeminiProvider
from webapp.llm.providers.http import HTTPProvider
from webapp.llm.providers.openai import OpenAIProvider

HELLO: list[dict[str, Any]] = [{"role": "user", "content": "Hello there"}]
KEY = CacheKeys("a secret of the deployment").key("conversation-1")


def keyed(key: str | None = KEY) -> CallInfo:
    return CallInfo("m", 1000, 900, 10, 0, reserve=100, cache_key=key)


def chat_bodies(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.requests if r["path"].endswith("/chat/completions")]


async def one_each(llm: HTTPProvider, model: str, info: CallInfo) -> None:
    """A whole answer and a streamed one."""
    await llm.chat(model, HELLO, info=info)
    async for _ in llm.stream_chat(model, HELLO, info=info):
        pass


def test_keys_are_stable_apart_and_hide_the_conversation() -> None:
    keys = CacheKeys("a secret of the deployment")
    assert keys.key("conversation-1") == KEY, "the same on every worker and after a restart"
    assert keys.key("conversation-2") != KEY
    assert CacheKeys("another secret").key("conversation-1") != KEY
    assert "conversation" not in KEY and len(KEY) == 32
    spread = {slot_for(keys.key(f"c{n}"), 4) for n in range(40)}
    assert spread == {0, 1, 2, 3}


@pytest.mark.parametrize("engine", ["openai", "vllm"])
async def test_openai_style_servers_get_prompt_cache_key(
    engine: str, engine_upstream: FakeUpstream
) -> None:
    engine_upstream.set_engine(engine)  # type: ignore[arg-type]
    async with OpenAIProvider(engine_upstream.base_url) as llm:
        await one_each(llm, "small", keyed())
        await one_each(llm, "small", keyed(None))
    bodies = chat_bodies(engine_upstream)
    assert [body.get("prompt_cache_key") for body in bodies] == [KEY, KEY, None, None]
    assert not any("id_slot" in body or "return_progress" in body for body in bodies)


async def test_llamacpp_gets_the_conversations_slot_and_progress(upstream: FakeUpstream) -> None:
    upstream.set_engine("llamacpp")
    upstream.slot_count = 3
    async with OpenAIProvider(upstream.base_url) as llm:
        await one_each(llm, "small", keyed())
        await one_each(llm, "small", keyed(None))  # a title: no slot, whatever is free
    whole, streamed, side, side_streamed = chat_bodies(upstream)
    assert whole["id_slot"] == streamed["id_slot"] == slot_for(KEY, 3)
    assert "prompt_cache_key" not in whole and "prompt_cache_key" not in streamed
    assert streamed["return_progress"] is True and "return_progress" not in whole
    assert not {"id_slot", "return_progress"} & (side.keys() | side_streamed.keys())
    asked = [r for r in upstream.requests if r["path"] == "/slots"]
    assert len(asked) == 1, "asked once per provider"


async def test_slots_from_the_catalog_when_llamacpp_hides_them(upstream: FakeUpstream) -> None:
    upstream.set_engine("llamacpp")
    upstream.slots_endpoint = False  # llama-server --no-slots: 501
    async with OpenAIProvider(upstream.base_url, affinity=Affinity(slots=2)) as llm:
        await llm.chat("small", HELLO, info=keyed())
    async with OpenAIProvider(upstream.base_url) as unknown:
        await unknown.chat("small", HELLO, info=keyed())
    configured, unknowing = chat_bodies(upstream)
    assert configured["id_slot"] == slot_for(KEY, 2)
    assert "id_slot" not in unknowing and unknowing["prompt_cache_key"] == KEY


async def test_the_slot_keeps_the_conversations_prefix(upstream: FakeUpstream) -> None:
    """The fake's llama.cpp cache is per slot for requests that name one: a conversation
    kept on its slot is served from it although others came in between."""
    upstream.set_engine("llamacpp")
    upstream.slot_count = 2
    keys = CacheKeys("s")
    mine = next(k for k in (keys.key(f"c{n}") for n in range(20)) if slot_for(k, 2) == 0)
    other = next(k for k in (keys.key(f"c{n}") for n in range(20)) if slot_for(k, 2) == 1)
    long = [{"role": "user", "content": "words " * 300}]
    async with OpenAIProvider(upstream.base_url) as llm:
        await llm.chat("small", long, info=keyed(mine))
        await llm.chat("small", [{"role": "user", "content": "else " * 300}], info=keyed(other))
        followed = [
            *long,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "and"},
        ]
        answer = await llm.chat("small", followed, info=keyed(mine))
    assert answer.usage is not None and answer.usage.cached_tokens is not None
    assert answer.usage.cached_tokens >= 300


async def test_off_sends_no_key_but_the_session_header_still(upstream: FakeUpstream) -> None:
    affinity = Affinity(cache_key="off", session_header="X-Session-Id")
    async with OpenAIProvider(upstream.base_url, affinity=affinity) as llm:
        await one_each(llm, "small", keyed())
        await llm.chat("small", HELLO, info=keyed(None))
    requests = [r for r in upstream.requests if r["path"].endswith("/chat/completions")]
    assert [r["headers"].get("x-session-id") for r in requests] == [KEY, KEY, None]
    assert not any("prompt_cache_key" in r["body"] for r in requests)


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
async def test_native_providers_carry_the_session_header(kind: str, vendors: FakeVendors) -> None:
    affinity = Affinity(session_header="X-Session-Id")
    llm: HTTPProvider
    if kind == "anthropic":
        llm = AnthropicProvider(vendors.base_url, api_key=ANTHROPIC_KEY, affinity=affinity)
    else:
        llm = GeminiProvider(vendors.base_url, api_key=GEMINI_KEY, affinity=affinity)
    model = "claude-small" if kind == "anthropic" else "gemini-small"
    async with llm:
        await one_each(llm, model, keyed())
        await llm.chat(model, HELLO, info=keyed(None))
    headers = [r["headers"].get("x-session-id") for r in vendors.requests]
    assert headers == [KEY, KEY, None]


async def test_off_leaves_llamacpp_its_own_slot_choice_and_still_shows_progress(
    upstream: FakeUpstream,
) -> None:
    """`cache_key = "off"` on a llama.cpp provider (its server then places each request on
    the slot holding the most similar prompt): no slot and no key, but a stream still
    asks for the prefill's progress."""
    upstream.set_engine("llamacpp")
    async with OpenAIProvider(upstream.base_url, affinity=Affinity(cache_key="off")) as llm:
        await one_each(llm, "small", keyed())
    whole, streamed = chat_bodies(upstream)
    assert not {"id_slot", "prompt_cache_key"} & (whole.keys() | streamed.keys())
    assert streamed["return_progress"] is True and "return_progress" not in whole
