"""Counting with the serving model's own tokenizer, end to end: the conversation service
against a fake engine that counts with Qwen's vocabulary (which the estimate was not
fitted to) and enforces its window with it, over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.catalogs import engine_toml
from tests.counting import corpus, counting_service
from tests.factories import CALLER, OWNER, say
from tests.upstream import FakeUpstream
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Status
from webapp.errors import TooManyRequests
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import load_catalog
from webapp.llm.manager import LLMManager
from webapp.llm.tokenizers import Tokenizers
from webapp.llm.window import Transcript

KINDS = ("english", "russian", "chinese", "hindi", "json", "python", "emoji", "arabic")


@pytest.fixture
async def counted(
    database_url: str, tmp_path: Path, engine_upstream: FakeUpstream
) -> AsyncIterator[tuple[ChatJobs, FakeUpstream]]:
    async with counting_service(database_url, tmp_path, engine_upstream) as service:
        yield service, engine_upstream


def chats(upstream: FakeUpstream) -> list[dict]:
    return [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]


def tokenizes(upstream: FakeUpstream) -> int:
    return sum(r["path"] == "/tokenize" for r in upstream.requests)


@pytest.mark.parametrize("kind", KINDS)
async def test_exact_counts_fill_the_window_and_are_never_refused(
    sqlite_url: str, tmp_path: Path, engine_upstream: FakeUpstream, kind: str
) -> None:
    """(On SQLite only: counting does not depend on the database; the rest of this file
    runs on both.)"""
    async with counting_service(sqlite_url, tmp_path, engine_upstream) as chat:
        await _fill_and_check(chat, engine_upstream, kind)


async def _fill_and_check(chat: ChatJobs, upstream: FakeUpstream, kind: str) -> None:
    samples = corpus()[kind]
    conversation = await chat.editor.create(OWNER, "gemma")
    trimmed = []
    for number in range(40):
        text = f"{number}: " + samples[number % len(samples)]
        user, answer = await say(chat, conversation.id, text)
        assert answer.status == Status.COMPLETE, answer.error  # never refused
        assert user.fit_counted_by == "server:gemma"
        if user.dropped_turns:
            sent = chats(upstream)[-1]["body"]["messages"]
            charged = upstream.count_chat(sent)
            budget = user.fit_budget
            assert budget is not None and charged <= budget, "exact counts never overfill"
            trimmed.append(charged / budget)
    assert trimmed, f"{kind}: 40 turns should outgrow 4,096 tokens"
    assert min(trimmed) >= 0.80, (kind, trimmed)
    assert answer.prompt_tokens == upstream.count_chat(chats(upstream)[-1]["body"]["messages"])


async def test_counts_are_made_once_and_stored_per_tokenizer(
    counted: tuple[ChatJobs, FakeUpstream],
) -> None:
    chat, upstream = counted
    conversation = await chat.editor.create(OWNER, "gemma")
    for number in range(6):
        await say(chat, conversation.id, f"turn {number}: " + "tell me more " * 20)
    _, rows = await chat.reader.history(OWNER, conversation.id)
    for row in rows:
        assert row.token_counts == {"server:gemma": upstream.count(row.content)}, row.seq
    # A send counts its new message and its answer, never the history again.
    before = tokenizes(upstream)
    await say(chat, conversation.id, "turn 6: and one more")
    assert tokenizes(upstream) - before == 2
    # Another model (its own tokenizer id): the history it may send is counted once,
    # then, and kept beside the first model's counts.
    await chat.editor.set_configuration(OWNER, conversation.id, "twin")
    user, _ = await say(chat, conversation.id, "turn 7: switched")
    assert user.fit_counted_by == "server:gemma-twin" and user.fit_model == "gemma-twin"
    _, rows = await chat.reader.history(OWNER, conversation.id)
    for row in rows[:-1]:
        assert row.token_counts is not None
        assert row.token_counts["server:gemma-twin"] == upstream.count(row.content), row.seq
    first_counts = rows[0].token_counts
    assert first_counts is not None
    assert first_counts["server:gemma"] == upstream.count(rows[0].content)
    before = tokenizes(upstream)
    await say(chat, conversation.id, "turn 8: again")
    assert tokenizes(upstream) - before == 2


async def test_a_system_prompt_is_counted_once_and_the_plan_is_sent_as_made(
    counted: tuple[ChatJobs, FakeUpstream],
) -> None:
    chat, upstream = counted
    conversation = await chat.editor.create(OWNER, "briefed")
    await say(chat, conversation.id, "first: hello")
    before = tokenizes(upstream)
    user, answer = await say(chat, conversation.id, "second: and again")
    # The new message and the answer: the system prompt's count is kept in memory.
    assert tokenizes(upstream) - before == 2
    assert user.fit_counted_by == "server:gemma"
    sent = chats(upstream)[-1]["body"]["messages"]
    assert sent[0]["role"] == "system"
    assert answer.prompt_tokens == upstream.count_chat(sent)
    preview = await chat.previewer.preview(OWNER, conversation.id, "third: what would you send?")
    assert preview.fit_counted_by == "server:gemma+estimate", "the typed text is estimated"
    assert tokenizes(upstream) - before == 2, "a preview asks the engine nothing"


async def test_a_send_sure_to_be_refused_does_not_ask_the_engine_to_count_it(
    database_url: str, tmp_path: Path, engine_upstream: FakeUpstream
) -> None:
    """Once an owner is refused, their sends until the wait is over are not counted by
    the engine first (an embed visitor hammering the send button costs the engine
    nothing); the send's transaction still decides, and stores nothing."""
    async with counting_service(database_url, tmp_path, engine_upstream, rate_limit=2) as chat:
        conversation = await chat.editor.create(OWNER, "gemma")
        await say(chat, conversation.id, "one")
        await say(chat, conversation.id, "two")
        before = tokenizes(engine_upstream)
        for attempt in range(3):
            with pytest.raises(TooManyRequests):
                await chat.sender.send(OWNER, conversation.id, f"again {attempt}")
        assert tokenizes(engine_upstream) - before == 1, "only the first refused send counted"
        _, rows = await chat.reader.history(OWNER, conversation.id)
        assert len(rows) == 4


