"""The prefix cache a serving engine keeps per model: what each request found in it, and
the timings llama.cpp reports for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

CACHE_SLOTS = 4
"""Prompts the prefix cache remembers per model (a multi-slot server's slots)."""

_CACHE_RULES: dict[str, tuple[int, int]] = {"openai": (1024, 128), "vllm": (0, 16)}
"""Engine -> (the least prefix it serves from cache, the unit it caches in): OpenAI from
1024 tokens on, in steps of 128; vLLM in whole KV blocks of 16. The other engines
(llama.cpp and the servers built on it) reuse any exact prefix, token by token."""


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
