"""The channel an answer's events go through: every reader sees every event, in order."""

from __future__ import annotations

import asyncio

from webapp.chat.answers import Channel, Event


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
