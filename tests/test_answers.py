"""The channel an answer's events go through: every reader sees every event, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from webapp.chat.answering.answer import AnswerRegistry, Channel, Event


async def read_all(channel: Channel) -> list[str]:
    return [event.name async for event in channel.follow()]


async def test_early_late_and_slow_readers_each_see_every_event_once() -> None:
    channel = Channel()
    early = asyncio.create_task(read_all(channel))
    await asyncio.sleep(0)
    channel.publish(Event("fit", {}))
    for index in range(5):
        channel.publish(Event(f"delta{index}", {}))
        if index == 2:
            await asyncio.sleep(0)  # the early reader catches up mid-way
    late = asyncio.create_task(read_all(channel))
    channel.publish(Event("done", {}), last=True)
    expected = ["fit"] + [f"delta{index}" for index in range(5)] + ["done"]
    assert await early == expected
    assert await late == expected
    assert await read_all(channel) == expected, "a reader arriving after the end"


async def test_a_reader_that_goes_away_does_not_disturb_the_others() -> None:
    channel = Channel()
    leaving = asyncio.create_task(read_all(channel))
    staying = asyncio.create_task(read_all(channel))
    await asyncio.sleep(0)
    leaving.cancel()
    await asyncio.sleep(0)
    channel.publish(Event("delta", {}))
    channel.close()
    assert await staying == ["delta"]
    assert leaving.cancelled()


async def test_a_paced_reader_gets_the_first_text_at_once_and_the_rest_in_pieces() -> None:
    channel = Channel()
    loop = asyncio.get_running_loop()
    batches: list[tuple[float, list[str]]] = []

    async def read() -> None:
        async for batch in channel.batches(pace=0.2):
            batches.append((loop.time(), [e.data.get("text", e.name) for e in batch]))

    reader = asyncio.create_task(read())
    channel.publish(Event("fit", {}))  # no text: no rest after it
    await asyncio.sleep(0.01)
    for index in range(7):  # the first at once; the others while the reader rests
        channel.publish(Event("delta", {"text": str(index)}))
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.25)
    channel.publish(Event("done", {}), last=True)
    await asyncio.wait_for(reader, 5)

    assert [names for _, names in batches] == [
        ["fit"],
        ["0"],
        ["1", "2", "3", "4", "5", "6"],
        ["done"],
    ]
    assert batches[1][0] - batches[0][0] < 0.19, "the first text was held back"
    assert batches[2][0] - batches[1][0] >= 0.2 - 0.01, "text came before the pace allowed"


async def test_the_end_of_an_answer_cuts_a_paced_rest_short() -> None:
    channel = Channel()
    seen: list[str] = []

    async def read() -> None:
        async for batch in channel.batches(pace=60):
            seen.extend(event.name for event in batch)

    reader = asyncio.create_task(read())
    channel.publish(Event("delta", {}))
    await asyncio.sleep(0)
    channel.publish(Event("done", {}), last=True)
    await asyncio.wait_for(reader, 5)  # not a minute
    assert seen == ["delta", "done"]


async def test_a_paced_reader_that_leaves_mid_rest_leaves_nothing_behind() -> None:
    channel = Channel()
    staying = asyncio.create_task(read_all(channel))
    channel.publish(Event("delta", {}))

    async def rest_then_leave() -> None:
        batches = channel.batches(pace=60)
        await anext(batches)
        await anext(batches)  # rests: the channel is open and the batch had text

    resting = asyncio.create_task(rest_then_leave())
    await asyncio.sleep(0.01)
    resting.cancel()
    await asyncio.gather(resting, return_exceptions=True)
    channel.publish(Event("done", {}), last=True)
    assert await staying == ["delta", "done"]
    assert resting.cancelled()


async def test_waiting_for_an_answer_to_be_on_its_way_ends_at_sent_at_its_end_or_at_the_limit() -> (
    None
):
    registry = AnswerRegistry()
    release = asyncio.Event()

    async def sends_then_waits(
        channel: Channel, stop: asyncio.Event, sent: Callable[[], None]
    ) -> None:
        await asyncio.sleep(0.01)
        sent()
        await release.wait()

    async def ends_without_sending(
        channel: Channel, stop: asyncio.Event, sent: Callable[[], None]
    ) -> None:
        await asyncio.sleep(0.01)

    async def never_sends(channel: Channel, stop: asyncio.Event, sent: Callable[[], None]) -> None:
        await release.wait()

    for run, limit, ended in ((sends_then_waits, 5, False), (ends_without_sending, 5, True)):
        running = registry.start(1, run)
        started = asyncio.get_running_loop().time()
        await running.on_its_way(limit)
        assert asyncio.get_running_loop().time() - started < 1
        assert running.sent.done() and running.task.done() is ended
    running = registry.start(2, never_sends)
    started = asyncio.get_running_loop().time()
    await running.on_its_way(0.2)
    waited = asyncio.get_running_loop().time() - started
    assert 0.2 <= waited < 1 and not running.sent.done()
    release.set()
    await registry.shutdown()
