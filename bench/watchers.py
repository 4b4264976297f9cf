"""The load benchmark's cross-worker part: two `webapp serve` processes on PostgreSQL.

One server writes answers; a page follows each answer on that server, and another on the
other server, the way a reloaded page does (`/c/{id}/answers/{id}/stream`, whose event
ids are the length of text shown). How much later the other server shows the same text
is the cross-worker delay (target: under 50 ms). Then 100 watchers follow an answer that
says nothing for seconds: what they cost the following server, in CPU and in /healthz
time. `bench.load` runs this last; alone, with rounds of its own:

    python -m bench.watchers --rounds 3
"""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx

HOST = "127.0.0.1"
IDLE_WATCHERS = 100
UNCAPPED = {"WEBAPP_WATCHERS_PER_ANSWER": "0", "WEBAPP_WATCHERS_PER_USER": "0"}
"""The servers' settings here: a hundred watchers of one answer, by one user, no caps."""


def client(port: int, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://{HOST}:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        limits=httpx.Limits(max_connections=None),
    )


async def streaming_answer(api: httpx.AsyncClient, conversation: str) -> int:
    for _ in range(500):
        messages = (await api.get(f"/api/conversations/{conversation}")).json()["messages"]
        streaming = [m for m in messages if m["role"] == "assistant" and m["status"] == "streaming"]
        if streaming:
            return int(streaming[-1]["id"])
        await asyncio.sleep(0.005)
    raise RuntimeError("no answer is being written")


async def send(api: httpx.AsyncClient, conversation: str) -> None:
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
        stream.raise_for_status()  # a cap's 429 (see UNCAPPED) fails, not waits forever
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
    """Milliseconds from a snapshot on the writer's own server to the other server's
    snapshot of the same length, both following the same answers from their start
    (`database_url`: the database both serve, which this measure does not need to read)."""
    del database_url
    delays: list[float] = []
    async with client(writer, token) as write, client(watcher, token) as watch:
        for conversation in conversations:
            sending = asyncio.create_task(send(write, conversation))
            answer = await streaming_answer(watch, conversation)
            own, other = await asyncio.gather(
                _follow(write, conversation, answer), _follow(watch, conversation, answer)
            )
            await sending
            delays += _behind(own, other)
    return delays


def _behind(own: dict[int, float], other: dict[int, float]) -> list[float]:
    """For each length both servers showed in a snapshot once both followers were on (their
    first snapshots replay what came before), how much later the other server showed it.
    A page is sent a snapshot per ~100 characters, counted from what it first showed, so a
    follower that joined a few characters later shows other lengths (105 where the other
    shows 98, then 202): comparing a length with the other's next larger one would count
    the wait for its next snapshot (some 400 ms), not how late the text came."""
    if not own or not other:
        return []
    joined = max(min(own), min(other))
    return [(other[n] - at) * 1000 for n, at in own.items() if n > joined and n in other]


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
    async with client(writer, token) as write, client(watcher, token) as watch:
        sending = asyncio.create_task(send(write, conversation))
        answer = await streaming_answer(watch, conversation)

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
            refused = next((f for f in followers if f.done()), None)
            if refused is not None:  # a cap on watchers (settings), or a failure
                await write.post(f"/api/conversations/{conversation}/stop")
                refused.result()
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # and the last ones' set-up done
        watched = await cost()
        await write.post(f"/api/conversations/{conversation}/stop")
        await asyncio.gather(sending, *followers, return_exceptions=True)
    return (*alone, *watched)


def report(delays: list[float], idle: tuple[float, float, float, float]) -> None:
    if delays:
        print(
            f"  cross-worker follow: the other server shows text "
            f"{statistics.median(delays):.1f} ms (p90 {_percentile(delays, 0.9):.1f}, "
            f"p99 {_percentile(delays, 0.99):.1f}) after the writer's own, "
            f"{len(delays)} snapshots both showed at the same length; target < 50 ms: "
            f"{'met' if _percentile(delays, 0.9) < 50 else 'MISSED'} (p90)"
        )
    else:
        print("  cross-worker follow: no snapshot to compare (MISSED)")
    cpu_alone, health_alone, cpu_watched, health_watched = idle
    print(
        f"  {IDLE_WATCHERS} idle watchers on the other server: CPU {cpu_alone:.0f} -> "
        f"{cpu_watched:.0f} ms/s, /healthz median {health_alone:.1f} -> {health_watched:.1f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    """The cross-worker part of `bench.load` on its own, set up the same way."""
    import argparse
    import os
    import secrets
    import tempfile
    from pathlib import Path

    from bench import load
    from bench.common import machine
    from bench.processes import server, upstream, webapp
    from tests.postgres import throwaway_database

    parser = argparse.ArgumentParser(prog="python -m bench.watchers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="cross-worker runs")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp, throwaway_database("webapp_bench") as url:
        folder = Path(tmp)
        with (
            upstream(folder, set(), load.CHUNK_DELAY, load.REPLY) as up_port,
            upstream(folder, set(), load.QUIET_CHUNK_DELAY, load.REPLY) as quiet_port,
        ):
            env = {
                **os.environ,
                "WEBAPP_CONFIG": str(load.catalog(folder / "catalog.toml", up_port, quiet_port)),
                "WEBAPP_SECRET_KEY": secrets.token_hex(16),
                "WEBAPP_RATE_LIMIT_MESSAGES": str(load.RATE_LIMIT),
                "WEBAPP_DATABASE_URL": url,
            }
            webapp(env, "migrate")
            with server(env, folder, 1, set()) as (port, _):
                clients = load.set_up_accounts(env, port, 5)
            for n in range(args.rounds):
                print(f"PostgreSQL, two servers (one writes, the other follows), run {n + 1}:")
                load.cross_worker(env, folder, url, clients)


if __name__ == "__main__":
    main()
