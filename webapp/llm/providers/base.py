"""The contract every provider speaks, so the send pipeline never looks at a wire format.

Errors are sorted by what the pipeline should do next: a retryable error lets a
fallback model try; a context-length error lets the bound tighten and re-fit;
anything else fails the call.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

Message = dict[str, Any]
"""A chat message as OpenAI's wire format spells it (role, content, tool_calls, tool_call_id)."""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None
    """Prompt tokens the engine served from its prompt cache; None when it does not say."""
    evaluated_tokens: int | None = None
    """Prompt tokens the engine says it evaluated (llama.cpp's `timings.prompt_n`,
    Anthropic's uncached input and cache writes); None when it does not say."""
    cache_write_tokens: int | None = None
    """Prompt tokens the engine says it wrote to its cache (Anthropic's
    `cache_creation_input_tokens`, OpenAI-style `cache_write_tokens`); None when it does not say."""

    @property
    def evaluated(self) -> int | None:
        """The prompt tokens evaluated: as the engine said, else the prompt less what it
        said its cache served; None when it said neither."""
        if self.evaluated_tokens is not None:
            return self.evaluated_tokens
        if self.cached_tokens is None:
            return None
        return max(self.prompt_tokens - self.cached_tokens, 0)


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A whole chat answer, as every provider reports it whatever its wire format: tool
    calls OpenAI-shaped, finish reasons OpenAI's."""

    content: str
    finish_reason: str | None
    usage: Usage | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Prefill:
    """How far the engine has read the prompt, before the answer's first token (llama.cpp
    streams it when asked: `return_progress`). `processed` counts the cached tokens too."""

    processed: int
    total: int
    cached: int

    def words(self) -> str:
        """As the page says it."""
        return (
            f"Reading the conversation: {self.processed:,} of {self.total:,} tokens, "
            f"{self.cached:,} from cache"
        )


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One piece of a streamed answer. Usage and finish_reason arrive on the last chunks;
    `progress`, on chunks of their own, before the first text."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    progress: Prefill | None = None


@dataclass(frozen=True, slots=True)
class CompletionResult:
    """The answer to a raw prompt (`complete`), for the gateway's completions route."""

    text: str
    finish_reason: str | None
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What the pipeline knows about a call; providers may report it (the demo does)."""

    model: str
    window: int
    budget: int
    estimated_tokens: int
    dropped_turns: int
    reserve: int | None = None
    """Room the bound left for the answer: a provider that must name `max_tokens` names it."""
    cache_marks: tuple[int, ...] = ()
    """Indices of the sent messages after which the prompt is a prefix later sends keep:
    the end of the head, and the end of the prompt (the next send of the branch appends
    to it while the cut holds). A provider with explicit prompt caching marks them."""
    cache_key: str | None = None
    """The conversation's key (`webapp.llm.affinity`), never its id: a provider sends it
    where its server takes one. Side calls (titles) have none."""


@dataclass(frozen=True, slots=True)
class ChatCall:
    """What a chat call asks beside its model and messages, as `Provider` hands it on."""

    max_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    info: CallInfo | None = None
    sent: Callable[[], None] | None = None
    """Called once the request is written to the engine's connection (streams only)."""
    temperature: float | None = None
    """None: the engine's default."""

    @property
    def key(self) -> str | None:
        """The conversation's cache key, when the call is one of its sends."""
        return self.info.cache_key if self.info is not None else None

    @property
    def room(self) -> int | None:
        """The answer's room: the call's `max_tokens`, else what the bound left for it
        (a vendor API that must name a maximum names this one)."""
        return self.max_tokens or (self.info.reserve if self.info is not None else None)


