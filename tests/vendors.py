"""A real HTTP server speaking Anthropic's Messages API and Google's Gemini API, for tests
and benchmarks: the sibling of `tests/upstream/` for the two native wire formats.

One server serves both at their own paths, as the vendors lay them out under their
roots (`https://api.anthropic.com`, `https://generativelanguage.googleapis.com`):

- Anthropic: `POST /v1/messages` (JSON or a stream of named events: `message_start`,
  `content_block_start`, `ping`, `content_block_delta` with `text_delta` or
  `input_json_delta`, `content_block_stop`, `message_delta`, `message_stop`, and
  `error`), `POST /v1/messages/count_tokens`, `GET /v1/models` and `/v1/models/{id}`
  (`max_input_tokens`, `max_tokens`). Keys come as `x-api-key` or as a bearer token
  (the SDK now sends the latter); `anthropic-version` is required. Errors are
  `{"type": "error", "error": {"type", "message"}, "request_id"}`: a prompt over the
  window is `invalid_request_error` "prompt is too long: N tokens > M maximum",
  overload is 529 `overloaded_error`, rate limits 429 `rate_limit_error` with
  `retry-after`. `cache_control` breakpoints (at most 4) write and read a prompt
  cache, reported as `cache_creation_input_tokens` / `cache_read_input_tokens`, with
  `input_tokens` the rest, as Anthropic bills them.
- Gemini: `POST /v1beta/models/{model}:generateContent`,
  `:streamGenerateContent?alt=sse` (each event a whole `GenerateContentResponse`,
  CRLF-framed), `:countTokens`, `GET /v1beta/models/{model}` and `/v1beta/models`
  (`inputTokenLimit`, `outputTokenLimit`); `gemini-embedding` answers `:embedContent` and
  `:batchEmbedContents` (one deterministic vector per request, in order) and nothing else.
  Keys come as `x-goog-api-key` or `?key=`.
  Errors are `{"error": {"code", "message", "status"}}`: INVALID_ARGUMENT "The input
  token count (N) exceeds the maximum number of tokens allowed (M).",
  RESOURCE_EXHAUSTED (429, with a RetryInfo detail), UNAVAILABLE (503). Prompts that
  share a long prefix with an earlier one report `cachedContentTokenCount` (implicit
  caching).

Both count with a tokenizer of their own (Qwen's vocabulary by default, one the app's
estimate was not fitted to), frame each message with a few tokens the way chat templates
do, and count exactly the same in their count-tokens endpoints as in what they bill, so
a client that counts there can fill a window exactly. Answers are deterministic
("Echo from claude-small: I saw 3 messages; last said: ..."), and a request with tools
whose last message is the user's calls the first tool.

Use it as the `vendors` pytest fixture (one server per session, reset per test), as a
context manager, or standalone: ``python -m tests.vendors --port 8002``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.upstream import TOKENIZERS, ServedApp, _Abort, _EventStream, _pieces, _vocabulary

ANTHROPIC_MODELS: dict[str, tuple[int, int]] = {
    "claude-small": (4096, 1024),
    "claude-large": (200_000, 64_000),
}
"""Model id -> (max_input_tokens, max_tokens)."""
GEMINI_MODELS: dict[str, tuple[int, int]] = {
    "gemini-small": (4096, 1024),
    "gemini-large": (1_048_576, 65_536),
    "gemini-embedding": (2048, 1),
}
"""Model id -> (inputTokenLimit, outputTokenLimit)."""
EMBEDDING_MODELS = frozenset({"gemini-embedding"})
"""Gemini models that embed (`:embedContent`, `:batchEmbedContents`) and do nothing else."""
EMBEDDING_SIZE = 8
"""Values in a vector unless the request's `outputDimensionality` says fewer."""

ANTHROPIC_KEY = "sk-ant-test-0123456789"
GEMINI_KEY = "AIza-test-0123456789"

