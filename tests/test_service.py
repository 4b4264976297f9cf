"""The conversation service on SQLite and PostgreSQL, against the real fake upstream."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import col

from tests.dbutil import session_on
from tests.factories import OWNER, SERVICE, build_service, close_service, say
from tests.upstream import FakeUpstream, count_chat_tokens
from webapp.chat.answering import answer as answering
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Message, Status
from webapp.errors import Conflict, InvalidInput, NotFound, TooManyRequests
from webapp.settings import Settings
from webapp.timeutil import utcnow

pytestmark = pytest.mark.settings(**SERVICE)


async def fill(chat: ChatJobs, conversation_id: str, turns: int, words: int = 25) -> None:
    for index in range(turns):
        await say(chat, conversation_id, f"message {index}: " + "lorem ipsum " * words)


async def test_a_send_stores_both_rows_with_fit_and_usage(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    user, answer = await say(chat, conversation.id, "Hello there, model!")
    assert (user.seq, answer.seq) == (1, 2)
    assert user.dropped_turns == 0 and user.fit_model == "small" and user.fit_window == 1024
    assert user.fit_budget == 1024 - 100 - 31
    assert user.fit_estimated_tokens and user.fit_overflow_at_floor is False
    assert answer.status == Status.COMPLETE and answer.model == "small"
    assert answer.content.startswith("Echo from small")
    assert answer.prompt_tokens == count_chat_tokens(upstream.requests[-1]["body"]["messages"])
    assert answer.completion_tokens and answer.finish_reason == "stop"
    assert answer.estimated_tokens > 0
    refreshed = await chat.reader.get(OWNER, conversation.id)
    assert refreshed.title == "Hello there, model!"


async def test_a_send_returns_once_its_request_is_with_the_engine_not_before(
    chat: ChatJobs, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send's own response starts after the answer's request is written, so it runs
    while the engine reads the prompt; it does not wait for the answer."""
    # The send waits for the write at most REQUEST_HEAD_START; a process's first send
    # (a new connection, the tokenizer loading) on a busy machine may take longer, and
    # what is tested here is the order, not that limit.
    monkeypatch.setattr(answering, "REQUEST_HEAD_START", 30.0)
    conversation = await chat.editor.create(OWNER, "small")
    upstream.stall(60)  # until ended below: the engine is still reading the prompt
    send = await chat.sender.send(OWNER, conversation.id, "Hello there, model!")
    assert send.running.sent.done(), "the request was written before the send returned"
    async with asyncio.timeout(20):  # the fake reads it in a thread of its own
        while not upstream.requests:
            await asyncio.sleep(0.01)
    assert [r["path"] for r in upstream.requests] == ["/v1/chat/completions"]
    assert not send.running.task.done(), "the answer waits for the engine"
    upstream.end_stalls()
    _, answer = await asyncio.wait_for(chat.sender.settle(send), timeout=20)
    assert answer.status == Status.COMPLETE


