"""The load benchmark's cross-worker part: two `webapp serve` processes on PostgreSQL.

One server writes answers; the other follows them the way a reloaded page does (its
`/c/{id}/answers/{id}/stream`). The benchmark LISTENs on the notice channel itself, so
it knows when each flush committed and how much text it stored; the follower's
snapshot of that same text arrives some milliseconds later: that difference is the
cross-worker delay (target: under 50 ms). Then 100 watchers follow an answer that says
nothing for seconds: what they cost the following server, in CPU and in /healthz time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from webapp.chat.notify import CHANNEL

HOST = "127.0.0.1"
IDLE_WATCHERS = 100


def _client(port: int, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://{HOST}:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        limits=httpx.Limits(max_connections=None),
    )


async def _answer_id(api: httpx.AsyncClient, conversation: str) -> int:
    for _ in range(500):
        messages = (await api.get(f"/api/conversations/{conversation}")).json()["messages"]
        streaming = [m for m in messages if m["role"] == "assistant" and m["status"] == "streaming"]
        if streaming:
            return int(streaming[-1]["id"])
        await asyncio.sleep(0.005)
    raise RuntimeError("no answer is being written")


async def _send(api: httpx.AsyncClient, conversation: str) -> None:
    path = f"/api/conversations/{conversation}/messages"
    headers = {"Accept": "text/event-stream"}
    async with api.stream("POST", path, json={"content": "Hello"}, headers=headers) as r:
        r.raise_for_status()
        await r.aread()


async def _follow(
    api: httpx.AsyncClient, conversation: str, answer: int, started: list[int] | None = None
) -> dict[int, float]:
    """Arrival time of each snapshot, by the length of text it shows (its event id)."""
    seen: dict[int, float] = {}
    path = f"/c/{conversation}/answers/{answer}/stream"
    async with api.stream("GET", path) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("id:"):
                if not seen and started is not None:
                    started.append(answer)
                seen.setdefault(int(line[3:].strip()), time.perf_counter())
            elif line.startswith("event: done"):
                break
    return seen


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def follow_delay(
    database_url: str, writer: int, watcher: int, token: str, conversations: list[str]
) -> list[float]:
    """Milliseconds from each flush's commit to the other server's snapshot of it."""
    dsn = make_url(database_url).set(drivername="postgresql")
    listener = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    heard: dict[tuple[int, int], float] = {}

    def note(*args: Any) -> None:
        kind, answer, *length = args[-1].split(" ")
        if kind == "moved" and length:
            heard.setdefault((int(answer), int(length[0])), time.perf_counter())

    await listener.add_listener(CHANNEL, note)
    delays: list[float] = []
    try:
        async with _client(writer, token) as write, _client(watcher, token) as watch:
            for conversation in conversations:
                sending = asyncio.create_task(_send(write, conversation))
                answer = await _answer_id(watch, conversation)
                seen = await _follow(watch, conversation, answer)
                await sending
                for (answer_id, length), committed in heard.items():
                    if answer_id == answer and length in seen and length > 0:
                        delays.append((seen[length] - committed) * 1000)
    finally:
        await listener.close()
    return delays


def _cpu(pid: int) -> float:
    import os
    from pathlib import Path

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _healthz(api: httpx.AsyncClient, times: int = 30) -> float:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        (await api.get("/healthz")).raise_for_status()
        samples.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0.02)
    return statistics.median(samples)


async def idle_watchers(
    writer: int, watcher: int, watcher_pid: int, token: str, conversation: str
) -> tuple[float, float, float, float]:
    """(CPU ms/s and /healthz ms of the watching server) without, then with, 100
    watchers of an answer that says nothing."""
    async with _client(writer, token) as write, _client(watcher, token) as watch:
        sending = asyncio.create_task(_send(write, conversation))
        answer = await _answer_id(watch, conversation)

        async def cost() -> tuple[float, float]:
            before, start = _cpu(watcher_pid), time.perf_counter()
            await asyncio.sleep(2)
            used = (_cpu(watcher_pid) - before) / (time.perf_counter() - start) * 1000
            return used, await _healthz(watch)

        alone = await cost()
        started: list[int] = []
        followers = [
            asyncio.create_task(_follow(watch, conversation, answer, started))
            for _ in range(IDLE_WATCHERS)
        ]
        while len(started) < IDLE_WATCHERS:  # each one following, its first snapshot shown
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # and the last ones' set-up done
        watched = await cost()
        await write.post(f"/api/conversations/{conversation}/stop")
        await asyncio.gather(sending, *followers, return_exceptions=True)
    return (*alone, *watched)


def report(delays: list[float], idle: tuple[float, float, float, float]) -> None:
    if delays:
        print(
            f"  cross-worker follow: snapshot {statistics.median(delays):.1f} ms "
            f"(p99 {_percentile(delays, 0.99):.1f}, max {max(delays):.1f}) after the flush "
            f"committed, {len(delays)} flushes; target < 50 ms: "
            f"{'met' if _percentile(delays, 0.99) < 50 else 'MISSED'} (p99)"
        )
    else:
        print("  cross-worker follow: no snapshot matched a flush (MISSED)")
    cpu_alone, health_alone, cpu_watched, health_watched = idle
    print(
        f"  {IDLE_WATCHERS} idle watchers on the other server: CPU {cpu_alone:.0f} -> "
        f"{cpu_watched:.0f} ms/s, /healthz median {health_alone:.1f} -> {health_watched:.1f} ms"
    )
