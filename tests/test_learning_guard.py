"""No single caller steers what a model learns for everyone (issues 22 and 43).

A gateway call with a long `name`, or an imported conversation with forged
`token_counts` / `estimated_tokens`, used to move the model's template overhead and
estimate factor far in one answer, and another user's next send left out four times the
turns (issue 22); two calls asking for almost the whole window were refused, and each
refusal doubled the shared overhead (issue 43). Now they learn only from prompts the app
sized itself, what a caller's prompts teach is that caller's own figure (the model's
shared one moves only when distinct callers agree: tests/test_learning_per_caller.py),
and a caller's own figure follows the median of its recent observations in bounded
steps. Against the fake engine over real HTTP (llama.cpp's /tokenize: exact counts), on
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.factories import service_settings_on
from tests.upstream import FakeUpstream
from webapp.chat.jobs import ChatJobs, chat_jobs
from webapp.chat.stored.models import Message
from webapp.db import Database
from webapp.gateway.schemas import ChatMessage
from webapp.llm.calibration import (
    DECAY,
    DEFAULT_OVERHEAD,
    FACTOR_STEP,
    MARGIN,
    MAX_OVERHEAD,
    OVERHEAD_STEP,
    RECENT,
    Calibrator,
)
from webapp.llm.catalog import load_catalog
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager
from webapp.llm.providers.base import ContextLengthExceeded
from webapp.llm.tokenizers import Tokenizers
from webapp.llm.window import Transcript

OWNER = "alice"


async def say(chat: ChatJobs, conversation_id: str, text: str) -> tuple[Message, Message]:
    """One send, waited for: the stored user row and its answer."""
    send = await chat.sender.send(OWNER, conversation_id, text)
    return await chat.sender.settle(send)


OTHER = "bob"
TOKENIZER = "server:small"


def engine_toml(upstream: FakeUpstream) -> str:
    return f"""
[[providers]]
name = "engine"
kind = "openai"
base_url = "{upstream.base_url}"
timeout = 5

[[models]]
name = "small"
provider = "engine"
model_id = "small"
context_window = 1024
max_output_tokens = 100

[[configurations]]
name = "small"
model = "small"
trim_to = 1.0
"""


@pytest.fixture
async def chat(
    database_url: str, tmp_path: Path, upstream: FakeUpstream
) -> AsyncIterator[ChatJobs]:
    """The service as the app builds it, its tokenizers probed against a llama.cpp engine
    (so every stored message is counted exactly, with cl100k)."""
    upstream.set_engine("llamacpp")
    path = tmp_path / "engine.toml"
    path.write_text(engine_toml(upstream), encoding="utf-8")
    settings = service_settings_on(
        database_url, path, max_message_chars=20_000, rate_limit_messages=0
    )
    catalog = load_catalog(path)
    tokenizers = Tokenizers()
    await tokenizers.probe(catalog)
    db = Database(database_url)
    calibrator = Calibrator(db)
    await calibrator.load()
    manager = LLMManager(catalog, calibrator, tokenizers=tokenizers)
    service = chat_jobs(db, manager, settings)
    try:
        yield service
    finally:
        await service.shutdown()
        await manager.aclose()
        await tokenizers.aclose()
        await db.dispose()


async def long_conversation(chat: ChatJobs) -> str:
    """The other user's conversation: far longer than the 1,024-token window."""
    conversation = await chat.editor.create(OWNER, "small")
    for number in range(40):
        await say(chat, conversation.id, f"turn {number}: tell me about rivers and bridges")
    return conversation.id


async def left_out(chat: ChatJobs, conversation_id: str) -> int:
    """How many turns the other user's next send would leave out (a preview learns nothing)."""
    preview = await chat.previewer.preview(OWNER, conversation_id, "and the next one?")
    assert preview.fit_counted_by is not None and preview.fit_counted_by.startswith(TOKENIZER)
    return preview.dropped_turns or 0