class ProviderError(Exception):
    """A provider call failed. `retryable` says whether another model may be tried.

    `message` is for the operator's log: it names the endpoint and quotes the provider.
    `reason` is what a user may read, said of the model ("is unavailable (HTTP 503)"):
    the kind of failure, without the address or the provider's words.
    """

    retryable: bool = False
    default_reason: str | None = None
    """The kind's own `reason` where the raiser names none; else it is said by the status."""

    def __init__(
        self, message: str, *, status: int | None = None, reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = (
            reason
            or self.default_reason
            or (f"failed (HTTP {status})" if status is not None else "failed")
        )

    def public(self, model: str) -> str:
        """The failure as a user may read it, naming the model by its catalog name."""
        return f"{model} {self.reason}."


class _Said(TypedDict, total=False):
    """`ProviderError`'s own keywords, which a kind with facts of its own passes on."""

    status: int | None
    reason: str | None


class ProviderUnavailable(ProviderError):
    """Connection refused, timeout or a 5xx: the model may work elsewhere or later."""

    retryable = True


class RateLimited(ProviderError):
    """HTTP 429. `retry_after` is in seconds when the provider said so."""

    retryable = True
    default_reason = "is rate-limited by its provider"

    def __init__(
        self, message: str, *, retry_after: float | None = None, **said: Unpack[_Said]
    ) -> None:
        super().__init__(message, **said)
        self.retry_after = retry_after


class ContextLengthExceeded(ProviderError):
    """The provider refused the prompt as too long.

    `prompt_tokens` and `limit` are filled when the provider's message names them,
    so the calibration can learn the real ratio instead of guessing.
    """

    default_reason = "refused the conversation as too long"

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int | None = None,
        limit: int | None = None,
        **said: Unpack[_Said],
    ) -> None:
        super().__init__(message, **said)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class ImageRefused(ProviderError):
    """The provider refused the request for the images it holds (a model that reads no
    images): the caller's to change, as a prompt too long is."""

    default_reason = "does not accept images"


_IMAGE_REFUSALS = re.compile(
    r"(does not|doesn't|do not|cannot|can't) (support|accept|take|read|process)\b.{0,40}"
    r"\b(images?|image input|vision|multimodal)\b|not a multimodal model"
    r"|image input is not supported|images? (are|is) not supported"
    r"|image(_url)? (input )?is only supported by",
    re.IGNORECASE,
)


def is_image_refusal(message: str) -> bool:
    """Whether a refused request's message (any vendor's words) says the model reads no
    images: Anthropic's "'claude-...' does not support image input.", vLLM's "... is not a
    multimodal model", OpenAI's "image_url is only supported by certain models", and the
    like."""
    return bool(_IMAGE_REFUSALS.search(message or ""))


class StreamBroken(ProviderError):
    """The stream ended without its final chunk, after some text may have arrived."""

    retryable = False


class Provider(abc.ABC):
    """What the send pipeline needs from a provider. `model_id` is the provider's own name.

    The chat calls' keywords are spelled here once: `chat` and `stream_chat` gather them
    into a `ChatCall` and hand it to the provider's `_chat` / `_stream_chat`, so a new
    option reaches every provider without each restating the signature. `stream_chat`
    returns the provider's own generator: no layer stands between it and each chunk.
    """

    async def chat(
        self,
        model_id: str,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        info: CallInfo | None = None,
        temperature: float | None = None,
    ) -> ChatResult:
        return await self._chat(
            model_id, messages, ChatCall(max_tokens, tools, info, temperature=temperature)
        )

    def stream_chat(
        self,
        model_id: str,
        messages: list[Message],
        *,
        max_tokens: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        info: CallInfo | None = None,
        sent: Callable[[], None] | None = None,
        temperature: float | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        """`sent` is called once the request is on its way to the engine (written to its
        connection): what comes before the first token from then on overlaps the
        engine's own work."""
        call = ChatCall(max_tokens, tools, info, sent, temperature)
        return self._stream_chat(model_id, messages, call)

    @abc.abstractmethod
    async def _chat(self, model_id: str, messages: list[Message], call: ChatCall) -> ChatResult:
        """The whole answer to `messages`."""

    @abc.abstractmethod
    def _stream_chat(
        self, model_id: str, messages: list[Message], call: ChatCall
    ) -> AsyncGenerator[StreamChunk, None]:
        """Text chunks as they arrive, then one last chunk with the finish reason and usage."""

    @abc.abstractmethod
    async def complete(
        self, model_id: str, prompt: str, *, max_tokens: int | None = None
    ) -> CompletionResult: ...

    @abc.abstractmethod
    async def embed(self, model_id: str, inputs: list[str]) -> list[list[float]]: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...
