"""Check on a real llama.cpp engine: summaries on against off (issue 41).

The same conversation twice through the conversation service, with the default `trim_to`
and without summaries, then with `summarize = true`, each after a first request of other
text that takes the previous round's prompt out of the engine's cache. The engine must
run with `--verbose true` and its log go to `--log` (see `bench.llamacpp_cache` and
docs/cache.md): per request it says `N prefix-match hit, remaining M prompt tokens to
eval`. Summed over every request of a round, summary calls included, M is what the engine
evaluated; for a summary call (the first request of a send that made two), N / (N + M) is
the share of its prompt the cache served.

    python -m bench.llamacpp_summaries --base-url http://127.0.0.1:8081/v1 --log server.log
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.cache import service, user_text
from bench.common import fresh_sqlite, git_revision, machine
from bench.llamacpp_cache import after_other_text, run_against_engine
from bench.llamacpp_cache import catalog as cut_catalog
from webapp.chat.stored.models import Status

MATCHED = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")


def catalog(base_url: str, window: int) -> str:
    return (
        cut_catalog(base_url, window)
        + """
[[configurations]]
name = "summed"
model = "gemma"
system_prompt = "You are a patient tutor. Answer in plain prose."
max_tokens = 96
summarize = true
"""
    )


def matches_since(log: Path, offset: int) -> tuple[list[tuple[int, int]], int]:
    text = log.read_text(errors="replace")
    found = [(int(n), int(m)) for n, m in MATCHED.findall(text[offset:])]
    return found, len(text)


@dataclass
class Round:
    evaluated: int = 0
    requests: int = 0
    summary_calls: list[tuple[int, int]] = field(default_factory=list)
    carried: int = 0
    refused: int = 0


async def one_round(
    base_url: str, log: Path, window: int, configuration: str, turns: int, folder: Path
) -> Round:
    url = fresh_sqlite(folder / f"{configuration}.db")
    result = Round()
    async with service(url, folder, catalog(base_url, window)) as chat:
        conversation = await after_other_text(chat, configuration)
        _, offset = matches_since(log, 0)
        for turn in range(turns):
            send = await chat.sender.send("bench", conversation.id, user_text(turn, 3 + turn % 4))
            user, answer = await chat.sender.settle(send)
            found, offset = matches_since(log, offset)
            result.evaluated += sum(m for _, m in found)
            result.requests += len(found)
            if len(found) == 2:  # a summary call, then the send
                result.summary_calls.append(found[0])
            result.carried += user.fit_summary is not None
            result.refused += answer.status != Status.COMPLETE
    return result


async def main(base_url: str, log: Path, window: int, turns: int) -> None:
    print(f"# llama.cpp, summaries on against off, {machine()}, {git_revision()}")
    print(f"# {turns} turns, {window:,}-token window, exact counts\n")
    print(
        "| summaries | requests | evaluated prompt tokens (all requests) | summary calls "
        "| summary calls served from cache | sends carrying one | refused |"
    )
    print("|---|---|---|---|---|---|---|")
    rounds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for configuration in ("default", "summed"):
            done = await one_round(base_url, log, window, configuration, turns, Path(tmp))
            rounds[configuration] = done
            hit = sum(n for n, _ in done.summary_calls)
            asked = hit + sum(m for _, m in done.summary_calls)
            served = f"{hit / asked:.1%}" if asked else "-"
            label = "on" if configuration == "summed" else "off"
            print(
                f"| {label} | {done.requests} | {done.evaluated:,} | {len(done.summary_calls)} "
                f"| {served} | {done.carried} | {done.refused} |"
            )
    ratio = rounds["summed"].evaluated / max(1, rounds["default"].evaluated)
    print(f"\nratio on / off {ratio:.3f} (target <= 1.15)")


if __name__ == "__main__":
    run_against_engine(__doc__, main)
