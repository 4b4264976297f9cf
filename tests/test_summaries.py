"""Summaries of what the cut left out (DESIGN 14), through the conversation service to the
fake upstream on SQLite and PostgreSQL: between moves each request, summary included, is
the previous one plus what was appended; the summary call replays the previous request and
its answer plus one instruction; edits, branches, pins, switches, slow or failed calls and
a summary that does not fit."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from tests.factories import OWNER, SERVICE, say
from tests.upstream import FakeUpstream
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Message
from webapp.llm.summaries import HEADING

SUMMARIZING = """
[[configurations]]
name = "summed"
model = "medium"
system_prompt = "You are a test model."
summarize = true
summary_max_tokens = 200

[[configurations]]
name = "plain"
model = "medium"
system_prompt = "You are a test model."
"""

pytestmark = pytest.mark.settings(extra=SUMMARIZING, **SERVICE, rate_limit_messages=0)

INSTRUCTION = "Before we go on:"


def wire(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": m["role"], "content": m["content"]} for m in request["body"]["messages"]]


def is_summary_call(request: dict[str, Any]) -> bool:
    return wire(request)[-1]["content"].startswith(INSTRUCTION)


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
    stored = (await chat.reader.get(OWNER, conversation.id)).id
    assert stored


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
