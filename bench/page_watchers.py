"""What pages following one long answer cost: the bytes each is sent, and the server's time.

A real `webapp serve` process (SQLite, one worker, pinned to its own core) streams a
4,000-token markdown answer (headings, paragraphs, lists, code, tables) from
`tests.upstream`, a word a chunk. Pages follow it as a browser does
(`/c/{id}/answers/{id}/stream`):

- one page's bytes, against the size of the answer's final rendering (what a page that
  connects once it is done is sent whole; target: at most 2x);
- `/healthz` while the answer streams to that one page, then to 100 pages (target: a
  median of at most 50 ms), with the server's CPU meanwhile.

`bench.load` runs this after its SQLite part; alone, with rounds of its own:

    python -m bench.page_watchers --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvloop

from bench import watchers
from bench.common import machine
from bench.processes import (
    HOST,
    cores,
    cpu_seconds,
    new_conversation,
    pin,
    server,
    upstream,
    webapp,
)

UPSTREAM_MODEL = "large"
"""A model `tests.upstream` serves."""
PASSWORD = "bench-password-0123456789"
PAGES = 100
CHUNK_DELAY = 0.005
"""Seconds between the upstream's chunks (words): 4,000 tokens in some 15 s."""
TARGET_BYTES_RATIO = 2.0
TARGET_HEALTHZ_MS = 50.0


def long_answer(tokens: int = 4000) -> str:
    """A markdown answer of about `tokens` tokens (four characters a token) with every
    common kind of block, as a long technical answer has them."""
    sections: list[str] = []
    n = 0
    while sum(map(len, sections)) < tokens * 4:
        n += 1
        prose = " ".join(
            f"Step {n} reads the {word} and checks it against the plan before it goes on"
            for word in ("input", "state", "cache", "index")
        )
        section = (
            f"## Part {n}\n\n{prose}, so *nothing* is lost and `value_{n}` stays put.\n\n"
            f"- the first point of part {n}\n- a second point, with **bold** text\n"
            f"- a third point that links to https://example.com/{n}\n\n"
            f"```python\ndef part_{n}(items):\n    total = 0\n    for item in items:\n"
            f"        total += item * {n}\n    return total\n```\n\n"
        )
        if n % 3 == 0:
            section += f"| Case | Value |\n|------|-------|\n| a{n} | {n} |\n| b{n} | {2 * n} |\n\n"
        sections.append(section)
    return "".join(sections).rstrip() + "\n"


REPLY = long_answer()


def catalog(path: Path, upstream_port: int) -> Path:
    path.write_text(
        f"""
[[providers]]
name = "up"
kind = "openai"
base_url = "http://{HOST}:{upstream_port}/v1"
timeout = 120

[[models]]
name = "long"
provider = "up"
model_id = "{UPSTREAM_MODEL}"
context_window = 32768
max_output_tokens = 8192
tokenizer = "estimate"

[[configurations]]
name = "long"
model = "long"
"""
    )
    return path


@dataclass
class Round:
    page_bytes: int
    final_bytes: int
    healthz_one: float
    healthz_many: float
    cpu_one: float
    cpu_many: float
    """Milliseconds of server CPU per second of streaming."""


async def _page(api: httpx.AsyncClient, conversation: str, answer: int) -> int:
    """Follow the answer as a page does, to its `done`: the bytes it was sent."""
    received = 0
    path = f"/c/{conversation}/answers/{answer}/stream"
    async with api.stream("GET", path) as stream:
        stream.raise_for_status()
        async for chunk in stream.aiter_bytes():
            received += len(chunk)
            if b"event: done" in chunk:
                break
    return received


async def _final_size(api: httpx.AsyncClient, conversation: str, answer: int) -> int:
    """Bytes of the answer's final rendering, as a page that connects once it is done
    is sent it (whole, in its first `content` event)."""
    path = f"/c/{conversation}/answers/{answer}/stream"
    async with api.stream("GET", path) as stream:
        body = (await stream.aread()).decode()
    for block in body.replace("\r\n", "\n").split("\n\n"):
        if block.startswith("event: content"):
            data = next(line[6:] for line in block.split("\n") if line.startswith("data: "))
            return len(json.loads(data)["r"].encode())
    return 0  # a build that sends pages the whole answer each time (measured before)


