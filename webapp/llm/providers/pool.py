"""A provider's HTTP clients, in shards of a few connections each.

httpcore's pool (1.0) walks all its connections, and for each one all of them again,
whenever a request starts or ends: quadratic in the connections it holds. With 200
answers streaming from one provider that walk was 40% of the server's CPU. So a provider
keeps several clients of at most `SHARD` connections each, and a call takes the one with
the fewest calls in flight, or a new one when every one is full: a walk then costs
`SHARD`² at most, however many answers stream, and there is no ceiling on connections
(the 101st answer never waits for a whole answer to end, as under httpx's default 100).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

SHARD = 8
KEEPALIVE_EXPIRY = 4.0
"""Idle connections are kept this long: under the 5 s after which uvicorn (vLLM's server,
and many others) closes an idle connection, so a call never lands on one being closed."""


@dataclass(slots=True)
class _Shard:
    client: httpx.AsyncClient
    busy: int = 0


class ClientShards:
    """`make(limits)` builds one client; with a `transport` of its own (tests, unusual
    set-ups) there is only ever one, since the transport holds the connections."""

    def __init__(
        self, make: Callable[[httpx.Limits], httpx.AsyncClient], *, single: bool = False
    ) -> None:
        self._make = make
        self._single = single
        self._shards: list[_Shard] = []

    @asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        shard = min(self._shards, key=lambda s: s.busy, default=None)
        if shard is None or (shard.busy >= SHARD and not self._single):
            limits = httpx.Limits(
                max_connections=SHARD,
                max_keepalive_connections=SHARD,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            )
            shard = _Shard(self._make(limits))
            self._shards.append(shard)
        shard.busy += 1
        try:
            yield shard.client
        finally:
            shard.busy -= 1

    async def aclose(self) -> None:
        shards, self._shards = self._shards, []
        for shard in shards:
            await shard.client.aclose()
