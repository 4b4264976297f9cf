"""Older tool results cleared in batches that keep the engine's cache (webapp/llm/clearing.py,
through `window.fit`): only when the cut moves, every result older than the newest
`keep_tool_results` answered turns at once, each a one-line stub in the request; between
two moves every request is the previous request plus what was appended. Sends are
simulated as the chat makes them: each send fits the whole history with the previous
send's cut and clearing (`keep_from`, `cleared_through`), and each tool step of a turn
the turn's previous step's (`tool_loop.carried`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.chat.answering.tool_loop import carried
from webapp.llm import clearing
from webapp.llm.catalog import ModelSpec
from webapp.llm.estimator import REPLY_PRIMING, estimate_message, estimate_tools
from webapp.llm.window import FitResult, Transcript, fit, split_turns

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the documents for a phrase and return the passages.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


def model(window: int = 8192) -> ModelSpec:
    return ModelSpec(
        name="m", provider="p", model_id="m", context_window=window, max_output_tokens=512
    )


def fitted(transcript: Transcript, spec: ModelSpec, trim_to: float = 0.6) -> FitResult:
    """A send's fit as `LLMManager.fit_for` makes it for the route's first model."""
    return fit(
        transcript.messages,
        spec,
        TOOLS,
        trim_to=trim_to,
        keep_from=transcript.keep_from,
        clear_keep=transcript.clear_keep,
        cleared_through=transcript.cleared_through,
    )


@dataclass
class Conversation:
    """Sends of a conversation with tools, fitted as the chat fits them."""

    spec: ModelSpec
    keep: int = 2
    trim_to: float = 0.6
    history: list[dict[str, Any]] = field(
        default_factory=lambda: [{"role": "system", "content": "You search documents."}]
    )
    keep_from: int = 0
    cleared_through: int = 0
    requests: list[tuple[FitResult, list[dict[str, Any]]]] = field(default_factory=list)
    """Each model call's fit and the messages it was given."""
    calls: int = 0

    def transcript(self, appended: list[dict[str, Any]]) -> Transcript:
        return Transcript(
            [*self.history, *appended],
            keep_from=self.keep_from,
            clear_keep=self.keep,
            cleared_through=self.cleared_through,
        )

    def send(self, question: str, results: list[str], answer: str) -> None:
        """One turn: the question, one model step per result (a call, then its result),
        the answer; every step fitted as `run_tools` fits it."""
        appended: list[dict[str, Any]] = [{"role": "user", "content": question}]
        history = self.transcript([])
        for result in [*results, None]:
            transcript = Transcript(
                [*history.messages, *appended],
                keep_from=history.keep_from,
                clear_keep=history.clear_keep,
                cleared_through=history.cleared_through,
            )
            sent = fitted(transcript, self.spec, self.trim_to)
            self.requests.append((sent, transcript.messages))
            history = carried(history, sent)
            if result is None:
                break
            self.calls += 1
            call: dict[str, Any] = {"id": f"call_{self.calls}", "type": "function"}
            call["function"] = {"name": "search", "arguments": '{"q": "x"}'}
            appended.append({"role": "assistant", "content": None, "tool_calls": [call]})
            appended.append(
                {"role": "tool", "tool_call_id": call["id"], "name": "search", "content": result}
            )
        appended.append({"role": "assistant", "content": answer})
        self.history += appended
        # What the stored user row keeps for the next send: where its cut and its
        # clearing ended (indices stand for seqs: the history only grows).
        self.keep_from, self.cleared_through = history.keep_from, history.cleared_through


def is_stub(message: dict[str, Any]) -> bool:
    return message.get("role") == "tool" and str(message["content"]).startswith("[result of tool")


def check(conversation: Conversation) -> int:
    """The property over every pair of consecutive requests; returns how many moves."""
    moves = 0
    previous: list[dict[str, Any]] | None = None
    previous_given: list[dict[str, Any]] = []
    for sent, given_messages in conversation.requests:
        request = sent.messages
        if previous is not None and not sent.cut_moved:
            # The previous request, then exactly what was appended since.
            assert request[: len(previous)] == previous
            assert request[len(previous) :] == given_messages[len(previous_given) :]
        if sent.cut_moved:
            moves += 1
        # Every result older than the newest `keep` answered turns is a stub, after a
        # move and ever after; the turn being answered keeps all of its own.
        _, turns = split_turns(given_messages)
        newest_kept = clearing.boundary(turns, conversation.keep)
        cleared = {index for index, _ in sent.cleared}
        if sent.cut_moved:
            for index in clearing.results(given_messages):
                if index < newest_kept and index in _kept_indices(sent, given_messages):
                    assert index in cleared
        for index in cleared:
            assert index < turns[-1][0]
        stubs = sum(1 for m in request if is_stub(m))
        assert stubs == len(sent.cleared)
        previous, previous_given = request, given_messages
    return moves