async def test_a_gateway_call_with_a_long_name_does_not_move_another_users_trim(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation_id = await long_conversation(chat)
    calibrator = chat.manager.calibrator
    overhead = calibrator.overhead("small")
    before = await left_out(chat, conversation_id)
    assert before > 10

    # What the gateway sends for one caller: its messages as they came, `name` and all.
    name = " ".join(f"caller{i}" for i in range(250))
    messages = [
        ChatMessage(role="system", content="You are terse.").wire(),
        ChatMessage(role="user", content="hi", name=name).wire(),
    ]
    manager = chat.manager
    plan = manager.plan(manager.route("small"), Transcript(messages=messages), caller=OTHER)
    answer, fit, _ = await manager.chat(plan)
    assert answer.usage is not None and answer.usage.prompt_tokens > 400, "the engine counted it"
    # The name was not counted by the tokenizer, so the estimate sized that message.
    assert fit.counted_by == f"{TOKENIZER}+estimate" and fit.counted_tokens is None

    assert calibrator.overhead("small") <= overhead, "the shared overhead did not rise"
    after = await left_out(chat, conversation_id)
    assert abs(after - before) <= 1, (before, after)


async def test_refusals_asking_for_the_whole_window_do_not_move_another_users_trim(
    chat: ChatJobs,
) -> None:
    """Issue 43's attack: a call whose `max_tokens` leaves its prompt no room is refused
    twice (the refusal and the re-fitted retry), and each refusal of an exactly counted
    prompt doubled the model's shared overhead: two calls took it to its cap, and another
    user's next send left out far more turns. The refusals tighten the caller's own
    figure now; another user's cut is what it was."""
    conversation_id = await long_conversation(chat)
    calibrator = chat.manager.calibrator
    shared = calibrator.overhead("small")
    before = await left_out(chat, conversation_id)
    assert before > 10

    manager = chat.manager
    for _ in range(2):
        hi = Transcript(messages=[{"role": "user", "content": "hi"}])
        plan = manager.plan(manager.route("small"), hi, caller=OTHER, max_tokens=1020)
        with pytest.raises(ContextLengthExceeded):
            await manager.chat(plan)
    assert calibrator.overhead("small", OTHER) == MAX_OVERHEAD, "the caller's own figure paid"
    assert calibrator.overhead("small") == shared, "the shared figure did not move"
    assert await left_out(chat, conversation_id) == before


def forged_export(turns: int) -> dict[str, Any]:
    """An export whose every message claims to cost one token."""
    messages: list[dict[str, Any]] = []
    for number in range(turns):
        for role, text in (("user", "question"), ("assistant", "answer")):
            messages.append(
                {
                    "seq": len(messages) + 1,
                    "role": role,
                    "content": f"{text} {number}: " + "lorem ipsum dolor " * 10,
                    "status": "complete",
                    "estimated_tokens": 1,
                    "token_counts": {"estimate": 1, TOKENIZER: 1},
                }
            )
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "forged", "configuration": "small"},
        "messages": messages,
    }


