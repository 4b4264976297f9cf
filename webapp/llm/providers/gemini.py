"""Google's Gemini API, spoken natively (`kind = "gemini"`).

The pipeline speaks OpenAI's message shapes; this module translates both ways:

- the system prompt goes to `systemInstruction`; turns become `contents` with the roles
  `user` and `model`; an assistant's tool calls become `functionCall` parts and the tool
  messages answering them `functionResponse` parts of one user content (a response
  names its function, so each tool message's call is looked up by its id); tool schemas
  become `functionDeclarations` (as JSON Schema, `parametersJsonSchema`);
- the answer's parts come back as text (thoughts left out) and OpenAI-shaped tool calls,
  `finishReason` as OpenAI's finish reasons, `usageMetadata` as usage with
  `cached_tokens` = `cachedContentTokenCount` (the prefix Gemini's implicit cache
  served);
- errors by their `status`: INVALID_ARGUMENT "The input token count (N) exceeds the
  maximum number of tokens allowed (M)" is `ContextLengthExceeded` with both numbers;
  RESOURCE_EXHAUSTED (429) is `RateLimited`, with the wait its RetryInfo names;
  UNAVAILABLE, INTERNAL and DEADLINE_EXCEEDED are `ProviderUnavailable`.

Streams are `:streamGenerateContent?alt=sse`: each event a whole response with the next
piece of text, the last with the finish reason and the usage. The key goes in
`x-goog-api-key` and is scrubbed from every error.
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
    Message,
    ProviderError,
    RateLimited,
    StreamChunk,
    Usage,
)
from webapp.llm.providers.http import ChatOnlyProvider, count_of, read_rest, refusal, retry_after
from webapp.llm.providers.openai import context_length_exceeded, is_context_length_message
from webapp.llm.providers.shapes import content_text, declared_functions, tool_arguments

__all__ = ["API_VERSION", "GeminiProvider", "to_gemini_request"]

API_VERSION = "v1beta"
"""The API version whose paths this module speaks."""

_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}

_UNAVAILABLE = frozenset({"UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "UNKNOWN"})
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _declarations(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        {**entry, "parametersJsonSchema": parameters} if parameters else entry
        for entry, parameters in declared_functions(tools)
    ]


def to_gemini_request(
    messages: list[Message],
    *,
    max_tokens: int | None,
    tools: list[dict[str, Any]] | None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """The generateContent body for an OpenAI-shaped transcript."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        text = content_text(message.get("content"))
        if role in ("system", "developer"):
            if text:
                system.append({"text": text})
            continue
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            part = {
                "functionResponse": {
                    "name": names.get(call_id, message.get("name") or "tool"),
                    "response": {"result": text},
                }
            }
            if contents and contents[-1].get("responses"):
                contents[-1]["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part], "responses": True})
            continue
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        parts += _pictures(message.get("content"))
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = str(function.get("name") or "")
                names[str(call.get("id") or "")] = name
                parts.append(
                    {
                        "functionCall": {
                            "name": name,
                            "args": tool_arguments(function.get("arguments")),
                        }
                    }
                )
        if not parts:
            continue  # an empty answer: Gemini refuses a content without parts
        contents.append({"role": "model" if role == "assistant" else "user", "parts": parts})
    for content in contents:
        content.pop("responses", None)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    if declarations := _declarations(tools):
        body["tools"] = [{"functionDeclarations": declarations}]
    generation: dict[str, Any] = {}
    if max_tokens is not None:
        generation["maxOutputTokens"] = max_tokens
    if temperature is not None:
        generation["temperature"] = temperature
    if generation:
        body["generationConfig"] = generation
    return body


def _usage(metadata: Any, earlier: Usage | None = None) -> Usage | None:
    if not isinstance(metadata, dict):
        return earlier
    prompt = count_of(metadata.get("promptTokenCount"))
    if prompt is None:
        return earlier
    completion = (count_of(metadata.get("candidatesTokenCount")) or 0) + (
        count_of(metadata.get("thoughtsTokenCount")) or 0
    )
    cached = count_of(metadata.get("cachedContentTokenCount"))
    return Usage(prompt, completion, cached if cached is not None and cached <= prompt else None)


def _pictures(content: Any) -> list[dict[str, Any]]:
    """OpenAI image parts given as data URLs, as Gemini's `inlineData` parts exactly as
    Google's SDK writes them (URL-safe base64, the type as `mime_type`; the API reads
    either spelling). A picture given by a web address has no inline form: left out."""
    pictures = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            media, _, data = url.removeprefix("data:").partition(";base64,")
            if url.startswith("data:") and data:
                safe = data.replace("+", "-").replace("/", "_")
                pictures.append({"inlineData": {"data": safe, "mime_type": media}})
    return pictures


def _parts(data: dict[str, Any]) -> tuple[list[Any], str | None]:
    """The first candidate's parts and its finish reason."""
    candidates = data.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return [], None
    candidate = candidates[0]
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    reason = candidate.get("finishReason")
    return parts if isinstance(parts, list) else [], reason if isinstance(reason, str) else None


def _answer_text(parts: list[Any]) -> str:
    return "".join(
        str(p.get("text") or "")
        for p in parts
        if isinstance(p, dict) and "text" in p and not p.get("thought")
    )


def _finish(reason: str | None, calls: bool) -> str | None:
    if reason is None:
        return None
    if calls and reason == "STOP":
        return "tool_calls"
    return _FINISH.get(reason, reason.lower())


class GeminiProvider(ChatOnlyProvider):
    """Gemini through `v1beta/models/{model}:generateContent` under `base_url` (the
    vendor's root, ``https://generativelanguage.googleapis.com``)."""

    CHAT_PATH = "v1beta/models/{model}:streamGenerateContent"

    def _auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    @staticmethod
    def _path(model_id: str, method: str) -> str:
        model = model_id.removeprefix("models/")
        return f"{API_VERSION}/models/{model}:{method}"

    def _where(self, path: str, model_id: str) -> str:
        return super()._where(path.replace("{model}", model_id.removeprefix("models/")), model_id)

    async def _chat(self, model_id: str, messages: list[Message], call: ChatCall) -> ChatResult:
        body = to_gemini_request(
            messages, max_tokens=call.room, tools=call.tools, temperature=call.temperature
        )
        path = self._path(model_id, "generateContent")
        data = await self._post_json(path, body, model_id, call.key)
        parts, reason = _parts(data)
        if not parts and reason is None:
            raise self._blocked(data, path, model_id)
        calls = [
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {
                    "name": part["functionCall"].get("name"),
                    "arguments": json.dumps(part["functionCall"].get("args") or {}),
                },
            }
            for index, part in enumerate(parts)
            if isinstance(part, dict) and isinstance(part.get("functionCall"), dict)
        ]
        return ChatResult(
            content=_answer_text(parts),
            finish_reason=_finish(reason, bool(calls)),
            usage=_usage(data.get("usageMetadata")),
            tool_calls=calls,
        )

    async def _stream_chat(
        self, model_id: str, messages: list[Message], call: ChatCall
    ) -> AsyncGenerator[StreamChunk, None]:
        """Text as each event brings it, then one chunk with the finish reason and the
        usage of the last event, once the body ends."""
        body = to_gemini_request(
            messages, max_tokens=call.room, tools=call.tools, temperature=call.temperature
        )
        path = self._path(model_id, "streamGenerateContent")
        yielded = False
        finish_reason: str | None = None
        usage: Usage | None = None
        try:
            async with self._streamed(
                path, body, model_id, call.sent, params={"alt": "sse"}, key=call.key
            ) as response:
                events = self._json_events(response, path, model_id, lambda: yielded)
                async for _, data in events:
                    if "error" in data:
                        error = self._error_from_payload(
                            None, data, httpx.Headers(), path, model_id
                        )
                        raise self._broke_off(path, model_id, error.message) if yielded else error
                    usage = _usage(data.get("usageMetadata"), usage)
                    parts, reason = _parts(data)
                    if not parts and reason is None and not yielded and "promptFeedback" in data:
                        raise self._blocked(data, path, model_id)
                    text = _answer_text(parts)
                    if text:
                        yielded = True
                        yield StreamChunk(text=text)
                    if reason is not None:
                        calls = any(isinstance(p, dict) and "functionCall" in p for p in parts)
                        finish_reason = _finish(reason, calls)
                        await read_rest(events)
                        break
                else:
                    raise self._cut_short(
                        model_id, yielded, "the stream ended without a finishReason"
                    )
        except httpx.HTTPError as exc:
            if finish_reason is None:
                raise self._stream_broke(exc, path, model_id, yielded) from None
        yield StreamChunk(finish_reason=finish_reason, usage=usage)

    async def embed(self, model_id: str, inputs: list[str]) -> list[list[float]]:
        if not inputs:
            return []
        model = f"models/{model_id.removeprefix('models/')}"
        body = {
            "requests": [
                {"model": model, "content": {"parts": [{"text": text}]}} for text in inputs
            ]
        }
        path = self._path(model_id, "batchEmbedContents")
        data = await self._post_json(path, body, model_id)
        try:
            vectors = [[float(x) for x in item["values"]] for item in data["embeddings"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise self._malformed(path, model_id, exc) from None
        if len(vectors) != len(inputs):
            raise self._malformed(
                path, model_id, ValueError(f"{len(vectors)} vectors for {len(inputs)} inputs")
            )
        return vectors

    # ---- the wire ----------------------------------------------------------------------

    def _blocked(self, data: dict[str, Any], path: str, model_id: str) -> ProviderError:
        feedback = data.get("promptFeedback")
        reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if reason is None:
            return self._malformed(path, model_id, ValueError("the answer has no candidates"))
        return ProviderError(
            f"{self._where(path, model_id)} blocked the prompt ({reason})",
            reason=f"refused the prompt ({str(reason).lower()})",
        )

    def _error_from_payload(
        self, status: int | None, payload: Any, headers: httpx.Headers, path: str, model_id: str
    ) -> ProviderError:
        if isinstance(payload, list) and payload:  # a stream without alt=sse: a JSON array
            payload = payload[0]
        error = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(error, dict):
            error = {}
        code = status if status is not None else count_of(error.get("code"))
        kind = error.get("status")
        raw = error.get("message") if error else payload
        message, text = self._answered(code, raw, path, model_id)
        if kind == "RESOURCE_EXHAUSTED" or code == 429:
            wait = retry_after(headers, message)
            for detail in error.get("details") or []:
                delay = detail.get("retryDelay") if isinstance(detail, dict) else None
                match = _DELAY.match(delay) if isinstance(delay, str) else None
                if match:
                    wait = float(match.group(1))
            return RateLimited(text, status=code, retry_after=wait)
        if is_context_length_message(message) and code not in (401, 403):
            return context_length_exceeded(text, code, message)
        return refusal(
            text,
            code,
            credentials=kind in ("UNAUTHENTICATED", "PERMISSION_DENIED")
            or "API key not valid" in message,
            unavailable=kind in _UNAVAILABLE,
        )
