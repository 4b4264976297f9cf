"""Benchmark: the engine's own overhead on a streamed send.

The same request is streamed from the same upstream two ways, alternating: by
the OpenAI-compatible provider directly, and through the conversation service
(check the rate limit, store the message with its fit after loading and fitting
the history, stream, store the answer). Each send goes into a conversation that
already has a few turns, as most sends do, and the direct request carries the
same history. The difference of the medians is the engine's overhead; target
(issue 2): under 5 ms. The upstream runs in its own process on the other core,
so its work does not compete with the engine's. Settings are the defaults, rate
limit included.

    make bench-stream
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import fresh_sqlite, machine, pin_to_one_core, run, summary
from tests.catalogs import write_upstream_catalog
from webapp.chat.jobs import chat_jobs
from webapp.db import Database
from webapp.llm.calibration import Calibrator
from webapp.llm.manager import LLMManager
from webapp.llm.providers.openai import OpenAIProvider
from webapp.settings import Settings

ROUNDS = 400
WARMUP = 10
EARLIER = ["Hello! Can you help me with git?", "What is a good branch name for a bug fix?"]
QUESTION = "Give me three short tips for writing clear commit messages."


class Upstream:
    """`python -m tests.upstream` in a subprocess, with the attributes the catalog needs."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.upstream", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        if len(cores) > 1:
            os.sched_setaffinity(self.process.pid, {max(cores)})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.base_url}/models", timeout=1).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.process.kill()
        raise RuntimeError("the fake upstream did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


async def measure(upstream: Upstream, folder: Path) -> None:
    settings = Settings(
        database_url=fresh_sqlite(folder / "bench.db"),
        config=write_upstream_catalog(folder / "catalog.toml", upstream),
    )
    db = Database(settings.database_url)
    manager = LLMManager(settings.catalog, Calibrator(db))
    chat = chat_jobs(db, manager, settings)
    direct = OpenAIProvider(upstream.base_url)

    async def send(owner: str, conversation_id: str, content: str) -> None:
        sent = await chat.sender.send(owner, conversation_id, content)
        async for event in sent.running.channel.follow():
            if event.name in ("done", "error"):
                assert event.name == "done", event.data
                break

    # One owner a conversation, so the rate limit is checked on every send but never hit.
    conversations = []
    for index in range(ROUNDS + WARMUP):
        owner = f"bench-{index}"
        conversation = await chat.editor.create(owner, "small")
        for content in EARLIER:
            await send(owner, conversation.id, content)
        conversations.append((owner, conversation.id))
    # The direct request is the one the engine sends: system prompt, the turns so far,
    # the question.
    _, stored = await chat.reader.history(*conversations[0])
    system = settings.catalog.configurations["small"].system_prompt
    messages = [{"role": "system", "content": system}] if system else []
    messages += [{"role": row.role, "content": row.content} for row in stored]
    messages.append({"role": "user", "content": QUESTION})

    async def through_provider() -> None:
        async for _ in direct.stream_chat("small", messages, max_tokens=None):
            pass

    provider_ms: list[float] = []
    engine_ms: list[float] = []
    for index, (owner, conversation_id) in enumerate(conversations):
        start = time.perf_counter()
        await through_provider()
        middle = time.perf_counter()
        await send(owner, conversation_id, QUESTION)
        end = time.perf_counter()
        if index >= WARMUP:
            provider_ms.append((middle - start) * 1000)
            engine_ms.append((end - middle) * 1000)
    # Same request both ways: the engine left nothing out of the same stored history.
    _, last = await chat.reader.history(*conversations[-1])
    assert [(r.role, r.content) for r in last[:-2]] == [(r.role, r.content) for r in stored]
    assert last[-2].dropped_turns == 0 and last[-1].status == "complete"
    print(f"  provider called directly   {summary(provider_ms)}")
    print(f"  through the engine         {summary(engine_ms)}")
    overhead = statistics.median(engine_ms) - statistics.median(provider_ms)
    paired = statistics.median(e - p for e, p in zip(engine_ms, provider_ms, strict=True))
    ratio = statistics.median(engine_ms) / statistics.median(provider_ms)
    print(
        f"  engine overhead: {overhead:.2f} ms (difference of medians), "
        f"{paired:.2f} ms (median of paired differences), engine/direct {ratio:.2f}x; "
        f"target < 5 ms ({'met' if overhead < 5 else 'MISSED'})"
    )
    await direct.aclose()
    await manager.aclose()
    await db.dispose()


def main() -> None:
    print(f"machine: {machine()}; engine {pin_to_one_core()}, upstream on another core")
    upstream = Upstream()
    try:
        with tempfile.TemporaryDirectory() as folder:
            run(measure(upstream, Path(folder)))
    finally:
        upstream.stop()


if __name__ == "__main__":
    main()
