"""A loop-lag monitor: a ticker task on an event loop that records the largest gap between
its ticks. A tick due every few milliseconds that comes late by a second means something
held the loop for that second: every other request of the process waited as long.

A gap is measured twice: in wall time (`worst`), and in the CPU time the loop's thread
spent inside it (`busiest`). On a quiet machine they agree. On a busy one the process
may wait for a core for a while, which makes a gap in wall time where nothing held the
loop; the CPU time counts only what ran on the loop's thread (a render, a parse, a
collection it triggered), so a test of what the app does holds `busiest` to its limit.

Litestar's test client runs the app on an event loop of its own (in a thread, behind an
anyio blocking portal), so `watching_app(client)` puts the ticker there; `watching()`
watches the loop the caller runs on.

Both freeze the heap while they watch (`gc.freeze()`): a full collection stops every
thread for as long as it takes to walk every object of the process, and the test process
holds pytest, the app, the fake upstream and all they imported, so one collection can
take over 100 ms whatever the app does. Frozen, the objects that existed before the watch
are left out of collections, and what is measured is what the watched code does: the
objects it makes are still collected, and still counted in a pause.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

from litestar.testing import AsyncTestClient

TICK = 0.005
"""How often the ticker asks to run."""


@dataclass
class LoopLag:
    """The largest gap between two ticks seen so far (seconds of wall time, and seconds of
    the loop thread's CPU time), and how many ticks ran."""

    worst: float = 0.0
    busiest: float = 0.0
    ticks: int = 0
    stopped: bool = False

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        last, last_cpu = loop.time(), time.thread_time()
        while not self.stopped:
            await asyncio.sleep(TICK)
            now, cpu = loop.time(), time.thread_time()
            self.worst = max(self.worst, now - last)
            self.busiest = max(self.busiest, cpu - last_cpu)
            self.ticks += 1
            last, last_cpu = now, cpu

    async def started(self) -> None:
        """Returns once the ticker has ticked (so the watch covers what follows)."""
        while self.ticks == 0:
            await asyncio.sleep(TICK)


@contextmanager
def frozen_heap() -> Iterator[None]:
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def watching_app(client: AsyncTestClient) -> Iterator[LoopLag]:
    """Watch the loop the test client runs the app on, for the duration of the block."""
    lag = LoopLag()
    portal = client.blocking_portal
    with frozen_heap():
        ticker = portal.start_task_soon(lag.tick)
        portal.call(lag.started)
        try:
            yield lag
        finally:
            lag.stopped = True
            ticker.result(timeout=10)


@asynccontextmanager
async def watching() -> AsyncIterator[LoopLag]:
    """Watch the caller's own loop for the duration of the block."""
    lag = LoopLag()
    with frozen_heap():
        ticker = asyncio.create_task(lag.tick())
        await lag.started()
        try:
            yield lag
        finally:
            lag.stopped = True
            await ticker
