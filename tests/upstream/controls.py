"""The fake upstream's state and what tests do with it: faults to script, replies, models,
engine and tokenizer to switch, requests to read back; all thread-safe."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import Any

from tests.upstream.cache import CACHE_SLOTS, CacheRecord
from tests.upstream.faults import _Break, _Failure, _Stall
from tests.upstream.server import ServedApp
from tests.upstream.slots import Slots
from tests.upstream.vocab import (
    DEFAULT_MODELS,
    Engine,
    TokenizerName,
    _check_engine,
    _Vocabulary,
    _vocabulary,
)


class Controls(ServedApp):
    """The fake upstream's state, its lifecycle and its controls (see FakeUpstream)."""

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
        """The state a server starts with (the arguments are FakeUpstream's)."""
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
        self._stalls_ended = 0
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
            # llama.cpp's slots: how many `/slots` lists, whether it answers at all
            # (`--no-slots` answers 501), and the prompt each slot holds by model, for
            # requests that name their slot (`id_slot`).
            self.slot_count = CACHE_SLOTS
            # llama.cpp's `return_progress`: the prompt is reported read this many tokens
            # at a time (its batch), and a test may hold the stream once it has been.
            self.progress_batch = 512
            self.hold_after_progress = False
            self.slots_endpoint = True
            self._slot_prompts: dict[str, dict[int, list[int]]] = {}
            # Slot-local caches (`tests.upstream.slots`): None keeps the shared pool above;
            # a number is the server's `--slot-prompt-similarity` (0.1 its default, 0 its
            # search off), and then every request takes a slot, as llama.cpp chooses it.
            self.slot_local: float | None = None
            self._slot_local: dict[str, Slots] = {}

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

    def end_stalls(self) -> None:
        """Stalled requests and streams go on now: a test that needs something done while
        a request waits stalls it long, then ends the stall, rather than guessing a time."""
        with self._lock:
            self._stalls_ended += 1

    async def _stalled(self, seconds: float) -> None:
        """Sleep `seconds`, or until `end_stalls`."""
        ended = self._stalls_ended
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            if self._stalls_ended != ended:
                return
            await asyncio.sleep(min(left, 0.01))

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

    def slots_taken(self, model: str) -> list[int]:
        """The slot each request for `model` took, in order (with `slot_local` set)."""
        with self._lock:
            slots = self._slot_local.get(model)
            return list(slots.chosen) if slots is not None else []

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

    def forget_requests(self) -> None:
        """Forget the requests received so far, and nothing else (the scripted replies,
        faults and models stay)."""
        with self._lock:
            self._requests = []

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Received requests, oldest first: {"method", "path", "body", "headers",
        "client_port"}; `body` is the parsed JSON (None for GET or unparsable bodies),
        `headers` lower-cased, `client_port` the connection's (one port, one connection)."""
        with self._lock:
            return list(self._requests)

    @property
    def chats(self) -> list[dict[str, Any]]:
        """The bodies of the chat requests received (those with `messages`), oldest first:
        what the model was sent, without the counting and listing calls around it."""
        return [r["body"] for r in self.requests if r["body"] and "messages" in r["body"]]

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