async def _healthz_while(api: httpx.AsyncClient, running: asyncio.Task[object]) -> float:
    samples = []
    while not running.done():
        start = time.perf_counter()
        (await api.get("/healthz")).raise_for_status()
        samples.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0.02)
    return statistics.median(samples) if samples else float("nan")


async def _watched_answer(
    api: httpx.AsyncClient, conversation: str, pages: int, pid: int
) -> tuple[int, float, float, int]:
    """Send, follow with `pages` pages: (first page's bytes, /healthz median ms, CPU ms/s,
    answer id)."""
    sending = asyncio.create_task(watchers.send(api, conversation))
    answer = await watchers.streaming_answer(api, conversation)
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    followers = [asyncio.create_task(_page(api, conversation, answer)) for _ in range(pages)]
    healthz = await _healthz_while(api, sending)
    first, *_ = await asyncio.gather(*followers)
    cpu = (cpu_seconds(pid) - cpu_before) / (time.perf_counter() - started) * 1000
    return first, healthz, cpu, answer


async def one_round(port: int, pid: int, token: str, conversations: tuple[str, str]) -> Round:
    async with watchers.client(port, token) as api:
        one_bytes, healthz_one, cpu_one, answer = await _watched_answer(
            api, conversations[0], 1, pid
        )
        final = await _final_size(api, conversations[0], answer)
        _, healthz_many, cpu_many, _ = await _watched_answer(api, conversations[1], PAGES, pid)
    return Round(one_bytes, final, healthz_one, healthz_many, cpu_one, cpu_many)


def report(rounds: list[Round]) -> None:
    def median(values: list[float]) -> float:
        return statistics.median(values)

    ratio = median([r.page_bytes / max(r.final_bytes, 1) for r in rounds])
    healthz = median([r.healthz_many for r in rounds])
    print(
        f"  one page of a {len(REPLY):,}-character answer: sent "
        f"{median([r.page_bytes for r in rounds]) / 1000:.1f} KB for a final rendering of "
        f"{median([r.final_bytes for r in rounds]) / 1000:.1f} KB: {ratio:.2f}x; "
        f"target <= {TARGET_BYTES_RATIO:g}x: {'met' if ratio <= TARGET_BYTES_RATIO else 'MISSED'}"
    )
    print(
        f"  /healthz while it streams: to 1 page {median([r.healthz_one for r in rounds]):.1f} ms, "
        f"to {PAGES} pages {healthz:.1f} ms (median); server CPU "
        f"{median([r.cpu_one for r in rounds]):.0f} -> {median([r.cpu_many for r in rounds]):.0f}"
        f" ms/s; target <= {TARGET_HEALTHZ_MS:g} ms: "
        f"{'met' if healthz <= TARGET_HEALTHZ_MS else 'MISSED'} (medians of {len(rounds)} rounds)"
    )


def measure(folder: Path, rounds: int, app_cores: set[int], other_cores: set[int]) -> None:
    """Its own upstream (the long answer) and server, in `folder`."""
    with upstream(folder, other_cores, CHUNK_DELAY, REPLY) as up_port:
        env = {
            **os.environ,
            **watchers.UNCAPPED,
            "WEBAPP_CONFIG": str(catalog(folder / "page-watchers.toml", up_port)),
            "WEBAPP_SECRET_KEY": secrets.token_hex(16),
            "WEBAPP_RATE_LIMIT_MESSAGES": "1000",
            "WEBAPP_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'page-watchers.db'}",
        }
        webapp(env, "migrate")
        with server(env, folder, 1, app_cores) as (port, pid):
            webapp(env, "user", "create", "reader", "--password-stdin", stdin=PASSWORD)
            token = webapp(env, "token", "create", "reader")
            conversations = [new_conversation(port, token, "long") for _ in range(2 * rounds)]
            pairs = [(conversations[2 * n], conversations[2 * n + 1]) for n in range(rounds)]
            results = [uvloop.run(one_round(port, pid, token, pair)) for pair in pairs]
    report(results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.page_watchers", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    available = cores()
    app_cores = {available[0]} if len(available) > 1 else set()
    other_cores = set(available[1:]) if len(available) > 1 else set()
    pin(os.getpid(), other_cores)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    print(f"SQLite, one worker, pages following a long answer ({args.rounds} rounds):")
    with tempfile.TemporaryDirectory() as tmp:
        measure(Path(tmp), args.rounds, app_cores, other_cores)


if __name__ == "__main__":
    main()
