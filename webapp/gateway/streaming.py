"""Chat answers in OpenAI's shapes: the whole answer, or chunks of a server-sent stream.

A stream is `data: {chunk}` events and a final `data: [DONE]`. The first chunk (the
assistant's role) and the last one (its finish_reason) carry the `webapp` object: the
fit is final before the first chunk, because the stream is opened only once the
pipeline has the first piece of the answer, after any fallback's re-fit. A failure
after that is sent as an `error` event and the stream ends without [DONE], which the
official client raises as an APIError.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from webapp.llm.providers.base import ChatResult, Usage
from webapp.web.events import frame

DONE = frame("[DONE]")


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def sse(data: dict[str, Any]) -> bytes:
    """One chunk of an OpenAI-style stream: a `data:` event of compact JSON."""
    return frame(json.dumps(data, separators=(",", ":")))


def usage_dict(usage: Usage | None) -> dict[str, Any] | None:
    """Usage in OpenAI's shape; what the engine's cache served is in its
    `prompt_tokens_details`, as OpenAI says it, when the engine said it."""
    if usage is None:
        return None
    shaped: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }
    if usage.cached_tokens is not None:
        shaped["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    return shaped


def answer_message(answer: ChatResult) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content or None}
    if answer.tool_calls:
        message["tool_calls"] = answer.tool_calls
    elif message["content"] is None:
        message["content"] = ""
    return message


_ID_PREFIXES = {"chat.completion": "chatcmpl", "text_completion": "cmpl"}


def whole_answer(
    kind: Literal["chat.completion", "text_completion"],
    model: str | None,
    choice: dict[str, Any],
    usage: Usage | None,
    webapp: dict[str, Any],
) -> dict[str, Any]:
    """A whole answer (not streamed) in OpenAI's shape, of a chat or of a raw prompt
    (`kind`, its `object`): its one choice, its usage, and the `webapp` report."""
    return {
        "id": new_id(_ID_PREFIXES[kind]),
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage_dict(usage),
        "webapp": webapp,
    }


def completion_body(
    model: str | None, answer: ChatResult, webapp: dict[str, Any]
) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": answer_message(answer),
        "logprobs": None,
        "finish_reason": answer.finish_reason,
    }
    return whole_answer("chat.completion", model, choice, answer.usage, webapp)


@dataclass
class Chunks:
    """Builds the chunks of one streamed answer; they share an id and a creation time."""

    model: str
    webapp: dict[str, Any]
    include_usage: bool
    ident: str = field(default_factory=lambda: new_id("chatcmpl"))
    created: int = field(default_factory=lambda: int(time.time()))

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        data: dict[str, Any] = {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        if self.include_usage and "usage" not in data:
            data["usage"] = None
        return sse(data)

    def delta(self, delta: dict[str, Any]) -> bytes:
        return self._chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def first(self) -> bytes:
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return self._chunk([choice], webapp=self.webapp)

    def last(self, finish_reason: str | None, usage: Usage | None) -> list[bytes]:
        """The finish_reason chunk, the usage chunk if asked for, and [DONE]."""
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}
        if usage is not None and usage.cached_tokens is not None:
            self.webapp["cached_tokens"] = usage.cached_tokens
        events = [self._chunk([choice], webapp=self.webapp)]
        if self.include_usage:
            events.append(self._chunk([], usage=usage_dict(usage)))
        events.append(DONE)
        return events


async def replay(chunks: Chunks, answer: ChatResult) -> AsyncIterator[bytes]:
    """A whole answer as a stream. The pipeline's stream carries text only, so a streamed
    call with tools is answered in one upstream call, then sent in OpenAI's chunk shapes
    (content, then each tool call with its `index`)."""
    yield chunks.first()
    if answer.content:
        yield chunks.delta({"content": answer.content})
    for index, call in enumerate(answer.tool_calls):
        yield chunks.delta({"tool_calls": [{"index": index, **call}]})
    for event in chunks.last(answer.finish_reason, answer.usage):
        yield event