async def test_trimmed_sends_store_the_count_and_history_stays_whole(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    await fill(chat, conversation.id, 12)
    user, _ = await say(chat, conversation.id, "What did I say first?")
    assert user.dropped_turns and user.dropped_turns > 0
    sent = upstream.requests[-1]["body"]["messages"]
    # The system prompt, the opening exchange, then the newest turns; the count is exact.
    assert sent[0]["role"] == "system" and sent[1]["content"].startswith("message 0:")
    sent_turns = [m for m in sent if m["role"] == "user"]
    assert len(sent_turns) + user.dropped_turns == 13
    assert sent_turns[1]["content"].startswith(f"message {1 + user.dropped_turns}:")
    _, messages = await chat.reader.history(OWNER, conversation.id)
    assert len(messages) == 26, "stored history is never shortened"


async def test_a_failed_call_keeps_the_message_and_its_fit(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    upstream.fail_next(503)
    user, answer = await say(chat, conversation.id, "Are you there?")
    assert user.content == "Are you there?" and user.dropped_turns == 0
    assert user.fit_model == "small"
    assert answer.status == Status.FAILED and answer.content == ""
    assert answer.error == "No model could answer: small is unavailable (HTTP 503)."
    # The failed turn is kept but not replayed to the model.
    _, answer2 = await say(chat, conversation.id, "Second try")
    assert answer2.status == Status.COMPLETE
    sent = [m["content"] for m in upstream.requests[-1]["body"]["messages"]]
    assert "Are you there?" not in sent and sent[-1] == "Second try"
    _, messages = await chat.reader.history(OWNER, conversation.id)
    assert [m.seq for m in messages] == [1, 2, 3, 4]


async def test_a_fallback_refits_and_the_rows_name_the_model_that_served(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small-then-medium")
    await fill(chat, conversation.id, 12)
    upstream.fail_next(429, model="small")
    user, answer = await say(chat, conversation.id, "Now, fall back.")
    assert answer.model == "medium" and user.fit_model == "medium"
    assert user.fit_window == 4096 and user.dropped_turns == 0


async def test_unknown_configuration_leaves_no_fit(chat: ChatJobs, settings: Settings) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    async with session_on(chat.db, begin=True) as session:
        stored = await session.get(type(conversation), conversation.id)
        assert stored is not None
        stored.configuration = "retired"
        session.add(stored)
    user, answer = await say(chat, conversation.id, "hello")
    assert user.dropped_turns is None and user.fit_model is None
    assert answer.status == Status.FAILED and "retired" in (answer.error or "")


async def test_a_broken_stream_keeps_the_partial_answer(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    upstream.set_reply("one two three four five six seven eight nine ten")
    upstream.break_stream_after(3)
    _, answer = await say(chat, conversation.id, "Tell me a story")
    assert answer.status == Status.INTERRUPTED
    assert answer.content.strip() == "one two three"
    assert answer.error == "small broke off its answer part of the way."


@pytest.mark.parametrize("status", [401, 404, 500])
async def test_what_users_read_of_a_failure_names_the_model_not_the_address(
    chat: ChatJobs, upstream: FakeUpstream, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """An answer's error is shown to the user, and to an embed's visitors: the provider's
    address and its own words stay in the operator's log."""
    conversation = await chat.editor.create(OWNER, "small")
    upstream.fail_next(status, count=3)
    _, answer = await say(chat, conversation.id, "hello")
    assert answer.status == Status.FAILED
    error = answer.error or ""
    assert "small" in error and f"HTTP {status}" in error
    assert "://" not in error and str(upstream.port) not in error
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert upstream.base_url in logged, "the details reach the log"


async def test_stop_keeps_what_was_written(chat: ChatJobs, upstream: FakeUpstream) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    upstream.set_reply(" ".join(f"word{i}" for i in range(200)))
    upstream.chunk_delay = 0.02
    send = await chat.sender.send(OWNER, conversation.id, "Talk for a while")
    async for event in send.running.channel.follow():
        if event.name == "delta" and int(event.id or 0) > 30:
            break
    stopped = await chat.stopper.stop(OWNER, conversation.id)
    assert stopped is not None and stopped.status == Status.STOPPED
    assert stopped.content.startswith("word0 word1")
    assert len(stopped.content.split()) < 200
    assert await chat.stopper.stop(OWNER, conversation.id) is None, "nothing left to stop"


async def test_stop_from_another_worker_reaches_the_writer(
    chat: ChatJobs, settings: Settings, upstream: FakeUpstream
) -> None:
    other_worker = await build_service(settings)
    try:
        conversation = await chat.editor.create(OWNER, "small")
        upstream.set_reply(" ".join(f"w{i}" for i in range(300)))
        upstream.chunk_delay = 0.02
        send = await chat.sender.send(OWNER, conversation.id, "Go on")
        await asyncio.sleep(0.3)
        await other_worker.stopper.stop(OWNER, conversation.id)
        _, answer = await asyncio.wait_for(chat.sender.settle(send), timeout=5)
        assert answer.status == Status.STOPPED
        assert 0 < len(answer.content.split()) < 300
    finally:
        await close_service(other_worker)


async def test_concurrent_sends_never_interleave(chat: ChatJobs, upstream: FakeUpstream) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    upstream.chunk_delay = 0.01
    outcomes = await asyncio.gather(
        *(chat.sender.send(OWNER, conversation.id, f"parallel {i}") for i in range(4)),
        return_exceptions=True,
    )
    sends = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(sends) == 1 and all(isinstance(o, Conflict) for o in refused)
    await chat.sender.settle(sends[0])
    await say(chat, conversation.id, "after")
    _, messages = await chat.reader.history(OWNER, conversation.id)
    assert [(m.seq, m.role) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]


async def test_an_answer_survives_its_watcher_going_away(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    upstream.chunk_delay = 0.02
    send = await chat.sender.send(OWNER, conversation.id, "Keep going after I leave")
    watcher = asyncio.ensure_future(anext(send.running.channel.follow()))
    await watcher
    watcher.cancel()
    _, answer = await chat.sender.settle(send)
    assert answer.status == Status.COMPLETE and answer.content.startswith("Echo from small")


async def test_restart_marks_in_flight_answers_interrupted(
    chat: ChatJobs, settings: Settings, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    upstream.set_reply(" ".join(f"w{i}" for i in range(300)))
    upstream.chunk_delay = 0.02
    send = await chat.sender.send(OWNER, conversation.id, "Long answer please")
    async with asyncio.timeout(10):  # stopped once part of the answer is in
        async for event in send.running.channel.follow():
            if event.name == "delta":
                break
    await chat.shutdown()  # what a graceful server stop does
    assert send.running.task.done()
    _, messages = await chat.reader.history(OWNER, conversation.id)
    assert messages[1].status == Status.INTERRUPTED and messages[1].content.startswith("w0")
    # A worker that died without a word leaves a row nobody writes: it is reaped.
    async with session_on(chat.db, begin=True) as session:
        await session.exec(
            update(Message)
            .where(col(Message.id) == messages[1].id)
            .values(status=Status.STREAMING, updated_at=utcnow() - timedelta(minutes=5))
        )
    restarted = await build_service(settings)
    try:
        assert await restarted.reaper.reap_stale() == 1
        _, messages = await restarted.reader.history(OWNER, conversation.id)
        assert messages[1].status == Status.INTERRUPTED
        upstream.set_reply("Back again.")  # not three hundred words at 20 ms each
        upstream.chunk_delay = 0
        _, answer = await say(restarted, conversation.id, "again")
        assert answer.status == Status.COMPLETE
    finally:
        await close_service(restarted)


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "empty"), ("   \n\t ", "empty"), ("x" * 5001, "limit"), (42, "string")],
)
async def test_bad_messages_are_refused_and_nothing_is_stored(
    chat: ChatJobs, content: object, message: str
) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    with pytest.raises(InvalidInput, match=message):
        await chat.sender.send(OWNER, conversation.id, content)
    _, messages = await chat.reader.history(OWNER, conversation.id)
    assert messages == []


async def test_other_owners_see_nothing(chat: ChatJobs) -> None:
    conversation = await chat.editor.create(OWNER, "small")
    await say(chat, conversation.id, "private")
    for call in (
        chat.reader.get("mallory", conversation.id),
        chat.reader.history("mallory", conversation.id),
        chat.sender.send("mallory", conversation.id, "hi"),
        chat.stopper.stop("mallory", conversation.id),
        chat.editor.rename("mallory", conversation.id, "mine"),
        chat.editor.delete("mallory", conversation.id),
    ):
        with pytest.raises(NotFound):
            await call
    assert await chat.reader.conversations("mallory") == []
    assert [c.id for c in await chat.reader.conversations(OWNER)] == [conversation.id]


async def test_create_rename_delete(chat: ChatJobs) -> None:
    with pytest.raises(InvalidInput, match="unknown configuration"):
        await chat.editor.create(OWNER, "nope")
    first = await chat.editor.create(OWNER, "small", "First")
    second = await chat.editor.create(OWNER)
    assert second.configuration == "small" and second.title == "New conversation"
    await chat.editor.rename(OWNER, first.id, "  Renamed   title ")
    assert (await chat.reader.get(OWNER, first.id)).title == "Renamed title"
    assert (await chat.reader.conversations(OWNER))[0].id == first.id
    with pytest.raises(InvalidInput):
        await chat.editor.rename(OWNER, first.id, "   ")
    await say(chat, first.id, "hello")
    await chat.editor.delete(OWNER, first.id)
    with pytest.raises(NotFound):
        await chat.reader.get(OWNER, first.id)


async def test_sends_are_rate_limited_per_owner_and_nothing_is_lost(
    settings: Settings,
) -> None:
    limited = settings.model_copy(update={"rate_limit_messages": 3, "embed_rate_limit_messages": 1})
    chat = await build_service(limited)
    try:
        conversation = await chat.editor.create(OWNER, "small")
        elsewhere = await chat.editor.create(OWNER, "small")
        await say(chat, elsewhere.id, "message 0")  # the limit is the owner's, not a chat's
        for index in range(1, 3):
            await say(chat, conversation.id, f"message {index}")
        with pytest.raises(TooManyRequests) as refused:
            await chat.sender.send(OWNER, conversation.id, "one too many")
        assert 0 < refused.value.retry_after <= 60
        assert "try again in" in refused.value.message
        _, messages = await chat.reader.history(OWNER, conversation.id)
        assert len(messages) == 4, "the refused message was not stored; nothing else changed"
        # Another owner has their own budget; an embed visitor has the embed limit.
        other = await chat.editor.create("bob", "small")
        await chat.sender.settle(await chat.sender.send("bob", other.id, "hello"))
        visitor = await chat.editor.create("embed:support:abc", "small")
        await chat.sender.settle(await chat.sender.send("embed:support:abc", visitor.id, "hi"))
        with pytest.raises(TooManyRequests):
            await chat.sender.send("embed:support:abc", visitor.id, "again")
    finally:
        await close_service(chat)


async def test_watchers_hear_the_end_even_when_it_cannot_be_stored(
    chat: ChatJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database failing at the very end must not leave a watcher waiting forever."""

    async def fails(*_args: object) -> None:
        raise RuntimeError("disk I/O error (simulated)")

    conversation = await chat.editor.create(OWNER, "small")
    monkeypatch.setattr(chat.sender.writer, "finish", fails)
    send = await chat.sender.send(OWNER, conversation.id, "hello")
    events = [event async for event in send.running.channel.follow()]
    assert events[0].name == "fit" and events[-1].name == "error"
    assert events[-1].data["message"] == "The answer could not be stored."
    with pytest.raises(RuntimeError):
        await send.running.task
