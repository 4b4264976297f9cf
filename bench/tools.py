"""Benchmark: prompt tokens an engine evaluates in a conversation with tools, with older
tool results cleared in batches when the cut moves (`webapp.llm.clearing`) against the
usual "keep the last 2 results" on every request.

A 30-turn conversation with 3 tool calls a turn (a call, its result of 600 to 900 words,
the next call...; then the answer) on an 8,192-token model: 120 model calls. Each call is
fitted as the chat fits it (`window.fit`, the configuration's default `trim_to`, each
send and each step starting from the previous one's cut: `tool_loop.carried`), and sent
to a fake engine with a prefix cache: it renders the request as tokens with the fake
upstream's chat template (tests/upstream) and evaluates what follows the longest prefix
it shares with its previous request, as llama.cpp and vLLM reuse a slot's cache.

- `batch`: the app's rule, `keep_tool_results = 2`: results are cleared only when the
  cut moves, every one older than the newest 2 answered turns at once.
- `keep-last-2`: before every call, every result but the newest 2 is replaced by the
  same one-line stub (what peers do); the cut rule is the same.

Target (issue 40): `batch` evaluates at most 1/3 of what `keep-last-2` does.

    make bench-tools
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import git_revision, machine
from tests.upstream import FakeUpstream
from webapp.chat.answering.tool_loop import carried
from webapp.llm import clearing
from webapp.llm.catalog import ModelSpec
from webapp.llm.estimator import estimate_message
from webapp.llm.window import FitResult, Transcript, fit

TURNS = 30
CALLS = 3
WINDOW = 8192
KEEP = 2
"""The baseline's: results kept whole on every request."""
BATCH_KEEPS = (2, 0)
"""The app's `keep_tool_results` (2, its default; 0: only the turn being answered keeps
its results): answered turns whose results a move keeps."""
TRIM_TO = 0.75
TARGET = 1 / 3
SIZES = (250, 400)
"""Words of a result: 700 to 1,100 tokens as the app estimates them, so that a turn's three
results (which are never cleared while it is answered) fit the window."""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the project's documents for a phrase; returns passages.",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": "what to look for"}},
                "required": ["q"],
            },
        },
    }
]
WORDS = ("river", "bridge", "ledger", "lantern", "quarry", "harbour", "meadow", "signal")


def passage(turn: int, call: int) -> str:
    """A deterministic result of 600 to 900 words."""
    size = SIZES[0] + (turn * 7 + call * 131) % (SIZES[1] - SIZES[0])
    return " ".join(f"{WORDS[(turn + call + i) % len(WORDS)]}{i % 97}" for i in range(size))


@dataclass
class Engine:
    """A fake engine with a one-slot prefix cache."""

    upstream: FakeUpstream = field(default_factory=FakeUpstream)
    previous: list[int] = field(default_factory=list)
    evaluated: list[int] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)

    def serve(self, messages: list[dict[str, Any]]) -> None:
        tokens = self.upstream.tokenize_chat(messages, TOOLS)
        shared = 0
        for a, b in zip(tokens, self.previous, strict=False):
            if a != b:
                break
            shared += 1
        self.evaluated.append(len(tokens) - shared)
        self.prompts.append(len(tokens))
        self.previous = tokens


