"""Summaries of what the cut left out (DESIGN 14), through the conversation service to the
fake upstream on SQLite and PostgreSQL: between moves each request, summary included, is
the previous one plus what was appended; the summary call replays the previous request and
its answer plus one instruction; edits, branches, pins, switches, slow or failed calls and
a summary that does not fit."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import select

from tests.catalogs import SUMMED_TOML
from tests.factories import OWNER, SERVICE, say
from tests.mcp_servers import stdio_fixture_toml
from tests.upstream import FakeUpstream
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import GatewayCall, Message
from webapp.llm.catalog import ModelSpec
from webapp.llm.summaries import FALLBACK_SYSTEM, HEADING, slot_messages
from webapp.llm.window import fit, kept_from

SUMMARIZING = (
    SUMMED_TOML
    + """
[[configurations]]
name = "plain"
model = "medium"
system_prompt = "You are a test model."
"""
)

pytestmark = pytest.mark.settings(extra=SUMMARIZING, **SERVICE, rate_limit_messages=0)

INSTRUCTION = "Before we go on:"


def wire(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": m["role"], "content": m["content"]} for m in request["body"]["messages"]]


def is_fallback_call(request: dict[str, Any]) -> bool:
    """The uncached summary call made when the replay cannot fit the window."""
    return wire(request)[0]["content"] == FALLBACK_SYSTEM


def is_summary_call(request: dict[str, Any]) -> bool:
    return wire(request)[-1]["content"].startswith(INSTRUCTION) or is_fallback_call(request)


async def converse(
    chat: ChatJobs, upstream: FakeUpstream, conversation_id: str, turns: int, start: int = 0
) -> list[Message]:
    users = []
    for index in range(start, start + turns):
        user, _ = await say(chat, conversation_id, f"message {index}: " + "lorem ipsum " * 80)
        users.append(user)
    return users


async def test_between_moves_every_request_appends_and_the_summary_call_replays(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    users = await converse(chat, upstream, conversation.id, 40)
    requests = upstream.requests
    sends = [wire(r) for r in requests if not is_summary_call(r)]
    calls = [i for i, r in enumerate(requests) if is_summary_call(r)]
    assert len(sends) == len(users) and len(calls) >= 2
    moves = [u for u in users if u.fit_cut_moved]
    assert len(moves) >= 2
    for (_, before), (user, request) in pairwise(zip(users, sends, strict=True)):
        if not user.fit_cut_moved:
            assert request[: len(before)] == before and len(request) == len(before) + 2
    # Each summary call is the request before it, its answer, and one instruction.
    for index in calls:
        previous = wire(requests[index - 1])
        call = wire(requests[index])
        assert call[: len(previous)] == previous
        assert len(call) == len(previous) + 2 and call[-2]["role"] == "assistant"
    # Summaries sit right after the head, never in the system prompt.
    summarized = [s for s in sends if any(m["content"].startswith(HEADING) for m in s)]
    assert summarized
    for request in summarized:
        assert request[3]["content"].startswith(HEADING) and request[4]["role"] == "assistant"
        assert HEADING not in request[0]["content"]
    # Each summary call is recorded as a spending of kind "summary" (not a message).
    kinds = await chat.db.read(lambda session: list(session.exec(select(GatewayCall.kind)).all()))
    assert kinds.count("summary") == len(calls)


def seq_of(content: str) -> int | None:
    """The user row's seq of a message these tests wrote ("message N: ..."; no failures)."""
    if not content.startswith("message "):
        return None
    return 2 * int(content.split(":")[0].split()[1]) + 1


