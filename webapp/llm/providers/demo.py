"""The offline demo model: no network, no weights, and honest about it.

It answers by describing what it was sent (how many messages, the estimate,
the window, how many turns were left out), which is exactly what a new user
needs to see the bound at work. Its small window makes trimming visible after
a few minutes of chatting.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from webapp.llm.estimator import estimate_message, estimate_text
from webapp.llm.providers.base import (
    CallInfo,
    ChatCall,
    ChatResult,
    CompletionResult,
    Message,
    Provider,
    StreamChunk,
    Usage,
)


def _text_of(message: Message) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def describe(messages: list[Message], info: CallInfo | None) -> str:
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    said = " ".join(_text_of(last_user).split()) if last_user else ""
    if len(said) > 120:
        said = said[:117] + "..."
    lines = ["This is the offline **demo** model: no language model is answering, only a report."]
    turns = sum(1 for m in messages if m.get("role") == "user")
    sent = f"I was sent {len(messages)} messages ({turns} user turns)"
    if info is not None:
        sent += (
            f", about {info.estimated_tokens:,} tokens by estimate, for a "
            f"{info.window:,}-token window with a prompt budget of {info.budget:,}."
        )
        lines.append(sent)
        if info.dropped_turns:
            noun = "turn was" if info.dropped_turns == 1 else "turns were"
            lines.append(f"{info.dropped_turns} earlier {noun} left out to make room.")
        else:
            lines.append("Nothing was left out.")
    else:
        lines.append(sent + ".")
    if said:
        lines.append(f"You said: \u201c{said}\u201d")
    return "\n\n".join(lines)


class DemoProvider(Provider):
    """Streams its report word by word so the UI's streaming can be seen offline."""

    def __init__(self, word_delay: float = 0.02) -> None:
        self.word_delay = word_delay

    def _usage(self, messages: list[Message], reply: str) -> Usage:
        prompt = sum(estimate_message(m) for m in messages)
        return Usage(prompt_tokens=prompt, completion_tokens=estimate_text(reply))

    async def _chat(self, model_id: str, messages: list[Message], call: ChatCall) -> ChatResult:
        reply = describe(messages, call.info)
        return ChatResult(reply, "stop", self._usage(messages, reply))

    async def _stream_chat(
        self, model_id: str, messages: list[Message], call: ChatCall
    ) -> AsyncGenerator[StreamChunk, None]:
        if call.sent is not None:
            call.sent()
        reply = describe(messages, call.info)
        words = reply.split(" ")
        for index, word in enumerate(words):
            if self.word_delay:
                await asyncio.sleep(self.word_delay)
            yield StreamChunk(text=word if index == 0 else " " + word)
        yield StreamChunk(finish_reason="stop", usage=self._usage(messages, reply))

    async def complete(
        self, model_id: str, prompt: str, *, max_tokens: int | None = None
    ) -> CompletionResult:
        reply = (
            f"This is the offline demo model. Your prompt was about {estimate_text(prompt)} tokens."
        )
        usage = Usage(prompt_tokens=estimate_text(prompt), completion_tokens=estimate_text(reply))
        return CompletionResult(reply, "stop", usage)

    async def embed(self, model_id: str, inputs: list[str]) -> list[list[float]]:
        """A deterministic toy vector (lengths by script class); enough to exercise the path."""
        return [
            [float(len(text)), float(len(text.encode())), float(estimate_text(text))]
            for text in inputs
        ]

    async def aclose(self) -> None:
        return None
