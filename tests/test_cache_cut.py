"""The cut that keeps the engine's cache, through the conversation service on SQLite and
PostgreSQL: what the upstream receives between two moves is the previous request plus its
answer plus the new turn, and the stored spans are exactly what it did not receive."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from tests.factories import OWNER, SERVICE, say
from tests.upstream import FakeUpstream
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Message

PLAIN = """
[[configurations]]
name = "small-plain"
model = "small"
system_prompt = "You are a test model."
trim_to = 1.0

[[configurations]]
name = "small-half"
model = "small"
system_prompt = "You are a test model."
trim_to = 0.5
"""

pytestmark = pytest.mark.settings(extra=PLAIN, **SERVICE)


def sent(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [
        {"role": m["role"], "content": m["content"]}
        for m in upstream.requests[-1]["body"]["messages"]
    ]


async def assert_spans_are_what_was_not_sent(
    chat: ChatJobs, conversation_id: str, user: Message, request: list[dict[str, Any]]
) -> None:
    """The stored branch less the user row's `left_out` spans is the request, message for
    message (failed turns are never sent, and are never a span of their own)."""
    _, branch = await chat.reader.history(OWNER, conversation_id)
    unsent = {s for a, b in user.fit_left_out or [] for s in range(a, b + 1)}
    before = [m for m in branch if m.seq < user.seq]
    replayed = [
        m
        for m in before
        if m.seq not in unsent
        and m.content
        and (m.role == "assistant" or any(a.seq == m.seq + 1 and a.content for a in before))
    ]
    expected = [{"role": m.role, "content": m.content} for m in replayed]
    assert request[1:-1] == expected
    assert request[-1]["content"] == user.content


async def converse(
    chat: ChatJobs, upstream: FakeUpstream, configuration: str, turns: int
) -> tuple[str, list[tuple[Message, list[dict[str, Any]]]]]:
    conversation = await chat.editor.create(OWNER, configuration)
    sends = []
    for index in range(turns):
        user, _ = await say(chat, conversation.id, f"message {index}: " + "lorem ipsum " * 20)
        sends.append((user, sent(upstream)))
    return conversation.id, sends


async def test_between_moves_each_request_appends_to_the_one_before(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation_id, sends = await converse(chat, upstream, "small", 30)
    trimmed = [(user, request) for user, request in sends if user.dropped_turns]
    assert len(trimmed) >= 15
    appends = 0
    for (_, before), (user, request) in pairwise(sends):
        assert user.fit_trim_to == 0.75
        if not user.fit_cut_moved:
            # The previous request, its answer, the new turn: nothing in between changed.
            assert request[: len(before)] == before and len(request) == len(before) + 2
            appends += 1
        else:
            assert user.fit_estimated_tokens is not None and user.fit_budget is not None
            assert user.fit_estimated_tokens <= 0.75 * user.fit_budget
    moves = [user for user, _ in trimmed if user.fit_cut_moved]
    assert moves and appends >= 0.6 * len(trimmed)
    for user, request in sends[-6:]:
        await assert_spans_are_what_was_not_sent(chat, conversation_id, user, request)


async def test_trim_to_one_moves_the_cut_on_every_trimmed_send(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    _, sends = await converse(chat, upstream, "small-plain", 24)
    trimmed = [user for user, _ in sends if user.dropped_turns]
    assert trimmed and all(user.fit_trim_to == 1.0 for user in trimmed)
    assert sum(bool(user.fit_cut_moved) for user in trimmed) >= len(trimmed) // 2


async def test_a_pin_a_configuration_switch_and_an_edit_start_the_cut_afresh(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation_id, sends = await converse(chat, upstream, "small", 16)
    user = sends[-1][0]
    assert user.fit_left_out
    first_left_out = user.fit_left_out[0][0]
    await chat.editor.pin(
        OWNER, conversation_id, await _id_of(chat, conversation_id, first_left_out)
    )
    assert (await chat.reader.get(OWNER, conversation_id)).cut_reset
    pinned_send, _ = await say(chat, conversation_id, "after the pin " + "lorem " * 20)
    request = sent(upstream)
    assert pinned_send.fit_cut_moved, "a pin change starts the cut afresh"
    assert any(m["content"].startswith(f"message {first_left_out // 2}:") for m in request)
    await assert_spans_are_what_was_not_sent(chat, conversation_id, pinned_send, request)
    assert not (await chat.reader.get(OWNER, conversation_id)).cut_reset, "the send cleared it"

    # The next send keeps that cut again.
    after, _ = await say(chat, conversation_id, "and one more " + "lorem " * 5)
    assert not after.fit_cut_moved and sent(upstream)[: len(request)] == request

    await chat.editor.set_configuration(OWNER, conversation_id, "small-half")
    switched, _ = await say(chat, conversation_id, "on half " + "lorem " * 5)
    assert switched.fit_cut_moved and switched.fit_trim_to == 0.5
    assert switched.fit_estimated_tokens is not None and switched.fit_budget is not None
    assert switched.fit_estimated_tokens <= 0.5 * switched.fit_budget

    edited = await chat.sender.send(
        OWNER, conversation_id, "edited " + "lorem " * 5, edit_of=switched.id
    )
    edited_user, _ = await chat.sender.settle(edited)
    assert edited_user.fit_cut_moved
    await assert_spans_are_what_was_not_sent(chat, conversation_id, edited_user, sent(upstream))


async def test_a_regenerated_answer_keeps_the_cut(chat: ChatJobs, upstream: FakeUpstream) -> None:
    conversation_id, sends = await converse(chat, upstream, "small", 20)
    user, request = sends[-1]
    regenerated = await chat.sender.regenerate(OWNER, conversation_id, user.id or 0)
    again, _ = await chat.sender.settle(regenerated)
    assert not again.fit_cut_moved or user.fit_cut_moved
    if not user.fit_cut_moved:
        assert sent(upstream) == request, "the same request again: the engine's cache serves it"


async def _id_of(chat: ChatJobs, conversation_id: str, seq: int) -> int:
    _, branch = await chat.reader.history(OWNER, conversation_id)
    return next(m.id for m in branch if m.seq == seq and m.id is not None)
