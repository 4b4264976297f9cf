"""A provider for any OpenAI-compatible server: OpenAI, Ollama's /v1, vLLM, llama.cpp, LM Studio.

The pipeline only ever sees the error types of `base`, so this module's real work is
translating each server's way of failing into them:

- connection refused, timeouts and 5xx become `ProviderUnavailable` (a fallback may try);
- 429 becomes `RateLimited` with the server's Retry-After;
- "prompt too long", in whatever words the server uses, becomes `ContextLengthExceeded`
  with the token counts the message names, so the bound can tighten and re-fit;
- anything else (401, 403, 404, other 4xx) is a plain, non-retryable `ProviderError`.

A stream is checked before anything is yielded: an error that happens before the first
chunk is raised as one of the types above, so the caller can still fall back; once text
has been handed out, a broken or stalled stream is `StreamBroken`.

The API key is sent only in the Authorization header and is scrubbed from every error
message, because servers like to echo it back ("Incorrect API key provided: sk-...").
"""

from __future__ import annotations

import base64
import functools
import json
import re
import struct
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from webapp.llm.affinity import slot_for
from webapp.llm.providers.base import (
    ChatCall,
    ChatResult,
    CompletionResult,
    ContextLengthExceeded,
    Message,
    Prefill,
    ProviderError,
    RateLimited,
    StreamChunk,
    Usage,
)
from webapp.llm.providers.http import HTTPProvider, count_of, read_rest, refusal, retry_after
from webapp.llm.providers.shapes import content_text
from webapp.llm.providers.slots import EngineSlots

__all__ = [
    "OpenAIProvider",
    "context_length_exceeded",
    "is_context_length_message",
    "parse_context_length_message",
]

# --------------------------------------------------------------------------------------
# Context-length errors: recognising them and reading the numbers they name.
# --------------------------------------------------------------------------------------

_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
)

_CONTEXT_PHRASES = re.compile(
    r"context[ _]length"  # OpenAI, vLLM, Ollama ("exceeded max context length by N tokens")
    r"|context[ _]window"  # many hosted APIs
    r"|context size"  # llama.cpp ("exceeds the available context size"), LM Studio
    r"|context limit"
    r"|too many tokens"
    r"|maximum model length"  # vLLM ("longer than the maximum model length of N")
    r"|prompt (?:is )?too long"  # Ollama ("prompt too long; ..."), Anthropic-style proxies
    r"|input (?:is )?too long"
    r"|(?:input|prompt) length exceeds"  # Ollama embeddings
    r"|(?:exceeds?|exceeded) (?:the )?(?:model )?(?:max(?:imum)? )?(?:input )?token limit"
    r"|maximum number of tokens allowed"  # Gemini's OpenAI endpoint
    r"|tokens\)? is too long"  # vLLM ("Input prompt (5000 tokens) is too long and ...")
    r"|max_new_tokens`? must be <="  # TGI
    r"|range of input length should be",  # DashScope
    re.IGNORECASE,
)

_N = r"(\d[\d,]*)"
"""A token count; some servers print thousands separators."""

_PROMPT_PATTERNS = [
    # OpenAI (chat):  "(8000 in the messages, 500 in the functions, and 1000 in the completion)"
    # vLLM/DeepSeek:  "However, you requested 5000 tokens (4800 in the messages, 200 in the ..."
    re.compile(rf"\({_N} in the messages(?:, {_N} in the functions)?", re.IGNORECASE),
    # OpenAI (completions, embeddings): "(3975 in your prompt; 256 for the completion)"
    re.compile(rf"\({_N} in your prompt", re.IGNORECASE),
    # OpenAI (chat, no max_tokens): "However, your messages resulted in 9000 tokens."
    re.compile(rf"messages resulted in {_N} tokens", re.IGNORECASE),
    # vLLM (newer): "your request has 4800 input tokens"
    re.compile(rf"request has {_N} (?:input |prompt )?tokens", re.IGNORECASE),
    # llama.cpp: "request (4476 tokens) exceeds the available context size (4096 tokens)"
    # vLLM: "Input prompt (5000 tokens) is too long", Together: "The input (516368 tokens) ..."
    re.compile(rf"(?:request|prompt|input) \({_N} tokens\)", re.IGNORECASE),
    # vLLM: "The prompt (total length 25938) is too long", "The decoder prompt (length 5000)"
    re.compile(rf"prompt \((?:total )?length {_N}\)", re.IGNORECASE),
    # Mistral: "Prompt contains 40000 tokens"; others: "Prompt has 2000 tokens"
    re.compile(rf"prompt (?:contains|has) {_N} tokens", re.IGNORECASE),
    # Anthropic-style: "prompt is too long: 210000 tokens > 200000 maximum"
    re.compile(rf"too long: {_N} tokens", re.IGNORECASE),
    # Gemini: "The input token count (9000) exceeds the maximum number of tokens allowed (8192)"
    re.compile(rf"input token count \({_N}\)", re.IGNORECASE),
    # TGI: "Given: 4000 `inputs` tokens and 200 `max_new_tokens`"
    re.compile(rf"given: {_N} `?inputs`? tokens", re.IGNORECASE),
    # LM Studio: "Trying to keep the first 5000 tokens when context the overflows"
    re.compile(rf"keep the first {_N} tokens", re.IGNORECASE),
]

