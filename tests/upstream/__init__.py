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

The package, one job a module: `vocab` (engines, tokenizers, counting), `cache` (the
prefix cache), `faults` (scripted faults, error bodies), `sse` (event streams), `server`
(uvicorn in a thread), then FakeUpstream built up in layers: `controls` (state and what
tests script), `admission` (the front half of every model request), `engines`, `chat`
and `embeddings` (the endpoints), `fake` (the routes); `fixtures` (pytest) and
`__main__` (standalone).
"""

from __future__ import annotations

from tests.upstream.cache import CACHE_SLOTS, CacheRecord
from tests.upstream.embeddings import _embedding
from tests.upstream.fake import FakeUpstream
from tests.upstream.fixtures import engine_upstream, upstream
from tests.upstream.server import ServedApp
from tests.upstream.sse import _Abort, _EventStream, _pieces
from tests.upstream.vocab import (
    DEFAULT_MODELS,
    EMBEDDING_DIMENSIONS,
    ENGINES,
    QWEN_VOCABULARY,
    TOKENIZERS,
    Engine,
    TokenizerName,
    _vocabulary,
    count_chat_tokens,
    count_tokens,
)

__all__ = [
    "CACHE_SLOTS",
    "DEFAULT_MODELS",
    "EMBEDDING_DIMENSIONS",
    "ENGINES",
    "QWEN_VOCABULARY",
    "TOKENIZERS",
    "CacheRecord",
    "Engine",
    "FakeUpstream",
    "ServedApp",
    "TokenizerName",
    "_Abort",
    "_EventStream",
    "_embedding",
    "_pieces",
    "_vocabulary",
    "count_chat_tokens",
    "count_tokens",
    "engine_upstream",
    "upstream",
]
