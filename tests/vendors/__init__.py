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

The package, one job a module: `rules` (the models, keys and counting rules the fakes
share), `faults` (what tests script), `cache` (how a prompt is keyed and cached), then
FakeVendors built up in layers: `controls` (state, lifecycle and what tests do with
it), `anthropic_prompt` and `anthropic` (the Messages API), `gemini_prompt` and `gemini`
(the Gemini API), `fake` (both on one server, the routes); `catalogs` (the providers of
a catalog), `fixtures` (pytest) and `__main__` (standalone).
"""

from __future__ import annotations

from tests.vendors.cache import CacheEvent
from tests.vendors.catalogs import KEY_ENV, providers_toml
from tests.vendors.fake import FakeVendors
from tests.vendors.fixtures import vendor_keys, vendors
from tests.vendors.rules import (
    ANTHROPIC_KEY,
    ANTHROPIC_MODELS,
    GEMINI_KEY,
    GEMINI_MODELS,
    MIN_CACHEABLE,
)

__all__ = [
    "ANTHROPIC_KEY",
    "ANTHROPIC_MODELS",
    "GEMINI_KEY",
    "GEMINI_MODELS",
    "KEY_ENV",
    "MIN_CACHEABLE",
    "CacheEvent",
    "FakeVendors",
    "providers_toml",
    "vendor_keys",
    "vendors",
]