async def test_a_failing_or_slow_tokenizer_never_fails_or_stalls_a_send(
    counted: tuple[ChatJobs, FakeUpstream],
) -> None:
    chat, upstream = counted
    conversation = await chat.editor.create(OWNER, "gemma")
    await say(chat, conversation.id, "first: hello there")
    upstream.fail_tokenize(500, count=100)
    user, answer = await say(chat, conversation.id, "second: the tokenizer is down")
    assert answer.status == Status.COMPLETE
    # The history had counts, the new message could not be counted: it was estimated.
    assert user.fit_counted_by == "server:gemma+estimate"
    assert user.token_counts is None
    upstream.reset()
    upstream.set_engine("llamacpp")
    upstream.stall_tokenize(10, count=100)
    fresh = await chat.editor.create(OWNER, "gemma")
    started = time.monotonic()
    user, answer = await say(chat, fresh.id, "third: the tokenizer is slow")
    assert time.monotonic() - started < 8, "a stalled tokenizer is given up on"
    assert answer.status == Status.COMPLETE
    assert (user.fit_counted_by or "").startswith("estimate (server:gemma")


async def test_llama_cpp_python_counts_by_its_extras_endpoint_without_streamed_usage(
    database_url: str, tmp_path: Path, engine_upstream: FakeUpstream
) -> None:
    async with counting_service(
        database_url, tmp_path, engine_upstream, "llama-cpp-python"
    ) as chat:
        model = chat.manager.catalog.models["gemma"]
        assert "extras" in chat.manager.tokenizers.describe(model)
        conversation = await chat.editor.create(OWNER, "gemma")
        user, answer = await say(chat, conversation.id, "hello from llama-cpp-python")
        assert answer.status == Status.COMPLETE and answer.prompt_tokens is None
        assert user.fit_counted_by == "server:gemma"
        assert user.token_counts == {"server:gemma": engine_upstream.count(user.content)}


