"""Anthropic's Messages API, spoken natively (`kind = "anthropic"`).

The pipeline speaks OpenAI's message shapes; this module translates both ways:

- the system prompt goes to the top-level `system`; turns become content blocks; an
  assistant's tool calls become `tool_use` blocks and the tool messages answering them
  one user message of `tool_result` blocks (the API wants every result of a turn's
  calls in the message right after it); a request that declares no tools tells them as
  text instead (the API refuses those blocks without tools);
- the answer's blocks come back as text and OpenAI-shaped tool calls, its `stop_reason`
  as OpenAI's finish reasons, its usage with the prompt counted whole (Anthropic bills
  `input_tokens`, `cache_creation_input_tokens` and `cache_read_input_tokens` apart) and
  `cached_tokens` = the cache reads, `cache_write_tokens` the cache writes and
  `evaluated_tokens` the writes and the uncached input;
- errors by their `type`: `invalid_request_error` "prompt is too long: N tokens > M
  maximum" is `ContextLengthExceeded` with both numbers (the bound learns the window);
  `overloaded_error` (529) and `api_error` are `ProviderUnavailable`, `rate_limit_error`
  (429) is `RateLimited` with its `retry-after`; an `error` event inside a stream is
  mapped the same way before any text, and is `StreamBroken` after.

Prompt caching: the call's `cache_marks` (the end of the head, and the end of the
prompt, which the next send of the same branch keeps as its prefix while the cut holds)
get `cache_control` breakpoints, so a pure append reads the whole previous prompt from
the cache and a moved cut still reads the head.

The key goes in `x-api-key`, with `anthropic-version`; it is scrubbed from every error.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from webapp.llm.providers.base import (
    ChatCall,
    ChatResult,
    ContextLengthExceeded,
    Message,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    StreamChunk,
    Usage,
)
from webapp.llm.providers.http import ChatOnlyProvider, count_of, read_rest, refusal, retry_after
from webapp.llm.providers.openai import context_length_exceeded, is_context_length_message
from webapp.llm.providers.shapes import content_text, declared_functions, tool_arguments

__all__ = ["API_VERSION", "AnthropicProvider", "to_messages_request"]

API_VERSION = "2023-06-01"
"""The `anthropic-version` this module speaks: the Messages API as it is documented."""

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` is required by the API; used when neither the call nor the bound says."""

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

_INPUT_AND_MAX = re.compile(r"(\d[\d,]*) \+ (\d[\d,]*) > (\d[\d,]*)")
""""input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000"."""

EPHEMERAL = {"type": "ephemeral"}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """OpenAI message content as Anthropic content blocks: text (empty text dropped, the
    API refuses it) and images given as data URLs."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, dict):
            text = str(part)
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            media, _, data = url.removeprefix("data:").partition(";base64,")
            if data:
                source = {"type": "base64", "media_type": media, "data": data}
            else:
                source = {"type": "url", "url": url}
            blocks.append({"type": "image", "source": source})
            continue
        else:
            text = str(part.get("text") or "")
        if text.strip():
            blocks.append({"type": "text", "text": text})
    return blocks


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        {**entry, "input_schema": parameters or {"type": "object", "properties": {}}}
        for entry, parameters in declared_functions(tools)
    ]


def _mark(message: dict[str, Any]) -> None:
    """A cache breakpoint on the message's last block."""
    if message["content"]:
        message["content"][-1] = {**message["content"][-1], "cache_control": EPHEMERAL}