def keep_last(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """Every tool result but the newest `keep` as a stub (the baseline)."""
    results = clearing.results(messages)
    old = set(results[: max(len(results) - keep, 0)])
    return [
        clearing.stub(m, estimate_message(m)) if i in old else m for i, m in enumerate(messages)
    ]


@dataclass
class Run:
    policy: str
    engine: Engine = field(default_factory=Engine)
    moves: int = 0
    overflows: int = 0
    appended: int = 0
    """Tokens of the messages each call adds to the conversation: what any policy must
    evaluate at least."""
    seconds: float = 0.0


def conversation(policy: str, keep: int = 2) -> Run:
    spec = ModelSpec(
        name="m8k", provider="p", model_id="m", context_window=WINDOW, max_output_tokens=512
    )
    run = Run(policy)
    started = time.perf_counter()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer from the project's documents; search them."}
    ]
    state = Transcript(history, clear_keep=keep if policy.startswith("batch") else None)
    calls = 0
    for turn in range(TURNS):
        appended: list[dict[str, Any]] = [
            {"role": "user", "content": f"Question {turn}: what do the documents say of it?"}
        ]
        priming = len(run.engine.upstream.tokenize_chat([], None))
        new_from = len(history) - (1 if turn else 0)
        for step in range(CALLS + 1):
            messages = [*history, *appended]
            fresh = messages[new_from:]
            run.appended += len(run.engine.upstream.tokenize_chat(fresh, None)) - priming
            new_from = len(messages)
            if policy == "keep-last-2":
                messages = keep_last(messages, KEEP)
            transcript = Transcript(
                messages,
                keep_from=state.keep_from,
                clear_keep=state.clear_keep,
                cleared_through=state.cleared_through,
            )
            sent: FitResult = fit(
                messages,
                spec,
                TOOLS,
                trim_to=TRIM_TO,
                keep_from=transcript.keep_from,
                clear_keep=transcript.clear_keep,
                cleared_through=transcript.cleared_through,
            )
            run.moves += sent.cut_moved
            run.overflows += sent.overflow_at_floor
            run.engine.serve(sent.messages)
            state = carried(transcript, sent)
            if step == CALLS:
                break
            calls += 1
            call: dict[str, Any] = {"id": f"call_{calls}", "type": "function"}
            call["function"] = {"name": "search", "arguments": f'{{"q": "topic {turn}.{step}"}}'}
            appended.append({"role": "assistant", "content": None, "tool_calls": [call]})
            appended.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": "search",
                    "content": passage(turn, step),
                }
            )
        appended.append({"role": "assistant", "content": f"From the documents: {turn}. " * 12})
        history = [*history, *appended]
    run.seconds = time.perf_counter() - started
    return run


def main(repeats: int) -> None:
    print(f"# tools in the chat, {machine()}, revision {git_revision()}")
    print(
        f"# {TURNS} turns x {CALLS} tool calls on a {WINDOW:,}-token model, trim_to {TRIM_TO}, "
        f"results of {SIZES[0]} to {SIZES[1]} words\n"
    )
    print(
        "| policy | model calls | prompt tokens | evaluated | median evaluated per call "
        "| cut moves | over budget | run time (median) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    policies = [("keep-last-2", KEEP)] + [(f"batch, keep {k}", k) for k in BATCH_KEEPS]
    totals = {}
    floor = 0
    for policy, keep in policies:
        runs = [conversation(policy, keep) for _ in range(repeats)]
        run, engine = runs[0], runs[0].engine
        totals[policy] = sum(engine.evaluated)
        floor = run.appended
        seconds = statistics.median(r.seconds for r in runs)
        print(
            f"| {policy} | {len(engine.evaluated)} | {sum(engine.prompts):,} "
            f"| {sum(engine.evaluated):,} | {statistics.median(engine.evaluated):,.0f} "
            f"| {run.moves} | {run.overflows} | {seconds * 1000:,.0f} ms |",
            flush=True,
        )
    print(f"\ntokens the calls appended (what any policy evaluates at least): {floor:,}")
    missed = []
    for policy, _ in policies[1:]:
        ratio = totals[policy] / totals["keep-last-2"]
        print(f"evaluated, {policy} / keep-last-2: {ratio:.3f} (target <= {TARGET:.3f})")
        if ratio > TARGET:
            missed.append(policy)
    print("target met" if not missed else "TARGET MISSED: " + ", ".join(missed))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per policy (timing)")
    # A send whose newest turn alone is over budget is counted ("over budget"), not logged.
    logging.getLogger("webapp.llm.window").setLevel(logging.ERROR)
    main(parser.parse_args().repeats)
