"""The model manager on its own: long transcripts, and what a stream said."""

from __future__ import annotations

from typing import Any

from webapp.llm.manager import Finished, Fitted, LLMManager, StreamEvent
from webapp.llm.window import Transcript

CALLER = "user:1"
"""Whose sends the manager's tests make: what they teach is this caller's own figure."""


def long_transcript(turns: int, words: int = 30) -> Transcript:
    """A system prompt and `turns` exchanges of about `words` words each, then a question."""
    messages = [{"role": "system", "content": "You are terse."}]
    for index in range(turns):
        messages.append({"role": "user", "content": f"question {index}: " + "lorem " * words})
        messages.append({"role": "assistant", "content": f"answer {index}: " + "ipsum " * words})
    messages.append({"role": "user", "content": "What was the first question?"})
    return Transcript(messages)


async def collect(
    manager: LLMManager,
    configuration: str,
    transcript: Transcript,
    caller: str = CALLER,
    **kw: Any,
) -> list[StreamEvent]:
    """Every fit in the order it was made (the plan's first), then what the stream said."""
    plan = manager.plan(manager.route(configuration), transcript, caller=caller, **kw)
    return [Fitted(plan.fit)] + [event async for event in manager.stream(plan)]


def finished(events: list[StreamEvent]) -> Finished:
    """How a stream ended: its last event, which must say so."""
    assert isinstance(events[-1], Finished), events[-1]
    return events[-1]