def to_messages_request(
    model_id: str,
    messages: list[Message],
    *,
    max_tokens: int,
    tools: list[dict[str, Any]] | None = None,
    cache_marks: tuple[int, ...] = (),
) -> dict[str, Any]:
    """The Messages API body for an OpenAI-shaped transcript; `cache_marks` are indices
    into `messages` whose end gets a cache breakpoint."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    marked: list[dict[str, Any]] = []
    # The API refuses `tool_use` and `tool_result` blocks in a request that declares no
    # tools (a tool loop's last step, a conversation whose tools are gone): then earlier
    # calls and results are told as text.
    declared = _tools(tools)
    if not declared:
        messages = [_as_text(message) for message in messages]
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            system += _blocks(message.get("content"))
            if index in cache_marks and system:
                marked.append({"content": system})
            continue
        if role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id") or ""),
                "content": _blocks(message.get("content")) or "(empty)",
            }
            if turns and turns[-1]["role"] == "user" and turns[-1].get("results"):
                turns[-1]["content"].append(result)
            else:
                turns.append({"role": "user", "content": [result], "results": True})
        else:
            blocks = _blocks(message.get("content"))
            if role == "assistant":
                for call in message.get("tool_calls") or []:
                    function = call.get("function") or {}
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": str(call.get("id") or ""),
                            "name": str(function.get("name") or ""),
                            "input": tool_arguments(function.get("arguments")),
                        }
                    )
            if not blocks:
                continue  # an empty answer: the API refuses empty content
            side = "assistant" if role == "assistant" else "user"
            if turns and turns[-1]["role"] == side and side == "user":
                turns[-1]["content"] += blocks  # a user turn after tool results: one message
            else:
                turns.append({"role": side, "content": blocks})
        if index in cache_marks:
            marked.append(turns[-1])
    for turn in turns:
        turn.pop("results", None)
    for target in marked:
        _mark(target)
    body: dict[str, Any] = {"model": model_id, "max_tokens": max_tokens, "messages": turns}
    if system:
        body["system"] = system
    if declared:
        body["tools"] = declared
    return body


def _as_text(message: Message) -> Message:
    """A tool call or result as plain text (for a request that declares no tools)."""
    if message.get("role") == "tool":
        name = message.get("name") or "tool"
        said = content_text(message.get("content"))
        return {"role": "user", "content": f"[result of {name}]\n{said}"}
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    lines = [content_text(message.get("content"))] if message.get("content") else []
    for call in calls:
        function = call.get("function") or {}
        lines.append(f"[called {function.get('name')} with {function.get('arguments')}]")
    return {"role": "assistant", "content": "\n".join(lines)}


def _usage(reported: Any, earlier: Usage | None = None) -> Usage | None:
    """The usage of a message (or a stream's running usage over `earlier`): the prompt is
    the sum of its uncached, cache-written and cache-read parts."""
    if not isinstance(reported, dict):
        return earlier
    base = earlier or Usage(0, 0, None)
    parts = [count_of(reported.get(key)) for key in ("input_tokens", "cache_creation_input_tokens")]
    read = count_of(reported.get("cache_read_input_tokens"))
    if all(part is None for part in parts) and read is None:
        prompt, cached = base.prompt_tokens, base.cached_tokens
        evaluated, written = base.evaluated_tokens, base.cache_write_tokens
    else:
        prompt = sum(part or 0 for part in parts) + (read or 0)
        cached = read if read is not None else None
        evaluated, written = sum(part or 0 for part in parts), parts[1]
    completion = count_of(reported.get("output_tokens"))
    completion = completion if completion is not None else base.completion_tokens
    return Usage(prompt, completion, cached, evaluated, written)


def _tool_calls(blocks: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))},
        }
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]


class AnthropicProvider(ChatOnlyProvider):
    """Claude through `POST /v1/messages` under `base_url` (the vendor's root,
    ``https://api.anthropic.com``)."""

    CHAT_PATH = "v1/messages"

    def _auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    @staticmethod
    def _body(model_id: str, messages: list[Message], call: ChatCall) -> dict[str, Any]:
        marks = call.info.cache_marks if call.info is not None else ()
        body = to_messages_request(
            model_id,
            messages,
            max_tokens=call.room or DEFAULT_MAX_TOKENS,
            tools=call.tools,
            cache_marks=marks,
        )
        if call.temperature is not None:  # the API takes 0 to 1; a preset may say up to 2
            body["temperature"] = min(call.temperature, 1.0)
        return body

    async def _chat(self, model_id: str, messages: list[Message], call: ChatCall) -> ChatResult:
        body = self._body(model_id, messages, call)
        data = await self._post_json(self.CHAT_PATH, body, model_id, call.key)
        content = data.get("content")
        if not isinstance(content, list):
            raise self._malformed(self.CHAT_PATH, model_id, ValueError("the answer has no content"))
        text = "".join(
            str(b.get("text") or "")
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
        return ChatResult(
            content=text,
            finish_reason=_FINISH.get(str(data.get("stop_reason")), data.get("stop_reason")),
            usage=_usage(data.get("usage")),
            tool_calls=_tool_calls(content),
        )

    async def _stream_chat(
        self, model_id: str, messages: list[Message], call: ChatCall
    ) -> AsyncGenerator[StreamChunk, None]:
        """Text as `text_delta`s arrive, then one chunk with the finish reason and usage
        (`message_start` says the prompt, `message_delta` the output), after
        `message_stop`."""
        body = self._body(model_id, messages, call)
        body["stream"] = True
        path = self.CHAT_PATH
        yielded = False
        finish_reason: str | None = None
        usage: Usage | None = None
        stopped = False
        try:
            async with self._streamed(path, body, model_id, call.sent, key=call.key) as response:
                events = self._json_events(response, path, model_id, lambda: yielded)
                async for name, event in events:
                    kind = event.get("type", name)
                    if kind == "message_start":
                        usage = _usage((event.get("message") or {}).get("usage"), usage)
                    elif kind == "content_block_delta":
                        delta = event.get("delta") or {}
                        text = delta.get("text") if delta.get("type") == "text_delta" else None
                        if isinstance(text, str) and text:
                            yielded = True
                            yield StreamChunk(text=text)
                    elif kind == "message_delta":
                        reason = (event.get("delta") or {}).get("stop_reason")
                        finish_reason = _FINISH.get(str(reason), reason) or finish_reason
                        usage = _usage(event.get("usage"), usage)
                    elif kind == "error":
                        raise self._stream_error(event, path, model_id, yielded)
                    elif kind == "message_stop":
                        stopped = True
                        await read_rest(events)
                        break
                if not stopped:
                    raise self._cut_short(
                        model_id, yielded, "the stream ended without message_stop"
                    )
        except httpx.HTTPError as exc:
            if not stopped:
                raise self._stream_broke(exc, path, model_id, yielded) from None
        yield StreamChunk(finish_reason=finish_reason, usage=usage)

    async def embed(self, model_id: str, inputs: list[str]) -> list[list[float]]:
        raise ProviderError(
            f"{self._where('embeddings', model_id)}: Anthropic serves no embeddings",
            reason="serves no embeddings",
        )

    # ---- the wire ----------------------------------------------------------------------

    def _stream_error(
        self, event: dict[str, Any], path: str, model_id: str, yielded: bool
    ) -> ProviderError:
        error = self._error_from_payload(None, event, httpx.Headers(), path, model_id)
        return self._broke_off(path, model_id, error.message) if yielded else error

    def _error_from_payload(
        self, status: int | None, payload: Any, headers: httpx.Headers, path: str, model_id: str
    ) -> ProviderError:
        error = payload.get("error") if isinstance(payload, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        raw = error.get("message") if isinstance(error, dict) else payload
        message, text = self._answered(status, raw, path, model_id)
        if kind == "rate_limit_error" or status == 429:
            return RateLimited(text, status=status, retry_after=retry_after(headers, message))
        if kind == "overloaded_error" or status == 529:
            return ProviderUnavailable(text, status=status, reason="is overloaded (HTTP 529)")
        if kind == "request_too_large" or status == 413:
            return ContextLengthExceeded(text, status=status)
        if kind == "invalid_request_error" and is_context_length_message(message):
            both = _INPUT_AND_MAX.search(message)
            if not both:
                return context_length_exceeded(text, status, message)
            prompt_tokens = int(both.group(1).replace(",", ""))
            limit = int(both.group(3).replace(",", ""))
            return ContextLengthExceeded(
                text, status=status, prompt_tokens=prompt_tokens, limit=limit
            )
        return refusal(
            text,
            status,
            credentials=kind in ("authentication_error", "permission_error"),
            unavailable=kind in ("api_error", "timeout_error"),
            shown=status or (401 if kind == "authentication_error" else 403),
        )
