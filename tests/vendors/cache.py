"""The prompt caches' records: a request as the cache saw it, and a prompt keyed block by
block (Anthropic caches prefixes that end at a breakpoint)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tests.vendors.rules import REQUEST_BASE


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
