"""/v1/completions and /v1/embeddings: prompts echoed, texts embedded as deterministic
unit vectors (in reverse order, each with its index)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import struct
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from tests.upstream.admission import Admission
from tests.upstream.faults import _error
from tests.upstream.vocab import EMBEDDING_DIMENSIONS


def _embedding(text: str) -> list[float]:
    """A deterministic unit vector derived from the text's hash."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(b - 127.5) / 127.5 for b in digest[:EMBEDDING_DIMENSIONS]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


class CompletionEndpoints(Admission):
    """/v1/completions and /v1/embeddings."""

    async def _completions(self, request: Request) -> JSONResponse:
        generation = self._generation
        admitted = await self._admit(request)
        if isinstance(admitted, JSONResponse):
            return admitted
        body, model, window = admitted
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return _error(400, "'prompt' must be a string (in this fake).", param="prompt")
        if body.get("stream"):
            return _error(400, "Streaming completions are not supported by this fake.")
        max_tokens = body.get("max_tokens")
        tokens = self._vocab().encode(prompt)
        if len(tokens) + (max_tokens or 0) > window:
            return self._prompt_overflow(window, len(tokens), max_tokens or 0)
        engine = self.engine
        prefill = self._prefill(model, tokens, generation)
        text, completion_tokens, finish = self._reply_text(
            f"Echo from {model}: prompt said: {prompt[:40]}", max_tokens
        )
        if prefill.seconds:
            await asyncio.sleep(prefill.seconds)
        answer: dict[str, Any] = {
            "id": f"cmpl-{self._next_id()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
            "usage": self._usage(engine, prefill, completion_tokens),
        }
        if engine == "llamacpp":
            answer["timings"] = self._timings(prefill, completion_tokens, 0.0)
        return JSONResponse(answer)

    @staticmethod
    def _prompt_overflow(window: int, prompt_tokens: int, completion: int) -> JSONResponse:
        """OpenAI's wording for completions and embeddings, which differs from chat's."""
        return _error(
            400,
            f"This model's maximum context length is {window} tokens, however you requested "
            f"{prompt_tokens + completion} tokens ({prompt_tokens} in your prompt; {completion} "
            "for the completion). Please reduce your prompt; or completion length.",
            param="prompt",
            code="context_length_exceeded",
        )

    async def _embeddings(self, request: Request) -> JSONResponse:
        admitted = await self._admit(request)
        if isinstance(admitted, JSONResponse):
            return admitted
        body, model, window = admitted
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if (
            not isinstance(inputs, list)
            or not inputs
            or not all(isinstance(i, str) for i in inputs)
        ):
            return _error(400, "'input' must be a string or an array of strings.", param="input")
        counts = [self.count(text) for text in inputs]
        for tokens in counts:
            if tokens > window:
                return self._prompt_overflow(window, tokens, 0)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(inputs):
            vector: Any = _embedding(text)
            if as_base64:
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        data.reverse()  # clients must order by `index`, as the API documents
        total = sum(counts)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": total, "total_tokens": total},
            }
        )
