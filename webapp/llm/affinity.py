"""Each conversation on its engine's cache: the key its sends carry, and the slot it maps to.

An engine keeps a conversation's prompt where it last evaluated it: llama.cpp in one of
its slots (a follow-up another slot takes re-reads the whole prompt), a router on one
replica, OpenAI on the machine its `prompt_cache_key` routes to. A send that names the
same place every time finds its prefix there. The key is derived from the conversation
with the server's secret (an HMAC), so it is the same on every worker and after every
restart, yet tells the vendor nothing of the conversation's id; side calls (titles)
carry none, so they never take the conversation's place.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

KEY_LENGTH = 32
"""Hex digits of a key: 128 bits, short enough for any vendor's limit (OpenAI's is 64)."""


class CacheKeys:
    """The keys of one deployment: one secret, so every worker derives the same ones."""

    def __init__(self, secret: str) -> None:
        self._secret = secret.encode()

    def key(self, scope: str) -> str:
        """The key of `scope` (a conversation's id, or a gateway caller's own key with its
        owner): stable, and not reversible without the secret."""
        digest = hmac.new(self._secret, b"cache-key:" + scope.encode(), hashlib.sha256)
        return digest.hexdigest()[:KEY_LENGTH]


def slot_for(key: str, slots: int) -> int:
    """The slot of an engine with `slots` slots that a key's sends go to: spread evenly,
    and the same for every worker (the key is hex, its leading digits a number)."""
    return int(key[:8], 16) % slots


@dataclass(frozen=True, slots=True)
class Affinity:
    """What a provider's catalog entry says of keys (`[[providers]]` `cache_key`, `slots`,
    `session_header`), as its client applies them."""

    cache_key: str = "auto"
    slots: int | None = None
    """llama.cpp's slot count when its `/slots` cannot be read."""
    session_header: str | None = None

    @property
    def in_body(self) -> bool:
        """Whether the key goes in the request's body (`prompt_cache_key`, `id_slot`)."""
        return self.cache_key != "off"

    def headers(self, key: str | None) -> dict[str, str]:
        """The session header for a router, when one is named and the call has a key."""
        return {self.session_header: key} if key and self.session_header else {}
