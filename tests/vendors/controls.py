"""The fake vendors' state and what tests do with it: faults to script, replies, windows,
requests and cache events to read back; and what both vendors' endpoints share (ids,
recording, faults taken, the echoed reply, paced streams). All thread-safe."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import BaseRoute

from tests.upstream import TOKENIZERS, ServedApp, _vocabulary
from tests.vendors.cache import CacheEvent
from tests.vendors.faults import _Fault, _StreamFault, _take
from tests.vendors.rules import ANTHROPIC_MODELS, GEMINI_MODELS, MIN_CACHEABLE


class Controls(ServedApp):
    """The fake vendors' state, lifecycle and controls (see FakeVendors)."""

    SERVED = "fake vendors"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        tokenizer: str = "qwen",
        *,
        anthropic_models: dict[str, tuple[int, int]] | None = None,
        gemini_models: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        """`tokenizer` counts every prompt; the models (id -> limits) are the vendors'
        until a test says otherwise."""
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {tokenizer!r}; expected one of {TOKENIZERS}")
        self.host = host
        self.port = port
        self._vocabulary = _vocabulary(tokenizer)
        self.tokenizer = tokenizer
        self._initial = (
            dict(anthropic_models or ANTHROPIC_MODELS),
            dict(gemini_models or GEMINI_MODELS),
        )
        self._lock = threading.Lock()
        self._ids = 0
        self.app = Starlette(routes=self._routes())
        self.reset()

    def _routes(self) -> list[BaseRoute]:
        """Where each endpoint is served: the fake's to say, which has them all."""
        raise NotImplementedError

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Both vendors' root here, as their SDKs and the catalog's `base_url` take it."""
        return f"http://{self.host}:{self.port}"

    # ---- controls --------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget faults, requests, the forced reply, model changes and both caches."""
        with self._lock:
            self._anthropic_limits = dict(self._initial[0])
            self._gemini_limits = dict(self._initial[1])
            self._faults: list[_Fault] = []
            self._stream_faults: list[_StreamFault] = []
            self._requests: list[dict[str, Any]] = []
            self._reply: str | None = None
            self._prompt_cache: dict[str, int] = {}
            self._gemini_cache: dict[str, list[list[int]]] = {}
            self._cache_log: list[CacheEvent] = []
            self.min_cacheable = MIN_CACHEABLE
            self.chunk_delay = 0.0
            self.count_delay = 0.0
            self._counting = 0
            self.counts_in_flight_peak = 0

    def fail_next(self, status: int, count: int = 1, retry_after: int | None = None) -> None:
        """Answer the next `count` generation requests with `status`, in the vendor's own
        error shape (529 overloaded, 429 rate limited with `retry_after`, 503, 401...)."""
        with self._lock:
            self._faults.append(_Fault(status, count, retry_after))

    def break_stream_after(self, pieces: int, *, error: bool = True, count: int = 1) -> None:
        """The next `count` streams send `pieces` text pieces, then an error event
        (`error=True`: Anthropic's `overloaded_error`, Gemini's UNAVAILABLE chunk) or
        a cut connection."""
        with self._lock:
            self._stream_faults.append(_StreamFault(pieces, count, error))

    def set_reply(self, text: str | None) -> None:
        with self._lock:
            self._reply = text

    def set_window(self, model: str, window: int) -> None:
        """Change a model's input limit (either vendor's model) until reset."""
        with self._lock:
            for table in (self._anthropic_limits, self._gemini_limits):
                if model in table:
                    table[model] = (window, table[model][1])

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request received: {"path", "headers", "body"}, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def cache_log(self) -> list[CacheEvent]:
        with self._lock:
            return list(self._cache_log)

    def count(self, text: str) -> int:
        return len(self._vocabulary.encode(text))

    async def _count_slowly(self) -> None:
        """A count-tokens request takes `count_delay` seconds; the most that were ever
        in flight at once is kept in `counts_in_flight_peak`."""
        with self._lock:
            self._counting += 1
            self.counts_in_flight_peak = max(self.counts_in_flight_peak, self._counting)
        try:
            await asyncio.sleep(self.count_delay)
        finally:
            with self._lock:
                self._counting -= 1

    def generations(self) -> list[dict[str, Any]]:
        """The recorded requests that asked a model for an answer (not counts or records)."""
        ends = ("/v1/messages", ":generateContent", ":streamGenerateContent")
        return [r for r in self.requests if r["path"].endswith(ends)]

    # ---- shared ------------------------------------------------------------------------------

    def _next_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"{self._ids:08d}"

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self._requests.append(
                {"path": request.url.path, "headers": dict(request.headers), "body": body}
            )
        return body

    def _take_fault(self) -> _Fault | None:
        with self._lock:
            fault = _take(self._faults)
        return None if fault is None else _Fault(fault.status, 1, fault.retry_after)

    def _take_stream_fault(self) -> _StreamFault | None:
        with self._lock:
            return _take(self._stream_faults)

    def _reply_text(
        self, model: str, seen: int, last: str, max_tokens: int
    ) -> tuple[str, int, bool]:
        """(text, its tokens, cut at max_tokens)."""
        with self._lock:
            forced = self._reply
        text = (
            forced
            if forced is not None
            else (f"Echo from {model}: I saw {seen} messages; last said: {last[:60]}")
        )
        tokens = self._vocabulary.encode(text)
        if len(tokens) > max_tokens:
            return self._vocabulary.decode(tokens[:max_tokens]), max_tokens, True
        return text, len(tokens), False

    async def _paced(self, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for event in events:
            yield event
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
