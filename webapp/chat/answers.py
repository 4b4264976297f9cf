"""Answers being written right now, in this process.

An answer runs as its own task, not inside the request that asked for it: a
client that disconnects does not stop it, and it is completed and stored all the
same. Whoever wants to watch (the SSE response, a page reloaded mid-answer)
subscribes to its channel and first receives everything published so far, so
nothing is duplicated or lost by arriving late.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

TEXT_PACE = 0.03
"""Seconds between two writes of an answer's text to one client. Each write costs the
server about as much as reading a chunk from the model: a model sending a token every
few milliseconds (or hundreds of answers at once) would otherwise cost one write each;
30 ms is faster than anyone reads and leaves the first token untouched."""


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: dict[str, Any]
    id: str | None = None


class Channel:
    """An append-only log of one answer's events with any number of live readers.

    Readers wait on one shared future that the next publish resolves: a delta costs an
    append and a wake-up, however many readers there are.
    """

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._closed = False
        self._next: asyncio.Future[None] | None = None
        self._resting: set[asyncio.Future[None]] = set()

    def publish(self, event: Event, *, last: bool = False) -> None:
        self._events.append(event)
        self._closed = self._closed or last
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        waiting, self._next = self._next, None
        if waiting is not None:
            _settle(waiting)
        if self._closed:
            for rested in self._resting:
                _settle(rested)

    async def follow(self) -> AsyncIterator[Event]:
        async for batch in self.batches():
            for event in batch:
                yield event

    async def batches(self, pace: float = 0.0) -> AsyncIterator[list[Event]]:
        """Everything published since the reader last looked, at once. A reader that falls
        behind (hundreds of answers streaming on one core) catches up in one step, and
        one write to its client, instead of one per event: the work follows the reader's
        wake-ups, not the provider's chunks.

        With a `pace`, a batch that carried text is followed by at least `pace` seconds
        before the next (the end of the answer cuts the wait short): text comes in
        pieces of that rhythm, each one write to the client, however fast the model
        sends. The first piece of text is never held back, so the time to the first
        token is the model's."""
        position = 0
        while True:
            if position < len(self._events):
                batch = self._events[position:]
                position += len(batch)
                yield batch
                if pace > 0 and not self._closed and any(e.name == "delta" for e in batch):
                    await self._rest(pace)
                continue
            if self._closed:
                return
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._next)

    async def _rest(self, pace: float) -> None:
        """Wait `pace` seconds, or less if the channel closes meanwhile; what is published
        in between does not wake the reader (that is the point)."""
        loop = asyncio.get_running_loop()
        rested: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(pace, _settle, rested)
        self._resting.add(rested)
        try:
            await rested
        finally:
            timer.cancel()
            self._resting.discard(rested)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(slots=True)
class RunningAnswer:
    answer_id: int
    channel: Channel
    task: asyncio.Task[None]
    stop: asyncio.Event
    sent: asyncio.Future[None]
    """Settled once the answer's request is on its way to the engine, or the answer ended
    without one."""

    async def on_its_way(self, limit: float) -> None:
        """Wait (at most `limit` seconds) until the answer's request has been written: what
        a send does after that, such as starting its response, then runs while the engine
        reads the prompt, not before it has it. A request slow to connect only costs the
        wait's limit."""
        await asyncio.wait((self.sent,), timeout=limit)


class AnswerRegistry:
    """The answers this process is writing, by assistant message id."""

    def __init__(self) -> None:
        self._running: dict[int, RunningAnswer] = {}

    def start(
        self,
        answer_id: int,
        run: Callable[[Channel, asyncio.Event, Callable[[], None]], Coroutine[Any, Any, None]],
    ) -> RunningAnswer:
        """Run an answer in a task of its own: `run(channel, stop, sent)`, where `sent` is
        called when its request has been written (see `RunningAnswer.sent`)."""
        channel = Channel()
        stop = asyncio.Event()
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            run(channel, stop, lambda: _settle(sent)), name=f"answer-{answer_id}"
        )
        task.add_done_callback(lambda _: _settle(sent))
        running = RunningAnswer(answer_id, channel, task, stop, sent)
        self._running[answer_id] = running
        task.add_done_callback(lambda _: self._running.pop(answer_id, None))
        return running

    def get(self, answer_id: int) -> RunningAnswer | None:
        return self._running.get(answer_id)

    def request_stop(self, answer_id: int) -> bool:
        running = self._running.get(answer_id)
        if running is None:
            return False
        running.stop.set()
        return True

    async def shutdown(self) -> None:
        """Cancel what is still running; each answer stores itself as interrupted."""
        tasks = [running.task for running in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