REQUEST_BASE = 3
"""Tokens every prompt costs beyond its messages (the reply's priming)."""
MESSAGE_FRAME = 4
"""Tokens each message (each `contents` entry, the system prompt) costs beyond its parts."""
BLOCK_FRAME = 3
"""Tokens a tool call or tool result block costs beyond its name, input and content."""
MAX_BREAKPOINTS = 4
"""Anthropic takes at most this many `cache_control` blocks a request."""
LOOKBACK = 20
"""Blocks before a breakpoint that Anthropic looks back over for a cached prefix."""
MIN_CACHEABLE = 1024
"""The shortest prefix either vendor caches (Anthropic's least; Gemini's implicit
caching starts at 1,024 tokens on Flash)."""


# ---- the scripted faults ------------------------------------------------------------------


@dataclass
class _Fault:
    status: int
    count: int
    retry_after: int | None = None


@dataclass
class _StreamFault:
    after: int
    """Text pieces streamed before it."""
    count: int
    error: bool
    """True: an `error` event (Anthropic) or error chunk; False: the connection is cut."""


@dataclass
class CacheEvent:
    """One request's prompt as the cache saw it."""

    vendor: str
    model: str
    prompt_tokens: int
    read: int
    written: int


@dataclass
class _Blocks:
    """A prompt as the cache keys it: each block's canonical form and its tokens."""

    keys: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    breakpoints: list[int] = field(default_factory=list)

    def add(self, key: Any, tokens: int, breakpoint: bool = False) -> None:
        self.keys.append(json.dumps(key, sort_keys=True))
        self.tokens.append(tokens)
        if breakpoint:
            self.breakpoints.append(len(self.keys) - 1)

    @property
    def total(self) -> int:
        return REQUEST_BASE + sum(self.tokens)

    def prefix(self, end: int) -> tuple[str, int]:
        """The hash of blocks [0, end] and their tokens."""
        digest = hashlib.sha256("\n".join(self.keys[: end + 1]).encode()).hexdigest()
        return digest, REQUEST_BASE + sum(self.tokens[: end + 1])


GENERATION_METHODS = ("generateContent", "streamGenerateContent", "countTokens")
EMBEDDING_METHODS = ("embedContent", "batchEmbedContents")


class _Invalid(Exception):
    """A request the vendor refuses with 400."""


# ---- the server ----------------------------------------------------------------------------


