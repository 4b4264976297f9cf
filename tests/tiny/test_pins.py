"""Pins, the stored left-out spans, preview and switching configuration, through the
conversation service against the real fake upstream, on SQLite and PostgreSQL."""

from __future__ import annotations

import random

import pytest

from tests.factories import OWNER, say
from tests.tiny import TINY_SETTINGS, received_turns, turn_number
from tests.upstream import FakeUpstream
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import REPLAYABLE, Message, Role
from webapp.errors import InvalidInput, NotFound
from webapp.stored import id_of

pytestmark = TINY_SETTINGS


def replayable_users(rows: list[Message], before_seq: int) -> dict[int, int]:
    """User seq -> turn number, for turns whose answer would be replayed (independently
    of webapp.chat.stored.history)."""
    by_seq = {r.seq: r for r in rows}
    found = {}
    for row in rows:
        answer = by_seq.get(row.seq + 1)
        if (
            row.role == Role.USER
            and row.seq < before_seq
            and answer is not None
            and answer.status in REPLAYABLE
            and answer.content
        ):
            found[row.seq] = turn_number(row.content)
    return found


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_stored_left_out_is_exactly_what_the_upstream_did_not_receive(
    chat: ChatJobs, upstream: FakeUpstream, seed: int
) -> None:
    rng = random.Random(seed)
    conversation = await chat.editor.create(OWNER, "tiny")
    pinned_at_send: dict[int, set[int]] = {}
    for number in range(1, 19):
        if number > 3 and rng.random() < 0.15:
            upstream.fail_next(400)  # a failed turn: kept on record, never replayed
        content = f"turn {number}: " + "lorem ipsum dolor " * rng.randint(2, 12)
        user, _ = await say(chat, conversation.id, content)
        _, rows = await chat.reader.history(OWNER, conversation.id)
        pinned_at_send[user.seq] = {r.seq for r in rows if r.pinned and r.seq < user.seq}
        if rng.random() < 0.3:
            candidates = [r for r in rows if r.role == Role.USER and not r.pinned]
            await chat.editor.pin(OWNER, conversation.id, id_of(rng.choice(candidates)), True)
        if rng.random() < 0.1 and any(r.pinned for r in rows):
            pinned = [r for r in rows if r.pinned]
            await chat.editor.pin(OWNER, conversation.id, id_of(rng.choice(pinned)), False)

    _, rows = await chat.reader.history(OWNER, conversation.id)
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    users = [r for r in rows if r.role == Role.USER]
    assert len(chats) == len(users)
    trimmed = 0
    for user, request in zip(users, chats, strict=True):
        received = received_turns(request)
        replayable = replayable_users(rows, user.seq)
        in_spans = {
            seq for first, last in user.fit_left_out or [] for seq in range(first, last + 1)
        }
        left_out = {seq for seq in replayable if seq in in_spans}
        not_received = {seq for seq, n in replayable.items() if n not in received}
        assert left_out == not_received, (user.seq, user.fit_left_out, received)
        assert user.dropped_turns == len(left_out)
        assert not any(n in received for seq, n in replayable.items() if seq in in_spans)
        # Pins that were in place are sent unless the marker says pins had to go.
        pins = pinned_at_send[user.seq] & set(replayable)
        missing_pins = {seq for seq in pins if replayable[seq] not in received}
        assert len(missing_pins) == (user.fit_pins_dropped or 0)
        assert user.fit_counted_by == "estimate"
        trimmed += bool(user.dropped_turns)
    assert trimmed >= 5, "the tiny window trims most sends"


async def test_a_pinned_turn_outlives_the_window(chat: ChatJobs, upstream: FakeUpstream) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    for number in range(1, 4):
        await say(chat, conversation.id, f"turn {number}: " + "lorem ipsum " * 12)
    _, rows = await chat.reader.history(OWNER, conversation.id)
    second = next(r for r in rows if r.content.startswith("turn 2:"))
    pinned = await chat.editor.pin(OWNER, conversation.id, id_of(second), True)
    assert pinned.pinned
    for number in range(4, 14):
        user, _ = await say(chat, conversation.id, f"turn {number}: " + "lorem ipsum " * 12)
    assert user.dropped_turns and user.dropped_turns > 3
    assert 2 in received_turns(upstream.requests[-1]), "the pin was sent"
    assert 3 not in received_turns(upstream.requests[-1])
    # Unpinned, it goes the way of its neighbours.
    await chat.editor.pin(OWNER, conversation.id, id_of(second), False)
    await say(chat, conversation.id, "turn 14: " + "lorem ipsum " * 12)
    assert 2 not in received_turns(upstream.requests[-1])


async def test_pinning_refuses_what_it_cannot_pin(chat: ChatJobs) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    user, answer = await say(chat, conversation.id, "turn 1: hello")
    with pytest.raises(InvalidInput, match="only a user's message"):
        await chat.editor.pin(OWNER, conversation.id, id_of(answer), True)
    with pytest.raises(NotFound):
        await chat.editor.pin("mallory", conversation.id, id_of(user), True)
    other = await chat.editor.create(OWNER, "tiny")
    with pytest.raises(NotFound):
        await chat.editor.pin(OWNER, other.id, id_of(user), True)
    with pytest.raises(NotFound):
        await chat.editor.pin(OWNER, conversation.id, 10**9, True)


async def test_preview_is_the_fit_the_send_makes_and_stores_nothing(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    for number in range(1, 9):
        await say(chat, conversation.id, f"turn {number}: " + "lorem ipsum " * 15)
    _, before = await chat.reader.history(OWNER, conversation.id)
    requests_before = len(upstream.requests)
    content = "turn 9: " + "lorem ipsum " * 15
    preview = await chat.previewer.preview(OWNER, conversation.id, content)
    _, after = await chat.reader.history(OWNER, conversation.id)
    assert [r.model_dump() for r in after] == [r.model_dump() for r in before], "nothing stored"
    assert len(upstream.requests) == requests_before, "nothing sent"
    user, _ = await say(chat, conversation.id, content)
    assert preview.id is None and preview.seq == user.seq
    assert user.dropped_turns is not None and preview.dropped_turns == user.dropped_turns > 0
    assert preview.fit_left_out == user.fit_left_out
    assert preview.fit_estimated_tokens == user.fit_estimated_tokens
    with pytest.raises(InvalidInput):
        await chat.previewer.preview(OWNER, conversation.id, "   ")
    with pytest.raises(NotFound):
        await chat.previewer.preview("mallory", conversation.id, "hi")


async def test_switching_configuration_bounds_the_next_send_against_its_model(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    for number in range(1, 9):
        user, _ = await say(chat, conversation.id, f"turn {number}: " + "lorem ipsum " * 15)
    assert user.dropped_turns and user.fit_model == "tiny"
    preview = await chat.previewer.preview(OWNER, conversation.id, "turn 9: and now?")
    assert preview.fit_model == "tiny" and preview.dropped_turns
    switched = await chat.editor.set_configuration(OWNER, conversation.id, "large")
    assert switched.configuration == "large"
    user, answer = await say(chat, conversation.id, "turn 9: and now?")
    assert user.fit_model == "large" and user.dropped_turns == 0 and answer.model == "large"
    assert received_turns(upstream.requests[-1]) == set(range(1, 10))
    with pytest.raises(InvalidInput, match="unknown configuration"):
        await chat.editor.set_configuration(OWNER, conversation.id, "nope")
    with pytest.raises(NotFound):
        await chat.editor.set_configuration("mallory", conversation.id, "large")
