"""Benchmark: how much of its budget a trimmed send fills, per kind of text.

Every kind of the corpus (tests/corpus/estimator) gets a long conversation, sent
through the conversation service to a fake llama.cpp server that counts with
Qwen's vocabulary, a tokenizer the estimate was not fitted to, and refuses any
prompt over its window. Each conversation runs twice: with the serving model's
own tokenizer (`tokenizer = "auto"`, found at /tokenize) and with the estimate
alone (`tokenizer = "estimate"`, calibration learning as it goes). For every
send that left turns out, the fill is what the server charged for the prompt
divided by the budget the bound allowed.

Targets (issue 8): with exact counts, median >= 0.90 and minimum >= 0.80 for
every kind, and no refusal; with the estimate alone, never under (no refusal,
no fill above 1.0).

    make bench-window
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import fresh_sqlite, git_revision, machine
from tests.test_counting import counting_service
from tests.test_estimator import corpus
from tests.upstream import FakeUpstream
from webapp.chat.models import Status

KINDS = (
    "english",
    "german",
    "russian",
    "chinese",
    "japanese",
    "arabic",
    "hindi",
    "korean",
    "json",
    "python",
    "javascript",
    "emoji",
)
TURNS = 40


@dataclass
class Fills:
    fills: list[float]
    refusals: int
    sends: int

    def row(self) -> str:
        if not self.fills:
            return "no trimmed send |"
        return (
            f"{statistics.median(self.fills):.2f} | {min(self.fills):.2f} | "
            f"{max(self.fills):.2f} | {len(self.fills)}/{self.sends} | {self.refusals}"
        )


async def conversation_fills(
    upstream: FakeUpstream, database_url: str, folder: Path, kind: str, configuration: str
) -> Fills:
    samples = corpus()[kind]
    fills: list[float] = []
    refusals = 0
    async with counting_service(database_url, folder, upstream) as chat:
        conversation = await chat.create("bench", configuration)
        for number in range(TURNS):
            text = f"{number}: {samples[number % len(samples)]}"
            send = await chat.send("bench", conversation.id, text)
            user, answer = await chat.settle(send)
            if answer.status != Status.COMPLETE:
                refusals += 1
                continue
            if user.dropped_turns:
                chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
                charged = upstream.count_chat(chats[-1]["body"]["messages"])
                fills.append(charged / (user.fit_budget or 1))
    return Fills(fills, refusals, TURNS)


async def main(kinds: tuple[str, ...]) -> None:
    print(f"# window fill per kind, {machine()}, revision {git_revision()}")
    print(f"# {TURNS} turns per conversation; 4,096-token window; Qwen vocabulary\n")
    header = "median | min | max | trimmed sends | refusals"
    print(f"| kind | exact: {header} | estimate: {header} |")
    print("|---|" + "---|" * 10)
    failures = []
    with tempfile.TemporaryDirectory() as tmp, FakeUpstream(tokenizer="qwen") as upstream:
        folder = Path(tmp)
        for kind in kinds:
            results = {}
            for configuration in ("gemma", "guess"):
                upstream.reset()
                url = fresh_sqlite(folder / f"{kind}-{configuration}.db")
                results[configuration] = await conversation_fills(
                    upstream, url, folder, kind, configuration
                )
            exact, estimate = results["gemma"], results["guess"]
            print(f"| {kind} | {exact.row()} | {estimate.row()} |")
            if not exact.fills or statistics.median(exact.fills) < 0.90:
                failures.append(f"{kind}: exact median under 0.90")
            if exact.fills and min(exact.fills) < 0.80:
                failures.append(f"{kind}: exact minimum under 0.80")
            if exact.refusals or estimate.refusals:
                failures.append(f"{kind}: refused")
            if estimate.fills and max(estimate.fills) > 1.0:
                failures.append(f"{kind}: the estimate undercounted")
    print()
    print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="*", default=list(KINDS))
    asyncio.run(main(tuple(parser.parse_args().kinds)))