class FakeVendors(ServedApp):
    """Anthropic's and Gemini's APIs on 127.0.0.1 with scriptable faults. Control methods
    are thread-safe: tests call them from their own thread while the server runs in its own."""

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
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                # Gemini serves /v1 and /v1beta alike (its SDK now defaults to /v1), so
                # /v1/models is Anthropic's or Gemini's by the key's header.
                Route("/v1/models", self._either_models, methods=["GET"]),
                Route("/v1/models/{rest:path}", self._either_model, methods=["GET", "POST"]),
                Route("/v1beta/models", self._gemini_models, methods=["GET"]),
                Route("/v1beta/models/{rest:path}", self._gemini, methods=["GET", "POST"]),
            ]
        )
        self.reset()

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

    def prompt_tokens(self, request: dict[str, Any]) -> int:
        """What the vendor bills as the prompt of a recorded generation request (one of
        `requests`): the same count its count-tokens endpoint gives."""
        body = request["body"]
        if request["path"] == "/v1/messages":
            return self._anthropic_blocks(body).total
        return REQUEST_BASE + sum(len(run) for run in self._gemini_tokens(body))

    def generations(self) -> list[dict[str, Any]]:
        """The recorded requests that asked a model for an answer (not counts or records)."""
        ends = ("/v1/messages", ":generateContent", ":streamGenerateContent")
        return [r for r in self.requests if r["path"].endswith(ends)]

    @staticmethod
    def _is_gemini(request: Request) -> bool:
        return "x-goog-api-key" in request.headers or "key" in request.query_params

    async def _either_models(self, request: Request) -> Response:
        if self._is_gemini(request):
            return await self._gemini_models(request)
        return await self._anthropic_models(request)

    async def _either_model(self, request: Request) -> Response:
        if self._is_gemini(request) or request.method == "POST":
            return await self._gemini(request)
        return await self._anthropic_model(request)

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
            if not self._faults:
                return None
            fault = self._faults[0]
            fault.count -= 1
            if fault.count <= 0:
                self._faults.pop(0)
            return _Fault(fault.status, 1, fault.retry_after)

    def _take_stream_fault(self) -> _StreamFault | None:
        with self._lock:
            if not self._stream_faults:
                return None
            fault = self._stream_faults[0]
            fault.count -= 1
            if fault.count <= 0:
                self._stream_faults.pop(0)
            return fault

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

    # ---- Anthropic ---------------------------------------------------------------------------

    def _anthropic_error(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> JSONResponse:
        request_id = f"req_{self._next_id()}"
        body = {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": request_id,
        }
        return JSONResponse(
            body, status_code=status, headers={"request-id": request_id, **(headers or {})}
        )

    def _anthropic_fault(self, fault: _Fault) -> JSONResponse:
        kinds = {
            400: ("invalid_request_error", "Invalid request (simulated)."),
            401: ("authentication_error", "invalid x-api-key"),
            403: (
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
            ),
            404: ("not_found_error", "Not found (simulated)."),
            413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
            429: (
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit (simulated).",
            ),
            500: ("api_error", "Internal server error"),
            529: ("overloaded_error", "Overloaded"),
        }
        kind, message = kinds.get(fault.status, ("api_error", "Internal server error"))
        headers = {"retry-after": str(fault.retry_after)} if fault.retry_after is not None else {}
        return self._anthropic_error(fault.status, kind, message, headers)

    def _anthropic_auth(self, request: Request) -> JSONResponse | None:
        key = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        if key != ANTHROPIC_KEY:
            return self._anthropic_error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self._anthropic_error(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        return None

    def _anthropic_model_or_error(self, model: Any) -> tuple[int, int] | JSONResponse:
        with self._lock:
            limits = self._anthropic_limits.get(model) if isinstance(model, str) else None
        if limits is None:
            return self._anthropic_error(404, "not_found_error", f"model: {model}")
        return limits

    def _text_tokens(self, text: Any) -> int:
        return self.count(text if isinstance(text, str) else json.dumps(text))

    def _anthropic_blocks(self, body: dict[str, Any]) -> _Blocks:
        """The prompt as blocks (tools, system, each message's content blocks), checked
        the way the Messages API checks it."""
        blocks = _Blocks()
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise _Invalid("tools: Input should be a valid list")
        for number, tool in enumerate(tools):
            if not isinstance(tool, dict) or not tool.get("name") or "input_schema" not in tool:
                raise _Invalid(f"tools.{number}.custom.input_schema: Field required")
            shown = {k: v for k, v in tool.items() if k != "cache_control"}
            blocks.add(["tool", shown], self._text_tokens(shown), "cache_control" in tool)
        system = body.get("system")
        if isinstance(system, str):
            system = [{"type": "text", "text": system}] if system else []
        if system is not None and not isinstance(system, list):
            raise _Invalid("system: Input should be a valid string or list")
        for part in system or []:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _Invalid("system: only text blocks are accepted")
            blocks.add(
                ["system", part.get("text")],
                self._text_tokens(part.get("text")) + MESSAGE_FRAME,
                "cache_control" in part,
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Invalid("messages: at least one message is required")
        pending_tools: set[str] = set()
        for number, message in enumerate(messages):
            if not isinstance(message, dict):
                raise _Invalid(f"messages.{number}: Input should be a valid dictionary")
            role = message.get("role")
            if role not in ("user", "assistant", "system"):
                raise _Invalid(
                    f"messages.{number}.role: Input should be 'user', 'assistant' or 'system'"
                )
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if not isinstance(content, list) or not content:
                raise _Invalid(f"messages.{number}: all messages must have non-empty content")
            results = {
                b.get("tool_use_id")
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            if pending_tools and not pending_tools <= results:
                raise _Invalid(
                    f"messages.{number}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(pending_tools - results))}. Each "
                    "`tool_use` block must have a corresponding `tool_result` block in the "
                    "next message."
                )
            pending_tools = set()
            frame = MESSAGE_FRAME
            for index, block in enumerate(content):
                if not isinstance(block, dict):
                    raise _Invalid(f"messages.{number}.content.{index}: Input should be an object")
                kind = block.get("type")
                if kind == "text":
                    text = block.get("text")
                    if not isinstance(text, str) or not text.strip():
                        raise _Invalid(
                            f"messages.{number}.content.{index}.text: text content blocks "
                            "must contain non-whitespace text"
                        )
                    tokens = self.count(text)
                    key: Any = [role, "text", text]
                elif kind == "tool_use" and role == "assistant":
                    if not isinstance(block.get("input"), dict) or not block.get("id"):
                        raise _Invalid(
                            f"messages.{number}.content.{index}.tool_use: id and input are required"
                        )
                    pending_tools.add(str(block["id"]))
                    tokens = (
                        self.count(str(block.get("name")))
                        + self._text_tokens(block["input"])
                        + BLOCK_FRAME
                    )
                    key = [role, "tool_use", block.get("id"), block.get("name"), block["input"]]
                elif kind == "tool_result" and role == "user":
                    tokens = self._text_tokens(block.get("content") or "") + BLOCK_FRAME
                    key = [role, "tool_result", block.get("tool_use_id"), block.get("content")]
                else:
                    raise _Invalid(
                        f"messages.{number}.content.{index}.type: unexpected block type "
                        f"{kind!r} in a {role} message"
                    )
                blocks.add(key, tokens + frame, "cache_control" in block)
                frame = 0
        if pending_tools:
            raise _Invalid(
                "messages: the last assistant message has `tool_use` blocks without results"
            )
        if len(blocks.breakpoints) > MAX_BREAKPOINTS:
            raise _Invalid(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(blocks.breakpoints)}."
            )
        return blocks

    def _anthropic_cache(self, model: str, blocks: _Blocks) -> tuple[int, int]:
        """(tokens read from the cache, tokens written to it), as Anthropic's prompt cache
        does: each breakpoint looks back up to LOOKBACK blocks for the longest cached
        prefix; the prefix up to each breakpoint is then written."""
        with self._lock:
            cache = self._prompt_cache
            read = 0
            for point in blocks.breakpoints:
                for end in range(point, max(-1, point - LOOKBACK - 1), -1):
                    digest, tokens = blocks.prefix(end)
                    if cache.get(f"{model}:{digest}") is not None:
                        read = max(read, tokens)
                        break
            written = 0
            for point in blocks.breakpoints:
                digest, tokens = blocks.prefix(point)
                if tokens >= self.min_cacheable:
                    cache[f"{model}:{digest}"] = tokens
                    written = max(written, tokens)
            written = max(0, written - read)
            self._cache_log.append(CacheEvent("anthropic", model, blocks.total, read, written))
        return read, written

    async def _anthropic_request(
        self, request: Request
    ) -> tuple[dict[str, Any], tuple[int, int]] | JSONResponse:
        """(the body, its model's limits), or the refusal of a bad key, body or model."""
        body = await self._record(request)
        refused = self._anthropic_auth(request)
        if refused is not None:
            return refused
        if not isinstance(body, dict):
            return self._anthropic_error(
                400, "invalid_request_error", "the body must be a JSON object"
            )
        limits = self._anthropic_model_or_error(body.get("model"))
        if isinstance(limits, JSONResponse):
            return limits
        return body, limits

    async def _count_tokens(self, request: Request) -> Response:
        accepted = await self._anthropic_request(request)
        if isinstance(accepted, JSONResponse):
            return accepted
        body, _ = accepted
        await self._count_slowly()
        try:
            blocks = self._anthropic_blocks(body)
        except _Invalid as exc:
            return self._anthropic_error(400, "invalid_request_error", str(exc))
        return JSONResponse({"input_tokens": blocks.total})

    def _anthropic_answer(
        self, body: dict[str, Any], model: str, max_tokens: int
    ) -> tuple[list[dict[str, Any]], int, str]:
        """(content blocks, output tokens, stop_reason)."""
        messages = body["messages"]
        last = messages[-1]
        content = last.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        calls_tool = (
            bool(body.get("tools"))
            and last.get("role") == "user"
            and all(b.get("type") == "text" for b in blocks)
        )
        if calls_tool:
            tool = body["tools"][0]
            schema = tool.get("input_schema") or {}
            samples = {"string": "echo", "integer": 1, "number": 1, "boolean": True, "array": []}
            arguments = {
                name: samples.get(
                    ((schema.get("properties") or {}).get(name) or {}).get("type", "")
                )
                for name in schema.get("required") or []
            }
            block = {
                "type": "tool_use",
                "id": f"toolu_{self._next_id()}",
                "name": tool["name"],
                "input": arguments,
            }
            return [block], self.count(json.dumps(arguments)) + BLOCK_FRAME, "tool_use"
        said = " ".join(
            b.get("text", "") if b.get("type") == "text" else json.dumps(b.get("content"))
            for b in blocks
        )
        text, tokens, cut = self._reply_text(model, len(messages), said, max_tokens)
        return [{"type": "text", "text": text}], tokens, "max_tokens" if cut else "end_turn"

    async def _messages(self, request: Request) -> Response:
        accepted = await self._anthropic_request(request)
        if isinstance(accepted, JSONResponse):
            return accepted
        body, (max_input, max_output) = accepted
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return self._anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
        if max_tokens > max_output:
            return self._anthropic_error(
                400,
                "invalid_request_error",
                f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed "
                f"number of output tokens for {body['model']}",
            )
        try:
            blocks = self._anthropic_blocks(body)
        except _Invalid as exc:
            return self._anthropic_error(400, "invalid_request_error", str(exc))
        fault = self._take_fault()
        if fault is not None:
            return self._anthropic_fault(fault)
        model = str(body["model"])
        if blocks.total > max_input:
            return self._anthropic_error(
                400,
                "invalid_request_error",
                f"prompt is too long: {blocks.total} tokens > {max_input} maximum",
            )
        read, written = self._anthropic_cache(model, blocks)
        usage = {
            "input_tokens": blocks.total - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": 0,
            "service_tier": "standard",
        }
        content, output_tokens, stop_reason = self._anthropic_answer(body, model, max_tokens)
        message_id = f"msg_{self._next_id()}"
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": output_tokens},
                }
            )
        return _EventStream(
            self._paced(
                self._anthropic_stream(
                    message_id, model, content, usage, output_tokens, stop_reason
                )
            )
        )  # type: ignore[return-value]  # an ASGI app is a response

    async def _anthropic_stream(
        self,
        message_id: str,
        model: str,
        content: list[dict[str, Any]],
        usage: dict[str, Any],
        output_tokens: int,
        stop_reason: str,
    ) -> AsyncIterator[bytes]:
        def event(name: str, data: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

        fault = self._take_stream_fault()
        start: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        yield event("message_start", {"message": start})
        yield event("ping", {})
        sent = 0
        for index, block in enumerate(content):
            if block["type"] == "text":
                yield event(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                pieces = _pieces(block["text"])
                kind, field_name = "text_delta", "text"
            else:
                opening = {**block, "input": {}}
                yield event("content_block_start", {"index": index, "content_block": opening})
                arguments = json.dumps(block["input"])
                pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]
                kind, field_name = "input_json_delta", "partial_json"
            for piece in pieces:
                if fault is not None and sent >= fault.after:
                    if fault.error:
                        yield event(
                            "error",
                            {"error": {"type": "overloaded_error", "message": "Overloaded"}},
                        )
                        return
                    raise _Abort
                yield event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": kind, field_name: piece}},
                )
                sent += 1
            yield event("content_block_stop", {"index": index})
        yield event(
            "message_delta",
            {
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
        yield event("message_stop", {})

    def _anthropic_record(self, model: str, limits: tuple[int, int]) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model,
            "display_name": model.replace("-", " ").title(),
            "created_at": "2026-05-14T00:00:00Z",
            "lifecycle": "active",
            "max_input_tokens": limits[0],
            "max_tokens": limits[1],
        }

    async def _anthropic_models(self, request: Request) -> Response:
        await self._record(request)
        refused = self._anthropic_auth(request)
        if refused is not None:
            return refused
        with self._lock:
            records = [
                self._anthropic_record(m, limits) for m, limits in self._anthropic_limits.items()
            ]
        return JSONResponse(
            {
                "data": records,
                "has_more": False,
                "first_id": records[0]["id"] if records else None,
                "last_id": records[-1]["id"] if records else None,
            }
        )

    async def _anthropic_model(self, request: Request) -> Response:
        await self._record(request)
        refused = self._anthropic_auth(request)
        if refused is not None:
            return refused
        model = request.path_params["rest"]
        limits = self._anthropic_model_or_error(model)
        if isinstance(limits, JSONResponse):
            return limits
        return JSONResponse(self._anthropic_record(model, limits))

    # ---- Gemini --------------------------------------------------------------------------------

    @staticmethod
    def _gemini_error(
        code: int, status: str, message: str, details: list[dict[str, Any]] | None = None
    ) -> JSONResponse:
        error: dict[str, Any] = {"code": code, "message": message, "status": status}
        if details:
            error["details"] = details
        return JSONResponse({"error": error}, status_code=code)

    def _gemini_fault(self, fault: _Fault) -> JSONResponse:
        statuses = {
            400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
            401: ("UNAUTHENTICATED", "API key not valid. Please pass a valid API key."),
            403: ("PERMISSION_DENIED", "Permission denied on resource project."),
            404: ("NOT_FOUND", "Requested entity was not found."),
            429: (
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota, please check your plan and billing details.",
            ),
            500: ("INTERNAL", "An internal error has occurred. Please retry or report."),
            503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
            504: ("DEADLINE_EXCEEDED", "The request timed out. Please try again."),
        }
        status, message = statuses.get(
            fault.status, ("INTERNAL", "An internal error has occurred.")
        )
        details = None
        if fault.status == 429 and fault.retry_after is not None:
            details = [
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": f"{fault.retry_after}s",
                }
            ]
        return self._gemini_error(fault.status, status, message, details)

    def _gemini_auth(self, request: Request) -> JSONResponse | None:
        key = request.headers.get("x-goog-api-key") or request.query_params.get("key")
        if key != GEMINI_KEY:
            return self._gemini_error(
                400 if key else 403,
                "INVALID_ARGUMENT" if key else "PERMISSION_DENIED",
                "API key not valid. Please pass a valid API key."
                if key
                else "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call "
                "this API.",
            )
        return None

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

    async def _gemini(self, request: Request) -> Response:
        body = await self._record(request)
        refused = self._gemini_auth(request)
        if refused is not None:
            return refused
        rest = request.path_params["rest"]
        model, _, method = rest.partition(":")
        with self._lock:
            limits = self._gemini_limits.get(model)
        if limits is None:
            return self._gemini_error(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, or is not supported for "
                "generateContent.",
            )
        if request.method == "GET":
            if method:
                return self._gemini_error(404, "NOT_FOUND", "Method not found.")
            return JSONResponse(self._gemini_record(model, limits))
        embeds = model in EMBEDDING_MODELS
        if method not in (EMBEDDING_METHODS if embeds else GENERATION_METHODS):
            return self._gemini_error(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, or is not supported "
                f"for {method}.",
            )
        if not isinstance(body, dict):
            return self._gemini_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        if embeds:
            try:
                return JSONResponse(self._gemini_embeddings(model, method, body, limits[0]))
            except _Invalid as exc:
                return self._gemini_error(400, "INVALID_ARGUMENT", str(exc))
        if method == "countTokens":
            await self._count_slowly()
            inner = (
                body.get("generateContentRequest") or body.get("generate_content_request") or body
            )
            try:
                runs = self._gemini_tokens(inner)
            except _Invalid as exc:
                return self._gemini_error(400, "INVALID_ARGUMENT", str(exc))
            total = REQUEST_BASE + sum(len(run) for run in runs)
            return JSONResponse(
                {
                    "totalTokens": total,
                    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
                }
            )
        config = body.get("generationConfig") or body.get("generation_config") or {}
        max_tokens = config.get("maxOutputTokens") or config.get("max_output_tokens") or limits[1]
        if not isinstance(max_tokens, int) or max_tokens > limits[1]:
            return self._gemini_error(
                400, "INVALID_ARGUMENT", f"The maxOutputTokens must be at most {limits[1]}."
            )
        try:
            runs = self._gemini_tokens(body)
        except _Invalid as exc:
            return self._gemini_error(400, "INVALID_ARGUMENT", str(exc))
        fault = self._take_fault()
        if fault is not None:
            return self._gemini_fault(fault)
        prompt = [token for run in runs for token in run]
        total = REQUEST_BASE + len(prompt)
        if total > limits[0]:
            return self._gemini_error(
                400,
                "INVALID_ARGUMENT",
                f"The input token count ({total}) exceeds the maximum number of tokens allowed "
                f"({limits[0]}).",
            )
        cached = self._gemini_cached(model, prompt)
        parts, output_tokens, finish = self._gemini_answer(body, model, max_tokens)
        usage: dict[str, Any] = {
            "promptTokenCount": total,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": total + output_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
        }
        if cached:
            usage["cachedContentTokenCount"] = cached
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        response_id = self._next_id()
        if method == "generateContent":
            return JSONResponse(self._gemini_response(model, response_id, parts, finish, usage))
        if request.query_params.get("alt") != "sse":
            # Without alt=sse Gemini streams one JSON array; clients are to ask for SSE.
            chunks = [self._gemini_response(model, response_id, parts, finish, usage)]
            return JSONResponse(chunks)
        return _EventStream(
            self._paced(self._gemini_stream(model, response_id, parts, finish, usage))
        )  # type: ignore[return-value]  # an ASGI app is a response

    def _gemini_answer(
        self, body: dict[str, Any], model: str, max_tokens: int
    ) -> tuple[list[dict[str, Any]], int, str]:
        contents = body["contents"]
        last = contents[-1]
        parts = last.get("parts") or []
        declarations = [
            d
            for tool in body.get("tools") or []
            for d in (tool.get("functionDeclarations") or tool.get("function_declarations") or [])
        ]
        if declarations and last.get("role", "user") == "user" and all("text" in p for p in parts):
            declaration = declarations[0]
            schema = (
                declaration.get("parameters")
                or declaration.get("parametersJsonSchema")
                or declaration.get("parameters_json_schema")  # as the SDK sends it
                or {}
            )
            samples = {
                "string": "echo",
                "STRING": "echo",
                "integer": 1,
                "INTEGER": 1,
                "number": 1,
                "boolean": True,
            }
            arguments = {
                name: samples.get(
                    ((schema.get("properties") or {}).get(name) or {}).get("type", "")
                )
                for name in schema.get("required") or []
            }
            call = {"functionCall": {"name": declaration["name"], "args": arguments}}
            return [call], self.count(json.dumps(arguments)) + BLOCK_FRAME, "STOP"
        said = " ".join(str(p.get("text", "")) if "text" in p else json.dumps(p) for p in parts)
        text, tokens, cut = self._reply_text(model, len(contents), said, max_tokens)
        return [{"text": text}], tokens, "MAX_TOKENS" if cut else "STOP"

    @staticmethod
    def _gemini_response(
        model: str,
        response_id: str,
        parts: list[dict[str, Any]],
        finish: str | None,
        usage: dict[str, Any],
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": response_id,
        }

    async def _gemini_stream(
        self,
        model: str,
        response_id: str,
        parts: list[dict[str, Any]],
        finish: str,
        usage: dict[str, Any],
    ) -> AsyncIterator[bytes]:
        def chunk(data: dict[str, Any]) -> bytes:
            return f"data: {json.dumps(data)}\r\n\r\n".encode()

        fault = self._take_stream_fault()
        if "text" not in parts[0]:
            yield chunk(self._gemini_response(model, response_id, parts, finish, usage))
            return
        pieces = _pieces(parts[0]["text"])
        running = {k: v for k, v in usage.items() if k != "candidatesTokenCount"}
        for number, piece in enumerate(pieces):
            if fault is not None and number >= fault.after:
                if fault.error:
                    error = {
                        "error": {
                            "code": 503,
                            "message": "The model is overloaded. Please try again later.",
                            "status": "UNAVAILABLE",
                        }
                    }
                    yield chunk(error)
                    return
                raise _Abort
            last = number == len(pieces) - 1
            yield chunk(
                self._gemini_response(
                    model,
                    response_id,
                    [{"text": piece}],
                    finish if last else None,
                    usage if last else running,
                )
            )

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

    @staticmethod
    def _gemini_record(model: str, limits: tuple[int, int]) -> dict[str, Any]:
        return {
            "name": f"models/{model}",
            "baseModelId": model,
            "version": "001",
            "displayName": model.replace("-", " ").title(),
            "description": "A fake Gemini model for tests.",
            "inputTokenLimit": limits[0],
            "outputTokenLimit": limits[1],
            "supportedGenerationMethods": list(
                EMBEDDING_METHODS if model in EMBEDDING_MODELS else GENERATION_METHODS
            ),
            "temperature": 1.0,
            "topP": 0.95,
            "topK": 64,
        }

    async def _gemini_models(self, request: Request) -> Response:
        await self._record(request)
        refused = self._gemini_auth(request)
        if refused is not None:
            return refused
        with self._lock:
            models = [self._gemini_record(m, limits) for m, limits in self._gemini_limits.items()]
        return JSONResponse({"models": models})


def _vector(tokens: list[int], size: int) -> list[float]:
    """A deterministic unit-length vector of the tokens: equal texts embed equal."""
    digest = hashlib.sha256(json.dumps(tokens).encode()).digest()
    raw = [digest[i % len(digest)] / 255 - 0.5 for i in range(size)]
    norm = sum(x * x for x in raw) ** 0.5 or 1.0
    return [round(x / norm, 6) for x in raw]


# ---- catalogs ---------------------------------------------------------------------------------

KEY_ENV = {"FAKE_ANTHROPIC_KEY": ANTHROPIC_KEY, "FAKE_GEMINI_KEY": GEMINI_KEY}
"""The variables the catalogs of `providers_toml` read the fakes' keys from."""


def providers_toml(vendors: FakeVendors) -> str:
    """A catalog's two native providers served by the fakes: `claude` (kind "anthropic")
    and `google` (kind "gemini"), keys from KEY_ENV's variables; models and
    configurations are the caller's to add."""
    return f"""
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_ANTHROPIC_KEY"
timeout = 5

[[providers]]
name = "google"
kind = "gemini"
base_url = "{vendors.base_url}"
api_key_env = "FAKE_GEMINI_KEY"
timeout = 5
"""


@pytest.fixture
def vendor_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """KEY_ENV in the environment, for catalogs made by `providers_toml`."""
    for variable, key in KEY_ENV.items():
        monkeypatch.setenv(variable, key)


# ---- the pytest fixture ---------------------------------------------------------------------

_session_vendors: FakeVendors | None = None


def _stop_session_vendors() -> None:
    global _session_vendors
    if _session_vendors is not None:
        _session_vendors.stop()
        _session_vendors = None


@pytest.fixture
def vendors(request: pytest.FixtureRequest) -> Iterator[FakeVendors]:
    """The session's fake vendors (started on first use), reset before and after each test."""
    global _session_vendors
    if _session_vendors is None:
        _session_vendors = FakeVendors().start()
        request.config.add_cleanup(_stop_session_vendors)
    _session_vendors.reset()
    yield _session_vendors
    _session_vendors.reset()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.vendors", description="Serve fake Anthropic and Gemini APIs."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--tokenizer", choices=TOKENIZERS, default="qwen")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = FakeVendors(args.host, args.port, args.tokenizer).start()
    print(
        f"fake vendors serving {server.base_url} (keys {ANTHROPIC_KEY}, {GEMINI_KEY})", flush=True
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
