"""A Gemini prompt as Gemini checks and counts it (tools, system instruction, each
content's parts), its implicit cache, and the embeddings of the embedding model, which
counts its parts the same way."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.vendors.cache import CacheEvent
from tests.vendors.controls import Controls
from tests.vendors.faults import _Invalid
from tests.vendors.media import gemini_picture_tokens, inline_picture
from tests.vendors.rules import BLOCK_FRAME, EMBEDDING_SIZE, MESSAGE_FRAME


class GeminiPrompt(Controls):
    """How the fake reads a Gemini prompt or embedding request."""

    def _gemini_tokens(self, body: dict[str, Any]) -> list[list[int]]:
        """The prompt as token runs, one per entry (tools, system, each content), checked
        the way the Gemini API checks a request."""
        runs: list[list[int]] = []
        declarations: list[Any] = []
        for tool in body.get("tools") or []:
            if not isinstance(tool, dict):
                raise _Invalid("Invalid value at 'tools'")
            declarations += (
                tool.get("functionDeclarations") or tool.get("function_declarations") or []
            )
        if declarations:
            runs.append(self._vocabulary.encode(json.dumps(declarations)))
        system = body.get("systemInstruction") or body.get("system_instruction")
        if system is not None:
            if not isinstance(system, dict) or not isinstance(system.get("parts"), list):
                raise _Invalid("Invalid value at 'system_instruction'")
            runs.append(
                [1] * MESSAGE_FRAME + self._parts_tokens(system["parts"], "system_instruction")
            )
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise _Invalid("* GenerateContentRequest.contents: contents is not specified")
        for number, content in enumerate(contents):
            if not isinstance(content, dict):
                raise _Invalid(f"Invalid value at 'contents[{number}]'")
            role = content.get("role", "user")
            if role not in ("user", "model"):
                raise _Invalid("Please use a valid role: user, model.")
            parts = content.get("parts")
            if not isinstance(parts, list) or not parts:
                raise _Invalid(
                    f"* GenerateContentRequest.contents[{number}].parts: contents.parts must not "
                    "be empty."
                )
            runs.append(
                self._vocabulary.encode(role)[:1] * MESSAGE_FRAME
                + self._parts_tokens(parts, f"contents[{number}]")
            )
        return runs

    def _parts_tokens(self, parts: list[Any], where: str) -> list[int]:
        tokens: list[int] = []
        for index, part in enumerate(parts):
            if not isinstance(part, dict):
                raise _Invalid(f"Invalid value at '{where}.parts[{index}]'")
            if "text" in part:
                tokens += self._vocabulary.encode(str(part["text"]))
            elif "functionCall" in part or "function_call" in part:
                call = part.get("functionCall") or part.get("function_call") or {}
                tokens += [2] * BLOCK_FRAME + self._vocabulary.encode(
                    str(call.get("name")) + json.dumps(call.get("args") or {})
                )
            elif "inlineData" in part or "inline_data" in part:
                inline = part.get("inlineData") or part.get("inline_data") or {}
                tokens += [4] * gemini_picture_tokens(
                    inline_picture(inline, f"GenerateContentRequest.{where}.parts[{index}]")
                )
            elif "functionResponse" in part or "function_response" in part:
                answer = part.get("functionResponse") or part.get("function_response") or {}
                tokens += [3] * BLOCK_FRAME + self._vocabulary.encode(
                    str(answer.get("name")) + json.dumps(answer.get("response") or {})
                )
            else:
                raise _Invalid(
                    f"* GenerateContentRequest.{where}.parts[{index}].data: required oneof field "
                    "'data' must have one initialized field"
                )
        return tokens

    def _gemini_cached(self, model: str, prompt: list[int]) -> int:
        """Implicit caching: the longest prefix shared with an earlier prompt of the
        model, when it is long enough to have been cached."""
        with self._lock:
            earlier = self._gemini_cache.setdefault(model, [])
            best = 0
            for tokens in earlier:
                shared = 0
                for a, b in zip(tokens, prompt, strict=False):
                    if a != b:
                        break
                    shared += 1
                best = max(best, shared)
            earlier.append(prompt)
            del earlier[:-4]
            cached = best if best >= self.min_cacheable else 0
            self._cache_log.append(CacheEvent("gemini", model, len(prompt), cached, 0))
        return cached

    def _gemini_embeddings(
        self, model: str, method: str, body: dict[str, Any], limit: int
    ) -> dict[str, Any]:
        """`{"embedding": {"values"}}` for embedContent, `{"embeddings": [...]}` in request
        order for batchEmbedContents, whose every request names the path's model."""
        batch = method == "batchEmbedContents"
        requests = body.get("requests") if batch else [body]
        if not isinstance(requests, list) or not requests:
            raise _Invalid("* BatchEmbedContentsRequest.requests: requests is not specified")
        vectors = []
        for number, request in enumerate(requests):
            where = f"requests[{number}]" if batch else "content"
            if not isinstance(request, dict):
                raise _Invalid(f"Invalid value at '{where}'")
            if batch and str(request.get("model", "")).removeprefix("models/") != model:
                raise _Invalid(
                    f"* BatchEmbedContentsRequest.{where}.model: the model of each request "
                    f"must be the batch's, models/{model}"
                )
            content = request.get("content")
            if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
                raise _Invalid(f"* EmbedContentRequest.{where}.content: content is not specified")
            tokens = self._parts_tokens(content["parts"], f"{where}.content")
            if len(tokens) > limit:
                raise _Invalid(
                    f"The input token count ({len(tokens)}) exceeds the maximum number of "
                    f"tokens allowed ({limit})."
                )
            config = request.get("embedContentConfig") or {}
            size = request.get("outputDimensionality") or config.get("outputDimensionality")
            vectors.append({"values": _vector(tokens, size or EMBEDDING_SIZE)})
        return {"embeddings": vectors} if batch else {"embedding": vectors[0]}


def _vector(tokens: list[int], size: int) -> list[float]:
    """A deterministic unit-length vector of the tokens: equal texts embed equal."""
    digest = hashlib.sha256(json.dumps(tokens).encode()).digest()
    raw = [digest[i % len(digest)] / 255 - 0.5 for i in range(size)]
    norm = sum(x * x for x in raw) ** 0.5 or 1.0
    return [round(x / norm, 6) for x in raw]