_LIMIT_PATTERNS = [
    # OpenAI, vLLM, DeepSeek: "maximum context length is 8192 tokens"
    re.compile(rf"maximum context length (?:is|of) {_N}", re.IGNORECASE),
    # Mistral: "too large for model with 32768 maximum context length"
    re.compile(rf"{_N} maximum context length", re.IGNORECASE),
    # llama.cpp "available context size (4096 tokens)", vLLM "(context length 4096)",
    # LM Studio "context length of only 4096 tokens", "configured context size is 1000 tokens"
    re.compile(
        rf"context (?:length|size|window)(?: is| of)?(?: only)? \(?{_N}(?: tokens)?",
        re.IGNORECASE,
    ),
    # vLLM: "longer than the maximum model length of 4096"
    re.compile(rf"maximum model length (?:is |of )?{_N}", re.IGNORECASE),
    # vLLM: "is too long and exceeds limit of 4096"
    re.compile(rf"exceeds (?:the )?limit of {_N}", re.IGNORECASE),
    # Gemini: "exceeds the maximum number of tokens allowed (8192)"
    re.compile(rf"maximum number of tokens allowed \({_N}\)", re.IGNORECASE),
    # Anthropic-style: "210000 tokens > 200000 maximum"
    re.compile(rf"> {_N} maximum", re.IGNORECASE),
    # TGI: "`inputs` tokens + `max_new_tokens` must be <= 4096"
    re.compile(rf"must be <= {_N}", re.IGNORECASE),
]


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def is_context_length_message(message: str, code: Any = None) -> bool:
    """Whether an error (its message, and its code or type if the server sent one) says
    the prompt did not fit the model's window."""
    if isinstance(code, str) and code.lower() in _CONTEXT_CODES:
        return True
    return bool(_CONTEXT_PHRASES.search(message or ""))


def parse_context_length_message(message: str) -> tuple[int | None, int | None]:
    """Return (prompt_tokens, limit) as far as the message names them, else None for each.

    The prompt count is the prompt alone (messages plus function schemas), never the
    prompt plus requested completion: it is what the calibration compares its estimate to.
    """
    prompt_tokens: int | None = None
    for pattern in _PROMPT_PATTERNS:
        match = pattern.search(message)
        if match:
            prompt_tokens = sum(_int(g) or 0 for g in match.groups())
            break
    limit: int | None = None
    for pattern in _LIMIT_PATTERNS:
        match = pattern.search(message)
        if match:
            limit = _int(match.group(1))
            break
    return prompt_tokens, limit


def context_length_exceeded(
    text: str,
    status: int | None,
    message: str,
    *,
    prompt_tokens: int | None = None,
    limit: int | None = None,
) -> ContextLengthExceeded:
    """A prompt refused as too long, with the numbers its message names (`prompt_tokens`
    and `limit` stand in for those it does not): every kind, once it has recognised the
    refusal, reports it so, and the bound learns the window from any of them."""
    named_prompt, named_limit = parse_context_length_message(message)
    return ContextLengthExceeded(
        text, status=status, prompt_tokens=named_prompt or prompt_tokens, limit=named_limit or limit
    )


# --------------------------------------------------------------------------------------
# Reading the wire format.
# --------------------------------------------------------------------------------------