async def test_a_forged_import_does_not_move_another_users_trim(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation_id = await long_conversation(chat)
    calibrator = chat.manager.calibrator
    overhead, factor = calibrator.overhead("small"), calibrator.factor("small")
    before = await left_out(chat, conversation_id)

    forged = await chat.editor.import_conversation(OTHER, forged_export(10))
    _, rows = await chat.reader.history(OTHER, forged.id)
    for row in rows:  # the file's sizes were not taken
        assert row.token_counts is None
        assert row.estimated_tokens == estimate_message({"role": row.role, "content": row.content})
    sends = len([r for r in upstream.requests if r["path"] == "/v1/chat/completions"])
    send = await chat.sender.send(OTHER, forged.id, "what did I ask first?")
    user, answer = await chat.sender.settle(send)
    assert answer.status == "complete", answer.error
    assert user.fit_counted_by == TOKENIZER, "the imported history was counted on first use"
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == sends + 1, "fitted right the first time"
    assert upstream.count_chat(chats[-1]["body"]["messages"]) <= (user.fit_budget or 0)
    _, rows = await chat.reader.history(OTHER, forged.id)
    counted = [row for row in rows[:-2] if row.token_counts is not None]
    assert len(counted) >= 4, "what the send could carry was counted, and stored"
    for row in counted:
        assert row.token_counts == {TOKENIZER: upstream.count(row.content)}, row.seq

    assert calibrator.overhead("small") <= overhead
    assert calibrator.factor("small") <= factor * (1 + FACTOR_STEP)
    after = await left_out(chat, conversation_id)
    assert abs(after - before) <= 1, (before, after)


async def test_an_import_keeps_its_format_but_not_its_sizes(chat: ChatJobs) -> None:
    """The fields may be there (an export has them); a file without them imports too."""
    export = forged_export(2)
    for message in export["messages"][:2]:
        del message["estimated_tokens"], message["token_counts"]
    conversation = await chat.editor.import_conversation(OTHER, export)
    _, rows = await chat.reader.history(OTHER, conversation.id)
    assert len(rows) == 4
    assert all(row.token_counts is None and row.estimated_tokens > 1 for row in rows)


# ---- the rule, observation by observation ---------------------------------------------


async def overheads(calibrator: Calibrator, per_message: float, times: int) -> int:
    """`times` answers of 10 messages with 500 content tokens, `per_message` template
    tokens each, plus 3 of priming."""
    for _ in range(times):
        prompt = round(500 + 10 * per_message + 3)
        await calibrator.observe_overhead("m", 500, 10, prompt, fixed=3, caller=OWNER)
    return calibrator.overhead("m", OWNER)


async def test_one_outlier_is_outvoted_and_a_first_one_moves_a_bounded_step() -> None:
    calibrator = Calibrator()
    settled = await overheads(calibrator, 4, 40)
    assert settled == 5  # 4.5 learned, rounded up
    # One prompt whose template cost 6,000 tokens a message (whoever made it) changes
    # nothing: the median of the recent observations is still 4.5.
    assert await overheads(calibrator, 6000, 1) == settled
    # One that cost none moves it a tenth of the way down, and the median back.
    assert await overheads(calibrator, 0, 1) == settled
    assert await overheads(calibrator, 4, 1) == settled

    fresh = Calibrator()
    assert await fresh.observe_overhead(
        "m", 0, 1, 10_000, fixed=3, caller=OWNER
    ) == DEFAULT_OVERHEAD + (OVERHEAD_STEP), (
        "a new model's first observation moves one bounded step"
    )

    await calibrator.observe("m", raw_estimate=100, prompt_tokens=100, caller=OWNER)
    for _ in range(40):
        await calibrator.observe("m", raw_estimate=100, prompt_tokens=100, caller=OWNER)
    factor = calibrator.factor("m", OWNER)
    assert factor == pytest.approx(MARGIN)
    await calibrator.observe("m", raw_estimate=100, prompt_tokens=10_000, caller=OWNER)
    assert calibrator.factor("m", OWNER) == pytest.approx(factor), "a high one is outvoted"
    await calibrator.observe("m", raw_estimate=100, prompt_tokens=1, caller=OWNER)
    assert calibrator.factor("m", OWNER) >= factor * (1 - DECAY), "a low one moves it a tenth"
    await calibrator.observe("m", raw_estimate=100, prompt_tokens=100, caller=OWNER)
    assert calibrator.factor("m", OWNER) == pytest.approx(factor), "and the next answer undoes it"
    await fresh.observe("f", raw_estimate=100, prompt_tokens=10_000, caller=OWNER)
    assert fresh.factor("f", OWNER) == pytest.approx(1 + FACTOR_STEP)


async def test_a_real_change_is_still_learned_in_bounded_steps() -> None:
    """A model whose template really costs 12 tokens a message: once most recent answers
    say so, the overhead climbs, a bounded step per answer, to just above it."""
    calibrator = Calibrator()
    await overheads(calibrator, 4, 40)
    seen = [await overheads(calibrator, 12, 1) for _ in range(RECENT)]
    assert seen[0] == 5, "one answer is not a majority"
    steps = [b - a for a, b in pairwise(seen)]
    assert max(steps) <= OVERHEAD_STEP + 1  # rounding up
    assert seen[-1] == 13  # 12.5, rounded up
    # And a factor: the estimate undercounts this model by half.
    for _ in range(40):
        await calibrator.observe("m", raw_estimate=100, prompt_tokens=100, caller=OWNER)
    factors = []
    for _ in range(RECENT):
        await calibrator.observe("m", raw_estimate=100, prompt_tokens=150, caller=OWNER)
        factors.append(calibrator.factor("m", OWNER))
    assert all(b <= a * (1 + FACTOR_STEP) + 1e-9 for a, b in pairwise(factors))
    assert factors[-1] == pytest.approx(1.5 * MARGIN)