async def test_a_summary_never_covers_a_turn_the_same_request_sends(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    users = await converse(chat, upstream, conversation.id, 30)
    summaries = await chat.reader.summaries(OWNER, conversation.id)
    assert [s.version for s in summaries] == list(range(1, len(summaries) + 1))
    assert summaries and all(s.first_seq == 3 and s.model == "medium" for s in summaries)
    by_version = {s.version: s for s in summaries}
    sends = [wire(r) for r in upstream.requests if not is_summary_call(r)]
    carried = 0
    for user, request in zip(users, sends, strict=True):
        if user.fit_summary is None:
            assert not any(m["content"].startswith(HEADING) for m in request)
            continue
        carried += 1
        summary = by_version[user.fit_summary]
        assert request[3]["content"] == f"{HEADING}\n\n{summary.content}"
        sent_seqs = [seq_of(m["content"]) for m in request[5:] if m["role"] == "user"]
        assert all(s is not None and s > summary.last_seq for s in sent_seqs[:-1])
        left_out = user.fit_left_out or []
        assert left_out and left_out[-1][1] >= summary.last_seq
    assert carried >= 5
    # The summary calls were served from the engine's cache.
    records = [r for r in upstream.cache_log if r.prompt_tokens]
    calls = [i for i, r in enumerate(upstream.requests) if is_summary_call(r)]
    assert calls
    for index in calls:
        record = records[index]
        assert record.cached_tokens >= 0.9 * record.prompt_tokens, record


LONG = "lorem ipsum " * 80


async def until_a_move(
    chat: ChatJobs, conversation_id: str, start: int, before_move: Any = None
) -> tuple[Message, int]:
    """Send turns until one moves the cut; `before_move()` runs right before that send."""
    for index in range(start, start + 40):
        text = f"message {index}: {LONG}"
        if before_move is not None:
            preview = await chat.previewer.preview(OWNER, conversation_id, text)
            if preview.fit_cut_moved:
                before_move()
        user, _ = await say(chat, conversation_id, text)
        if user.fit_cut_moved:
            return user, index + 1
    raise AssertionError("the cut never moved")


@pytest.mark.settings(extra=SUMMARIZING, **SERVICE, rate_limit_messages=0, summary_wait_seconds=0.3)
async def test_a_slow_summary_is_carried_from_the_next_move_on(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    first, at = await until_a_move(chat, conversation.id, 0)
    assert first.fit_summary == 1
    slow, at = await until_a_move(
        chat, conversation.id, at, before_move=lambda: upstream.stall(30.0)
    )
    assert slow.fit_summary == 1, "the move went with the summary before"
    upstream.end_stalls()
    for _ in range(100):
        if len(await chat.reader.summaries(OWNER, conversation.id)) == 2:
            break
        await asyncio.sleep(0.1)
    late = (await chat.reader.summaries(OWNER, conversation.id))[-1]
    assert late.version == 2 and late.last_seq == (slow.fit_left_out or [])[-1][1]
    following, _ = await say(chat, conversation.id, f"message {at}: {LONG}")
    assert not following.fit_cut_moved and following.fit_summary == 1
    upstream.forget_requests()
    moved, _ = await until_a_move(chat, conversation.id, at + 1)
    assert moved.fit_summary == 3
    call = next(wire(r) for r in upstream.requests if is_summary_call(r))
    assert late.content in call[-1]["content"], "the late summary is the new one's base"


async def test_a_failed_summary_call_sends_the_one_before_and_the_next_covers_the_gap(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    _, at = await until_a_move(chat, conversation.id, 0)
    failed, at = await until_a_move(
        chat, conversation.id, at, before_move=lambda: upstream.fail_next(400)
    )
    assert failed.fit_summary == 1 and failed.status == "complete"
    assert len(await chat.reader.summaries(OWNER, conversation.id)) == 1
    upstream.forget_requests()
    moved, _ = await until_a_move(chat, conversation.id, at)
    assert moved.fit_summary == 2
    summaries = await chat.reader.summaries(OWNER, conversation.id)
    assert summaries[-1].last_seq == (moved.fit_left_out or [])[-1][1]
    instruction = next(wire(r) for r in upstream.requests if is_summary_call(r))[-1]
    # The turns the failed move left out are not in the replayed request: quoted instead.
    assert "not shown above" in instruction["content"]
    first_gap = summaries[0].last_seq + 1
    assert f"message {(first_gap - 1) // 2}:" in instruction["content"]


SQUEEZED = """
[[configurations]]
name = "squeezed"
model = "medium"
system_prompt = "You are a test model."
summarize = true
summary_max_tokens = 2000
"""


@pytest.mark.settings(extra=SQUEEZED, **SERVICE, rate_limit_messages=0)
async def test_when_pins_and_the_summary_do_not_fit_the_summary_goes_first(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "squeezed")
    users = await converse(chat, upstream, conversation.id, 12)
    assert any(u.fit_summary for u in users), "alone it fits"
    for user in users[1:9]:
        await chat.editor.pin(OWNER, conversation.id, user.id or 0)
    pinned, _ = await say(chat, conversation.id, f"message 12: {LONG}")
    request = wire(upstream.requests[-1])
    assert pinned.fit_summary is None and pinned.fit_pins_dropped == 0
    assert not any(m["content"].startswith(HEADING) for m in request)
    assert all(any(m["content"] == u.content for m in request) for u in users[1:9])


async def test_an_edit_of_a_covered_turn_never_reuses_its_summary(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    users = await converse(chat, upstream, conversation.id, 30)
    summaries = await chat.reader.summaries(OWNER, conversation.id)
    assert summaries and users[-1].fit_summary
    covered = users[2]  # seq 5, inside every summary
    assert summaries[0].first_seq <= covered.seq <= summaries[0].last_seq
    edited = await chat.sender.send(OWNER, conversation.id, "edited: " + LONG, edit_of=covered.id)
    user, _ = await chat.sender.settle(edited)
    assert user.fit_summary is None
    assert not any(m["content"].startswith(HEADING) for m in wire(upstream.requests[-1]))
    assert await chat.reader.summaries(OWNER, conversation.id) == []
    # An edit after what the summary covers keeps it: the branch still passes through it.
    await chat.editor.branch(OWNER, conversation.id, users[-1].id or 0)
    later = await chat.sender.send(OWNER, conversation.id, "again: " + LONG, edit_of=users[-1].id)
    again, _ = await chat.sender.settle(later)
    assert again.fit_summary == summaries[-1].version


async def test_a_pin_a_switch_and_an_edit_of_the_summary(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    users = await converse(chat, upstream, conversation.id, 30)
    newest = (await chat.reader.summaries(OWNER, conversation.id))[-1]
    # A pinned covered turn is sent as itself, after the summary.
    await chat.editor.pin(OWNER, conversation.id, users[3].id or 0)
    pinned, _ = await say(chat, conversation.id, f"message 30: {LONG}")
    request = wire(upstream.requests[-1])
    assert pinned.fit_summary == newest.version
    assert request[3]["content"] == f"{HEADING}\n\n{newest.content}"
    assert request[5]["content"] == users[3].content
    # The owner's edit is carried by the next send; the one after appends to it again.
    edited = await chat.editor.edit_summary(OWNER, conversation.id, newest.id or 0, "EDITED")
    assert edited.edited and edited.version == newest.version
    after_edit, _ = await say(chat, conversation.id, f"message 31: {LONG}")
    request = wire(upstream.requests[-1])
    assert request[3]["content"] == f"{HEADING}\n\nEDITED"
    if not after_edit.fit_cut_moved:
        assert after_edit.fit_summary == newest.version
    # Off for the conversation: no summary; on again: the newest applies.
    await chat.editor.set_summarize(OWNER, conversation.id, False)
    off, _ = await say(chat, conversation.id, f"message 32: {LONG}")
    assert off.fit_summary is None
    assert not any(m["content"].startswith(HEADING) for m in wire(upstream.requests[-1]))
    await chat.editor.set_summarize(OWNER, conversation.id, True)
    on, _ = await say(chat, conversation.id, f"message 33: {LONG}")
    assert on.fit_summary is not None
    # A configuration without summaries (the conversation's own choice still decides).
    await chat.editor.set_configuration(OWNER, conversation.id, "plain")
    plain, _ = await say(chat, conversation.id, f"message 34: {LONG}")
    assert plain.fit_summary is not None


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=st.lists(st.integers(80, 200), min_size=24, max_size=36))
async def test_property_between_moves_requests_append_and_summaries_cover_only_unsent_turns(
    chat: ChatJobs, upstream: FakeUpstream, sizes: list[int]
) -> None:
    """Random turn lengths: between two moves each request, summary included, is the
    previous request plus its answer and the new turn; each summary call is the previous
    request plus its answer and one instruction; no request sends a turn its summary covers."""
    upstream.forget_requests()
    conversation = await chat.editor.create(OWNER, "summed")
    users = []
    for index, size in enumerate(sizes):
        user, _ = await say(chat, conversation.id, f"message {index}: " + "lorem ipsum " * size)
        users.append(user)
    summaries = {s.version: s for s in await chat.reader.summaries(OWNER, conversation.id)}
    assert summaries, "the cut moved and the summary was written"
    requests = upstream.requests
    sends = [wire(r) for r in requests if not is_summary_call(r)]
    for index, asked in enumerate(requests):
        if is_summary_call(asked):
            previous, call = wire(requests[index - 1]), wire(asked)
            assert call[: len(previous)] == previous and len(call) == len(previous) + 2
    for (_, before), (user, request) in pairwise(zip(users, sends, strict=True)):
        if not user.fit_cut_moved:
            assert request[: len(before)] == before and len(request) == len(before) + 2
    for user, request in zip(users, sends, strict=True):
        if user.fit_summary is not None:
            covered = summaries[user.fit_summary].last_seq
            assert request[3]["content"].startswith(HEADING)
            seqs = [seq_of(m["content"]) for m in request[5:-1] if m["role"] == "user"]
            assert all(s is not None and s > covered for s in seqs)


async def test_a_switch_to_a_configuration_without_summaries_sends_none(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "summed")
    users = await converse(chat, upstream, conversation.id, 24)
    assert users[-1].fit_summary is not None
    await chat.editor.set_configuration(OWNER, conversation.id, "plain")
    plain, _ = await say(chat, conversation.id, f"message 24: {LONG}")
    assert plain.fit_summary is None and plain.fit_cut_moved
    assert not any(m["content"].startswith(HEADING) for m in wire(upstream.requests[-1]))
    assert not any(is_summary_call(r) for r in upstream.requests[-1:])
    await chat.editor.set_configuration(OWNER, conversation.id, "summed")
    back, _ = await say(chat, conversation.id, f"message 25: {LONG}")
    newest = (await chat.reader.summaries(OWNER, conversation.id))[-1]
    assert back.fit_summary == newest.version, "back on, the newest that applies"


# ---- the fit's summary slot, without a service ---------------------------------------------

SLOT_MODEL = ModelSpec(
    name="m", provider="p", model_id="m", context_window=2048, max_output_tokens=256
)


def slotted(turns: int, summary: str) -> list[dict[str, Any]]:
    """System prompt, head, the slot, then `turns` answered turns and a new one."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "terse"}]
    messages += [{"role": "user", "content": "head " * 20}, {"role": "assistant", "content": "ok"}]
    messages += list(slot_messages(summary))
    for n in range(turns):
        messages += [
            {"role": "user", "content": f"q{n} " + "word " * 60},
            {"role": "assistant", "content": f"a{n} " + "word " * 60},
        ]
    return [*messages, {"role": "user", "content": "new " * 10}]


def test_an_empty_slot_keeps_its_room_and_sends_nothing() -> None:
    messages = slotted(4, "")
    without = fit(messages, SLOT_MODEL, summary=3, summary_room=0)
    with_room = fit(messages, SLOT_MODEL, summary=3, summary_room=300)
    assert not with_room.summary_sent and all(m["content"] for m in with_room.messages)
    assert with_room.estimated_tokens >= without.estimated_tokens + 300
    assert with_room.dropped_turns == 0 and with_room.kept_turns == 6


def test_a_full_slot_is_sent_after_the_head_at_the_size_of_its_room() -> None:
    messages = slotted(4, "what came before")
    result = fit(messages, SLOT_MODEL, summary=3, summary_room=300)
    assert result.summary_sent and result.messages[3]["content"].startswith(HEADING)
    assert result.messages[4]["role"] == "assistant"
    small = fit(messages, SLOT_MODEL, summary=3, summary_room=10)
    assert result.estimated_tokens - small.estimated_tokens == 290


def test_the_summary_goes_before_any_pin() -> None:
    messages = slotted(12, "what came before")
    pinned = [i for i, m in enumerate(messages[5:-1], 5) if m["role"] == "user"]
    result = fit(messages, SLOT_MODEL, summary=3, summary_room=900, pinned=pinned)
    assert result.summary_dropped and not result.summary_sent
    assert not any(m["content"].startswith(HEADING) for m in result.messages)
    assert result.pins_dropped < len(pinned)
    roomy = fit(messages, SLOT_MODEL, summary=3, summary_room=20, pinned=pinned[:2])
    assert roomy.summary_sent and not roomy.summary_dropped and roomy.pins_dropped == 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(1, 140), min_size=3, max_size=40),
    st.integers(0, 500),
    st.sampled_from([0.5, 0.75, 0.9]),
)
def test_property_the_slot_never_breaks_an_append(
    sizes: list[int], room: int, trim_to: float
) -> None:
    """Sends of a growing conversation with a slot of fixed content: between moves the
    request is the previous one, its answer and the new turn, and the fit stays in budget."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "terse"},
        {"role": "user", "content": "head"},
        {"role": "assistant", "content": "ok"},
        *slot_messages("a summary"),
    ]
    previous = None
    for n, size in enumerate(sizes):
        messages = [*history, {"role": "user", "content": f"q{n} " + "word " * size}]
        result = fit(
            messages,
            SLOT_MODEL,
            summary=3,
            summary_room=room,
            trim_to=trim_to,
            keep_from=kept_from(previous.left_out) if previous is not None else 0,
        )
        if previous is not None and not result.cut_moved and not result.summary_dropped:
            assert result.messages == [*previous.messages, history[-1], messages[-1]]
        if not result.overflow_at_floor:
            assert result.estimated_tokens <= result.budget
        history = [*messages, {"role": "assistant", "content": f"a{n} " + "word " * size}]
        previous = result


# ---- summaries and tool-result clearing in one fit ------------------------------------------

TOOLED = stdio_fixture_toml("local", 'tools = ["report"]', "timeout = 20") + (
    SUMMED_TOML.replace('"summed"', '"summed-tools"') + 'tools = ["local"]\nkeep_tool_results = 1\n'
)


def tool_pairs_whole(request: list[dict[str, Any]]) -> bool:
    """Every call in `request` is followed by its result, and every result by its call."""
    for index, message in enumerate(request):
        calls = message.get("tool_calls") or []
        if calls:
            ids = [call["id"] for call in calls]
            after = request[index + 1 : index + 1 + len(ids)]
            if [m.get("tool_call_id") for m in after] != ids:
                return False
        if message["role"] == "tool":
            before = [m for m in request[:index] if m.get("tool_calls")]
            if not before or message.get("tool_call_id") not in [
                c["id"] for c in before[-1]["tool_calls"]
            ]:
                return False
    return True


@pytest.mark.settings(extra=SUMMARIZING + TOOLED, **SERVICE, rate_limit_messages=0)
async def test_summaries_and_cleared_tool_results_share_the_fit(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    """A configuration with both: between moves every request (summary slot and stubs
    included) is the previous one plus what was appended; at a move older results turn to
    stubs and the turns left out are folded into the summary; no call goes without its
    result; the head turn's tool steps stay before the slot."""
    conversation = await chat.editor.create(OWNER, "summed-tools")
    upstream.forget_requests()
    turns: list[tuple[Message, list[dict[str, Any]]]] = []
    for index in range(24):
        tool = index == 0 or index % 3 == 1
        text = f"message {index}: " + ("please use tool. " if tool else "") + "lorem ipsum " * 40
        before = len(upstream.requests)
        user, answer = await say(chat, conversation.id, text)
        assert answer.status == "complete", answer
        turns.append((user, upstream.requests[before:]))
    users = [user for user, _ in turns]
    moves = [u for u in users if u.fit_cut_moved]
    assert len(moves) >= 3, [u.fit_cut_moved for u in users]
    summaries = {s.version: s for s in await chat.reader.summaries(OWNER, conversation.id)}
    assert len(summaries) >= 2
    previous: list[dict[str, Any]] | None = None
    replayed: list[dict[str, Any]] = []
    stubbed = covered = 0
    seq_by_text = {u.content: u.seq for u in users}
    for user, requests in turns:
        sends = [r["body"]["messages"] for r in requests if not is_summary_call(r)]
        calls = [r["body"]["messages"] for r in requests if is_summary_call(r)]
        assert sends, user
        broke = False
        for number, request in enumerate(sends):
            assert tool_pairs_whole(request), request
            # The head turn (with its tool steps) comes whole, then the slot.
            head = request[1:5] if len(request) > 5 else []
            if head and head[1].get("tool_calls"):
                assert [m["role"] for m in head] == ["user", "assistant", "tool", "assistant"]
            if user.fit_summary is not None and number == 0:
                assert len(request) > 5, (user, request)
                slot = 5 if request[2].get("tool_calls") else 3
                text = f"{HEADING}\n\n{summaries[user.fit_summary].content}"
                assert request[slot]["content"] == text and request[slot + 1]["role"] == "assistant"
            if previous is not None and request[: len(previous)] != previous:
                # Only a move breaks the append, once a turn (at its first request, or at
                # the step whose tool results no longer fit).
                assert user.fit_cut_moved and not broke, user.seq
                broke = True
            previous = request
        for request in requests:
            if is_summary_call(request):
                call = request["body"]["messages"]
                assert tool_pairs_whole(call)
                if not is_fallback_call(request):
                    # The replay is the previous request (stubs included) and one instruction.
                    assert call[: len(replayed)] == replayed and len(call) == len(replayed) + 2
            else:
                replayed = request["body"]["messages"]
        if user.fit_cut_moved:
            if user.fit_cleared:
                stubbed += 1
                assert any(str(m.get("content")).startswith("[result of") for m in sends[0])
            # What the move left out is folded into the summary it carries, which never
            # covers a turn the request sends.
            if calls:
                assert user.fit_summary is not None
                summary = summaries[user.fit_summary]
                assert covered < summary.last_seq == (user.fit_left_out or [])[-1][1]
                covered = summary.last_seq
                sent = [seq_by_text.get(m["content"]) for m in sends[0] if m["role"] == "user"]
                assert all(seq > covered for seq in sent if seq is not None and seq > 1)
    assert stubbed >= 1, "older results were cleared at a move"
    assert covered >= (users[-1].fit_left_out or [])[-1][1] - 8, "the summary keeps up"
    stored = list(summaries.values())
    assert any(s.fallback for s in stored) and any(not s.fallback for s in stored)
    # The replays (stubs and tools included) were served from the engine's cache: all but
    # the previous answer and the instruction, which may quote turns.
    records = [r for r in upstream.cache_log if r.prompt_tokens]
    asked = upstream.requests
    assert len(records) == len(asked)
    for record, request in zip(records, asked, strict=True):
        if is_summary_call(request) and not is_fallback_call(request):
            assert record.cached_tokens >= 0.8 * record.prompt_tokens, record
            assert request["body"].get("tools"), "the tools of the request it replays"


async def test_a_replay_that_cannot_fit_falls_back_to_an_uncached_call(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    """Answers as long as the reserve, so the replayed request, its answer, the instruction
    and the summary cannot fit the window (as in a 2,048-token llama.cpp run): the call is
    a request of its own (the previous summary and the turns left out, cut to fit, code and
    numbers quoted with their turn), without the conversation's cache key, and its summary
    is stored and sent."""
    conversation = await chat.editor.create(OWNER, "summed")
    upstream.set_reply("The answer is 42 " * 200)  # cut at max_tokens: the whole reserve
    upstream.forget_requests()
    moved, _ = await until_a_move(chat, conversation.id, 0)
    calls = [r for r in upstream.requests if is_summary_call(r)]
    assert len(calls) == 1 and is_fallback_call(calls[0]), "the replay does not fit"
    asked = wire(calls[0])
    assert [m["role"] for m in asked] == ["system", "user"]
    assert "message 1:" in asked[1]["content"] and "(turn 12)" in asked[1]["content"]
    assert "prompt_cache_key" not in calls[0]["body"]
    sends = [r for r in upstream.requests if not is_summary_call(r)]
    assert all("prompt_cache_key" in r["body"] for r in sends)
    # The window holds the fallback request and its answer.
    assert upstream.count_chat(calls[0]["body"]["messages"]) + 200 <= 4096
    (summary,) = await chat.reader.summaries(OWNER, conversation.id)
    assert summary.fallback and summary.version == 1 and moved.fit_summary == 1
    assert summary.last_seq == (moved.fit_left_out or [])[-1][1]
    assert summary.prompt_tokens and summary.prompt_tokens > 0
    assert wire(upstream.requests[-1])[3]["content"] == f"{HEADING}\n\n{summary.content}"
    kinds = await chat.db.read(lambda session: list(session.exec(select(GatewayCall.kind)).all()))
    assert kinds.count("summary") == 1
    # The next move starts from it: the previous summary is in the next fallback request.
    upstream.forget_requests()
    again, _ = await until_a_move(chat, conversation.id, 40)
    (call,) = [r for r in upstream.requests if is_summary_call(r)]
    assert is_fallback_call(call) and summary.content in wire(call)[1]["content"]
    assert again.fit_summary == 2


@pytest.mark.settings(extra=SUMMARIZING + TOOLED, **SERVICE, rate_limit_messages=0)
async def test_a_tool_call_in_answer_to_the_replay_falls_back_to_the_uncached_call(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    """The replay offers the tools; quoting turns that asked for one ("please use tool",
    after a failed summary call), it is answered with a tool call (as the fake does): the
    move then makes the uncached call, without tools, and stores its summary."""
    conversation = await chat.editor.create(OWNER, "summed-tools")
    summaries: list[Any] = []
    failed, before = False, 0
    for index in range(40):
        ask = "please use tool. " if not failed else "no tools now. "
        text = f"message {index}: {ask}" + "lorem ipsum " * 40
        user, _ = await say(chat, conversation.id, text)
        summaries = await chat.reader.summaries(OWNER, conversation.id)
        if user.fit_cut_moved and summaries and not failed:
            upstream.fail_next(400)  # the next move's summary call fails: a gap
            failed, before = True, len(summaries)
            upstream.forget_requests()
        elif failed and len(summaries) > before:
            break
    assert failed and len(summaries) > before
    asked = [r for r in upstream.requests if is_summary_call(r)]
    replays = [r for r in asked if not is_fallback_call(r)]
    assert replays and all(r["body"].get("tools") for r in replays)
    assert any("please use tool" in wire(r)[-1]["content"] for r in replays)
    fallbacks = [r for r in asked if is_fallback_call(r)]
    assert fallbacks and not any(r["body"].get("tools") for r in fallbacks)
    assert summaries[-1].fallback
