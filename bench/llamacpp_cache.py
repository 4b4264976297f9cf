"""Check on a real llama.cpp engine: prompt tokens it evaluates per trimmed send.

Not part of `make bench` (it needs an engine running); see docs/cache.md for how to
start llama-cpp-python with Gemma 3 270M. The engine must run with `--verbose true`
and its log go to `--log`: per request that shares a prefix with the one before it says
`N prefix-match hit, remaining M prompt tokens to eval`, and M is what it evaluated (a
request that shares nothing gets no line: it evaluated the whole prompt). The same
conversation is sent twice, with `trim_to = 1.0` and with the default, each after a
first request of other text that takes the previous round's prompt out of the cache.

    python -m bench.llamacpp_cache --base-url http://127.0.0.1:8081/v1 --log server.log
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.cache import service, user_text
from bench.common import fresh_sqlite, git_revision, machine
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Conversation, Status

EVALUATED = re.compile(r"remaining (\d+) prompt tokens to eval")


def catalog(base_url: str, window: int) -> str:
    return f"""
[[providers]]
name = "engine"
kind = "openai"
base_url = "{base_url}"
timeout = 300

[[models]]
name = "gemma"
provider = "engine"
model_id = "gemma"
context_window = {window}
max_output_tokens = 96

[[configurations]]
name = "plain"
model = "gemma"
system_prompt = "You are a patient tutor. Answer in plain prose."
max_tokens = 96
trim_to = 1.0

[[configurations]]
name = "default"
model = "gemma"
system_prompt = "You are a patient tutor. Answer in plain prose."
max_tokens = 96
"""


def evaluated_since(log: Path, offset: int) -> tuple[list[int], int]:
    text = log.read_text(errors="replace")
    return [int(n) for n in EVALUATED.findall(text[offset:])], len(text)


async def after_other_text(chat: ChatJobs, configuration: str) -> Conversation:
    """A new conversation, after a first request of other text that takes the previous
    round's prompt out of the engine's cache."""
    warm = await chat.editor.create("bench", configuration)
    await chat.sender.settle(await chat.sender.send("bench", warm.id, "Say hello in one word."))
    return await chat.editor.create("bench", configuration)


async def one_round(
    base_url: str, log: Path, window: int, configuration: str, turns: int, folder: Path
) -> tuple[list[int], int, int]:
    """(tokens evaluated per trimmed send, trimmed sends, refused sends)."""
    url = fresh_sqlite(folder / f"{configuration}.db")
    evaluated: list[int] = []
    refused = trimmed = 0
    async with service(url, folder, catalog(base_url, window)) as chat:
        conversation = await after_other_text(chat, configuration)
        _, offset = evaluated_since(log, 0)
        for turn in range(turns):
            send = await chat.sender.send("bench", conversation.id, user_text(turn, 3 + turn % 4))
            user, answer = await chat.sender.settle(send)
            counts, offset = evaluated_since(log, offset)
            if answer.status != Status.COMPLETE:
                refused += 1
            elif user.dropped_turns:
                trimmed += 1
                # No line: nothing matched, the engine evaluated the whole prompt.
                evaluated.append(counts[-1] if counts else user.fit_estimated_tokens or 0)
    return evaluated, trimmed, refused


async def main(base_url: str, log: Path, window: int, turns: int) -> None:
    print(f"# llama.cpp prompt evaluation per trimmed send, {machine()}, {git_revision()}")
    print(f"# {turns} turns, {window:,}-token window, exact counts\n")
    print(
        "| trim_to | trimmed sends | evaluated tokens (sum) | per trimmed send (median) | refused |"
    )
    print("|---|---|---|---|---|")
    sums = {}
    with tempfile.TemporaryDirectory() as tmp:
        for configuration in ("plain", "default"):
            evaluated, trimmed, refused = await one_round(
                base_url, log, window, configuration, turns, Path(tmp)
            )
            sums[configuration] = sum(evaluated)
            median = statistics.median(evaluated) if evaluated else 0
            label = "1.0" if configuration == "plain" else "0.75 (default)"
            print(f"| {label} | {trimmed} | {sum(evaluated):,} | {median:,.0f} | {refused} |")
    print(f"\nratio {sums['default'] / max(1, sums['plain']):.3f}")


def run_against_engine(
    doc: str, main: Callable[[str, Path, int, int], Coroutine[Any, Any, None]]
) -> None:
    """The command line of a check on a real engine: `main(base_url, log, window, turns)`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--turns", type=int, default=24)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.base_url, arguments.log, arguments.window, arguments.turns))


if __name__ == "__main__":
    run_against_engine(__doc__, main)
