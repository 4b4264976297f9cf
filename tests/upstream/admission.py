"""The shared front half of every model request: recorded, faults taken, the model and
window checked, the prompt looked up in the prefix cache, the usage reported."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from tests.upstream.cache import (
    _CACHE_RULES,
    CACHE_SLOTS,
    CacheRecord,
    _llamacpp_timings,
    _Prefill,
    _shared_prefix,
)
from tests.upstream.controls import Controls
from tests.upstream.faults import _ERROR_BODIES, _error, _Failure, _vllm_error
from tests.upstream.slots import Slots


class Admission(Controls):
    """What every model endpoint does before and after its own work."""

    # ---- the prefix cache ------------------------------------------------------------------

    def _prefill(
        self, model: str, tokens: list[int], generation: int, slot: int | None = None
    ) -> _Prefill:
        """Look the prompt up in the model's prefix cache, and remember it there.

        A request that names its `slot` (llama.cpp's `id_slot`) finds only what that slot
        holds, and leaves its prompt there: llama.cpp's cache is per slot. With
        `slot_local` set every request does, and one that names none takes the slot
        llama.cpp's server would choose (`tests.upstream.slots`).

        Of the last CACHE_SLOTS prompts, the one sharing the longest prefix with this one
        is replaced by it when they share at least half of it (as llama.cpp picks the
        slot most like the prompt), else the least recently used one is. All but the
        last token can be served (an engine computes at least one to answer), in the
        engine's unit (_CACHE_RULES). A request that outlived a reset (one the test
        before stalled) neither finds nor leaves anything.
        """
        minimum, unit = _CACHE_RULES.get(self.engine, (0, 1))
        with self._lock:
            if generation != self._generation:
                return _Prefill(len(tokens), 0, 0.0)
            if self.slot_local is not None:
                local = self._slot_local.get(model)
                if local is None:
                    local = self._slot_local[model] = Slots(self.slot_count, self.slot_local)
                shared = local.take(tokens, slot)
                return self._found(model, tokens, shared, minimum, unit)
            if slot is not None:
                held = self._slot_prompts.setdefault(model, {})
                shared = _shared_prefix(held.get(slot, []), tokens)
                held[slot] = tokens
                return self._found(model, tokens, shared, minimum, unit)
            slots = self._prefix_cache.setdefault(model, [])
            shared, best = 0, None
            for index, held_prompt in enumerate(slots):
                if (length := _shared_prefix(held_prompt, tokens)) > shared:
                    shared, best = length, index
            if best is not None and 2 * shared >= len(slots[best]):
                slots.pop(best)
            slots.insert(0, tokens)
            del slots[CACHE_SLOTS:]
            return self._found(model, tokens, shared, minimum, unit)

    def _found(
        self, model: str, tokens: list[int], shared: int, minimum: int, unit: int
    ) -> _Prefill:
        """What a prompt sharing `shared` tokens with the cache is served (under the lock):
        all but the last token at most (an engine computes one to answer), in the
        engine's unit, from its least; logged."""
        cached = max(0, min(shared, len(tokens) - 1)) // unit * unit
        cached = cached if cached >= minimum else 0
        self._cache_log.append(CacheRecord(model, len(tokens), cached))
        seconds = self._prefill_per_token * (len(tokens) - cached)
        return _Prefill(len(tokens), cached, seconds)

    def _usage(self, engine: str, prefill: _Prefill, completion_tokens: int) -> dict[str, Any]:
        """The usage object, with the cached prompt tokens where the engine puts them:
        OpenAI always (0 included); vLLM only when enabled and not 0 (null otherwise,
        which streams leave out). llama.cpp says it in `timings`, the rest not at all."""
        usage: dict[str, Any] = {
            "prompt_tokens": prefill.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prefill.prompt_tokens + completion_tokens,
        }
        if engine == "openai":
            usage["prompt_tokens_details"] = {
                "cached_tokens": prefill.cached_tokens,
                "audio_tokens": 0,
            }
            usage["completion_tokens_details"] = {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            }
        elif engine == "vllm":
            usage["prompt_tokens_details"] = (
                {"cached_tokens": prefill.cached_tokens}
                if self.enable_prompt_tokens_details and prefill.cached_tokens
                else None
            )
        return usage

    # ---- the shared front half of every model request ---------------------------------------

    async def _admit(self, request: Request) -> tuple[dict[str, Any], str, int] | JSONResponse:
        """Record, stall, fail as scripted, then check JSON and model.

        Returns (body, model, window) or the error response to send.
        """
        body, headers = await self._record(request)
        streaming = isinstance(body, dict) and bool(body.get("stream"))
        delay = self._take_stall(streaming, before=True)
        generation = self._generation
        if delay:
            await self._stalled(delay)
        model = body.get("model") if isinstance(body, dict) else None
        # A request still stalled when the test that stalled it ended (and reset the
        # server) takes none of the faults the next test scripts.
        late = generation != self._generation
        failure = None if late else self._take_failure(model if isinstance(model, str) else None)
        if failure is not None:
            return self._failure_response(failure, headers)
        if not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(model, str) or not model:
            return _error(400, "You must provide a model parameter.", param="model")
        window = self._window(model)
        if window is None:
            return self._model_not_found(model)
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return _error(400, "max_tokens must be a positive integer.", param="max_tokens")
        return body, model, window

    async def _record(self, request: Request) -> tuple[Any, dict[str, str]]:
        """Parse the JSON body (None when absent or bad) and record the request."""
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            self._requests.append(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "body": body,
                    "headers": headers,
                    "client_port": request.client.port if request.client else None,
                }
            )
        return body, headers

    def _model_not_found(self, model: str) -> JSONResponse:
        if self.engine == "vllm":
            return _vllm_error(404, f"The model `{model}` does not exist.", "NotFoundError")
        return _error(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
        )

    def _chat_overflow(
        self, window: int, prompt_tokens: int, max_tokens: int | None
    ) -> JSONResponse:
        """The engine's own refusal of a chat that does not fit its window."""
        engine = self.engine
        if engine == "vllm":
            # vLLM fills in max_tokens itself when none is asked, so only the prompt can
            # overflow then; its error body is flat, not OpenAI's {"error": {...}}.
            if max_tokens is None:
                detail = (
                    f"your request has {prompt_tokens} input tokens. "
                    "Please reduce the length of the input messages."
                )
            else:
                detail = (
                    f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in "
                    f"the messages, {max_tokens} in the completion). Please reduce the "
                    "length of the messages or completion."
                )
            message = f"This model's maximum context length is {window} tokens. However, {detail}"
            return _vllm_error(400, message, "BadRequestError")
        if engine == "llamacpp":
            body = {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": prompt_tokens,
                    "n_ctx": window,
                }
            }
            return JSONResponse(body, status_code=400)
        if max_tokens is None:
            detail = f"your messages resulted in {prompt_tokens} tokens"
            advice = "Please reduce the length of the messages."
        else:
            detail = (
                f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in "
                f"the messages, {max_tokens} in the completion)"
            )
            advice = "Please reduce the length of the messages or completion."
        return _error(
            400,
            f"This model's maximum context length is {window} tokens. However, {detail}. {advice}",
            param="messages",
            code="context_length_exceeded",
        )

    @staticmethod
    def _failure_response(failure: _Failure, headers: dict[str, str]) -> JSONResponse:
        message, kind, code = _ERROR_BODIES.get(
            failure.status, (f"Simulated HTTP {failure.status}.", "server_error", None)
        )
        if "{key}" in message:
            key = headers.get("authorization", "").removeprefix("Bearer ").strip()
            message = message.format(key=key or "(none)")
        extra = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
        return _error(failure.status, message, kind, code, headers=extra)

    def _reply_text(self, default: str, max_tokens: int | None) -> tuple[str, int, str]:
        """(text, completion_tokens, finish_reason), cut at max_tokens like a real model."""
        with self._lock:
            text = self._reply if self._reply is not None else default
        vocab = self._vocab()
        tokens = vocab.encode(text)
        if max_tokens is not None and len(tokens) > max_tokens:
            return vocab.decode(tokens[:max_tokens]), max_tokens, "length"
        return text, len(tokens), "stop"

    @staticmethod
    def _timings(prefill: _Prefill, predicted: int, predicted_s: float) -> dict[str, Any]:
        evaluated = prefill.prompt_tokens - prefill.cached_tokens
        return _llamacpp_timings(
            prefill.cached_tokens, evaluated, prefill.seconds, predicted, predicted_s
        )