def _cached_tokens(data: dict[str, Any]) -> int | None:
    """Prompt tokens a response or stream chunk says the engine served from its prompt
    cache: OpenAI's and vLLM's `usage.prompt_tokens_details.cached_tokens`, or llama.cpp's
    `timings.cache_n`. None when it says nothing, or nothing readable."""
    usage = data.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    if isinstance(details, dict) and count_of(details.get("cached_tokens")) is not None:
        return count_of(details["cached_tokens"])
    timings = data.get("timings")
    return count_of(timings.get("cache_n")) if isinstance(timings, dict) else None


def _ledger(data: dict[str, Any], earlier: Usage | None) -> tuple[int | None, int | None]:
    """(evaluated, written to the cache) as a response or chunk says them, else as said
    before: llama.cpp's `timings.prompt_n`, OpenAI-style
    `usage.prompt_tokens_details.cache_write_tokens`."""
    timings = data.get("timings")
    evaluated = count_of(timings.get("prompt_n")) if isinstance(timings, dict) else None
    usage = data.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    written = count_of(details.get("cache_write_tokens")) if isinstance(details, dict) else None
    if earlier is not None:
        evaluated = evaluated if evaluated is not None else earlier.evaluated_tokens
        written = written if written is not None else earlier.cache_write_tokens
    return evaluated, written


def _usage(data: dict[str, Any], earlier: Usage | None = None) -> Usage | None:
    """The usage a response or stream chunk reports, or `earlier` (what the stream said
    before) when it reports none. llama.cpp may send its timings and its usage in
    different chunks, so cached tokens said before are kept; and without a usage object
    its timings still give the prompt: what it had cached plus what it evaluated."""
    cached = _cached_tokens(data)
    if cached is None and earlier is not None:
        cached = earlier.cached_tokens
    evaluated, written = _ledger(data, earlier)
    reported = data.get("usage")
    timings = data["timings"] if isinstance(data.get("timings"), dict) else {}
    if isinstance(reported, dict) and "prompt_tokens" in reported:
        prompt = int(reported.get("prompt_tokens") or 0)
        completion = int(reported.get("completion_tokens") or 0)
    elif (hit := count_of(timings.get("cache_n"))) is not None and (
        evaluated := count_of(timings.get("prompt_n"))
    ) is not None:
        prompt, completion = hit + evaluated, count_of(timings.get("predicted_n")) or 0
    else:
        return earlier
    return Usage(
        prompt,
        completion,
        cached if cached is not None and cached <= prompt else None,
        evaluated if evaluated is not None and evaluated <= prompt else None,
        written if written is not None and written <= prompt else None,
    )


def _prefill(data: dict[str, Any]) -> Prefill | None:
    """llama.cpp's `prompt_progress` {total, cache, processed, time_ms} on a stream chunk
    before the first token, or None (absent, or counts that do not add up)."""
    progress = data.get("prompt_progress")
    if not isinstance(progress, dict):
        return None
    total, cached = count_of(progress.get("total")), count_of(progress.get("cache"))
    processed = count_of(progress.get("processed"))
    if total is None or cached is None or processed is None or not cached <= total:
        return None
    return Prefill(min(processed, total), total, cached)


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    return choices[0]


def _decode_embedding(value: Any) -> list[float]:
    """A vector as floats; `encoding_format: base64` answers pack little-endian float32."""
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return [float(x) for x in value]


def _error_parts(payload: Any) -> tuple[str | None, Any, Any, dict[str, Any]]:
    """(message, code, type, the error object) from the error shapes servers use:
    OpenAI/Ollama-v1/llama.cpp `{"error": {...}}`, Ollama-native `{"error": "..."}`,
    vLLM `{"object": "error", "message": ...}`, FastAPI `{"detail": ...}`."""
    if not isinstance(payload, dict):
        return None, None, None, {}
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error, None, None, {}
    if not isinstance(error, dict):
        return None, None, None, {}
    message = error.get("message")
    if message is None and "detail" in error:
        message = error["detail"]
    if message is not None and not isinstance(message, str):
        message = json.dumps(message)
    return message, error.get("code"), error.get("type"), error