def _kept_indices(sent: FitResult, given_messages: list[dict[str, Any]]) -> set[int]:
    out = {i for first, last in sent.left_out for i in range(first, last + 1)}
    return set(range(len(given_messages))) - out


result_sizes = st.lists(st.integers(min_value=50, max_value=900), min_size=0, max_size=3)


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(result_sizes, min_size=4, max_size=24),
    keep=st.integers(min_value=0, max_value=3),
    trim_to=st.sampled_from([0.5, 0.6, 0.75]),
)
def test_between_moves_requests_only_grow_and_a_move_clears_all_older(
    turns: list[list[int]], keep: int, trim_to: float
) -> None:
    conversation = Conversation(model(8192), keep=keep, trim_to=trim_to)
    for number, sizes in enumerate(turns):
        results = [" ".join(f"passage{number}w{i}" for i in range(size)) for size in sizes]
        conversation.send(f"Question {number}: find it. " * 3, results, f"Answer {number}. " * 8)
    check(conversation)


def test_a_long_conversation_clears_in_batches_and_says_what() -> None:
    conversation = Conversation(model(8192), keep=2)
    for number in range(30):
        results = [" ".join(f"p{number}{k}w{i}" for i in range(600)) for k in range(3)]
        conversation.send(f"Question {number}", results, f"Answer {number}. " * 10)
    moves = check(conversation)
    assert moves >= 1
    cleared = [(sent, given) for sent, given in conversation.requests if sent.cleared]
    assert cleared, "a long conversation of large results clears some"
    # Far fewer moves than sends: clearing waits for the cut.
    assert moves < len(conversation.requests) / 4
    sent, given_messages = cleared[-1]
    stub = next(m for m in sent.messages if is_stub(m))
    index, tokens = sent.cleared[0]
    assert stub["content"] == clearing.stub(given_messages[index], tokens)["content"]
    assert "search" in stub["content"] and f"{tokens:,} tokens" in stub["content"]
    assert stub["tool_call_id"] == given_messages[index]["tool_call_id"]


def test_the_stored_result_is_untouched_and_old_calls_keep_their_results() -> None:
    conversation = Conversation(model(4096), keep=1)
    for number in range(12):
        conversation.send(f"Q{number}", [f"result {number} " * 150], f"A{number}")
    for sent, _ in conversation.requests:
        ids = set()
        for message in sent.messages:
            for call in message.get("tool_calls") or []:
                ids.add(call["id"])
            if message["role"] == "tool":
                assert message["tool_call_id"] in ids  # never a result without its call
        called = [c["id"] for m in sent.messages for c in m.get("tool_calls") or []]
        answered = [m["tool_call_id"] for m in sent.messages if m["role"] == "tool"]
        assert called == answered  # never a call without its result
    # The history (what is stored) never holds a stub.
    assert not any(is_stub(m) for m in conversation.history)


def test_schemas_are_counted_in_the_head() -> None:
    messages = [{"role": "user", "content": "hello"}]
    without = fit(messages, model(), None, trim_to=1.0)
    with_tools = fit(messages, model(), TOOLS, trim_to=1.0)
    assert with_tools.estimated_tokens - without.estimated_tokens == estimate_tools(TOOLS)
    assert without.estimated_tokens == math.ceil(estimate_message(messages[0]) + REPLY_PRIMING)


def test_without_clearing_nothing_is_cleared() -> None:
    """The gateway's transcripts carry no `clear_keep`: a caller's results are its own."""
    history: list[dict[str, Any]] = []
    for number in range(20):
        call: dict[str, Any] = {"id": f"c{number}", "type": "function"}
        call["function"] = {"name": "search", "arguments": "{}"}
        history += [
            {"role": "user", "content": f"Q{number}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{number}", "content": "r " * 400},
            {"role": "assistant", "content": "A"},
        ]
    sent = fit(history, model(4096), TOOLS, trim_to=0.6)
    assert sent.dropped_turns and not sent.cleared


def test_the_note_says_how_many_and_how_much() -> None:
    spans = [
        {"first_seq": 4, "last_seq": 5, "tokens": 10_000},
        {"first_seq": 9, "last_seq": 9, "tokens": 2_410},
    ]
    assert clearing.said(spans) == "3 older tool results cleared, 12,410 tokens"
    assert clearing.said([{"first_seq": 4, "last_seq": 4, "tokens": 7}]) == (
        "1 older tool result cleared, 7 tokens"
    )
    assert clearing.said(None) is None
    assert clearing.seq_spans([(3, 5), (4, 6), (8, 1)], [None, 1, 2, 4, 5, 6, 7, 8, 10]) == [
        {"first_seq": 4, "last_seq": 5, "tokens": 11},
        {"first_seq": 10, "last_seq": 10, "tokens": 1},
    ]
