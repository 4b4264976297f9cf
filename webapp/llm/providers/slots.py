"""How many slots a llama.cpp server has: asked of its `/slots` once per provider.

llama.cpp keeps a prompt cache per slot, so a conversation is sent to one slot every
time (`id_slot`, `webapp.llm.affinity.slot_for`); other servers have no `/slots` and
take OpenAI's `prompt_cache_key` instead. Whether a server is llama.cpp is learned from
the same answer: a list of slots. llama.cpp started with `--no-slots` answers 501; then
the catalog's `slots` says it.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from webapp.llm.engine import PROBE_TIMEOUT, server_root
from webapp.llm.providers.pool import ClientShards

log = logging.getLogger(__name__)


class EngineSlots:
    """The slot count of the server at `base_url`, or None when it is not llama.cpp (or
    hides its slots). A definite answer is kept for the provider's life; a server that
    could not be reached is asked again at the next keyed call."""

    def __init__(self, base_url: str) -> None:
        self._url = server_root(base_url) + "/slots"
        self._asked: asyncio.Future[int | None] | None = None

    async def count(self, clients: ClientShards, configured: int | None) -> int | None:
        """The server's slots, else `configured` (the catalog's `slots`)."""
        if self._asked is None:
            self._asked = asyncio.ensure_future(self._ask(clients))
        asked = self._asked
        try:
            found = await asyncio.shield(asked)
        except httpx.HTTPError as error:
            if self._asked is asked:
                self._asked = None
            log.info("could not ask %s for its slots: %s", self._url, error)
            found = None
        return found or configured

    async def _ask(self, clients: ClientShards) -> int | None:
        async with clients.client() as client:
            response = await client.get(self._url, timeout=PROBE_TIMEOUT)
        if response.status_code != 200:
            return None
        try:
            slots = response.json()
        except ValueError:
            return None
        return len(slots) if isinstance(slots, list) and slots else None