class OpenAIProvider(HTTPProvider):
    """An OpenAI-compatible HTTP API, spoken through pooled `httpx.AsyncClient`s (shards).

    `base_url` includes the API prefix (e.g. ``http://127.0.0.1:11434/v1``); the endpoint
    paths are appended to it. `timeout` is the read timeout, i.e. the longest silence
    tolerated from the server (time to first token, or a gap inside a stream).
    `transport` exists for tests and unusual set-ups (a Unix socket, a mounted app).
    """

    @functools.cached_property
    def _slots(self) -> EngineSlots:
        """The server's slots, asked once (only a conversation's send asks)."""
        return EngineSlots(self.base_url)

    # ---- the four calls --------------------------------------------------------------

    async def _chat(self, model_id: str, messages: list[Message], call: ChatCall) -> ChatResult:
        body = self._chat_body(model_id, messages, call) | await self._keyed(call)
        path = "chat/completions"
        data = await self._post_json(path, body, model_id, call.key)
        return self._chat_result(data, path, model_id)

    async def _stream_chat(
        self, model_id: str, messages: list[Message], call: ChatCall
    ) -> AsyncGenerator[StreamChunk, None]:
        """Yield text chunks as they arrive, then one last chunk with finish_reason and usage.

        Usage usually comes after the finish_reason, in a chunk with no choices, so the
        last chunk is held back until `[DONE]` (or the end of the body).
        """
        body = self._chat_body(model_id, messages, call) | await self._keyed(call, stream=True)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        path = "chat/completions"
        yielded = False
        finish_reason: str | None = None
        usage: Usage | None = None
        try:
            async with self._streamed(path, body, model_id, call.sent, key=call.key) as response:
                if response.headers.get("content-type", "").startswith("application/json"):
                    # The server ignored "stream": it sent the whole answer at once.
                    await response.aread()
                    result = self._chat_result(
                        self._json_body(response, path, model_id), path, model_id
                    )
                    if result.content:
                        yield StreamChunk(text=result.content)
                    yield StreamChunk(finish_reason=result.finish_reason, usage=result.usage)
                    return
                events = self._sse_data(response, path, model_id)
                async for data in events:
                    if data == "[DONE]":
                        await read_rest(events)
                        break
                    event = self._stream_event(data, path, model_id, yielded)
                    if (read := _prefill(event)) is not None:
                        yield StreamChunk(progress=read)
                    usage = _usage(event, usage)
                    choices = event.get("choices") or []
                    if not choices or not isinstance(choices[0], dict):
                        continue  # the usage-only chunk, or a keep-alive
                    choice = choices[0]
                    delta = choice.get("delta") or {}
                    text = content_text(delta.get("content")) if isinstance(delta, dict) else ""
                    # Tool-call and reasoning deltas carry no answer text; skipped.
                    if text:
                        yielded = True
                        yield StreamChunk(text=text)
                    finish_reason = choice.get("finish_reason") or finish_reason
                else:
                    # The body ended cleanly but without [DONE]: complete only if the
                    # server had already said why it stopped.
                    if finish_reason is None:
                        raise self._cut_short(model_id, yielded, "the stream ended without [DONE]")
        except httpx.HTTPError as exc:
            if finish_reason is None:  # else the answer was complete; only its trailer is lost
                raise self._stream_broke(exc, path, model_id, yielded) from None
        yield StreamChunk(finish_reason=finish_reason, usage=usage)

    async def complete(
        self, model_id: str, prompt: str, *, max_tokens: int | None = None
    ) -> CompletionResult:
        body: dict[str, Any] = {"model": model_id, "prompt": prompt}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        data = await self._post_json("completions", body, model_id)
        try:
            choice = _first_choice(data)
            return CompletionResult(
                text=content_text(choice.get("text")),
                finish_reason=choice.get("finish_reason"),
                usage=_usage(data),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise self._malformed("completions", model_id, exc) from None

    async def embed(self, model_id: str, inputs: list[str]) -> list[list[float]]:
        """One vector per input, in input order (sorted by `index`: not every server keeps
        the order of its answer)."""
        if not inputs:
            return []
        data = await self._post_json("embeddings", {"model": model_id, "input": inputs}, model_id)
        try:
            items = data["data"]
            ordered = sorted(enumerate(items), key=lambda pair: pair[1].get("index", pair[0]))
            vectors = [_decode_embedding(item["embedding"]) for _, item in ordered]
        except (KeyError, TypeError, ValueError, AttributeError, struct.error) as exc:
            raise self._malformed("embeddings", model_id, exc) from None
        if len(vectors) != len(inputs):
            raise ProviderError(
                f"{self._where('embeddings', model_id)} returned {len(vectors)} vectors "
                f"for {len(inputs)} inputs",
                reason="sent an answer this app cannot read",
            )
        return vectors

    # ---- requests --------------------------------------------------------------------

    @staticmethod
    def _chat_body(model_id: str, messages: list[Message], call: ChatCall) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model_id, "messages": messages}
        if call.max_tokens is not None:
            body["max_tokens"] = call.max_tokens
        if call.temperature is not None:
            body["temperature"] = call.temperature
        if call.tools:
            body["tools"] = call.tools
        return body

    async def _keyed(self, call: ChatCall, *, stream: bool = False) -> dict[str, Any]:
        """What a conversation's send adds to its body (side calls add nothing): its key,
        as `id_slot` for llama.cpp (its cache is per slot) and `prompt_cache_key` for
        other servers, unless the catalog turned keys off; and, on llama.cpp streams,
        `return_progress`, so the prefill can be shown."""
        if call.key is None:
            return {}
        slots = await self._slots.count(self._clients, self._affinity.slots)
        fields: dict[str, Any] = {}
        if self._affinity.in_body:
            key = (
                {"id_slot": slot_for(call.key, slots)} if slots else {"prompt_cache_key": call.key}
            )
            fields |= key
        if slots and stream:
            fields["return_progress"] = True
        return fields

    def _json_body(self, response: httpx.Response, path: str, model_id: str) -> dict[str, Any]:
        data = super()._json_body(response, path, model_id)
        if "error" in data and "choices" not in data and "data" not in data:
            # Some servers report a failure inside a 200.
            raise self._error_from_payload(None, data, response.headers, path, model_id)
        return data

    def _chat_result(self, data: dict[str, Any], path: str, model_id: str) -> ChatResult:
        try:
            choice = _first_choice(data)
            message = choice.get("message") or {}
            return ChatResult(
                content=content_text(message.get("content")),
                finish_reason=choice.get("finish_reason"),
                usage=_usage(data),
                tool_calls=list(message.get("tool_calls") or []),
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise self._malformed(path, model_id, exc) from None

    def _sse_data(self, response: httpx.Response, path: str, model_id: str) -> AsyncIterator[str]:
        """The `data` of each server-sent event, read by httpx-sse: it joins an event's data
        lines and drops comments, which servers send as keep-alives.

        An event with no data (a bare `id:` or `retry:`) carries no chunk and is skipped.
        """
        events = self._event_stream(response, path, model_id)
        return (event.data async for event in events if event.data)

    def _stream_event(self, data: str, path: str, model_id: str, yielded: bool) -> dict[str, Any]:
        """One stream event as JSON; an error event becomes the matching error."""
        try:
            event = json.loads(data)
        except ValueError:
            raise self._cut_short(
                model_id, yielded, f"a stream event is not JSON: {self._snippet(data)!r}"
            ) from None
        if not isinstance(event, dict):
            raise self._cut_short(model_id, yielded, "a stream event is not an object")
        if "error" in event:
            message, code, _, _ = _error_parts(event)
            status = code if isinstance(code, int) else None
            if yielded:
                raise self._broke_off(path, model_id, message or "an error event", status)
            raise self._error_from_payload(status, event, httpx.Headers(), path, model_id)
        return event

    # ---- errors ----------------------------------------------------------------------

    def _error_from_payload(
        self, status: int | None, payload: Any, headers: httpx.Headers, path: str, model_id: str
    ) -> ProviderError:
        message, code, kind, error = _error_parts(payload)
        if message is None:
            message = payload if isinstance(payload, str) else ""
        message, text = self._answered(status, message, path, model_id)

        if status == 429 or code == "rate_limit_exceeded":
            return RateLimited(text, status=status, retry_after=retry_after(headers, message))
        if status not in (401, 403) and (
            is_context_length_message(message, code) or is_context_length_message("", kind)
        ):
            # llama.cpp names the numbers as fields besides the message.
            return context_length_exceeded(
                text,
                status,
                message,
                prompt_tokens=_as_int(error.get("n_prompt_tokens")),
                limit=_as_int(error.get("n_ctx")),
            )
        return refusal(text, status, unavailable=status == 408)


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