async def test_the_estimate_alone_never_undercounts_on_a_foreign_vocabulary(
    counted: tuple[ChatJobs, FakeUpstream],
) -> None:
    """A model set to "estimate" on the Qwen engine: never refused, never overfilled."""
    chat, upstream = counted
    conversation = await chat.editor.create(OWNER, "guess")
    samples = [text for kind in KINDS for text in corpus()[kind][:2]]
    for number, text in enumerate(samples):
        user, answer = await say(chat, conversation.id, f"{number}: {text}")
        assert answer.status == Status.COMPLETE, answer.error
        assert user.fit_counted_by == "estimate"
        charged = upstream.count_chat(chats(upstream)[-1]["body"]["messages"])
        estimated = user.fit_estimated_tokens
        assert estimated is not None and charged <= estimated, (number, charged)


SCRIPTS = st.sampled_from(
    [
        "abcdefghijklmnopqrstuvwxyz ",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя ",
        "的一是不了人我在有他这为之大来以个中上们",
        "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशसह ",
        "ابتثجحخدذرزسشصضطظعغفقكلمنهوي ",
        '{}[]":,0123456789truefalsenull ',
        "😀😁😂🤣😃😄😅😆😉😊🙂🙃 ",
        "def return lambda import class (self): ->\n    ",
    ]
)


@st.composite
def transcripts(draw: st.DrawFn) -> list[dict[str, str]]:
    def text() -> str:
        return draw(st.text(alphabet=draw(SCRIPTS), min_size=1, max_size=600))

    messages = []
    for _ in range(draw(st.integers(min_value=1, max_value=12))):
        messages += [{"role": "user", "content": text()}, {"role": "assistant", "content": text()}]
    return [*messages, {"role": "user", "content": text()}]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=transcripts(), pins=st.lists(st.integers(min_value=0, max_value=11), max_size=3))
async def test_with_exact_counts_a_send_the_engine_refuses_never_happens(
    tmp_path: Path, engine_upstream: FakeUpstream, messages: list[dict[str, str]], pins: list[int]
) -> None:
    """Random text of every script, fitted with the engine's own counts against a 1,024-
    token window: the engine, which enforces it with those counts, never refuses."""
    engine_upstream.set_engine("vllm")
    engine_upstream.set_models({"small": 1024})
    path = tmp_path / "engine.toml"
    path.write_text(engine_toml(engine_upstream).replace('"medium"', '"small"'), "utf-8")
    catalog = load_catalog(path)
    small = catalog.models["gemma"].model_copy(
        update={"context_window": 1024, "max_output_tokens": 60}
    )
    catalog.models["gemma"] = small
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        manager = LLMManager(catalog, Calibrator(), tokenizers=tokenizers)
        try:
            route = manager.route("gemma")
            pinned = tuple(2 * p for p in pins if 0 < 2 * p < len(messages) - 1)
            plan = manager.plan(route, Transcript(messages, pinned=pinned), caller=CALLER)
            before = len(chats(engine_upstream))
            answer, fitted, _ = await manager.chat(plan)
            assert len(chats(engine_upstream)) == before + 1, "refused, then retried"
        finally:
            await manager.aclose()
    assert fitted.counted_by == "server:gemma"
    sent = engine_upstream.requests[-1]["body"]["messages"]
    assert engine_upstream.count_chat(sent) <= fitted.estimated_tokens
    assert (answer.usage is not None and answer.usage.prompt_tokens <= fitted.budget) or (
        fitted.overflow_at_floor
    )
